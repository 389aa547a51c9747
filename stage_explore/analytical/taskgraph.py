"""The task graph of a pipeline schedule, a pure function of its shape ``(kind, p, m, vpp)``.

A rank's order (:mod:`stage_core.lower.schedule`) holds forwards ``F``, backwards ``B`` and,
in schedules that split the backward, weight gradients ``W``. A forward of global stage ``j``
waits for the forward of ``j−1`` on the same micro-batch, a backward of ``j`` for the backward
of ``j+1`` (the last stage's backward follows its own forward), a ``W`` only for its own ``B``
(earlier on the same rank). DualPipe's overlapped pairs (:func:`~stage_core.lower.schedule.
overlapped`: a forward, a backward of another micro-batch and its ``W``) run as one task that
waits for both inputs.

- :func:`shape` — per rank the order as ``(code, global stage, micro-batch, chunk)`` (code 0 F,
  1 B, 2 W), the pairs, which task ends each chunk's weight gradients, per-slot task counts and
  sends (memoised);
- :func:`compile_shape` — one flat topological order of the whole DAG (memoised), the fast
  path's input, in columns (:class:`Compiled`: each task's rank, previous task on its rank,
  dependency and duration slot); a pair is two entries, a zero-cost wait for the backward's
  input, then the pair waiting for the forward's input;
- :func:`periodic` — the proof that extrapolating a long run from a prefix is exact (see its
  docstring), used by :func:`stage_explore.analytical.pipeline.step_time`.

Duration slots of a rank with ``C`` chunks: ``F c`` → ``c``, ``B c`` → ``C + c``, ``W c`` →
``2C + c``, a pair (forward chunk ``a``, backward chunk ``b``) → ``3C + a·C + b``, the wait →
``3C + C²``; slot ``k`` of rank ``r`` is ``r·slots(C) + k``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from stage_core.lower.schedule import (
    SPLIT_BACKWARD,
    Step,
    chunks_per_rank,
    global_stage,
    global_stages,
    group_size,
    order,
    overlapped,
    ungrouped,
)

FORWARD, BACKWARD, WEIGHT = 0, 1, 2
_CODE = {"F": FORWARD, "B": BACKWARD, "W": WEIGHT}


def rank_order(kind: str, rank: int, p: int, m: int, vpp: int) -> tuple[Step, ...]:
    """:func:`~stage_core.lower.schedule.schedule` as plain ``(phase, chunk, micro_batch)``
    tuples (:func:`~stage_core.lower.schedule.order`), without its process-wide memo: the
    memoised shapes here keep only plain int tuples, so a sweep's schedules (hundreds of
    thousands of tasks the garbage collector would traverse on every full collection) are freed
    once a shape is built, and no ``Task`` object is made for them."""
    return order(kind, rank, p, m, vpp)


def slots(chunks: int) -> int:
    """Duration slots per rank."""
    return 3 * chunks + chunks * chunks + 1


def sends(code: int, stage: int, last_stage: int) -> bool:
    """Whether the task's output goes to another stage (a forward not on the last global stage,
    a backward not on global stage 0)."""
    if code == FORWARD:
        return stage != last_stage
    return code == BACKWARD and stage != 0


@dataclass(frozen=True, slots=True)
class Shape:
    """One schedule shape: per rank its order, the indices of pair starts, the index of each
    chunk's last weight-gradient task (``W`` or, unsplit, ``B``), the number of tasks per
    duration slot, and the number of sends."""

    kind: str
    chunks: int
    last_stage: int
    orders: tuple[tuple[tuple[int, int, int, int], ...], ...]
    pairs: tuple[frozenset[int], ...]
    last_grad: tuple[tuple[int, ...], ...]
    slot_counts: tuple[tuple[int, ...], ...]
    send_counts: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def shape(kind: str, p: int, m: int, vpp: int) -> Shape:
    chunks = chunks_per_rank(kind, vpp)
    last_stage = global_stages(kind, p, vpp) - 1
    grad_code = WEIGHT if kind in SPLIT_BACKWARD else BACKWARD
    orders, pairs, last_grad, slot_counts, send_counts = [], [], [], [], []
    for rank in range(p):
        stage_of = [global_stage(kind, rank, chunk, p) for chunk in range(chunks)]
        # by columns, with C-level iterators (no Python step per task; m ≥ 1: never empty)
        phases, chunk_of, micro_batches = zip(*rank_order(kind, rank, p, m, vpp), strict=True)
        codes = list(map(_CODE.__getitem__, phases))
        order = tuple(
            zip(codes, map(stage_of.__getitem__, chunk_of), micro_batches, chunk_of, strict=True)
        )
        starts = overlapped(kind, rank, p, m, vpp)
        last = [-1] * chunks
        counts = [0] * slots(chunks)
        index = 0
        while starts and index < len(order):  # DualPipe: pairs take three entries
            code, _, _, chunk = order[index]
            if index in starts:
                backward_chunk = order[index + 1][3]
                counts[3 * chunks + chunk * chunks + backward_chunk] += 1
                counts[3 * chunks + chunks * chunks] += 1
                last[backward_chunk] = index + 2
                index += 3
                continue
            counts[code * chunks + chunk] += 1
            if code == grad_code:
                last[chunk] = index
            index += 1
        if not starts:  # the same, without pairs: tasks per (code, chunk); the last from the end
            for (code, chunk), count in Counter(zip(codes, chunk_of, strict=True)).items():
                counts[code * chunks + chunk] = count
            found = 0
            for index in range(len(order) - 1, -1, -1):
                code, _, _, chunk = order[index]
                if code == grad_code and last[chunk] < 0:
                    last[chunk] = index
                    found += 1
                    if found == chunks:
                        break
        # a chunk's tasks all run its global stage: its sends follow from the counts
        forward_sends = [int(sends(FORWARD, j, last_stage)) for j in stage_of]
        backward_sends = [int(sends(BACKWARD, j, last_stage)) for j in stage_of]
        sent = sum(
            counts[c] * forward_sends[c] + counts[chunks + c] * backward_sends[c]
            for c in range(chunks)
        ) + sum(
            counts[3 * chunks + a * chunks + b] * (forward_sends[a] + backward_sends[b])
            for a in range(chunks)
            for b in range(chunks)
        )
        orders.append(order)
        pairs.append(starts)
        last_grad.append(tuple(last))
        slot_counts.append(tuple(counts))
        send_counts.append(sent)
    return Shape(
        kind, chunks, last_stage, tuple(orders), tuple(pairs), tuple(last_grad),
        tuple(slot_counts), tuple(send_counts),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compiled:
    """One schedule shape as a flat topological order, in columns.

    Task ``k`` runs on rank ``ranks[k]``, in duration slot ``slot_of[k]``; numbered from 1, so
    that 0 names "nothing" (a release of 0.0), ``after[k]`` = 1 + the rank's previous task (0:
    the rank's first) and ``waits[k]`` = 1 + the task whose release it waits for (0: none).
    ``last_backward[rank][chunk]`` = (the task, the rank's previous task) of the chunk's last
    weight-gradient task (a pair: the pair), to recover its start exactly; ``last_task[rank]``:
    its last task; ``first_forward[rank][chunk]``: the chunk's first forward (a pair: the pair).
    The columns are the fast path's input; :attr:`tasks` gives them as rows.
    """

    last_backward: tuple[tuple[tuple[int, int], ...], ...]
    last_task: tuple[int, ...]  # per rank
    first_forward: tuple[tuple[int, ...], ...]
    after: tuple[int, ...]
    waits: tuple[int, ...]
    slot_of: tuple[int, ...]
    ranks: tuple[int, ...]

    @property
    def tasks(self) -> tuple[tuple[int, int, int], ...]:
        """``tasks[k] = (rank, dependency, slot)`` (dependency −1: none), built on each call."""
        return tuple(zip(self.ranks, [wait - 1 for wait in self.waits], self.slot_of, strict=True))


@functools.lru_cache(maxsize=256)
def compile_shape(kind: str, p: int, m: int, vpp: int) -> Compiled:
    """A topological order of the task DAG: each rank runs its order until a dependency is
    missing and waits; producing that dependency wakes it (the times do not depend on which
    topological order is used)."""
    s = shape(kind, p, m, vpp)
    chunks, last_stage, per_rank = s.chunks, s.last_stage, slots(s.chunks)
    size = (last_stage + 1) * m  # produced[j·m + mb]: forwards; produced[size + j·m + mb]: B
    produced = [-1] * (2 * size)
    waiting: dict[int, int] = {}  # the key a blocked rank needs → that rank
    ranks: list[int] = []  # the columns of Compiled, one entry per task
    after: list[int] = []
    waits: list[int] = []
    slot_of: list[int] = []
    last_backward = [[(-1, -1)] * chunks for _ in range(p)]
    first_forward = [[-1] * chunks for _ in range(p)]
    position = [0] * p
    previous_of = [-1] * p  # each rank's last task so far
    runnable = list(range(p - 1, -1, -1))

    def needs(code: int, j: int, mb: int) -> tuple[int, int]:
        """(the key this task produces, the key it waits for, −1: none)."""
        if code == FORWARD:
            return j * m + mb, (j - 1) * m + mb if j else -1
        if code == BACKWARD:
            return size + j * m + mb, j * m + mb if j == last_stage else size + (j + 1) * m + mb
        return -1, -1

    while runnable:
        rank = runnable.pop()
        order, starts, grads = s.orders[rank], s.pairs[rank], s.last_grad[rank]
        firsts = first_forward[rank]
        index, length = position[rank], len(order)
        previous = previous_of[rank]
        base = rank * per_rank
        while index < length:
            code, j, mb, chunk = order[index]
            if starts and index in starts:
                _, jb, mbb, chunk_b = order[index + 1]
                key_f, need_f = needs(FORWARD, j, mb)
                key_b, need_b = needs(BACKWARD, jb, mbb)
                missing = next((n for n in (need_b, need_f) if n >= 0 and produced[n] < 0), -1)
                if missing >= 0:
                    waiting[missing] = rank
                    break
                wait_task = len(ranks)
                ranks += (rank, rank)
                after += (previous + 1, wait_task + 1)
                waits += (produced[need_b] + 1 if need_b >= 0 else 0,
                          produced[need_f] + 1 if need_f >= 0 else 0)  # fmt: skip
                slot_of += (base + per_rank - 1, base + 3 * chunks + chunk * chunks + chunk_b)
                task = wait_task + 1
                if grads[chunk_b] == index + 2:
                    last_backward[rank][chunk_b] = (task, wait_task)
                if firsts[chunk] < 0:
                    firsts[chunk] = task
                for key in (key_f, key_b):
                    produced[key] = task
                    if waiting and key in waiting:
                        runnable.append(waiting.pop(key))
                previous = task
                index += 3
                continue
            # needs(code, j, mb), inlined: this loop runs once per task of every new shape
            if code == FORWARD:
                key, needed = j * m + mb, (j - 1) * m + mb if j else -1
            elif code == BACKWARD:
                key = size + j * m + mb
                needed = j * m + mb if j == last_stage else key + m
            else:
                key = needed = -1
            dependency = -1
            if needed >= 0:
                dependency = produced[needed]
                if dependency < 0:
                    waiting[needed] = rank
                    break
            task = len(ranks)
            if grads[chunk] == index:
                last_backward[rank][chunk] = (task, previous)
            elif code == FORWARD and firsts[chunk] < 0:
                firsts[chunk] = task
            if key >= 0:
                produced[key] = task
                if waiting and key in waiting:
                    runnable.append(waiting.pop(key))
            ranks.append(rank)
            after.append(previous + 1)
            waits.append(dependency + 1)
            slot_of.append(base + code * chunks + chunk)
            previous = task
            index += 1
        position[rank], previous_of[rank] = index, previous
    if any(position[r] != len(s.orders[r]) for r in range(p)):  # pragma: no cover
        raise RuntimeError(f"pipeline schedule {kind!r} deadlocked")
    return Compiled(
        tuple(tuple(x) for x in last_backward),
        tuple(previous_of),
        tuple(tuple(x) for x in first_forward),
        tuple(after),
        tuple(waits),
        tuple(slot_of),
        tuple(ranks),
    )


def period(kind: str, p: int, vpp: int) -> int:
    """Micro-batches per period of the steady state: the interleaved schedule advances in
    groups of ``N`` (:func:`~stage_core.lower.schedule.group_size`, default ``p``), 1F1B and
    ZB-H1 one at a time; 0: never extrapolated (GPipe inserts a micro-batch at two places,
    DualPipe numbers its two directions from both ends)."""
    if kind in ("gpipe", "dualpipe"):
        return 0
    if ungrouped(kind)[0] == "interleaved" or vpp > 1:
        return group_size(kind, p)  # Megatron's groups of N (default p) micro-batches
    return 1


@dataclass(frozen=True, slots=True)
class Periodic:
    """A run of ``m`` micro-batches that decides every longer run (see :func:`periodic`):
    ``pairs`` are (task, the same task one period later) in ``compiled``."""

    m: int
    compiled: Compiled
    pairs: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=256)
def periodic(kind: str, p: int, vpp: int, base: int) -> Periodic | None:
    """The structure that makes extrapolation exact, or None.

    Going from ``base`` to ``base + P`` micro-batches (P = :func:`period`) must insert, on
    every rank ``r`` at the position ``c_r`` where the two orders part, one block of
    ``B_r`` tasks — the previous ``B_r`` tasks shifted by P micro-batches — and shift the rest
    by P; going to ``base + 2P`` must insert the shifted block after it (the schedules are
    formulas in the micro-batch index, so the pattern then repeats). In the run of
    ``base + P``, let the state be the last ``K`` periods before ``c_r`` on every rank, deep
    enough to hold every task that a task at or after ``c_r`` waits for (its dependency or its
    predecessor on the rank). Then all later tasks are determined by the state, so if the
    state's tasks one period later all end exactly ``Δ`` later, so does everything after: each
    further period adds ``Δ`` to the ends (max-plus homogeneity). ``pairs`` lists the state's
    (task, task one period later) for the caller to check.
    """
    step = period(kind, p, vpp)
    if not step:
        return None

    def orders(m: int) -> list[list[tuple[str, int, int]]]:
        return [list(rank_order(kind, r, p, m, vpp)) for r in range(p)]

    def shifted(tasks: Sequence[tuple[str, int, int]], k: int) -> list[tuple[str, int, int]]:
        return [(phase, chunk, mb + k * step) for phase, chunk, mb in tasks]

    first, second, third = orders(base), orders(base + step), orders(base + 2 * step)
    cuts, blocks = [], []
    for a, b, c in zip(first, second, third, strict=True):
        cut = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        block = len(b) - len(a)
        if block <= 0 or cut < block or cut + block > len(b):
            return None
        if b[cut + block :] != shifted(a[cut:], 1) or b[cut : cut + block] != shifted(
            b[cut - block : cut], 1
        ):
            return None
        if c[: cut + block] != b[: cut + block] or c[cut + block : cut + 2 * block] != shifted(
            b[cut : cut + block], 1
        ):
            return None
        if c[cut + 2 * block :] != shifted(a[cut:], 2):
            return None
        cuts.append(cut)
        blocks.append(block)
    compiled = compile_shape(kind, p, base + step, vpp)
    ranks = compiled.ranks
    by_rank: list[list[int]] = [[] for _ in range(p)]
    position = [0] * len(ranks)
    for index, rank in enumerate(ranks):
        position[index] = len(by_rank[rank])
        by_rank[rank].append(index)
    depth = 1  # periods before the cut that the rest refers to
    for index, (rank, wait) in enumerate(zip(ranks, compiled.waits, strict=True)):
        dependency = wait - 1
        if dependency < 0:
            continue
        owner = ranks[dependency]
        behind = cuts[owner] - position[dependency]
        if position[index] >= cuts[rank]:
            depth = max(depth, -(-behind // blocks[owner]))
        elif behind <= 0:  # the common prefix must not wait for what follows a cut
            return None
    pairs = []
    for rank in range(p):
        cut, block, order = cuts[rank], blocks[rank], second[rank]
        if cut < depth * block:
            return None
        window = range(cut - depth * block, cut)
        if any(order[i + block] != shifted([order[i]], 1)[0] for i in window):
            return None
        pairs += [(by_rank[rank][i], by_rank[rank][i + block]) for i in window]
        for chunk_task, _ in compiled.last_backward[rank]:
            if position[chunk_task] < cut:  # must follow the state, to be shifted with it
                return None
    return Periodic(base + step, compiled, tuple(pairs))
