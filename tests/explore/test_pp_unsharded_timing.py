"""FSDP2 under pipeline parallelism (``pp_unsharded_params``): a stage's ZeRO-3 all-gathers and
reduce-scatters are timed once per step (the first forward's gathers, the reduce-scatters after
the last backward), not per micro-batch; the trace mode runs it as the frameworks do
(tests/explore/test_trace_mode_held.py)."""

from __future__ import annotations

import pytest

from stage_core.lower.program_node import ZERO_GATHER
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from stage_explore.analytical.trace_mode import TraceStep, trace_step
from stage_explore.system import load_system

#: Short sequences over 4 hosts: the gathers and reduce-scatters outlast the blocks' compute.
LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
ZERO = "exposed_zero_gather"


def _result(held: bool, global_batch: int) -> tuple[float, dict[str, float]]:
    parallel = ParallelConfig(
        dp=16, pp=2, zero=3, recompute=Recompute.NONE, global_batch=global_batch
    )
    # without FSDP2's copies, which spread their once-per-step bytes over the micro-batches
    backend = AnalyticalBackend(
        framework="torchtitan",
        overrides={"pp_unsharded_params": held, "fsdp2_copies": False},
    )
    result = backend.evaluate(LLAMA, parallel, load_system("h100-80gb"))
    return result.step_time_s, dict(result.breakdown)


def test_held_stage_charges_its_zero_collectives_once_per_step() -> None:
    _, four = _result(True, 64)  # 4 micro-batches per data-parallel rank
    _, eight = _result(True, 128)  # 8
    assert four[ZERO] > 0.0
    assert eight[ZERO] == pytest.approx(four[ZERO], rel=1e-12)


def test_per_micro_batch_gathers_grow_with_the_micro_batches() -> None:
    _, four = _result(False, 64)
    _, eight = _result(False, 128)
    assert eight[ZERO] > 1.5 * four[ZERO] > 0.0


def test_held_stage_is_faster_than_regathering_every_micro_batch() -> None:
    held_step, held = _result(True, 128)
    regather_step, regather = _result(False, 128)
    assert held[ZERO] < regather[ZERO]
    assert held_step < regather_step


def _plan(held: tuple[tuple[float, float], tuple[float, float]]) -> StepPlan:
    def stage(gather: float, scatter: float) -> StageClass:
        sync = SyncCost(total_s=0.0, latest_s=float("-inf"), gather_s=0.0,
                        held_gather_s=gather, held_scatter_s=scatter)  # fmt: skip
        return StageClass(
            forward_s=(1.0,), backward_s=(2.0,), sync=(sync,), saved_bytes=(0,), compute_s=3.0,
            exposed_s=(), states_bytes=0, buffers_bytes=0, optimizer_s=0.5,
        )  # fmt: skip

    return StepPlan((0, 1), (stage(*held[0]), stage(*held[1])), 0.0, 0)


def test_held_seconds_run_in_the_schedule_and_are_labelled() -> None:
    base = assemble_step(_plan(((0.0, 0.0), (0.0, 0.0))), "1f1b", 4, 1)
    own = assemble_step(_plan(((0.25, 0.75), (0.0, 0.0))), "1f1b", 4, 1)
    assert own.slowest_stage == 0  # its last backward ends the pipeline
    # the first forward's gathers delay the whole schedule, the last scatters the rank's end
    assert own.step_time_s == pytest.approx(base.step_time_s + 0.25 + 0.75)
    assert dict(own.breakdown)[ZERO] == pytest.approx(1.0)
    assert sum(v for _, v in own.breakdown) == pytest.approx(own.step_time_s)
    # the last stage's scatters run before its last input-gradient send: stage 0 waits for them
    later = assemble_step(_plan(((0.0, 0.0), (0.0, 0.75))), "1f1b", 4, 1)
    assert later.slowest_stage == 0
    assert later.step_time_s == pytest.approx(base.step_time_s + 0.75)
    assert ZERO not in dict(later.breakdown)  # stage 0's wait is its bubble
    assert later.pipeline_end_s == pytest.approx(base.pipeline_end_s + 0.75)


def test_the_trace_mode_gathers_a_held_stage_once() -> None:
    parallel = ParallelConfig(dp=2, pp=2, zero=3, recompute=Recompute.NONE, global_batch=8)
    system = load_system("h100-80gb")
    small = LLAMA.with_overrides(seq_len=256)
    held = trace_step(AnalyticalBackend(framework="torchtitan"), small, parallel, system)
    off = AnalyticalBackend(framework="torchtitan", overrides={"pp_unsharded_params": False})
    per_micro_batch = trace_step(off, small, parallel, system)

    def gathers(traced: TraceStep) -> int:
        return sum(
            1
            for template in traced.templates
            for item in template
            if item.source is not None and item.source[1] == ZERO_GATHER
        )

    # 4 micro-batches: a forward and a backward gather per block each, against one forward's
    assert gathers(per_micro_batch) == 2 * 4 * gathers(held)
    assert held.step_time_s > 0.0 and per_micro_batch.step_time_s > 0.0


def test_a_held_stage_stays_gathered_across_the_steps_schedules() -> None:
    # local_batch_size: three schedules per step; AutoModel gathers once in the first and
    # reduce-scatters once after the last (post_backward only on the optimizer step)
    base = assemble_step(_plan(((0.0, 0.0), (0.0, 0.0))), "1f1b", 4, 1, schedules=3)
    held = assemble_step(_plan(((0.25, 0.75), (0.0, 0.0))), "1f1b", 4, 1, schedules=3)
    assert held.step_time_s == pytest.approx(base.step_time_s + 0.25 + 0.75)
    assert dict(held.breakdown)[ZERO] == pytest.approx(1.0)
    assert sum(v for _, v in held.breakdown) == pytest.approx(held.step_time_s)


def test_a_stage_synced_per_schedule_pays_its_collectives_in_every_schedule() -> None:
    # pp_held_sync_per_schedule (AutoModel's stage an FSDPModule): torch pipelining
    # reduce-scatters it on each schedule's last backward, and the next schedule gathers again
    base = assemble_step(_plan(((0.0, 0.0), (0.0, 0.0))), "1f1b", 4, 1, schedules=3)
    each = assemble_step(
        _plan(((0.25, 0.75), (0.0, 0.0))), "1f1b", 4, 1, schedules=3, held_per_schedule=True
    )
    assert each.step_time_s == pytest.approx(base.step_time_s + 3 * (0.25 + 0.75))
    assert dict(each.breakdown)[ZERO] == pytest.approx(3.0)
    assert sum(v for _, v in each.breakdown) == pytest.approx(each.step_time_s)
    # one schedule: the same as syncing once per step
    one = assemble_step(_plan(((0.25, 0.75), (0.0, 0.0))), "1f1b", 4, 1)
    one_each = assemble_step(
        _plan(((0.25, 0.75), (0.0, 0.0))), "1f1b", 4, 1, held_per_schedule=True
    )
    assert one_each == one


def _automodel_zero(per_schedule: bool, local: int) -> tuple[float, float]:
    """DSV3-like held stage under AutoModel: 16 micro-batches per rank in schedules of
    ``local``; (exposed ZeRO seconds, step seconds)."""
    backend = AnalyticalBackend(
        framework="automodel",
        overrides={
            "pp_held_sync_per_schedule": per_schedule, "local_batch_size": local,
            "fsdp2_copies": False,
        },
    )  # fmt: skip
    parallel = ParallelConfig(
        dp=16, pp=2, zero=3, recompute=Recompute.NONE, micro_batch=1, global_batch=256
    )
    result = backend.evaluate(LLAMA, parallel, load_system("h100-80gb"))
    return dict(result.breakdown)[ZERO], result.step_time_s


def test_automodel_syncs_its_held_stage_once_per_local_batch_schedule() -> None:
    once, once_step = _automodel_zero(False, 4)  # four schedules, synced once
    each, each_step = _automodel_zero(True, 4)  # four schedules, synced in each
    assert once > 0.0
    assert each == pytest.approx(4 * once, rel=1e-9)
    assert each_step > once_step
    # a single schedule per step: the option changes nothing
    assert _automodel_zero(True, 0) == _automodel_zero(False, 0)
