"""Event simulation of a pipeline-parallel step: bubbles come out of the schedule.

Every pipeline rank runs its task order (:mod:`stage_core.lower.schedule`; the task graph in
:mod:`~stage_explore.analytical.taskgraph`); a forward of global stage ``j`` waits for the
forward of ``j−1`` on the same micro-batch, a backward of ``j`` for the backward of ``j+1``
(the last stage's backward follows its own forward). A rank is never busy with two tasks at
once. Schedules that split the backward (ZB-H1, DualPipe) run its input-gradient part as ``B``
(what the previous stage waits for) and its weight-gradient part as a ``W`` task that waits for
nothing but its own ``B``. DualPipe's overlapped pairs run a forward, a backward of another
micro-batch and its ``W`` as one task of :attr:`StageTimes.pair_s` seconds (the computation of
each hides the other's communication, :func:`pair_seconds`), started when both inputs are in.

Point-to-point transfers are *blocking*, as in Megatron-LM's pipeline (``batch_isend_irecv``
then ``wait`` and a device synchronise, before the 2023 ``overlap_p2p_comm`` option): a task
whose output goes to another stage (a forward not on the last global stage, a backward not on
global stage 0) holds its rank for ``transfer_s`` after it ends, and the receiver may start
once that transfer is over. So ``transfer_s`` costs the sender time in every schedule, and the
receiver waits for it. Overlapped transfers (Megatron-Core's ``--overlap-p2p-communication``,
which the ``megatron-core`` profile runs) are timed as ``arrival_s`` instead: the receiver's
task starts that long after its producer ends and neither rank is held (:func:`step_time`).

The result is each rank's timeline summary: when it ends, its busy (compute) time, the time it
spends sending, and when each chunk's last weight-gradient work starts (its last backward, or
its last ``W``: for overlapping the gradient synchronisation); the rest is its bubble.

:func:`step_time` times it: the task DAG depends only on the schedule's shape
``(kind, p, m, vpp)``, never on durations, so it is compiled once per shape into a flat
topological order (memoised) and a step is one tight loop over it (~60–130 ns per task); any
topological order gives the same times. Its oracle, the plain round-robin over the ranks (each
running its order until a dependency is missing), is test code: ``simulate`` in
``tests/explore/pipeline_reference.py``.

:func:`activation_profiles` gives, per rank, the micro-batches in flight per chunk at the
schedule's activation peaks; :mod:`~stage_explore.analytical.step` finishes a step from
per-stage costs — each chunk's gradient synchronisation after its last backward, the
optimizer, ZeRO's parameter gathers — and returns the slowest rank's time and breakdown and the
peak memory over all ranks.

**Extrapolation, only when exact.** With many micro-batches the 1F1B, ZB-H1 and interleaved
timelines become periodic, but checking a few prefixes is not enough: a rank faster than the
slowest can keep its own rate for many periods before the slowest rank's delay reaches it (an
interleaved example with p = 4 changes rate after 40 micro-batches). :func:`step_time`
therefore simulates a short prefix and extrapolates only when the whole *state* — every task
that later tasks depend on — is found one period later shifted by one and the same Δ
(:func:`~stage_explore.analytical.taskgraph.periodic` proves that the rest then follows, by
max-plus homogeneity); otherwise it tries a longer prefix, and in the end simulates every task.
The tests check that both paths agree with the reference on many shapes, this one included.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from stage_core.lower.schedule import (
    SPLIT_BACKWARD,
    chunks_per_rank,
    global_stage,
    global_stages,
    steady_prefix,
)
from stage_explore.analytical.taskgraph import (
    BACKWARD,
    FORWARD,
    Compiled,
    compile_shape,
    period,
    periodic,
    rank_order,
    sends,
    shape,
)

_periodic = periodic  # the name the tests and older callers use


class StageTimes(NamedTuple):
    """Per pipeline rank and local chunk: seconds of a forward and of a backward task (under a
    split schedule its input-gradient part ``B``) and of a ``W`` task (empty: none); and of an
    overlapped pair ``pair_s[forward chunk][backward chunk]`` (empty: F + B + W in a row).
    ``first_forward_extra_s`` and ``last_grad_extra_s`` (empty: none): seconds the chunk's
    first forward, and its last weight-gradient task (its last ``B``, or ``W`` when split),
    hold the rank beyond the others, before their sends: work a chunk runs once per step
    (FSDP2's held stage, ``pp_unsharded_params``: the first forward's gathers, the
    reduce-scatters after the last backward).

    A named tuple (immutable, compared and hashed by value in C): a pipeline timeline is
    memoised by its stages' times, and a frozen dataclass's Python-level hash per stage cost
    ~10 µs per 16-stage key."""

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    weight_s: tuple[float, ...] = ()
    pair_s: tuple[tuple[float, ...], ...] = ()
    first_forward_extra_s: tuple[float, ...] = ()
    last_grad_extra_s: tuple[float, ...] = ()

    @property
    def has_extra(self) -> bool:
        """Whether a chunk's first forward or last weight-gradient task is longer."""
        return any(self.first_forward_extra_s) or any(self.last_grad_extra_s)

    def pair(self, forward_chunk: int, backward_chunk: int) -> float:
        if self.pair_s:
            return self.pair_s[forward_chunk][backward_chunk]
        weight = self.weight_s[backward_chunk] if self.weight_s else 0.0
        return self.forward_s[forward_chunk] + self.backward_s[backward_chunk] + weight


def pair_seconds(
    forward_s: float,
    forward_compute_s: float,
    backward_s: float,
    backward_compute_s: float,
    comm_sm_share: float = 0.0,
) -> float:
    """A forward and a backward (with its ``W``) of two micro-batches run together, DualPipe's
    overlap (DeepSeek-V3 report, Section 3.2.1, Figure 4): each one's communication runs during
    the other's computation, so the pair takes its total computation or its total exposed
    communication, whichever is longer, and never less than either part alone.

    ``comm_sm_share``: the fraction of the SMs the communication kernels hold while they run
    beside the computation (DeepEP's: the report's Section 3.2.2, "only 20 SMs are sufficient
    to fully utilize the bandwidths of IB and NVLink", of an H800's 132), so while the two
    overlap, ``min(communication, computation) · comm_sm_share`` of the computation's work is
    left for after (:func:`~stage_explore.analytical.overlap.deepep_sm_share_s`'s rule); 0: the
    communication takes no SMs from the computation."""
    exposed = (forward_s - forward_compute_s) + (backward_s - backward_compute_s)
    compute = forward_compute_s + backward_compute_s
    if comm_sm_share > 0.0:
        compute += min(exposed, compute) * comm_sm_share
    return max(forward_s, backward_s, compute, exposed)


@dataclass(frozen=True, slots=True)
class PipelineResult:
    """Per pipeline rank: when its last task (and its send) ends, its busy time, the time it
    is held by sends, and when each chunk's last weight-gradient work starts."""

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


def _durations(stage: StageTimes, chunks: int, pairs: bool = True) -> list[float]:
    """Seconds of every duration slot of a rank (without sends); without ``pairs`` (a schedule
    that runs no overlapped pair: every one but DualPipe) the pair slots, which no task then
    uses, hold 0.0 instead of their sums."""
    weight = stage.weight_s or (0.0,) * chunks
    if chunks == 1 and not stage.pair_s:  # the common case, without a call per slot
        return [stage.forward_s[0], stage.backward_s[0], weight[0], 0.0, 0.0]
    if not pairs:
        return [*stage.forward_s, *stage.backward_s, *weight, *([0.0] * (chunks * chunks)), 0.0]
    paired = [stage.pair(a, b) for a in range(chunks) for b in range(chunks)]
    return [*stage.forward_s, *stage.backward_s, *weight, *paired, 0.0]


def _busy(kind: str, stages: Sequence[StageTimes], m: int, vpp: int) -> tuple[float, ...]:
    if kind not in SPLIT_BACKWARD:  # every chunk runs every micro-batch's F and B once
        return tuple(m * (sum(s.forward_s) + sum(s.backward_s)) for s in stages)
    s = shape(kind, len(stages), m, vpp)
    return tuple(
        sum(n * d for n, d in zip(s.slot_counts[r], _durations(st, s.chunks), strict=True))
        for r, st in enumerate(stages)
    )


def _send_time(kind: str, p: int, m: int, vpp: int, transfer_s: float) -> tuple[float, ...]:
    if kind == "dualpipe":  # pairs send twice; each direction runs m/2 micro-batches
        return tuple(count * transfer_s for count in shape(kind, p, m, vpp).send_counts)
    forward_and_backward = 2 * chunks_per_rank(kind, vpp)  # each chunk's F and B, m times
    return tuple(
        m * sum(row[:forward_and_backward]) * transfer_s for row in _slot_sends(kind, p, vpp)
    )


# --- the fast path ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _slot_sends(kind: str, p: int, vpp: int) -> tuple[tuple[int, ...], ...]:
    """Per rank and duration slot: how many sends a task of that slot makes (memoised)."""
    chunks = chunks_per_rank(kind, vpp)
    last = global_stages(kind, p, vpp) - 1
    result = []
    for rank in range(p):
        stage_of = [global_stage(kind, rank, chunk, p) for chunk in range(chunks)]
        counts = []
        for slot in range(3 * chunks + chunks * chunks + 1):
            count = 0
            if slot < 2 * chunks:
                count = int(sends(slot // chunks, stage_of[slot % chunks], last))
            elif 3 * chunks <= slot < 3 * chunks + chunks * chunks:
                a, b = divmod(slot - 3 * chunks, chunks)
                count = sends(FORWARD, stage_of[a], last) + sends(BACKWARD, stage_of[b], last)
            counts.append(count)
        result.append(tuple(counts))
    return tuple(result)


def _costs(kind: str, stages: Sequence[StageTimes], vpp: int, transfer_s: float) -> list[float]:
    """Seconds each duration slot holds its rank: the task, plus its sends."""
    chunks = chunks_per_rank(kind, vpp)
    pairs = kind == "dualpipe"  # the only schedule whose tasks use the pair slots
    costs: list[float] = []
    for stage, counts in zip(stages, _slot_sends(kind, len(stages), vpp), strict=True):
        durations = _durations(stage, chunks, pairs)
        costs += [d + n * transfer_s if n else d for d, n in zip(durations, counts, strict=True)]
    return costs


def _releases(
    compiled: Compiled,
    stages: Sequence[StageTimes],
    vpp: int,
    transfer_s: float,
    kind: str = "",
    arrival_s: float = 0.0,
) -> list[float]:
    """When every task (and its send) ends, in compiled order; the extra last entry stays 0.0:
    the release of index −1, "no dependency".

    One pass over the flat columns (:class:`~stage_explore.analytical.taskgraph.Compiled`): a
    task starts when both its rank's previous task and its dependency are released, so its
    release is ``max(previous, dependency) + cost``, the same sums in the same order as a
    simulation (bit for bit). With ``arrival_s`` a dependency on a task that sends (to another
    stage) is ready ``arrival_s`` after that task's release: the message's flight, which holds
    neither rank (:func:`step_time`). A chunk's first forward and last weight-gradient task
    take their :class:`StageTimes` extra seconds too."""
    cost = _costs(kind, stages, vpp, transfer_s)
    slots = compiled.slot_of
    seconds_of = [cost[slots[0]]] if len(slots) == 1 else operator.itemgetter(*slots)(cost)
    if any(stage.has_extra for stage in stages):
        seconds_of = list(seconds_of)
        for rank, stage in enumerate(stages):
            for chunk, extra in enumerate(stage.first_forward_extra_s):
                seconds_of[compiled.first_forward[rank][chunk]] += extra
            for chunk, extra in enumerate(stage.last_grad_extra_s):
                seconds_of[compiled.last_backward[rank][chunk][0]] += extra
    release = [0.0]  # release[k + 1]: task k's; release[0]: "nothing"
    append = release.append
    if arrival_s > 0.0:
        flight = _flights(kind, len(stages), vpp, arrival_s)
        flight_of = [flight[slots[0]]] if len(slots) == 1 else operator.itemgetter(*slots)(flight)
        delay = [0.0, *flight_of]  # delay[k + 1]: task k's message
        columns3 = zip(compiled.after, compiled.waits, seconds_of, strict=True)
        for previous, dependency, seconds in columns3:
            now = release[previous]
            ready = release[dependency] + delay[dependency]
            append((ready if ready > now else now) + seconds)
    else:
        columns = zip(compiled.after, compiled.waits, seconds_of, strict=True)
        for previous, dependency, seconds in columns:
            now = release[previous]
            ready = release[dependency]
            append((ready if ready > now else now) + seconds)
    shifted = release[1:]
    shifted.append(0.0)
    return shifted


def _flights(kind: str, p: int, vpp: int, arrival_s: float) -> list[float]:
    """Per flat duration slot (as :func:`_costs`): ``arrival_s`` when a task of that slot sends
    its output to another stage, else 0.0."""
    return [arrival_s if n else 0.0 for counts in _slot_sends(kind, p, vpp) for n in counts]


def _ends_and_starts(
    compiled: Compiled, release: Sequence[float], p: int, flight: Sequence[float] = ()
) -> tuple[list[float], list[list[float]]]:
    """Every rank's end and the last weight-gradient start of every (rank, chunk); ``flight``
    (per duration slot, :func:`_flights`): a dependency's message arrives that long after its
    release, as :func:`_releases` starts the task."""
    ends = [release[task] for task in compiled.last_task]
    starts = []
    for rank in range(p):
        row = []
        for task, previous in compiled.last_backward[rank]:
            dependency = compiled.waits[task] - 1  # -1: none, a release of 0.0
            start = release[previous]  # -1: the rank's first task, free at 0.0
            ready = release[dependency]
            if flight and dependency >= 0:
                ready += flight[compiled.slot_of[dependency]]
            if ready > start:
                start = ready
            row.append(start)
        starts.append(row)
    return ends, starts


def _result(
    kind: str,
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
        _busy(kind, stages, m, vpp),
        _send_time(kind, p, m, vpp, transfer_s),
        tuple(tuple(row) for row in starts),
    )


def step_time(
    kind: str,
    stages: Sequence[StageTimes],
    micro_batches: int,
    vpp: int,
    transfer_s: float,
    arrival_s: float = 0.0,
) -> PipelineResult:
    """Every task of one step by the compiled order, in one tight loop, or — when the
    timeline is provably periodic (:func:`~stage_explore.analytical.taskgraph.periodic`) — a
    short prefix and the period's shift.

    ``transfer_s`` holds a sending rank after each task whose output goes to another stage
    (blocking transfers); ``arrival_s`` delays only the receiver: the dependent task may start
    ``arrival_s`` after its producer ends, and neither rank is held (overlapped transfers on a
    communication stream, as Megatron-Core's ``--overlap-p2p-communication``: hidden where the
    schedule has slack, on the critical path in the fill and the drain).

    The state's shifts must agree to within 1e-11 of the prefix's length (rounding); the
    periodic map does not expand differences, so the extrapolated times are then within
    (periods extrapolated) × that of the simulated ones. A stage with a longer first forward
    or last weight-gradient task (:class:`StageTimes`) is simulated whole: a prefix's last
    tasks may fall in the period the extrapolation repeats."""
    p, m = len(stages), micro_batches
    flight = _flights(kind, p, vpp, arrival_s) if arrival_s > 0.0 else []
    step = 0 if any(stage.has_extra for stage in stages) else period(kind, p, vpp)
    periods = 2 if step > 1 else p + 1  # past the warm-up, and deep enough for the state
    while step and p > 1:
        base = periods * step + m % step
        if 4 * (base + 2 * step) > m:
            break  # the prefix would cost about as much as the whole
        found = periodic(kind, p, vpp, base)
        if found is None:  # not yet one period deep: a longer prefix
            periods *= 2
            continue
        release = _releases(found.compiled, stages, vpp, transfer_s, kind, arrival_s)
        shift = release[found.pairs[0][1]] - release[found.pairs[0][0]]
        scale = 1e-11 * max(1.0, max(release))
        if all(abs(release[b] - release[a] - shift) <= scale for a, b in found.pairs):
            ends, starts = _ends_and_starts(found.compiled, release, p, flight)
            k = (m - base - step) // step  # periods beyond the simulated run
            ends = [e + k * shift for e in ends]
            starts = [[s + k * shift for s in row] for row in starts]
            return _result(kind, stages, m, vpp, transfer_s, ends, starts)
        periods *= 2  # still in the transient: a longer prefix
    compiled = compile_shape(kind, p, m, vpp)
    release = _releases(compiled, stages, vpp, transfer_s, kind, arrival_s)
    ends, starts = _ends_and_starts(compiled, release, p, flight)
    return _result(kind, stages, m, vpp, transfer_s, ends, starts)


@functools.lru_cache(maxsize=1024)
def activation_profiles(
    kind: str, stage: int, p: int, m: int, vpp: int
) -> tuple[tuple[int, ...], ...]:
    """The numbers of micro-batches in flight per local chunk at the candidate peaks of
    ``stage``'s saved activations (GPipe holds all ``m``).

    Walking the task order, a forward adds one micro-batch's saved activations of its chunk and
    a backward frees them; the peak is right after some forward. Under a split schedule (ZB-H1,
    DualPipe) a vector has two entries per chunk: micro-batches whose activations are held (a
    forward ran, its ``W`` not yet) and micro-batches whose ``W`` is pending (its ``B`` ran:
    the gradients ``W`` reads are held too); peaks follow a forward or a ``B``. Only count
    vectors not dominated by another are kept, so for any chunk sizes ``max(Σ counts·bytes)``
    is the peak :func:`stage_core.lower.memory.activation_peak` finds. After the warm-up the
    live set is periodic, so a prefix of ``4·N`` micro-batches and the last group's remainder
    (:func:`~stage_core.lower.schedule.steady_prefix`; N the group size, default p) suffices, as in
    :func:`stage_core.lower.memory.steady_activation_peak` (DualPipe walks every micro-batch).
    """
    prefix = m if kind == "dualpipe" else min(m, steady_prefix(kind, p, m))
    chunks = chunks_per_rank(kind, vpp)
    split = kind in SPLIT_BACKWARD
    live = [0] * (2 * chunks if split else chunks)
    peaks: set[tuple[int, ...]] = set()
    for phase, chunk, _ in rank_order(kind, stage, p, prefix, vpp):  # memoised here, not there
        if phase == "F":
            live[chunk] += 1
            peaks.add(tuple(live))
        elif not split:
            live[chunk] -= 1
        elif phase == "B":
            live[chunks + chunk] += 1
            peaks.add(tuple(live))
        else:
            live[chunk] -= 1
            live[chunks + chunk] -= 1
    kept: list[tuple[int, ...]] = []
    ge = operator.ge  # every vector has the same length: compared element by element in C
    for counts in sorted(peaks, key=sum, reverse=True):  # a dominating vector sorts first
        if not any(all(map(ge, other, counts)) for other in kept):
            kept.append(counts)
    return tuple(sorted(kept))


@functools.lru_cache(maxsize=16384)  # the benchmark's 10,000 candidates ask for ~10,400
def _peak_activations(
    kind: str, stage: int, p: int, m: int, vpp: int, sizes: tuple[int, ...]
) -> int:
    """Bytes of ``stage``'s saved activations at the schedule's peak, for ``sizes`` bytes per
    micro-batch of each entry of :func:`activation_profiles`' vectors (exact ints; memoised:
    plans that differ in what does not change the saved bytes, e.g. the ZeRO level, share
    it)."""
    peak: int = max(
        sum(map(operator.mul, counts, sizes))  # every vector has len(sizes)
        for counts in activation_profiles(kind, stage, p, m, vpp)
    )
    return peak
