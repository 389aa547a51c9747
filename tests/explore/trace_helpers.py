"""Helpers shared by the trace-mode tests (``test_trace_mode*.py``)."""

from __future__ import annotations

from stage_core.lower.program import lower, make_workload
from stage_core.lower.program_node import BWD_W, OPTIMIZER
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.taskgraph import shape
from stage_explore.analytical.trace_costs import StageCosts
from stage_explore.analytical.trace_mode import TraceStep, trace_point
from stage_explore.system.model import System


def optimizer_end(traced: TraceStep) -> float:
    """When the last rank's optimizer ends in a traced step (seconds)."""
    return max(traced.end_of(rank, OPTIMIZER) for rank in traced.result.ranks)


def split_bounds(
    backend: AnalyticalBackend, model: ModelSpec, parallel: ParallelConfig, system: System
) -> tuple[float, float]:
    """How much earlier and how much later a split-backward step may end in the trace than in
    the levelled mode (``test_trace_mode_split.py``'s docstring), summed over every stage's
    tasks: a standalone W task lasts ``W_block`` for the levelled ``W``; an overlapped pair at
    most ``F + B + W_block`` and at least the longer of ``F`` and ``B + W_block`` for the
    levelled ``pair``."""
    workload = make_workload(model, parallel)
    point = trace_point(backend, workload, system)
    plan = backend._plan(point).step
    programs = lower(model, parallel)
    kind, p, m = str(parallel.schedule), parallel.pp, workload.micro_batches
    counts = shape(kind, p, m, parallel.vpp).slot_counts
    earlier = later = 0.0
    for stage_program in programs.stages:
        stage = stage_program.stage
        costs = StageCosts(backend, point, stage, stage_program)
        times = plan.classes[plan.stage_class[stage]].stage_times(True)
        chunks = len(times.forward_s)
        w_block = [
            sum(
                backend._block_timing(point, block.kind, BWD_W, costs.spans(block.kind)).duration_s
                for block in chunk.blocks
            )
            for chunk in stage_program.chunks
        ]
        for c in range(chunks):  # every standalone W task
            n = counts[stage][2 * chunks + c]
            later += n * max(0.0, w_block[c] - times.weight_s[c])
            earlier += n * max(0.0, times.weight_s[c] - w_block[c])
        for a in range(chunks):  # every overlapped pair (its W included)
            for b in range(chunks):
                n = counts[stage][3 * chunks + a * chunks + b]
                pair = times.pair(a, b)
                longest = max(times.forward_s[a], times.backward_s[b] + w_block[b])
                later += n * max(0.0, times.forward_s[a] + times.backward_s[b] + w_block[b] - pair)
                earlier += n * max(0.0, pair - longest)
    return earlier, later


def w_excess(
    backend: AnalyticalBackend, model: ModelSpec, parallel: ParallelConfig, system: System
) -> float:
    """The largest ``|W_block − W|`` of any stage's chunk (0: the split costs nothing)."""
    workload = make_workload(model, parallel)
    point = trace_point(backend, workload, system)
    plan = backend._plan(point).step
    excess = 0.0
    for stage_program in lower(model, parallel).stages:
        costs = StageCosts(backend, point, stage_program.stage, stage_program)
        times = plan.classes[plan.stage_class[stage_program.stage]].stage_times(True)
        for c, chunk in enumerate(stage_program.chunks):
            w_block = sum(
                backend._block_timing(point, block.kind, BWD_W, costs.spans(block.kind)).duration_s
                for block in chunk.blocks
            )
            excess = max(excess, abs(w_block - times.weight_s[c]))
    return excess
