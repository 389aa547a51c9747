"""s31 ppbubble: what a large ``pipeline_bubble`` beside one slow stage is, and an expert-parallel
group whose symmetric-memory dispatch keeps it inside one NVLink domain (``moe_ep_one_domain``;
torchtitan's Dist-MoE routed experts).

The bubble: a fast stage waits for a slower neighbour in steady 1F1B, so its idle time is the
slower stage's extra busy time (plus its own first forward and last backward), counted once.
Hand-checked two-stage case below."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.ep_domain import one_domain_group
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from stage_explore.system import load_system
from stage_explore.system.placement import PLACEMENT_KEY
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_torch import DIST_MOE

NVL72 = (72, 2048)
DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data"


def _stage(forward_s: float, backward_s: float) -> StageClass:
    """One chunk a rank, no communication, no gradient synchronisation."""
    return StageClass(
        forward_s=(forward_s,), backward_s=(backward_s,), sync=(SyncCost(0.0, 0.0, 0.0),),
        saved_bytes=(0,), compute_s=forward_s + backward_s, exposed_s=(), states_bytes=0,
        buffers_bytes=0, optimizer_s=0.0,
    )  # fmt: skip


def test_a_fast_stage_s_bubble_is_the_slow_stage_s_extra_busy_time_once() -> None:
    """1F1B, 2 stages, 4 micro-batches: stage 0 F 1 s / B 2 s, stage 1 F 2 s / B 4 s. Stage 1
    starts after stage 0's first forward (t = 1) and never idles (stage 0 always has the next
    forward ready: F1 ends at 2, F2 at 10, F3 at 16, before stage 1 asks at 7, 13, 19), so it
    ends at 1 + 4·6 = 25; stage 0's last backward waits for it: 25 + 2 = 27. Stage 0 is busy
    4·3 = 12 s, so its bubble is 27 − 12 = 15 s = (24 − 12) + 1 + 2, not the schedule's
    fill (p − 1)·(F + B) alone and not the slow stage's excess twice."""
    plan = StepPlan((0, 1), (_stage(1.0, 2.0), _stage(2.0, 4.0)), 0.0, 0)
    step = assemble_step(plan, "1f1b", 4, 1)
    breakdown = dict(step.breakdown)
    assert step.step_time_s == pytest.approx(27.0)
    assert step.slowest_stage == 0
    assert breakdown["compute"] == pytest.approx(12.0)
    assert breakdown["pipeline_bubble"] == pytest.approx(15.0)


def test_equal_stages_leave_only_the_fill() -> None:
    """Both stages F 2 s / B 4 s: the bubble is 1F1B's (p − 1)·(F + B) = 6 s of 30 s."""
    plan = StepPlan((0, 1), (_stage(2.0, 4.0), _stage(2.0, 4.0)), 0.0, 0)
    step = assemble_step(plan, "1f1b", 4, 1)
    assert step.step_time_s == pytest.approx(30.0)
    assert dict(step.breakdown)["pipeline_bubble"] == pytest.approx(6.0)


def test_the_group_is_consecutive_ranks_of_one_domain() -> None:
    assert one_domain_group(range(128, 192), NVL72) == tuple(range(64))


def test_a_group_larger_than_a_domain_is_refused() -> None:
    with pytest.raises(ConfigError, match="group's 128 ranks exceed the scale-up domain's 72"):
        one_domain_group(range(128), NVL72)


@pytest.mark.parametrize("value", [1, "true", 0.0])
def test_a_bad_option_value_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="moe_ep_one_domain"):
        FRAMEWORKS["torchtitan"].with_overrides({"moe_ep_one_domain": value})


def _evaluate(gpus_per_stage: int, ep: int, **options: object) -> tuple[float, str]:
    """Qwen3-30B-A3B (8 layers) on ``2 × gpus_per_stage`` GB300 GPUs, PP 2, torchtitan: with
    128 GPUs a stage and EP 64, stage 1's first expert group (ranks 128–191) spans the
    preset's racks 1 and 2 (16 + 48 GPUs), stage 0's (0–63) one rack."""
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=8, seq_len=1024)
    parallel = ParallelConfig(
        pp=2, dp=gpus_per_stage, ep=ep, micro_batch=1, global_batch=gpus_per_stage * 8
    )
    backend = AnalyticalBackend(framework="torchtitan", overrides=options)
    result = backend.evaluate(model, parallel, load_system("gb300-nvl72"))
    return result.step_time_s, result.extra.get(PLACEMENT_KEY, "")


def test_the_straddling_group_is_timed_inside_one_domain() -> None:
    base, note = _evaluate(128, 64)
    placed, placed_note = _evaluate(128, 64, moe_ep_one_domain=True)
    assert placed < base
    assert "straddle" in note and "moe_ep_one_domain" not in note
    assert placed_note.endswith("(moe_ep_one_domain), not as above")


def test_no_straddling_group_no_change() -> None:
    """EP 8 in 128-GPU stages: every stage's first expert group lies inside one rack."""
    base = _evaluate(128, 8)[0]
    assert _evaluate(128, 8, moe_ep_one_domain=True)[0] == pytest.approx(base, rel=1e-12)


def _torchtitan_row(row_id: str) -> dict[str, str]:
    with open(DATA / "published_runs_no_setup.csv", newline="") as handle:
        return next(row for row in csv.DictReader(handle) if row["id"] == row_id)


def test_a_torchtitan_dist_moe_row_takes_the_option() -> None:
    row = _torchtitan_row("TTITAN-DISTMOE-DSV3-GB300-256-PP2VPP8")
    (case,) = row_cases(row, "extra.csv", 1)
    assert "moe_ep_one_domain=true" in case.backend_key
    assert any("moe_ep_one_domain" in note for note in case.assumptions)


def test_a_row_not_naming_dist_moe_does_not() -> None:
    row = {
        key: DIST_MOE.sub("MoE", value)
        for key, value in _torchtitan_row("TTITAN-DISTMOE-DSV3-GB300-256-PP2VPP8").items()
    }
    (case,) = row_cases(row, "extra.csv", 1)
    assert "moe_ep_one_domain" not in case.backend_key
