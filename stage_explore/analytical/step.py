"""A training step from its pipeline: per-stage-class costs (:class:`StageClass`), each
chunk's gradient synchronisation after its last backward (:class:`SyncCost`), the optimizer,
ZeRO's parameter gathers, and every rank's peak memory; :func:`assemble_step` runs the
schedule (:func:`~stage_explore.analytical.pipeline.step_time` or a memo of it) and returns
the slowest rank's time and breakdown (:class:`Step`). Split from
:mod:`~stage_explore.analytical.pipeline`, which keeps the schedule's event simulation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stage_core.lower.schedule import SPLIT_BACKWARD, chunks_per_rank
from stage_explore.analytical.blocktime import CONTENTION
from stage_explore.analytical.output_chunks import peak_with_kept_outputs
from stage_explore.analytical.pipeline import (
    PipelineResult,
    StageTimes,
    _peak_activations,
    pair_seconds,
    step_time,
)
from stage_explore.analytical.taskgraph import shape


@dataclass(frozen=True, slots=True)
class SyncCost:
    """A chunk's gradient synchronisation as a function of its last backward's start ``s``: on
    a communication stream free at ``f`` it ends at ``max(f + total_s, s + latest_s)``
    (:func:`~stage_explore.analytical.blocktime.sync_timing`); ``gather_s``: ZeRO-1/2
    parameter all-gathers after the optimizer. ``lost_s``: compute seconds the chunk's last
    backward loses to the SMs of the reductions beside it (and the next step's first forward
    to those of overlapped parameter gathers; :mod:`~stage_explore.analytical.contention`),
    which extend the rank's schedule (``latest_s`` includes the backward's). ``held_gather_s``
    and ``held_scatter_s``: seconds the chunk holds the rank's compute stream once per step
    under ``pp_unsharded_params`` (:meth:`~stage_explore.analytical.planning.StagePlanning.
    _held_zero_s`): its first forward's exposed ZeRO-3 gathers, and the reduce-scatters after
    its last backward, before that backward's send; the schedule runs them in those two tasks
    (:class:`~stage_explore.analytical.pipeline.StageTimes`' extra seconds), and the breakdown
    labels them ``exposed_zero_gather``. ``forward_lost_s``: compute seconds the next step's
    first forward loses to the SMs of a bucketed chunk's overlapped parameter gathers: that
    forward starts after the optimizer step, which waits for every reduction
    (Megatron-Core's ``finalize_model_grads`` → ``finish_grad_sync``), so these seconds add to
    the step after the reductions instead of running beside them. ``queue_total_s`` and
    ``queue_latest_s``: ZeRO-2's reduce-scatters after a split backward's last ``W``
    (:func:`~stage_explore.analytical.no_sync.weight_scatters_sync`), as ``total_s`` and
    ``latest_s`` but on the ZeRO queue, beside the gradient-synchronisation stream (its
    after-backward collective, DualPipe's mirror all-reduce, does not wait for them, as in the
    trace mode's streams); the optimizer waits for both."""

    total_s: float
    latest_s: float
    gather_s: float
    lost_s: float = 0.0
    held_gather_s: float = 0.0
    held_scatter_s: float = 0.0
    forward_lost_s: float = 0.0
    queue_total_s: float = 0.0
    queue_latest_s: float = float("-inf")

    @property
    def held_s(self) -> float:
        """The chunk's once-per-step ZeRO-3 seconds, gathers and reduce-scatters."""
        return self.held_gather_s + self.held_scatter_s


@dataclass(frozen=True, slots=True)
class StageClass:
    """Pipeline ranks that hold the same blocks and whose groups span the network alike.

    Per local chunk: forward and backward seconds per micro-batch, gradient synchronisation,
    saved activation bytes per micro-batch, bytes a micro-batch leaves held from its backward to
    the step's end (``kept_bytes``, torch pipelining's kept outputs; empty: none). Per rank:
    busy compute and exposed communication (by label) per micro-batch of every chunk,
    model-state bytes, transient buffers (ZeRO-3's gathered weights), optimizer seconds.

    For the schedules that split the backward (ZB-H1, DualPipe): per chunk the seconds of its
    input-gradient part ``input_grad_s`` (empty: all of the backward), of its weight-gradient
    part ``weight_grad_s`` (W's own instructions' timing; empty: the rest of the backward), the
    bytes a pending ``W`` holds (``pending_bytes``, empty: none), and DualPipe's overlapped
    pairs ``pair_s[forward chunk][backward chunk]`` (:func:`pair_seconds`; empty: no overlap).
    ``after_backward_s``: a collective that waits for the rank's whole backward (DualPipe's
    all-reduce between the two copies of its stages).
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
    input_grad_s: tuple[float, ...] = ()
    host_bytes: int = 0  # one rank's model states in host memory (CPU offload, offload.py)
    pending_bytes: tuple[int, ...] = ()
    pair_s: tuple[tuple[float, ...], ...] = ()
    after_backward_s: float = 0.0  # a collective once the whole backward is done (DualPipe's)
    weight_grad_s: tuple[float, ...] = ()
    # per chunk: bytes each micro-batch's backward leaves held until the step ends (torch
    # pipelining's output_chunks, :mod:`~stage_explore.analytical.output_chunks`); empty: none
    kept_bytes: tuple[int, ...] = ()
    #: What a backward of the class's own blocks holds at once (its transient; ``None``: the
    #: plan's whole-model :attr:`StepPlan.working_set_bytes`).
    working_set_bytes: int | None = None

    def stage_times(self, split: bool) -> StageTimes:
        """The pipeline's view: whole backwards, or B and W apart; a held chunk's first forward
        and last weight-gradient task lengthened by its once-per-step ZeRO-3 seconds."""
        first: tuple[float, ...] = ()
        last: tuple[float, ...] = ()
        if any(sync.held_gather_s or sync.held_scatter_s for sync in self.sync):
            first = tuple(sync.held_gather_s for sync in self.sync)
            last = tuple(sync.held_scatter_s for sync in self.sync)
        if not split:
            return StageTimes(self.forward_s, self.backward_s, (), (), first, last)
        b = self.input_grad_s or self.backward_s
        w = self.weight_grad_s or tuple(
            max(0.0, total - part) for total, part in zip(self.backward_s, b, strict=True)
        )
        return StageTimes(self.forward_s, b, w, self.pair_s, first, last)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Every pipeline stage's class, the activation transfer between stages (what it holds the
    sender, ``transfer_s``, and how long it delays the receiver beyond that, ``arrival_s``), and
    the bytes the model's largest backward holds at once, recompute's re-materialised
    activations included (a transient on a rank whose class states none of its own:
    :attr:`StageClass.working_set_bytes`)."""

    stage_class: tuple[int, ...]
    classes: tuple[StageClass, ...]
    transfer_s: float
    working_set_bytes: int
    arrival_s: float = 0.0  # an overlapped transfer's flight (:func:`step_time`)

    @property
    def stage_times(self) -> tuple[StageTimes, ...]:
        return self.schedule_times(False)

    def schedule_times(self, split: bool) -> tuple[StageTimes, ...]:
        """Every stage's :class:`StageTimes`, with B and W apart when ``split`` (one object
        per class, shared by its stages)."""
        times = [stage_class.stage_times(split) for stage_class in self.classes]
        return tuple([times[c] for c in self.stage_class])


@dataclass(frozen=True, slots=True)
class Step:
    """The slowest rank's step time and its breakdown (adding up to it), the peak memory
    over all ranks, and each pipeline rank's tensor peak (``stage_memory_bytes[i]``: pipeline
    rank ``i``, the one holding the first chunk at ``i = 0``; the global rank 0 of any mesh
    is pipeline rank 0)."""

    step_time_s: float
    breakdown: tuple[tuple[str, float], ...]
    peak_memory_bytes: int
    slowest_stage: int
    pipeline_end_s: float
    stage_memory_bytes: tuple[int, ...] = ()


#: :func:`step_time`'s signature: (kind, stages, micro-batches, vpp, transfer seconds, arrival
#: seconds).
Timeline = Callable[[str, tuple[StageTimes, ...], int, int, float, float], PipelineResult]


def assemble_step(
    plan: StepPlan,
    kind: str,
    m: int,
    vpp: int,
    timeline: Timeline = step_time,
    schedules: int = 1,
    held_per_schedule: bool = False,
) -> Step:
    """Simulate the schedule and finish every rank's step: each chunk's gradient
    synchronisation after its last backward (issued in the order those run, on one stream),
    then the optimizer, then ZeRO-1/2 parameter gathers; and every rank's peak memory (model
    states + saved activations at the schedule's peak + transients, as
    :func:`stage_core.lower.memory.chunks_memory`).

    ``timeline`` times the schedule: :func:`step_time` or a memo of it (a pure function of
    its arguments: plans that differ only in what the timeline does not read — gradient
    synchronisation, model states, the optimizer — share one simulation).

    ``schedules``: the step runs that many schedules of ``m`` micro-batches one after the other,
    each with its own fill and drain (a framework that runs every local batch as its own
    pipeline schedule, ``FrameworkProfile.local_batch_size``); a schedule starts when the one
    before has ended on every rank, and the gradients are synchronised after the last. A held
    stage (``pp_unsharded_params``) stays gathered across them: its gathers run in the first
    schedule's first forwards, its reduce-scatters after the last schedule's last backwards
    (AutoModel's ``patched_backward_maybe_with_nosync`` runs ``post_backward`` only on the
    optimizer step's last backward) — or, ``held_per_schedule``
    (``FrameworkProfile.pp_held_sync_per_schedule``: the stage is an ``FSDPModule``, which
    torch pipelining reduce-scatters on every schedule's last backward), is gathered in every
    schedule's first forwards and reduce-scattered after every schedule's last backwards."""
    p = len(plan.stage_class)
    split = kind in SPLIT_BACKWARD
    chunks = chunks_per_rank(kind, vpp)
    per_chunk = m // 2 if kind == "dualpipe" else m  # micro-batches through each chunk
    times = plan.schedule_times(split)
    args = (m, vpp, plan.transfer_s, plan.arrival_s)
    earlier = 0.0  # when the last schedule starts
    if schedules > 1 and not held_per_schedule and any(t.has_extra for t in times):
        first = timeline(kind, tuple(t._replace(last_grad_extra_s=()) for t in times), *args)
        earlier = first.makespan_s
        if schedules > 2:
            plain = tuple(StageTimes(*t[:4]) for t in times)
            earlier += (schedules - 2) * timeline(kind, plain, *args).makespan_s
        times = tuple(t._replace(first_forward_extra_s=()) for t in times)
    pipeline = timeline(kind, times, *args)
    if schedules > 1:  # the earlier schedules end before the last one starts
        offset = earlier or (schedules - 1) * pipeline.makespan_s
        pipeline = PipelineResult(
            tuple(end + offset for end in pipeline.end_s),
            tuple(busy * schedules for busy in pipeline.busy_s),
            tuple(send * schedules for send in pipeline.send_s),
            tuple(tuple(s + offset for s in row) for row in pipeline.last_backward_start_s),
        )
        per_chunk *= schedules
    worst: tuple[float, int, float, float, float, float, float] | None = None
    peak_memory = 0
    stage_memory: list[int] = []
    order: Sequence[int] = range(chunks)
    for stage in range(p):
        cls = plan.classes[plan.stage_class[stage]]
        starts = pipeline.last_backward_start_s[stage]
        free = gather = lost = held = forward_lost = zero_free = 0.0
        if chunks > 1:
            order = sorted(range(chunks), key=starts.__getitem__)
        for index in order:
            sync = cls.sync[index]
            queued, latest = free + sync.total_s, starts[index] + sync.latest_s
            free = latest if latest > queued else queued  # max(queued, latest), as max picks
            if sync.queue_latest_s > float("-inf"):  # ZeRO-2's W scatters, on their queue
                queued, latest = zero_free + sync.queue_total_s, starts[index] + sync.queue_latest_s
                zero_free = latest if latest > queued else queued
            gather += sync.gather_s
            lost += sync.lost_s
            forward_lost += sync.forward_lost_s
            held += sync.held_s
        # compute slowed by the reductions' SMs (the once-per-step ZeRO-3 collectives of a held
        # stage are in the schedule: StageClass.stage_times)
        end = pipeline.end_s[stage] + lost
        if cls.after_backward_s:  # e.g. DualPipe's all-reduce between a stage's two copies
            free = (end if end > free else free) + cls.after_backward_s  # max(free, end)
        free = zero_free if zero_free > free else free  # the optimizer waits for both streams
        total = (free if free > end else end) + cls.optimizer_s + gather  # max(end, free)
        total += forward_lost  # after the reductions and the optimizer (SyncCost)
        if worst is None or total > worst[0]:
            worst = (total, stage, free, lost, held, forward_lost, gather)
        kept_outputs = any(cls.kept_bytes)  # held until the step ends: walk the whole order
        if kind == "gpipe" and not kept_outputs:
            activations = m * sum(cls.saved_bytes)
        else:
            sizes = cls.saved_bytes
            if split:
                sizes = (*sizes, *(cls.pending_bytes or (0,) * chunks))
            if kept_outputs:
                activations = peak_with_kept_outputs(
                    kind, stage, p, m, vpp, sizes, cls.kept_bytes
                )
            else:
                activations = _peak_activations(kind, stage, p, m, vpp, sizes)
        transient = cls.working_set_bytes
        if transient is None:
            transient = plan.working_set_bytes
        memory = cls.states_bytes + activations + transient + cls.buffers_bytes
        stage_memory.append(memory)
        if memory > peak_memory:
            peak_memory = memory
    assert worst is not None
    total, stage, sync_end, lost, held, forward_lost, gather = worst
    cls = plan.classes[plan.stage_class[stage]]
    slowed = lost + forward_lost  # this step's compute lost to NCCL kernels, and the next forward's
    end = pipeline.end_s[stage] + slowed  # with both, for the bubble
    breakdown = {"compute": per_chunk * cls.compute_s}
    hidden = schedules * _hidden_by_pairs(kind, plan, stage, m, vpp)
    exposed = per_chunk * sum(seconds for _, seconds in cls.exposed_s)
    kept_fraction = 1.0 - min(1.0, hidden / exposed) if exposed > 0 else 1.0
    for label, seconds in cls.exposed_s:  # DualPipe's pairs hide some of it
        breakdown[f"exposed_{label}"] = per_chunk * seconds * kept_fraction
    if slowed:  # compute slowed by the reductions' and gathers' NCCL kernels (SyncCost.lost_s,
        label = f"exposed_{CONTENTION}"  # SyncCost.forward_lost_s)
        breakdown[label] = breakdown.get(label, 0.0) + slowed
    if held:  # the once-per-step ZeRO-3 gathers and reduce-scatters (SyncCost.held_s)
        if held_per_schedule:
            held *= schedules  # or once per schedule
        breakdown["exposed_zero_gather"] = breakdown.get("exposed_zero_gather", 0.0) + held
    breakdown["pipeline_p2p"] = pipeline.send_s[stage]
    breakdown["pipeline_bubble"] = max(0.0, end - sum(breakdown.values()))
    backward_end = end - forward_lost  # which the reductions may outlast
    breakdown["exposed_gradient_sync"] = max(0.0, sync_end - backward_end)
    breakdown["optimizer"] = cls.optimizer_s
    # what ``total`` adds after the later of the backward and the reductions, the optimizer
    # and the next forward's loss: the gathers themselves (s26 review: taken as that difference,
    # it was float noise, 1.4e-15 s, where nothing is gathered)
    breakdown["parameter_gather"] = gather
    kept = tuple(
        (k, v) for k, v in breakdown.items() if v > 0 or k in ("compute", "pipeline_bubble")
    )
    return Step(  # the schedule's own end
        total, kept, peak_memory, stage, pipeline.end_s[stage], tuple(stage_memory)
    )


def _hidden_by_pairs(kind: str, plan: StepPlan, stage: int, m: int, vpp: int) -> float:
    """Seconds DualPipe's overlapped pairs save on ``stage`` against running their tasks in a
    row (0 for the other schedules)."""
    if kind != "dualpipe":
        return 0.0
    s = shape(kind, len(plan.stage_class), m, vpp)
    times = plan.classes[plan.stage_class[stage]].stage_times(True)
    chunks = s.chunks
    counts = s.slot_counts[stage]
    saved = 0.0
    for a in range(chunks):
        for b in range(chunks):
            n = counts[3 * chunks + a * chunks + b]
            if n:
                weight = times.weight_s[b] if times.weight_s else 0.0
                alone = times.forward_s[a] + times.backward_s[b] + weight
                saved += n * (alone - times.pair(a, b))
    return saved


def pair_table(
    forward_s: Sequence[float],
    forward_compute_s: Sequence[float],
    backward_s: Sequence[float],
    backward_compute_s: Sequence[float],
    comm_sm_share: float = 0.0,
) -> tuple[tuple[float, ...], ...]:
    """``pair_s[a][b]``: :func:`pair_seconds` of chunk ``a``'s forward with chunk ``b``'s whole
    backward (B and W), for every pair of a rank's chunks; ``comm_sm_share``: the SMs the
    communication kernels take from the pair's computation (:func:`pair_seconds`)."""
    return tuple(
        tuple(
            pair_seconds(
                forward_s[a],
                forward_compute_s[a],
                backward_s[b],
                backward_compute_s[b],
                comm_sm_share,
            )
            for b in range(len(backward_s))
        )
        for a in range(len(forward_s))
    )
