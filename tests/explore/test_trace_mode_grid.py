"""The trace mode against the levelled mode on a grid of schedules x ZeRO stages x recompute
(issue #11's "one timing engine"; docs/analytical.md, "Trace mode against the levelled mode on
a schedule x ZeRO x recompute grid (7 Dec 2026, s36 tracegap)").

A tiny Llama (four layers, 1,024 tokens) on tp 2 x dp 2 (x pp 2), every framework profile:

- one stage, 1F1B and interleaved 1F1B: the two modes end the step to 1e-9 on every cell but
  DeepSpeed's ZeRO-3 under recompute (its third gather, bounded in
  tests/explore/test_trace_mode_zero3.py). Before session 36 the FSDP profiles without a root
  unit (``fsdp``, ``automodel``) were 4-6 % apart at ZeRO-3 with tp 2: the vocab-parallel
  cross-entropy's statistics all-reduces waited for nothing in the head block
  (``stage_core/lower/bind.py``), so the head's last instruction ended before its loss and the
  next pass's ZeRO gathers (waiting for that instruction) started beside the loss.
- ZB-H1 and DualPipe at ZeRO 0 / 1, with and without sequence parallelism: within the split
  schedules' design bound (``trace_helpers.split_bounds``: DualPipe's overlapped pairs), and
  ZB-H1 to 1e-9 on every profile. Before s36 wtime the levelled W was the backward less B
  (B's collectives hidden behind W's GEMMs) and W's sp input all-gathers started at the W
  task's entry beside the earlier weight GEMMs: ZB-H1's trace was +0.2 … +0.6 % later (tp 2),
  +0.2 … +2.8 % with sp. Both modes now time a W task from its own instructions and issue
  each W gather after the previous weight GEMM (``async_op=False``, as the zero-bubble
  reference's ``WeightGradStore.pop``; ``stage_core/lower/weightgrad.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute, Schedule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system
from tests.explore.trace_helpers import optimizer_end, split_bounds, w_excess

#: The a100-80gb preset without NCCL's channel counts, as the other agreement tests.
_REAL = load_system("a100-80gb")
SYSTEM = replace(_REAL, network=tuple(replace(d, nccl_channels=None) for d in _REAL.network))

LAYOUTS: dict[str, dict[str, Any]] = {
    "pp1": dict(tp=2, dp=2, global_batch=8),
    "1f1b": dict(tp=2, dp=2, pp=2, global_batch=16),
    "interleaved": dict(tp=2, dp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=16),
}
SPLIT: dict[str, dict[str, Any]] = {
    "zbh1": dict(tp=2, dp=2, pp=2, schedule=Schedule.ZERO_BUBBLE, global_batch=16),
    "zbh1-sp": dict(tp=2, dp=2, pp=2, sp=True, schedule=Schedule.ZERO_BUBBLE, global_batch=16),
    "dualpipe": dict(tp=2, dp=2, pp=2, schedule=Schedule.DUALPIPE, global_batch=16),
    "dualpipe-sp": dict(tp=2, dp=2, pp=2, sp=True, schedule=Schedule.DUALPIPE, global_batch=16),
}
RECOMPUTE = (Recompute.NONE, Recompute.FULL)


def _modes(framework: str, parallel: ParallelConfig) -> tuple[float, float, AnalyticalBackend]:
    """(levelled, traced) step ends without the step-end parameter gathers (the trace runs
    them after the optimizer, ``gathers_ahead=False``), and the backend."""
    backend = AnalyticalBackend(framework=framework)
    model = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
    evaluation = backend.evaluate(model, parallel, SYSTEM)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    traced = trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False)
    return levelled, optimizer_end(traced), backend


#: Every (framework, layout, zero, recompute) cell but DeepSpeed's ZeRO-3 under recompute, whose
#: third gather tests/explore/test_trace_mode_zero3.py bounds instead.
UNSPLIT_CELLS = [
    pytest.param(framework, layout, zero, recompute, id=f"{framework}-{layout}-{zero}-{recompute}")
    for framework in sorted(FRAMEWORKS)
    for layout in sorted(LAYOUTS)
    for zero in (0, 1, 2, 3)
    for recompute in RECOMPUTE
    if not (framework == "deepspeed" and zero == 3 and recompute is not Recompute.NONE)
]
#: Every (framework, schedule, zero, recompute) split cell but DeepSpeed under recompute, whose
#: regather the trace refuses under a split backward.
SPLIT_CELLS = [
    pytest.param(
        framework, schedule, zero, recompute, id=f"{framework}-{schedule}-{zero}-{recompute}"
    )
    for framework in sorted(FRAMEWORKS)
    for schedule in sorted(SPLIT)
    for zero in (0, 1)
    for recompute in RECOMPUTE
    if not (framework == "deepspeed" and recompute is not Recompute.NONE)
]


@pytest.mark.parametrize(("framework", "layout", "zero", "recompute"), UNSPLIT_CELLS)
def test_unsplit_schedules_end_the_step_as_the_levelled_mode(
    framework: str, layout: str, zero: int, recompute: Recompute
) -> None:
    parallel = ParallelConfig(zero=zero, recompute=recompute, **LAYOUTS[layout])
    levelled, traced, _ = _modes(framework, parallel)
    assert math.isclose(traced, levelled, rel_tol=1e-9), (traced, levelled)


@pytest.mark.parametrize(("framework", "schedule", "zero", "recompute"), SPLIT_CELLS)
def test_split_schedules_without_sharded_gradients_stay_within_their_design_bound(
    framework: str, schedule: str, zero: int, recompute: Recompute
) -> None:
    parallel = ParallelConfig(zero=zero, recompute=recompute, **SPLIT[schedule])
    levelled, traced, backend = _modes(framework, parallel)
    model = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
    earlier, later = split_bounds(backend, model, parallel, SYSTEM)
    tolerance = 1e-9 * levelled
    assert levelled - earlier - tolerance <= traced <= levelled + later + tolerance
    # the levelled W task is W's own instructions' timing (W_block), as the trace runs it
    assert w_excess(backend, model, parallel, SYSTEM) <= 1e-12 * levelled
    if schedule.startswith("zbh1"):
        assert math.isclose(traced, levelled, rel_tol=1e-9), (traced, levelled)
