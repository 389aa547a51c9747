"""The interleaved schedule's micro-batch group size ``N`` (Megatron-Core's
``--microbatch-group-size-per-virtual-pipeline-stage``, ``microbatch_group_size_per_vp_stage``;
Llama 3's tunable ``N``, arXiv 2407.21783 Section 3.3.2): the chunk order of each rank, its
warm-up ``(p − r − 1)·2 + (v − 1)·N``, the micro-batches in flight that the memory model counts,
and the configuration's one-line errors. The expected orders are derived by hand below from
Megatron's rule (groups of N micro-batches, each through chunk 0, 1, …; backwards mirror the
chunks), not copied from the code's output."""

from __future__ import annotations

from typing import NamedTuple, cast

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import activation_peak, steady_activation_peak
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import Chunk, lower
from stage_core.lower.program_node import message_tag
from stage_core.lower.schedule import grouped, schedule
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Schedule
from stage_core.trace import NodeKind
from stage_explore.analytical.pipeline import activation_profiles
from tests.core.test_lower_schedule import simulate

# (p, m, v, N): valid Megatron groups, p ≤ N ≤ m and m mod N either 0 or ≥ p
GROUPED = [(2, 5, 2, 3), (2, 6, 3, 3), (4, 8, 2, 8), (4, 10, 2, 6), (4, 12, 3, 4), (3, 7, 2, 4)]
IDS = [f"p{p}-m{m}-v{v}-N{n}" for p, m, v, n in GROUPED]


def _steps(kind: str, rank: int, p: int, m: int, v: int) -> list[str]:
    return [f"{t.phase}{t.chunk}.{t.micro_batch}" for t in schedule(kind, rank, p, m, v)]


def test_megatrons_p2_n3_m5_v2_example_by_hand() -> None:
    """Megatron's own example (schedules.py, 'PP2 N3M5 with VP2'): the forward table runs
    micro-batches 0 1 2 through chunk 0, then 0 1 2 through chunk 1, then 3 4 through chunk 0
    and 3 4 through chunk 1; the backward table the same with the chunks mirrored. Rank 0 warms
    up with (2 − 0 − 1)·2 + (2 − 1)·3 = 5 forwards, rank 1 with 0 + 3 = 3; then one forward and
    one backward alternately, then the remaining backwards."""
    forwards = ["F0.0", "F0.1", "F0.2", "F1.0", "F1.1", "F1.2", "F0.3", "F0.4", "F1.3", "F1.4"]
    backwards = ["B1.0", "B1.1", "B1.2", "B0.0", "B0.1", "B0.2", "B1.3", "B1.4", "B0.3", "B0.4"]
    kind = grouped("interleaved", 3)
    for rank, warmup in ((0, 5), (1, 3)):
        steady = len(forwards) - warmup
        alternating = [s for pair in zip(forwards[warmup:], backwards, strict=False) for s in pair]
        expected = forwards[:warmup] + alternating + backwards[steady:]
        assert _steps(kind, rank, 2, 5, 2) == expected


def test_the_default_group_is_pp() -> None:
    for p, m, v in ((2, 4, 2), (4, 8, 3), (4, 12, 2)):
        for rank in range(p):
            assert schedule(grouped("interleaved", p), rank, p, m, v) == schedule(
                "interleaved", rank, p, m, v
            )
    config = ParallelConfig(pp=4, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=8)
    assert config.schedule_kind == "interleaved"


def test_n_equal_to_m_runs_every_micro_batch_through_a_chunk_first() -> None:
    # breadth-first (N = m): rank 0 of p = 2, v = 2, m = 4 warms up with 2 + 4 = 6 forwards
    got = _steps(grouped("interleaved", 4), 0, 2, 4, 2)
    assert got[:6] == ["F0.0", "F0.1", "F0.2", "F0.3", "F1.0", "F1.1"]
    assert got[6:8] == ["F1.2", "B1.0"]


@pytest.mark.parametrize(("p", "m", "v", "n"), GROUPED, ids=IDS)
def test_every_task_once_warmup_and_no_deadlock(p: int, m: int, v: int, n: int) -> None:
    kind = grouped("interleaved", n)
    for rank in range(p):
        tasks = schedule(kind, rank, p, m, v)
        assert sorted(tasks) == sorted(
            (phase, c, mb) for phase in "BF" for c in range(v) for mb in range(m)
        )
        leading = next(i for i, t in enumerate(tasks) if t.phase == "B")
        assert leading == min((p - rank - 1) * 2 + (v - 1) * n + 1, m * v)
    assert simulate(kind, p, m, v) >= 2 * m * v + 2 * (p - 1)


@pytest.mark.parametrize(("p", "m", "v", "n"), GROUPED, ids=IDS)
def test_micro_batches_in_flight_follow_the_warm_up(p: int, m: int, v: int, n: int) -> None:
    """The memory model's count: rank r holds its warm-up forwards plus the first steady one
    (each chunk's activations until its backward), at most every forward of the step."""
    kind = grouped("interleaved", n)
    for rank in range(p):
        most = max(sum(counts) for counts in activation_profiles(kind, rank, p, m, v))
        assert most == min((p - rank - 1) * 2 + (v - 1) * n + 1, m * v)


class _Sized(NamedTuple):
    """A chunk as the activation walk reads it: the bytes one micro-batch saves."""

    saved_bytes: int


def test_a_larger_group_holds_more_in_flight_and_the_prefix_peak_is_the_whole_peak() -> None:
    p, v, m = 4, 2, 48
    chunks = cast(list[Chunk], [_Sized(1), _Sized(1000)])  # unequal: the per-chunk mix counts
    peaks = {}
    for n in (4, 6, 8, 12):
        kind = grouped("interleaved", n)
        whole = activation_peak(chunks, schedule(kind, 0, p, m, v))
        assert steady_activation_peak(chunks, kind, 0, p, m, v) == whole
        profiles = activation_profiles(kind, 0, p, m, v)
        assert max(a * 1 + b * 1000 for a, b in profiles) == whole
        peaks[n] = max(sum(c) for c in profiles)
    assert peaks == {n: (p - 1) * 2 + (v - 1) * n + 1 for n in (4, 6, 8, 12)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(microbatch_group_size_per_vp_stage=0), "must be a positive int or None"),
        (dict(microbatch_group_size_per_vp_stage=True), "must be a positive int or None"),
        (dict(microbatch_group_size_per_vp_stage=3), r"must lie in \[pp, micro-batches\]"),
        (dict(microbatch_group_size_per_vp_stage=9), r"must lie in \[pp, micro-batches\]"),
        (dict(microbatch_group_size_per_vp_stage=5), "must be 0 or at least pp"),
        (dict(microbatch_group_size_per_vp_stage=4, vpp=1, schedule="1f1b"), "needs schedule="),
    ],
)
def test_bad_group_sizes_are_one_line_config_errors(
    kwargs: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = dict(pp=4, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=8)
    fields.update(kwargs)
    with pytest.raises(ConfigError, match=message) as error:
        ParallelConfig(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_a_group_lifts_the_pp_divisibility_rule_as_megatron_does() -> None:
    # m = 10 is no multiple of pp = 4, but groups of 6 leave 4 ≥ pp: Megatron runs it
    config = ParallelConfig(
        pp=4, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=10,
        microbatch_group_size_per_vp_stage=6,
    )  # fmt: skip
    assert config.schedule_kind == "interleaved/6"
    assert config.to_dict()["microbatch_group_size_per_vp_stage"] == 6
    assert "microbatch_group_size_per_vp_stage" not in ParallelConfig().to_dict()
    with pytest.raises(ConfigError, match="needs schedule='interleaved' with `vpp` > 1"):
        schedule(grouped("gpipe", 4), 0, 4, 8, 1)


def test_the_chakra_templates_send_in_the_grouped_order() -> None:
    """The lowered programs carry the grouped order and the stage templates (what the Chakra
    writer and the trace mode emit) send each task's output in that order: forward sends
    from every global stage but the last, backward sends from every one but the first, each
    tagged by (sending global stage, micro-batch, direction)."""
    p, v, m, n = 2, 2, 5, 3
    model = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=256)
    config = ParallelConfig(
        pp=p, vpp=v, schedule=Schedule.INTERLEAVED, global_batch=m,
        microbatch_group_size_per_vp_stage=n,
    )  # fmt: skip
    programs = lower(model, config)
    for stage in programs.stages:
        tasks = schedule(grouped("interleaved", n), stage.stage, p, m, v)
        assert tuple(stage.tasks) == tasks
        expected = [
            message_tag(c * p + stage.stage, mb, m, phase == "B")
            for phase, c, mb in tasks
            if (phase == "F" and c * p + stage.stage != p * v - 1)
            or (phase == "B" and c * p + stage.stage != 0)
        ]
        sends = [
            item.node.tag
            for item in stage_nodes(programs, stage)
            if item.node.kind is NodeKind.SEND and item.peer_axis == "pp"
        ]
        assert sends == expected and len(sends) == 2 * m * v - m
