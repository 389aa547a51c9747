"""Timing one block's instructions on one rank: a compute stream and a communication stream.

The instructions of a bound block form a DAG (their ``deps``). Like ASTRA-sim, a rank has one
compute slot and one communication slot; an instruction is ready when its dependencies have
finished, and each slot serves ready instructions in index order. Compute instructions take the
accelerator's roofline time; collectives the α–β time over the network dims their group spans;
ring-attention exchanges ``ring_steps`` point-to-point messages. The result is the block's
duration, its busy compute time, and the communication time left exposed (not hidden behind
compute), by collective kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stage_core.lower.bind import Instr


@dataclass(frozen=True, slots=True)
class BlockTiming:
    """Seconds: wall ``duration_s``, busy ``compute_s``, exposed communication by kind."""

    duration_s: float
    compute_s: float
    exposed_s: dict[str, float]
    flops: int

    @staticmethod
    def zero() -> BlockTiming:
        return BlockTiming(0.0, 0.0, {}, 0)


def comm_label(instr: Instr) -> str:
    return "p2p" if instr.kind == "ring" else str(instr.collective)


def time_block(
    instrs: Sequence[Instr],
    compute_s: Callable[[Instr], float],
    comm_s: Callable[[Instr], float],
) -> BlockTiming:
    """Event-driven timing of ``instrs`` with one compute and one communication slot."""
    count = len(instrs)
    if not count:
        return BlockTiming.zero()
    durations = [comm_s(i) if (i.collective is not None or i.kind == "ring") else compute_s(i) for i in instrs]
    is_comm = [i.collective is not None or i.kind == "ring" for i in instrs]
    finish = [-1.0] * count
    ready_at = [0.0] * count
    remaining = [len(i.deps) for i in instrs]
    dependents: list[list[int]] = [[] for _ in range(count)]
    for index, instr in enumerate(instrs):
        for dep in instr.deps:
            dependents[dep].append(index)
    ready = [[i for i in range(count) if not is_comm[i] and remaining[i] == 0],
             [i for i in range(count) if is_comm[i] and remaining[i] == 0]]
    free = [0.0, 0.0]
    intervals: list[list[tuple[float, float, int]]] = [[], []]
    done = 0
    while done < count:
        # Start, on each slot, the lowest-index ready instruction (ASTRA-sim issues in id order).
        candidates = []
        for slot in (0, 1):
            if ready[slot]:
                index = min(ready[slot])
                candidates.append((max(free[slot], ready_at[index]), slot, index))
        if not candidates:  # pragma: no cover - the deps of a bound block form a DAG
            raise RuntimeError("block instructions have a dependency cycle")
        start, slot, index = min(candidates)
        ready[slot].remove(index)
        end = start + durations[index]
        free[slot] = end
        finish[index] = end
        intervals[slot].append((start, end, index))
        done += 1
        for follower in dependents[index]:
            remaining[follower] -= 1
            ready_at[follower] = max(ready_at[follower], end)
            if remaining[follower] == 0:
                ready[1 if is_comm[follower] else 0].append(follower)
    duration = max(finish)
    compute_busy = sum(end - start for start, end, _ in intervals[0])
    exposed: dict[str, float] = {}
    compute_iv = sorted((s, e) for s, e, _ in intervals[0])
    for start, end, index in intervals[1]:
        hidden = 0.0
        for c_start, c_end in compute_iv:
            if c_end <= start:
                continue
            if c_start >= end:
                break
            hidden += min(end, c_end) - max(start, c_start)
        label = comm_label(instrs[index])
        exposed[label] = exposed.get(label, 0.0) + (end - start - hidden)
    flops = sum(i.flops for i in instrs)
    return BlockTiming(duration, compute_busy, exposed, flops)
