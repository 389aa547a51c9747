"""Event simulation of a pipeline-parallel step: bubbles come out of the schedule.

Every pipeline rank runs its task order (:mod:`stage_core.lower.schedule`); a forward of global
stage ``j`` waits for the forward of ``j−1`` on the same micro-batch, a backward of ``j`` for the
backward of ``j+1`` (the last stage's backward follows its own forward). A rank is never busy
with two tasks at once.

Point-to-point transfers are *blocking*, as in Megatron-LM's pipeline (``batch_isend_irecv``
then ``wait`` and a device synchronise, before the 2023 ``overlap_p2p_comm`` option): a task
whose output goes to another stage (a forward not on the last global stage, a backward not on
global stage 0) holds its rank for ``transfer_s`` after it ends, and the receiver may start
once that transfer is over. So ``transfer_s`` costs the sender time in every schedule, and the
receiver waits for it.

The result is each rank's timeline summary: when it ends, its busy (compute) time, the time it
spends sending, and when each chunk's last backward starts (for overlapping the gradient
synchronisation); the rest of a rank's time is its bubble.

Two implementations of the same semantics:

- :func:`simulate`, the reference: a round-robin over the ranks, each running its order until a
  dependency is missing;
- :func:`step_time`, the fast path the backend uses: the task DAG depends only on the
  schedule's shape ``(kind, p, m, vpp)``, never on durations, so it is compiled once per shape
  into a flat topological order (memoised) and a step is one tight loop over it (~60–80 ns per
  task); any topological order gives the same times.

:func:`activation_profiles` gives, per rank, the micro-batches in flight per chunk at the
schedule's activation peaks; :func:`assemble_step` finishes a step from per-stage
:class:`StageClass` costs — each chunk's gradient synchronisation after its last backward, the
optimizer, ZeRO's parameter gathers — and returns the slowest rank's time and breakdown and the
peak memory over all ranks.

**Extrapolation, only when exact.** With many micro-batches the 1F1B and interleaved
timelines become periodic, but checking a few prefixes is not enough: a rank faster than the
slowest can keep its own rate for many periods before the slowest rank's delay reaches it (an
interleaved example with p = 4 changes rate after 40 micro-batches). :func:`step_time`
therefore simulates a short prefix and extrapolates only when the whole *state* — every task
that later tasks depend on — is found one period later shifted by one and the same Δ
(:func:`_periodic` proves that the rest then follows, by max-plus homogeneity); otherwise it
tries a longer prefix, and in the end simulates every task. The tests check that both paths
agree with the reference on many shapes, this one included.
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
    """Per pipeline rank: when its last task (and its send) ends, its busy time, the time it
    is held by sends, and when each chunk's last backward starts."""

    end_s: tuple[float, ...]
    busy_s: tuple[float, ...]
    send_s: tuple[float, ...]
    last_backward_start_s: tuple[tuple[float, ...], ...]

    @property
    def makespan_s(self) -> float:
        return max(self.end_s)

    def bubble_s(self, rank: int) -> float:
        """Idle time of ``rank``: neither computing nor sending."""
        return self.end_s[rank] - self.busy_s[rank] - self.send_s[rank]


def _sends(forward: bool, global_stage: int, last_global: int) -> bool:
    return global_stage != last_global if forward else global_stage != 0


@functools.lru_cache(maxsize=256)
def _orders(
    kind: str, p: int, m: int, vpp: int
) -> tuple[tuple[tuple[bool, int, int, int], ...], ...]:
    """Per rank: (is forward, global stage, micro-batch, local chunk) in schedule order
    (memoised: a pure function of the schedule's shape)."""
    return tuple(
        tuple(
            (t.phase == "F", t.chunk * p + rank, t.micro_batch, t.chunk)
            for t in schedule(kind, rank, p, m, vpp)
        )
        for rank in range(p)
    )


def _busy(stages: Sequence[StageTimes], m: int) -> tuple[float, ...]:
    return tuple(m * (sum(s.forward_s) + sum(s.backward_s)) for s in stages)


def _send_time(p: int, m: int, vpp: int, transfer_s: float) -> tuple[float, ...]:
    last = p * vpp - 1
    counts = [
        sum(_sends(True, c * p + r, last) + _sends(False, c * p + r, last) for c in range(vpp))
        for r in range(p)
    ]
    return tuple(m * count * transfer_s for count in counts)


def simulate(
    kind: str,
    stages: Sequence[StageTimes],
    micro_batches: int,
    vpp: int,
    transfer_s: float,
) -> PipelineResult:
    """Simulate every task of one step (the reference implementation)."""
    p = len(stages)
    m = micro_batches
    last_global = p * vpp - 1
    orders = _orders(kind, p, m, vpp)
    unset = -1.0
    fwd_release = [[unset] * m for _ in range(p * vpp)]  # when the output may be consumed
    bwd_release = [[unset] * m for _ in range(p * vpp)]
    position = [0] * p
    free = [0.0] * p
    busy = [0.0] * p
    sending = [0.0] * p
    last_bwd = [[0.0] * vpp for _ in range(p)]
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for rank in range(p):
            order = orders[rank]
            forward_s, backward_s = stages[rank].forward_s, stages[rank].backward_s
            index, now, spent, sent = position[rank], free[rank], busy[rank], sending[rank]
            length = len(order)
            while index < length:
                forward, j, mb, chunk = order[index]
                if forward:
                    ready = 0.0
                    if j:
                        ready = fwd_release[j - 1][mb]
                        if ready < 0:
                            break
                    duration = forward_s[chunk]
                else:
                    ready = fwd_release[j][mb] if j == last_global else bwd_release[j + 1][mb]
                    if ready < 0:
                        break
                    duration = backward_s[chunk]
                start = now if now > ready else ready
                if not forward and mb == m - 1:
                    last_bwd[rank][chunk] = start
                now = start + duration
                spent += duration
                if _sends(forward, j, last_global):
                    now += transfer_s
                    sent += transfer_s
                (fwd_release if forward else bwd_release)[j][mb] = now
                index += 1
            if index != position[rank]:
                remaining -= index - position[rank]
                position[rank], free[rank], busy[rank], sending[rank] = index, now, spent, sent
                progressed = True
        if not progressed:  # pragma: no cover - schedules are deadlock-free by construction
            raise RuntimeError(f"pipeline schedule {kind!r} deadlocked")
    return PipelineResult(
        tuple(free), tuple(busy), tuple(sending), tuple(tuple(x) for x in last_bwd)
    )


# --- the fast path ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Compiled:
    """One schedule shape as a flat topological order.

    ``tasks[k] = (rank, dependency, slot)``: the task's rank, the index of the task whose
    release it waits for (−1: none) and its duration slot ``rank·2·vpp + phase·vpp + chunk``.
    ``last_backward[rank][chunk]`` = (the task, the rank's previous task) of the last
    micro-batch's backward, to recover its start exactly; ``last_task[rank]``: its last task.
    """

    tasks: tuple[tuple[int, int, int], ...]
    last_backward: tuple[tuple[tuple[int, int], ...], ...]
    last_task: tuple[int, ...]  # per rank


@functools.lru_cache(maxsize=256)
def _compile(kind: str, p: int, m: int, vpp: int) -> _Compiled:
    """A topological order of the task DAG: each rank runs its order until a dependency is
    missing and waits; producing that dependency wakes it (the times do not depend on which
    topological order is used)."""
    last_global = p * vpp - 1
    size = p * vpp * m  # produced[j·m + mb]: forwards; produced[size + j·m + mb]: backwards
    produced = [-1] * (2 * size)
    waiting: dict[int, int] = {}  # the key a blocked rank needs → that rank
    tasks: list[tuple[int, int, int]] = []
    append = tasks.append
    last_backward = [[(-1, -1)] * vpp for _ in range(p)]
    position = [0] * p
    previous_of = [-1] * p  # each rank's last task so far
    runnable = list(range(p - 1, -1, -1))
    while runnable:
        rank = runnable.pop()
        order = schedule(kind, rank, p, m, vpp)
        index, length = position[rank], len(order)
        previous = previous_of[rank]
        forward_slot, backward_slot = rank * 2 * vpp, rank * 2 * vpp + vpp
        while index < length:
            phase, chunk, mb = order[index]
            j = chunk * p + rank
            if phase == "F":
                key, needed, slot = j * m + mb, (j - 1) * m + mb if j else -1, forward_slot + chunk
            else:
                key = size + j * m + mb
                needed = j * m + mb if j == last_global else size + (j + 1) * m + mb
                slot = backward_slot + chunk
            dependency = -1
            if needed >= 0:
                dependency = produced[needed]
                if dependency < 0:
                    waiting[needed] = rank
                    break
            task = len(tasks)
            if key >= size and mb == m - 1:
                last_backward[rank][chunk] = (task, previous)
            produced[key] = task
            if waiting and key in waiting:
                runnable.append(waiting.pop(key))
            previous = task
            append((rank, dependency, slot))
            index += 1
        position[rank], previous_of[rank] = index, previous
    if len(tasks) != 2 * size:  # pragma: no cover - schedules are deadlock-free
        raise RuntimeError(f"pipeline schedule {kind!r} deadlocked")
    return _Compiled(tuple(tasks), tuple(tuple(x) for x in last_backward), tuple(previous_of))


def _costs(stages: Sequence[StageTimes], vpp: int, transfer_s: float) -> list[float]:
    """Seconds each duration slot holds its rank: the task, plus its send if it sends."""
    p = len(stages)
    last = p * vpp - 1
    costs = []
    for rank, stage in enumerate(stages):
        for forward, times in ((True, stage.forward_s), (False, stage.backward_s)):
            for chunk, seconds in enumerate(times):
                costs.append(
                    seconds + transfer_s if _sends(forward, chunk * p + rank, last) else seconds
                )
    return costs


def _releases(
    compiled: _Compiled, stages: Sequence[StageTimes], vpp: int, transfer_s: float
) -> list[float]:
    """When every task (and its send) ends, in compiled order; the extra last entry stays 0.0:
    the release of index −1, "no dependency"."""
    cost = _costs(stages, vpp, transfer_s)
    release = [0.0] * (len(compiled.tasks) + 1)
    free = [0.0] * len(stages)
    index = 0
    for rank, dependency, slot in compiled.tasks:
        now = free[rank]
        ready = release[dependency]
        if ready > now:
            now = ready
        now += cost[slot]
        release[index] = now
        free[rank] = now
        index += 1
    return release


def _ends_and_starts(
    compiled: _Compiled, release: Sequence[float], p: int
) -> tuple[list[float], list[list[float]]]:
    """Every rank's end and the last backward start of every (rank, chunk)."""
    ends = [release[task] for task in compiled.last_task]
    starts = []
    for rank in range(p):
        row = []
        for task, previous in compiled.last_backward[rank]:
            _, dependency, _ = compiled.tasks[task]
            start = release[previous]  # -1: the rank's first task, free at 0.0
            if release[dependency] > start:
                start = release[dependency]
            row.append(start)
        starts.append(row)
    return ends, starts


def _result(
    stages: Sequence[StageTimes],
    m: int,
    vpp: int,
    transfer_s: float,
    ends: Sequence[float],
    starts: Sequence[Sequence[float]],
) -> PipelineResult:
    p = len(stages)
    return PipelineResult(
        tuple(ends),
        _busy(stages, m),
        _send_time(p, m, vpp, transfer_s),
        tuple(tuple(row) for row in starts),
    )


def step_time(
    kind: str,
    stages: Sequence[StageTimes],
    micro_batches: int,
    vpp: int,
    transfer_s: float,
) -> PipelineResult:
    """:func:`simulate` by compiled orders: the same tasks in one tight loop, or — when the
    timeline is provably periodic (:func:`_periodic`) — a short prefix and the period's shift.

    The state's shifts must agree to within 1e-11 of the prefix's length (rounding); the
    periodic map does not expand differences, so the extrapolated times are then within
    (periods extrapolated) × that of the simulated ones."""
    p, m = len(stages), micro_batches
    period = _period(kind, p, vpp)
    periods = 2 if period > 1 else p + 1  # past the warm-up, and deep enough for the state
    while kind != "gpipe" and p > 1:
        base = periods * period + m % period
        if 4 * (base + 2 * period) > m:
            break  # the prefix would cost about as much as the whole
        periodic = _periodic(kind, p, vpp, base)
        if periodic is None:  # not yet one period deep: a longer prefix
            periods *= 2
            continue
        release = _releases(periodic.compiled, stages, vpp, transfer_s)
        shift = release[periodic.pairs[0][1]] - release[periodic.pairs[0][0]]
        scale = 1e-11 * max(1.0, max(release))
        if all(abs(release[b] - release[a] - shift) <= scale for a, b in periodic.pairs):
            ends, starts = _ends_and_starts(periodic.compiled, release, p)
            k = (m - base - period) // period  # periods beyond the simulated run
            ends = [e + k * shift for e in ends]
            starts = [[s + k * shift for s in row] for row in starts]
            return _result(stages, m, vpp, transfer_s, ends, starts)
        periods *= 2  # still in the transient: a longer prefix
    compiled = _compile(kind, p, m, vpp)
    ends, starts = _ends_and_starts(compiled, _releases(compiled, stages, vpp, transfer_s), p)
    return _result(stages, m, vpp, transfer_s, ends, starts)


def _period(kind: str, p: int, vpp: int) -> int:
    """Micro-batches per period of the steady state: the interleaved schedule advances in
    groups of ``p``, the others one at a time."""
    return p if kind == "interleaved" or vpp > 1 else 1


@dataclass(frozen=True, slots=True)
class _Periodic:
    """A run of ``m`` micro-batches that decides every longer run (see :func:`_periodic`):
    ``pairs`` are (task, the same task one period later) in ``compiled``."""

    m: int
    compiled: _Compiled
    pairs: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=256)
def _periodic(kind: str, p: int, vpp: int, base: int) -> _Periodic | None:
    """The structure that makes extrapolation exact, or None.

    Going from ``base`` to ``base + P`` micro-batches (P = :func:`_period`) must insert, on
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
    period = _period(kind, p, vpp)

    def orders(m: int) -> list[list[tuple[str, int, int]]]:
        return [[(t.phase, t.chunk, t.micro_batch) for t in schedule(kind, r, p, m, vpp)]
                for r in range(p)]  # fmt: skip

    def shifted(tasks: Sequence[tuple[str, int, int]], k: int) -> list[tuple[str, int, int]]:
        return [(phase, chunk, mb + k * period) for phase, chunk, mb in tasks]

    first, second, third = orders(base), orders(base + period), orders(base + 2 * period)
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
    compiled = _compile(kind, p, base + period, vpp)
    by_rank: list[list[int]] = [[] for _ in range(p)]
    position = [0] * len(compiled.tasks)
    for index, (rank, _, _) in enumerate(compiled.tasks):
        position[index] = len(by_rank[rank])
        by_rank[rank].append(index)
    depth = 1  # periods before the cut that the rest refers to
    for index, (rank, dependency, _) in enumerate(compiled.tasks):
        if dependency < 0:
            continue
        owner = compiled.tasks[dependency][0]
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
    return _Periodic(base + period, compiled, tuple(pairs))


@functools.lru_cache(maxsize=1024)
def activation_profiles(
    kind: str, stage: int, p: int, m: int, vpp: int
) -> tuple[tuple[int, ...], ...]:
    """The numbers of micro-batches in flight per local chunk at the candidate peaks of
    ``stage``'s saved activations (1F1B and interleaved; GPipe holds all ``m``).

    Walking the task order, a forward adds one micro-batch's saved activations of its chunk and
    a backward frees them; the peak is right after some forward. Only count vectors not
    dominated by another are kept, so for any chunk sizes ``max(Σ counts·saved)`` is the peak
    :func:`stage_core.lower.memory.activation_peak` finds. After the warm-up the live set is
    periodic, so a prefix of ``4·p`` micro-batches (a multiple of p) suffices, as in
    :func:`stage_core.lower.memory.steady_activation_peak`.
    """
    prefix = min(m, 4 * p)
    live = [0] * vpp
    peaks: set[tuple[int, ...]] = set()
    for task in schedule(kind, stage, p, prefix, vpp):
        if task.phase == "F":
            live[task.chunk] += 1
            peaks.add(tuple(live))
        else:
            live[task.chunk] -= 1
    kept: list[tuple[int, ...]] = []
    for counts in sorted(peaks, key=sum, reverse=True):  # a dominating vector sorts first
        if not any(all(x >= y for x, y in zip(other, counts, strict=True)) for other in kept):
            kept.append(counts)
    return tuple(sorted(kept))


# --- a step: the pipeline, gradient synchronisation, optimizer, memory ----------------------


@dataclass(frozen=True, slots=True)
class SyncCost:
    """A chunk's gradient synchronisation as a function of its last backward's start ``s``: on
    a communication stream free at ``f`` it ends at ``max(f + total_s, s + latest_s)``
    (:func:`~stage_explore.analytical.blocktime.sync_timing`); ``gather_s``: ZeRO-1/2
    parameter all-gathers after the optimizer."""

    total_s: float
    latest_s: float
    gather_s: float


@dataclass(frozen=True, slots=True)
class StageClass:
    """Pipeline ranks that hold the same blocks and whose groups span the network alike.

    Per local chunk: forward and backward seconds per micro-batch, gradient synchronisation,
    saved activation bytes per micro-batch. Per rank: busy compute and exposed communication
    (by label) per micro-batch, model-state bytes, transient buffers (ZeRO-3's gathered
    weights), optimizer seconds.
    """

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    sync: tuple[SyncCost, ...]
    saved_bytes: tuple[int, ...]
    compute_s: float
    exposed_s: tuple[tuple[str, float], ...]
    states_bytes: int
    buffers_bytes: int
    optimizer_s: float


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Every pipeline stage's class, the activation transfer between stages, and the bytes
    recompute re-materialises (a transient on every rank)."""

    stage_class: tuple[int, ...]
    classes: tuple[StageClass, ...]
    transfer_s: float
    working_set_bytes: int

    @property
    def stage_times(self) -> tuple[StageTimes, ...]:
        return tuple(
            StageTimes(self.classes[c].forward_s, self.classes[c].backward_s)
            for c in self.stage_class
        )


@dataclass(frozen=True, slots=True)
class Step:
    """The slowest rank's step time and its breakdown (adding up to it), and the peak memory
    over all ranks."""

    step_time_s: float
    breakdown: tuple[tuple[str, float], ...]
    peak_memory_bytes: int
    slowest_stage: int
    pipeline_end_s: float


def assemble_step(plan: StepPlan, kind: str, m: int, vpp: int) -> Step:
    """Simulate the schedule and finish every rank's step: each chunk's gradient
    synchronisation after its last backward (issued in the order those run, on one stream),
    then the optimizer, then ZeRO-1/2 parameter gathers; and every rank's peak memory (model
    states + saved activations at the schedule's peak + transients, as
    :func:`stage_core.lower.memory.chunks_memory`)."""
    p = len(plan.stage_class)
    pipeline = step_time(kind, plan.stage_times, m, vpp, plan.transfer_s)
    worst: tuple[float, int, float] | None = None
    peak_memory = 0
    for stage in range(p):
        cls = plan.classes[plan.stage_class[stage]]
        starts = pipeline.last_backward_start_s[stage]
        free = gather = 0.0
        for index in sorted(range(vpp), key=starts.__getitem__):
            sync = cls.sync[index]
            free = max(free + sync.total_s, starts[index] + sync.latest_s)
            gather += sync.gather_s
        total = max(pipeline.end_s[stage], free) + cls.optimizer_s + gather
        if worst is None or total > worst[0]:
            worst = (total, stage, free)
        if kind == "gpipe":
            activations = m * sum(cls.saved_bytes)
        else:
            activations = max(
                sum(n * b for n, b in zip(counts, cls.saved_bytes, strict=True))
                for counts in activation_profiles(kind, stage, p, m, vpp)
            )
        memory = cls.states_bytes + activations + plan.working_set_bytes + cls.buffers_bytes
        peak_memory = max(peak_memory, memory)
    assert worst is not None
    total, stage, sync_end = worst
    cls = plan.classes[plan.stage_class[stage]]
    end = pipeline.end_s[stage]
    breakdown = {"compute": m * cls.compute_s}
    for label, seconds in cls.exposed_s:
        breakdown[f"exposed_{label}"] = m * seconds
    breakdown["pipeline_p2p"] = pipeline.send_s[stage]
    breakdown["pipeline_bubble"] = max(0.0, end - sum(breakdown.values()))
    breakdown["exposed_gradient_sync"] = max(0.0, sync_end - end)
    breakdown["optimizer"] = cls.optimizer_s
    breakdown["parameter_gather"] = total - max(end, sync_end) - cls.optimizer_s
    kept = tuple(
        (k, v) for k, v in breakdown.items() if v > 0 or k in ("compute", "pipeline_bubble")
    )
    return Step(total, kept, peak_memory, stage, end)
