"""Event simulation of a pipeline-parallel step: bubbles come out of the schedule.

Every pipeline rank runs its task order (:mod:`stage_core.lower.schedule`); a forward of global
stage ``j`` waits for the forward of ``j−1`` on the same micro-batch plus the activation's
transfer, a backward of ``j`` for the backward of ``j+1`` plus the gradient's transfer (the last
stage's backward follows its own forward). A rank is never busy with two tasks at once. The
result is each rank's task timeline: its busy time and its idle time (the bubble).

Steady state: with identical micro-batches the timeline becomes periodic once the pipeline is
full, so :func:`step_time` simulates a prefix and extrapolates — but only after checking that
three consecutive prefixes grow by exactly the same amount; otherwise it simulates all of it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from stage_core.lower.schedule import schedule


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Per pipeline rank: seconds of each local chunk's forward and backward task."""

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class PipelineResult:
    """Per pipeline rank: when its last task ends, its busy time, when each chunk's last
    backward starts (for overlapping gradient synchronisation)."""

    end_s: tuple[float, ...]
    busy_s: tuple[float, ...]
    last_backward_start_s: tuple[tuple[float, ...], ...]

    @property
    def makespan_s(self) -> float:
        return max(self.end_s)


@functools.lru_cache(maxsize=256)
def _orders(kind: str, p: int, m: int, vpp: int) -> tuple[tuple[tuple[bool, int, int, int], ...], ...]:
    """Per rank: (is forward, global stage, micro-batch, local chunk) in schedule order
    (memoised: a pure function of the schedule's shape)."""
    return tuple(
        tuple((t.phase == "F", t.chunk * p + rank, t.micro_batch, t.chunk) for t in schedule(kind, rank, p, m, vpp))
        for rank in range(p)
    )


def simulate(
    kind: str, stages: Sequence[StageTimes], micro_batches: int, vpp: int,
    transfer_s: float,
) -> PipelineResult:
    """Simulate every task of one step; ``transfer_s`` is one activation (or gradient) message."""
    p = len(stages)
    m = micro_batches
    last_global = p * vpp - 1
    orders = _orders(kind, p, m, vpp)
    nan = -1.0
    fwd_end = [[nan] * m for _ in range(p * vpp)]
    bwd_end = [[nan] * m for _ in range(p * vpp)]
    position = [0] * p
    free = [0.0] * p
    busy = [0.0] * p
    last_bwd = [[0.0] * vpp for _ in range(p)]
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for rank in range(p):
            order = orders[rank]
            forward_s, backward_s = stages[rank].forward_s, stages[rank].backward_s
            index, now, spent = position[rank], free[rank], busy[rank]
            length = len(order)
            while index < length:
                forward, j, mb, chunk = order[index]
                if forward:
                    if j:
                        previous = fwd_end[j - 1][mb]
                        if previous < 0:
                            break
                        ready = previous + transfer_s
                    else:
                        ready = 0.0
                    duration = forward_s[chunk]
                    start = now if now > ready else ready
                    now = start + duration
                    fwd_end[j][mb] = now
                else:
                    if j == last_global:
                        ready = fwd_end[j][mb]
                    else:
                        following = bwd_end[j + 1][mb]
                        if following < 0:
                            break
                        ready = following + transfer_s
                    duration = backward_s[chunk]
                    start = now if now > ready else ready
                    now = start + duration
                    bwd_end[j][mb] = now
                    if mb == m - 1:
                        last_bwd[rank][chunk] = start
                spent += duration
                index += 1
            if index != position[rank]:
                remaining -= index - position[rank]
                position[rank], free[rank], busy[rank] = index, now, spent
                progressed = True
        if not progressed:  # pragma: no cover - schedules are deadlock-free by construction
            raise RuntimeError(f"pipeline schedule {kind!r} deadlocked")
    return PipelineResult(tuple(free), tuple(busy), tuple(tuple(x) for x in last_bwd))


def step_time(
    kind: str, stages: Sequence[StageTimes], micro_batches: int, vpp: int, transfer_s: float,
) -> PipelineResult:
    """Like :func:`simulate`, extrapolating the steady state when that is exact."""
    p = len(stages)
    period = p if (kind == "interleaved" or vpp > 1) else 1
    base = 2 * p if period > 1 else p + 2  # past the warm-up; linearity is checked below
    if micro_batches < 3 * (base + period):  # three prefixes would cost more than the whole
        return simulate(kind, stages, micro_batches, vpp, transfer_s)
    runs = [simulate(kind, stages, base + i * period, vpp, transfer_s) for i in range(3)]
    extra_periods = (micro_batches - base) // period
    if (micro_batches - base) % period:
        return simulate(kind, stages, micro_batches, vpp, transfer_s)
    ends, busies, lasts = [], [], []
    for rank in range(p):
        e0, e1, e2 = (run.end_s[rank] for run in runs)
        b0, b1, b2 = (run.busy_s[rank] for run in runs)
        if not (_same(e1 - e0, e2 - e1) and _same(b1 - b0, b2 - b1)):
            return simulate(kind, stages, micro_batches, vpp, transfer_s)
        ends.append(e0 + extra_periods * (e1 - e0))
        busies.append(b0 + extra_periods * (b1 - b0))
        chunk_lasts = []
        for chunk in range(vpp):
            l0, l1, l2 = (run.last_backward_start_s[rank][chunk] for run in runs)
            if not _same(l1 - l0, l2 - l1):
                return simulate(kind, stages, micro_batches, vpp, transfer_s)
            chunk_lasts.append(l0 + extra_periods * (l1 - l0))
        lasts.append(tuple(chunk_lasts))
    return PipelineResult(tuple(ends), tuple(busies), tuple(lasts))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))
