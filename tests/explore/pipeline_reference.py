"""The reference pipeline simulation: the test oracle of the compiled fast path.

:func:`simulate` runs every task of one step as a round-robin over the ranks, each running its
order (:func:`stage_explore.analytical.taskgraph.shape`) until a dependency is missing — the
semantics :mod:`stage_explore.analytical.pipeline` states, written the plain way. The product
times steps with :func:`~stage_explore.analytical.pipeline.step_time` (a compiled topological
order, exact extrapolation of periodic timelines); the tests check it against this one.
"""

from __future__ import annotations

from collections.abc import Sequence

from stage_explore.analytical.pipeline import PipelineResult, StageTimes
from stage_explore.analytical.taskgraph import BACKWARD, FORWARD, sends, shape


def simulate(
    kind: str,
    stages: Sequence[StageTimes],
    micro_batches: int,
    vpp: int,
    transfer_s: float,
) -> PipelineResult:
    """Simulate every task of one step (the reference implementation). A chunk's first
    forward and its last weight-gradient task take their ``StageTimes`` extra seconds (not
    counted as busy: what the fast path counts)."""
    p = len(stages)
    m = micro_batches
    s = shape(kind, p, m, vpp)
    last_global = s.last_stage
    unset = -1.0
    fwd_release = [[unset] * m for _ in range(last_global + 1)]  # when it may be consumed
    bwd_release = [[unset] * m for _ in range(last_global + 1)]
    position = [0] * p
    free = [0.0] * p
    busy = [0.0] * p
    sending = [0.0] * p
    last_bwd = [[0.0] * s.chunks for _ in range(p)]
    seen = [[False] * s.chunks for _ in range(p)]  # a chunk's first forward has run

    def ready(code: int, j: int, mb: int) -> float:
        if code == FORWARD:
            return fwd_release[j - 1][mb] if j else 0.0
        if code == BACKWARD:
            return fwd_release[j][mb] if j == last_global else bwd_release[j + 1][mb]
        return 0.0  # a W follows its own B on the same rank

    remaining = sum(len(order) for order in s.orders)
    while remaining:
        progressed = False
        for rank in range(p):
            order, starts, grads, stage = (
                s.orders[rank],
                s.pairs[rank],
                s.last_grad[rank],
                stages[rank],
            )
            index, now, spent, sent = position[rank], free[rank], busy[rank], sending[rank]
            while index < len(order):
                code, j, mb, chunk = order[index]
                paired = index in starts
                if paired:
                    _, jb, mbb, chunk_b = order[index + 1]
                    at_f, at_b = ready(FORWARD, j, mb), ready(BACKWARD, jb, mbb)
                    at = unset if min(at_f, at_b) < 0 else max(at_f, at_b)
                    duration = stage.pair(chunk, chunk_b)
                    count = sends(FORWARD, j, last_global) + sends(BACKWARD, jb, last_global)
                    grad_index, grad_chunk, width = index + 2, chunk_b, 3
                else:
                    at = ready(code, j, mb)
                    duration = (stage.forward_s, stage.backward_s, stage.weight_s)[code][chunk]
                    count = int(sends(code, j, last_global))
                    grad_index, grad_chunk, width = index, chunk, 1
                if at < 0:
                    break
                start = now if now > at else at
                extra = 0.0
                if grads[grad_chunk] == grad_index:
                    last_bwd[rank][grad_chunk] = start
                    extra += stage.last_grad_extra_s[grad_chunk] if stage.last_grad_extra_s else 0.0
                if (paired or code == FORWARD) and not seen[rank][chunk]:
                    seen[rank][chunk] = True
                    if stage.first_forward_extra_s:
                        extra += stage.first_forward_extra_s[chunk]
                now = start + duration + extra + count * transfer_s
                spent += duration
                sent += count * transfer_s
                if paired:
                    fwd_release[j][mb] = bwd_release[jb][mbb] = now
                elif code != 2:
                    (fwd_release if code == FORWARD else bwd_release)[j][mb] = now
                index += width
            if index != position[rank]:
                remaining -= index - position[rank]
                position[rank], free[rank], busy[rank], sending[rank] = index, now, spent, sent
                progressed = True
        if not progressed:  # pragma: no cover - schedules are deadlock-free by construction
            raise RuntimeError(f"pipeline schedule {kind!r} deadlocked")
    return PipelineResult(
        tuple(free), tuple(busy), tuple(sending), tuple(tuple(x) for x in last_bwd)
    )
