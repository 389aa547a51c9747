"""Uneven pipeline splits: the split rules, and the lowering, memory and traces that follow them.

- ``split_layers`` against Megatron-Core's rules restated here (first/last-stage counts,
  embedding/loss counted as layers, interleaving) and the invariants of every split.
- Lowered chunks hold exactly the counted layers, in order; per-stage FLOPs are the closed form
  ``n_s·layer + [s = 0]·embedding + [s = last]·head``; FLOPs and model-state and activation
  bytes summed over the stages equal the even split's and the single-stage model's totals.
- Uneven and interleaved-uneven trace sets are sound; Llama-3.1 405B (126 layers) on pp16.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.traceset import trace_set_from_programs
from stage_core.errors import ConfigError
from stage_core.lower.flops import block_flops, step_flops
from stage_core.lower.memory import memory_report
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig, PipelineSplit, Recompute, Schedule, split_layers

LLAMA = get_flavor("llama3-8b").with_overrides(layers=6, seq_len=512)
GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=6, seq_len=512)  # tied embeddings
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=5, seq_len=512)


# ------------------------------------------------------------------ split rules


def megatron_first_last(layers: int, pp: int, first: int | None, last: int | None) -> list[int]:
    """Megatron-Core ``get_num_layers_to_build`` with first/last-stage counts, restated."""
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    counts = [rest // middle_stages if middle_stages else 0] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


@pytest.mark.parametrize(
    ("layers", "pp", "first", "last"),
    [(126, 16, 7, 7), (61, 8, 5, None), (61, 8, None, 5), (30, 4, 6, 8), (10, 2, 3, None)],
)
def test_first_last_stage_counts_follow_megatron(
    layers: int, pp: int, first: int | None, last: int | None
) -> None:
    assert list(split_layers(layers, pp, first=first, last=last)) == megatron_first_last(
        layers, pp, first, last
    )


@pytest.mark.parametrize(
    ("split", "embedding", "loss"),
    [("embedding", 1, 0), ("loss", 0, 1), ("embedding-loss", 1, 1)],
)
@pytest.mark.parametrize(("layers", "pp", "vpp"), [(126, 16, 1), (62, 8, 1), (46, 4, 3)])
def test_embedding_and_loss_counted_as_layers(
    split: str, embedding: int, loss: int, layers: int, pp: int, vpp: int
) -> None:
    total = layers + embedding + loss
    if total % (pp * vpp):
        with pytest.raises(ConfigError, match="as layers needs `pp`·`vpp` to divide"):
            split_layers(layers, pp, vpp, split=split)
        return
    per = total // (pp * vpp)  # every virtual stage, less one for the embedding's / loss's
    expected = [per] * (pp * vpp)
    expected[0] -= embedding
    expected[-1] -= loss
    assert list(split_layers(layers, pp, vpp, split=split)) == expected


def test_llama31_405b_default_split_is_megatrons_embedding_and_loss_split() -> None:
    """Llama 3 paper §3.3.2: one layer fewer on the first and the last of 16 stages."""
    expected = split_layers(126, 16, split="embedding-loss")
    assert expected == (7,) + (8,) * 14 + (7,)
    assert split_layers(126, 16) == split_layers(126, 16, split="ends") == expected
    assert split_layers(128, 16) == (8,) * 16  # the even split whenever it divides


def test_interleaved_per_rank_counts_split_evenly_over_chunks() -> None:
    # chunk v of rank r is global stage v·pp + r and holds count_r / vpp layers (Megatron)
    assert split_layers(12, 2, 2, explicit=(4, 8)) == (2, 4, 2, 4)
    assert split_layers(12, 2, 2, first=4) == (2, 4, 2, 4)
    assert split_layers(12, 2, 2, explicit=(1, 3, 3, 5)) == (1, 3, 3, 5)  # per chunk
    with pytest.raises(ConfigError, match="must divide by vpp"):
        split_layers(12, 2, 2, explicit=(5, 7))


@pytest.mark.parametrize("split", list(PipelineSplit))
def test_every_split_covers_every_layer_and_keeps_middle_stages_busy(split: str) -> None:
    for layers, pp, vpp in itertools.product(range(1, 41), range(1, 9), (1, 2, 3)):
        try:
            counts = split_layers(layers, pp, vpp, split=split)
        except ConfigError:
            assert split != "auto" or layers < pp * vpp - 2
            continue
        stages = pp * vpp
        assert len(counts) == stages and sum(counts) == layers
        assert all(count >= 1 for count in counts[1:-1]) and min(counts) >= 0
        if layers % stages == 0 and split in ("auto", "even"):
            assert set(counts) == {layers // stages}
        if split in ("auto", "ends") and layers % stages and stages > 2:
            # ends: equal middle stages, the ends share the rest (the head's end the smaller
            # half), and no other such split has a lighter largest stage when the embedding
            # and the head weigh one layer each (brute force over the middle count)
            assert len(set(counts[1:-1])) == 1 and counts[0] - counts[-1] in (0, 1)
            best = min(
                max(m, rest - rest // 2 + 1)
                for m in range(1, layers + 1)
                if (rest := layers - (stages - 2) * m) >= 0
            )
            assert max(counts[1], counts[0] + 1, counts[-1] + 1) == best


# ------------------------------------------------------------------ lowering


def stage_totals(programs: ProgramSet) -> list[dict[str, int]]:
    """Per stage: weight, gradient, optimizer and activation bytes of one rank."""
    keys = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")
    return [{key: getattr(entry, key) for key in keys} for entry in memory_report(programs)]


def summed(rows: list[dict[str, int]]) -> dict[str, int]:
    return {key: sum(row[key] for row in rows) for key in rows[0]}


UNEVEN: list[tuple[ModelSpec, dict[str, Any]]] = [
    (LLAMA, dict(pp=4, pp_layers=(1, 2, 2, 1))),
    (LLAMA, dict(pp=4, pp_split="embedding-loss")),
    (LLAMA, dict(pp=4, pp_layers=(0, 3, 2, 1))),  # the first stage holds only the embedding
    (LLAMA, dict(pp=2, pp_first_layers=2)),
    (LLAMA, dict(pp=2, vpp=2, schedule="interleaved", pp_layers=(2, 4))),
    (MIXTRAL, dict(pp=2, ep=2, dp=2)),  # 5 layers: auto gives (3, 2)
    (MIXTRAL, dict(pp=3, pp_split="loss")),
]


@pytest.mark.parametrize("case", UNEVEN, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_flops_and_states_sum_to_the_single_stage_totals(
    case: tuple[ModelSpec, dict[str, Any]],
) -> None:
    model, options = case
    base = {"schedule": "gpipe", "global_batch": 4 * options.get("dp", 1), **options}
    parallel = ParallelConfig(**base)
    programs = lower(model, parallel)
    counts = parallel.stage_layers(model)
    # chunks hold exactly the counted layers, consecutively in global-stage order
    chunks = sorted((c for s in programs.stages for c in s.chunks), key=lambda c: c.stage)
    assert [len(c.layers) for c in chunks] == list(counts)
    assert [i for c in chunks for i in c.layers] == list(range(model.layers))
    flat = {k: v for k, v in base.items() if not k.startswith("pp") and k not in ("vpp",)}
    flat["schedule"] = "gpipe"
    single = lower(model, ParallelConfig(**flat))
    assert step_flops(programs) == step_flops(single)
    rows = stage_totals(programs)
    ranks_per_stage = parallel.world_size // parallel.pp
    assert ranks_per_stage == single.workload.world_size
    # GPipe holds every micro-batch's activations: the stages' sum is the single stage's
    single_rows = stage_totals(single)[0]
    if parallel.schedule != "gpipe":
        del single_rows["activations_bytes"]
        rows = [{k: v for k, v in row.items() if k != "activations_bytes"} for row in rows]
    assert summed(rows) == single_rows


def test_per_stage_flops_are_the_closed_form() -> None:
    parallel = ParallelConfig(pp=4, pp_layers=(1, 2, 2, 1), global_batch=4)
    programs = lower(LLAMA, parallel)
    blocks = programs.blocks
    layer = sum(block_flops(blocks["layer"]))
    embedding, head = sum(block_flops(blocks["embedding"])), sum(block_flops(blocks["head"]))
    micro_batches = programs.workload.micro_batches
    for stage, count in zip(programs.stages, (1, 2, 2, 1), strict=True):
        work = sum(sum(block_flops(b)) for c in stage.chunks for b in c.blocks)
        expected = count * layer + (embedding if stage.stage == 0 else 0)
        expected += head if stage.stage == 3 else 0
        assert work == expected
        assert micro_batches == 4


def test_uneven_split_equals_even_split_totals() -> None:
    """An uneven pp4 split and the even pp2 and pp3 splits of the same model: equal totals."""
    totals = []
    for options in (dict(pp=2), dict(pp=3), dict(pp=4, pp_layers=(2, 1, 1, 2))):
        programs = lower(GPT, ParallelConfig(schedule=Schedule.GPIPE, global_batch=4, **options))
        rows = stage_totals(programs)
        totals.append((step_flops(programs), summed(rows)))
    assert totals[0] == totals[1] == totals[2]


# ------------------------------------------------------------------ traces


def sound(programs: ProgramSet) -> int:
    mesh = programs.workload.mesh
    ranks = {}
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        for rank in programs.ranks(stage.stage):
            ranks[rank] = tuple(materialize(template, rank, mesh))
    report = check_trace_set(trace_set_from_programs(ranks))
    assert report.violations == ()
    return len(ranks)


@pytest.mark.parametrize(
    "options",
    [
        dict(dp=2, tp=2, pp=4, sp=True, pp_layers=(0, 3, 2, 1), global_batch=8),
        dict(dp=2, tp=2, pp=2, vpp=2, schedule="interleaved", pp_layers=(1, 2, 1, 2),
             zero=1, recompute="full", global_batch=8),
        dict(dp=2, pp=4, zero=3, pp_split="embedding-loss", global_batch=8),
    ],
)  # fmt: skip
def test_uneven_trace_sets_are_sound(options: dict[str, Any]) -> None:
    parallel = ParallelConfig(**options)
    assert sound(lower(LLAMA, parallel)) == parallel.world_size


LLAMA31_405B_SHORT = get_flavor("llama3.1-405b").with_overrides(seq_len=256)


def test_llama31_405b_on_pp16_lowers_with_lighter_end_stages() -> None:
    parallel = ParallelConfig(pp=16, tp=8, sp=True, recompute=Recompute.FULL, global_batch=32)
    programs = lower(get_flavor("llama3.1-405b"), parallel)
    layers = [len(stage.chunks[0].layers) for stage in programs.stages]
    assert layers == [7] + [8] * 14 + [7]
    report = memory_report(programs)
    layer_states = report[1].weights_bytes // 8  # a middle stage: 8 layers, no embedding
    assert report[0].weights_bytes < report[1].weights_bytes
    assert report[14].weights_bytes == report[1].weights_bytes
    assert layer_states * 8 == report[1].weights_bytes


def test_llama31_405b_on_pp16_traces_are_sound() -> None:
    """Every rank of a 16-stage pipeline (tp 1, short sequences to keep the test fast)."""
    parallel = ParallelConfig(pp=16, global_batch=16)
    assert sound(lower(LLAMA31_405B_SHORT, parallel)) == 16


def test_front_is_automodels_split_the_first_stages_one_layer_more() -> None:
    # generate_hf_model_fqn_per_model_part: L // n each, +1 while stage < L % n; DeepSeek-V3's
    # 61 layers on AutoModel's 32 stages (PP 4 x VP 8, or PP 8 x VP 4): 29 of 2, then 3 of 1
    assert split_layers(61, 4, 8, split="front") == (2,) * 29 + (1,) * 3
    assert split_layers(61, 8, 4, split="front") == (2,) * 29 + (1,) * 3
    for layers, stages in itertools.product(range(1, 30), range(1, 12)):
        if stages > layers:
            with pytest.raises(ConfigError, match="more stages than layers"):
                split_layers(layers, stages, split="front")
            continue
        counts = split_layers(layers, stages, split="front")
        base = layers // stages
        assert counts == tuple(base + 1 if s < layers % stages else base for s in range(stages))
