"""Timing one rank's work: a block's instructions on two streams, chunks of blocks, and the
gradient synchronisation that overlaps a chunk's last backward.

**Blocks** (:func:`time_block`). The instructions of a bound block form a DAG (their
``deps``). A rank has one compute stream and one communication stream, and — as CUDA streams
do — each runs its instructions in program (index) order: an instruction starts when its
stream has finished the previous one and its dependencies have finished. Communication thus
overlaps the compute the program places after it and that does not need it (Megatron-LM's
weight-gradient GEMM behind the input-gradient reduction), never an earlier wait. A collective
starts when its own inputs are ready, or — ``collectives_wait_for_issued_compute``, a
framework option — only once every compute instruction placed before it has finished, as a
``torch.distributed`` collective issued from the compute stream does (the NCCL stream waits for
the issuing stream). (ASTRA-sim
instead issues any *ready* node of a free slot in id order, so an independent node may run
ahead of one that waits; the two agree when the program order is a valid schedule without such
waits.) Compute instructions take the time the caller gives (the accelerator's roofline with
efficiencies); collectives the α–β time over the network dims their group spans; ring-attention
exchanges ``ring_steps`` point-to-point messages. The result is the block's duration, its busy
compute time, and the communication time left exposed (not hidden behind compute), by
collective kind.

**Chunks** (:func:`chunk_timing`). A pipeline chunk is the lowering's compact form, a
run-length list of block kinds (:data:`~stage_core.lower.compact.Runs`: ``(("embedding", 1),
("layer", 12))``, :func:`~stage_core.lower.compact.chunk_runs`); its forward and backward take
the sum of its blocks', ZeRO-3 parameter gathers and ZeRO-2/3 gradient scatters running beside
each block on their own stream and exposed where they outlast it (FSDP's root unit, the
embedding's and the head's parameters, exposed whole: ``root_unit``).

**Gradient buckets** (:func:`sync_timing`). The lowering's groups of bucketed reductions
(:func:`~stage_core.lower.compact.bucket_gradients`, whose expansion is the program's
:func:`~stage_core.lower.program._sync_ops`) run on one communication stream in backward
position order, each no earlier than the end of the block that completed it;
:func:`hidden_sync_s` is how long they run beside the backward's compute.

**Expert load imbalance** (:func:`imbalanced_timers`). With routing imbalance ``f`` (max/mean
tokens per expert-parallel rank), the step waits for the busiest rank: its routed experts'
instructions take ``f`` × their balanced time and the collectives on routed tokens (the
dispatch/combine all-to-alls, the expert-tensor-parallel gathers and scatters) move ``f`` × the
balanced bytes (:func:`routed_instr` names them). Only under expert parallelism
(:func:`rank_imbalance`): at ep 1 every rank holds every expert and computes exactly its own
tokens' expert rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from stage_core.lower.bind import Instr
from stage_core.lower.compact import Runs
from stage_core.trace import CollectiveKind
from stage_explore.analytical.contention import contended_s
from stage_explore.analytical.zero_queue import QueueBlock, pass_time


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

    def plus_compute(self, seconds: float) -> BlockTiming:
        """This timing with ``seconds`` more of compute on the block's path (kernels that run on
        the compute stream, or compute slowed by SMs that communication kernels hold)."""
        return replace(
            self, duration_s=self.duration_s + seconds, compute_s=self.compute_s + seconds
        )


def comm_label(instr: Instr) -> str:
    return "p2p" if instr.kind == "ring" else str(instr.collective)


def time_block(
    instrs: Sequence[Instr],
    compute_s: Callable[[Instr], float],
    comm_s: Callable[[Instr], float],
    collectives_wait_for_issued_compute: bool = False,
) -> BlockTiming:
    """Timing of ``instrs`` on one in-order compute stream and one in-order communication
    stream: an instruction starts when its stream has finished the previous one and its
    dependencies have finished. With ``collectives_wait_for_issued_compute`` a collective also
    waits for every compute instruction placed before it (PyTorch's ProcessGroupNCCL makes
    the NCCL stream wait for the issuing stream: ``syncStream`` in ``collective()``)."""
    if not instrs:
        return BlockTiming.zero()
    free = [0.0, 0.0]
    finish: list[float] = []
    intervals: list[list[tuple[float, float, int]]] = [[], []]
    for index, instr in enumerate(instrs):
        slot = 1 if instr.collective is not None or instr.kind == "ring" else 0
        start = free[slot]
        if slot and collectives_wait_for_issued_compute and free[0] > start:
            start = free[0]  # the compute stream's work issued so far ends at free[0]
        for dep in instr.deps:
            if finish[dep] > start:
                start = finish[dep]
        end = start + (comm_s(instr) if slot else compute_s(instr))
        finish.append(end)
        free[slot] = end
        intervals[slot].append((start, end, index))
    compute = intervals[0]  # in start order: the stream is in order
    exposed: dict[str, float] = {}
    for start, end, index in intervals[1]:
        hidden = 0.0
        for c_start, c_end, _ in compute:
            if c_end <= start:
                continue
            if c_start >= end:
                break
            hidden += min(end, c_end) - max(start, c_start)
        label = comm_label(instrs[index])
        exposed[label] = exposed.get(label, 0.0) + (end - start - hidden)
    return BlockTiming(
        max(finish),
        sum(end - start for start, end, _ in compute),
        exposed,
        sum(i.flops for i in instrs),
    )


def routed_instr(instr: Instr) -> bool:
    """Whether ``instr``'s work is proportional to the tokens routed to this rank's experts:
    the routed experts' compute (``experts.*``, forward and backward, and the accumulation of the
    routed tokens' gradient) and the collectives on routed tokens — every all-to-all (in
    training only the expert dispatch and combine are all-to-alls) and the expert-tensor-parallel
    all-gathers / reduce-scatters of ``moe.tokens`` and ``experts.*`` outputs (and gradients)."""
    if instr.collective is None:
        return instr.name.startswith("experts.") or instr.name.endswith(".d.moe.tokens")
    if instr.collective is CollectiveKind.ALL_TO_ALL:
        return True
    tensor = instr.name.partition(":")[2].removeprefix("d.")
    return tensor == "moe.tokens" or tensor.startswith("experts.")


def rank_imbalance(factor: float, ep: int) -> float:
    """The busiest expert-parallel rank's max/mean routed tokens under the routing imbalance
    ``factor``: ``factor`` when the experts are split over ``ep`` > 1 ranks; 1 at ``ep`` 1,
    where every rank holds every expert and receives exactly its own ``tokens × top_k`` expert
    rows whatever the experts' shares (the per-expert skew changes the grouped GEMM's group
    sizes, not the rank's rows)."""
    return factor if ep > 1 else 1.0


def imbalanced_timers(
    compute_s: Callable[[Instr], float],
    comm_s: Callable[[Instr], float],
    factor: float,
) -> tuple[Callable[[Instr], float], Callable[[Instr], float]]:
    """The busiest expert-parallel rank's timers under routing imbalance ``factor`` (max/mean
    tokens per rank, ≥ 1): a :func:`routed_instr` compute instruction takes ``factor`` × its
    time, a routed collective moves ``ceil(factor × comm_bytes)`` bytes; the rest unchanged.
    ``factor`` 1 returns the timers themselves."""
    if factor == 1:
        return compute_s, comm_s

    def busiest_compute_s(instr: Instr) -> float:
        seconds = compute_s(instr)
        return factor * seconds if routed_instr(instr) else seconds

    def busiest_comm_s(instr: Instr) -> float:
        if instr.kind == "ring" or not routed_instr(instr):
            return comm_s(instr)
        return comm_s(replace(instr, comm_bytes=math.ceil(factor * instr.comm_bytes)))

    return busiest_compute_s, busiest_comm_s


def fuse_elementwise(instrs: Sequence[Instr]) -> tuple[Instr, ...]:
    """``instrs`` with chains of element-wise instructions fused, as Megatron-LM's fused
    kernels do (bias + GeLU, bias + dropout + residual add): an element-wise instruction's
    output that only the next element-wise instruction reads stays on chip — its bytes are
    neither written nor read back. What anything else reads is written: a dropout's mask,
    saved for the backward, is, its output is not. Readers are counted per tensor, each read
    resolved to its latest writer (as the lowering's dependencies are), so a recomputed
    forward fuses as the forward does although the backward after it reads the recomputed
    masks (Megatron re-runs the same fused bias-dropout-add under its checkpoint). Without
    tensor names, an output stays on chip when its instruction has that one dependent."""
    dependents = [0] * len(instrs)
    for instr in instrs:
        for dep in instr.deps:
            dependents[dep] += 1
    readers = _readers(instrs)
    fused = list(instrs)
    for index, instr in enumerate(instrs):
        if instr.kind != "elementwise":
            continue
        for dep in instr.deps:
            producer = fused[dep]
            if producer.kind != "elementwise" or producer.phase != instr.phase:
                continue
            if producer.outputs and instr.inputs:
                passed = sum(
                    nbytes
                    for name, nbytes in producer.outputs
                    if readers.get((dep, name)) == {index}
                )
            elif dependents[dep] == 1:
                passed = producer.bytes_written
            else:
                continue
            kept = min(producer.bytes_written, fused[index].bytes_read, passed)
            fused[dep] = replace(producer, bytes_written=producer.bytes_written - kept)
            fused[index] = replace(fused[index], bytes_read=fused[index].bytes_read - kept)
    return tuple(fused)


def _readers(instrs: Sequence[Instr]) -> dict[tuple[int, str], set[int]]:
    """(writer index, tensor name) → the instructions that read that write of the tensor."""
    writer: dict[str, int] = {}
    readers: dict[tuple[int, str], set[int]] = {}
    for index, instr in enumerate(instrs):
        for name, _ in instr.inputs:
            if name in writer:
                readers.setdefault((writer[name], name), set()).add(index)
        for name, _ in instr.outputs:
            writer[name] = index
    return readers


@dataclass(frozen=True, slots=True)
class BlockCost:
    """One block kind on one rank: its forward and backward timing, and the seconds of its
    ZeRO-3 parameter gathers and ZeRO-2/3 gradient reduce-scatters (0 when not used), and
    under hybrid sharding the all-reduce of its gradient shard over the replicas
    (``replica_s``), which FSDP issues on a stream of its own once the block's reduce-scatter
    is done (FSDP1 ``_reduce_grad``: ``_all_reduce_stream.wait_stream(_post_backward_stream)``;
    FSDP2 ``foreach_reduce``'s ``all_reduce_stream``): the next block's reduce-scatter does not
    wait for it. ``zero_share`` (forward, backward) and ``replica_share`` (backward): the share
    of its rate the block's compute loses to the SMs the NCCL kernels of the gathers and
    scatters, and of the replica all-reduce, hold while they run
    (:func:`~stage_explore.analytical.contention.contended_share`; applied by
    :func:`~stage_explore.analytical.contention.contended_s`). ``backward_gather_s``: the
    backward's own gather where it differs from the forward's (DeepSpeed hpZ's in-group gather,
    :mod:`~stage_explore.analytical.hpz`); None, the same seconds as ``gather_s``."""

    forward: BlockTiming
    backward: BlockTiming
    gather_s: float = 0.0
    scatter_s: float = 0.0
    replica_s: float = 0.0
    zero_share: tuple[float, float] = (0.0, 0.0)
    replica_share: float = 0.0
    backward_gather_s: float | None = None

    @property
    def bwd_gather_s(self) -> float:
        """Seconds of the backward's own parameter gather (``backward_gather_s``)."""
        return self.gather_s if self.backward_gather_s is None else self.backward_gather_s


@dataclass(frozen=True, slots=True)
class ChunkTiming:
    """Per micro-batch: a chunk's forward and backward seconds, busy compute, exposed
    communication by label, and its blocks' backward seconds as runs in backward order."""

    forward_s: float
    backward_s: float
    compute_s: float
    exposed_s: tuple[tuple[str, float], ...]
    backward_runs: tuple[tuple[float, int], ...]


def plus_exposed(
    timing: ChunkTiming, forward_s: float, backward_s: float, label: str
) -> ChunkTiming:
    """``timing`` with ``forward_s`` after each forward and ``backward_s`` after each backward
    on the compute stream, exposed under ``label`` (e.g. the FP8 amax all-reduces a chunk
    waits for); the blocks' backward runs, which the gradient reductions follow, unchanged."""
    exposed = dict(timing.exposed_s)
    exposed[label] = exposed.get(label, 0.0) + forward_s + backward_s
    return replace(
        timing,
        forward_s=timing.forward_s + forward_s,
        backward_s=timing.backward_s + backward_s,
        exposed_s=tuple(sorted(exposed.items())),
    )


#: The label of the seconds compute loses to the SMs and HBM bandwidth of the NCCL collectives
#: beside it (:mod:`~stage_explore.analytical.contention`): the step breakdown's
#: ``exposed_nccl_contention``, apart from the kernels' own ``compute``.
CONTENTION = "nccl_contention"


#: The blocks whose parameters an FSDP root unit holds (``root_unit`` of :func:`chunk_timing`).
ROOT_UNIT_KINDS = frozenset({"embedding", "head"})


def chunk_timing(
    runs: Runs,
    costs: Mapping[str, BlockCost],
    zero: int,
    root_unit: bool = False,
    queue_depth: int | None = None,
) -> ChunkTiming:
    """The timing of a chunk; ZeRO's per-block collectives run on their own stream beside the
    block (gathers before forward and backward, scatters after the backward) and are exposed
    where they outlast it. With ``root_unit`` (ZeRO-3, FSDP's root unit: the framework option
    ``fsdp_root_unit``) the embedding's and the head's parameters are one unit gathered once
    before the forward and reduce-scattered once after the backward, beside no compute: their
    gathers and scatters are exposed whole, once per micro-batch. A hybrid-sharded block's
    replica all-reduce (``BlockCost.replica_s``) runs on its own stream: in the steady state a
    block's backward lasts at least that long, beside its gathers and scatters, not after them;
    the root unit's follows its reduce-scatter, beside no compute. A block's compute beside its
    gathers, scatters and replica all-reduce runs on the SMs their NCCL kernels leave
    (``BlockCost.zero_share``, ``replica_share``; :func:`~stage_explore.analytical.contention.
    contended_s`): the seconds it loses are labelled :data:`CONTENTION`.

    With ``queue_depth`` (the framework option ``zero3_prefetch_units``) ZeRO-2's and -3's
    passes are timed as the frameworks queue them (:mod:`~stage_explore.analytical.
    zero_queue`: gathers and scatters on one queue, a gather at most that many blocks ahead of
    its compute, a backward pass ending once its scatters and replica all-reduces have): each
    block's steady state is the per-block rule above, and a pass's first gather and last
    scatter are exposed where nothing hides them (:func:`_queued`). Under ZeRO-2 (no gathers,
    the depth changes nothing) that is the backward's scatter backlog, exposed at the pass's
    end: DeepSpeed's ``independent_gradient_partition_epilogue`` synchronises its reduction
    stream, FSDP's post-backward final callback makes the compute stream wait for the
    reduce-scatter (and all-reduce) stream. None: the per-block rule alone."""
    timing = _per_block(runs, costs, zero, root_unit)
    if queue_depth is None or zero < 2 or not any(
        costs[kind].gather_s or costs[kind].scatter_s or costs[kind].replica_s for kind, _ in runs
    ):  # nothing on the queue (dp 1): the per-block rule is the queue, to the last bit
        return timing
    return _queued(timing, runs, costs, zero, root_unit, queue_depth)


def _per_block(
    runs: Runs, costs: Mapping[str, BlockCost], zero: int, root_unit: bool
) -> ChunkTiming:
    """:func:`chunk_timing` block by block: each block's ZeRO collectives beside it, exposed
    where they outlast it."""
    forward = backward = compute = 0.0
    exposed: dict[str, float] = {}
    backward_runs = []
    for kind, count in runs:
        cost = costs[kind]
        df, db = cost.forward.duration_s, cost.backward.duration_s
        if zero >= 3 and root_unit and kind in ROOT_UNIT_KINDS:
            tail = cost.scatter_s + cost.replica_s
            exposed["zero_gather"] = exposed.get("zero_gather", 0.0) + count * (
                cost.gather_s + tail
            )
            df, db = df + cost.gather_s, db + tail
        elif zero >= 3:
            comm = max(cost.bwd_gather_s + cost.scatter_s, cost.replica_s)
            label_s = max(0.0, cost.gather_s - df) + max(0.0, comm - db)
            exposed["zero_gather"] = exposed.get("zero_gather", 0.0) + count * label_s
            slowed_f = contended_s(
                df, cost.forward.compute_s, cost.gather_s, ((cost.gather_s, cost.zero_share[0]),)
            )
            slowed_b = contended_s(db, cost.backward.compute_s, comm, (
                (cost.bwd_gather_s + cost.scatter_s, cost.zero_share[1]),
                (cost.replica_s, cost.replica_share),
            ))  # fmt: skip
            lost = count * (slowed_f - max(df, cost.gather_s) + slowed_b - max(db, comm))
            if lost > 0.0:
                exposed[CONTENTION] = exposed.get(CONTENTION, 0.0) + lost
            df, db = slowed_f, slowed_b
        elif zero == 2:
            comm = max(cost.scatter_s, cost.replica_s)
            exposed["zero_scatter"] = exposed.get("zero_scatter", 0.0) + count * max(0.0, comm - db)
            slowed_b = contended_s(db, cost.backward.compute_s, comm, (
                (cost.scatter_s, cost.zero_share[1]), (cost.replica_s, cost.replica_share),
            ))  # fmt: skip
            lost = count * (slowed_b - max(db, comm))
            if lost > 0.0:
                exposed[CONTENTION] = exposed.get(CONTENTION, 0.0) + lost
            db = slowed_b
        forward += count * df
        backward += count * db
        compute += count * (cost.forward.compute_s + cost.backward.compute_s)
        for label, seconds in (*cost.forward.exposed_s.items(), *cost.backward.exposed_s.items()):
            exposed[label] = exposed.get(label, 0.0) + count * seconds
        backward_runs.append((db, count))
    return ChunkTiming(
        forward, backward, compute, tuple(sorted(exposed.items())),
        tuple(reversed(backward_runs)),
    )  # fmt: skip


def _queued(
    timing: ChunkTiming,
    runs: Runs,
    costs: Mapping[str, BlockCost],
    zero: int,
    root_unit: bool,
    depth: int,
) -> ChunkTiming:
    """``timing`` (the per-block rule) with its forward and backward replaced by the ZeRO
    queue's passes (:func:`~stage_explore.analytical.zero_queue.pass_time`): a block's compute
    slowed by the NCCL kernels beside it as the per-block rule slows it, its gathers and
    scatters on one queue, the replica all-reduce on its own stream. FSDP's root unit
    (``root_unit``): the embedding's and the head's parameters are gathered together before
    the embedding's forward and reduce-scattered together after its backward (one unit). The
    difference to the per-block rule is labelled ``zero_gather`` (ZeRO-3) or
    ``zero_scatter`` (ZeRO-2); the blocks' backward runs (which gradient buckets follow) stay
    the per-block rule's."""
    forward: list[tuple[QueueBlock, int]] = []
    backward: list[tuple[QueueBlock, int]] = []
    kinds = {kind for kind, _ in runs}
    root = root_unit and zero >= 3 and "embedding" in kinds and kinds >= ROOT_UNIT_KINDS
    root_gather = root_scatter = root_replica = 0.0
    if root:
        for kind in ROOT_UNIT_KINDS:
            count = sum(n for k, n in runs if k == kind)
            root_gather += count * costs[kind].gather_s
            root_scatter += count * costs[kind].scatter_s
            root_replica += count * costs[kind].replica_s
    for kind, count in runs:
        cost = costs[kind]
        df, db = cost.forward.duration_s, cost.backward.duration_s
        gather = cost.gather_s
        if root and kind in ROOT_UNIT_KINDS:
            first = kind == "embedding"
            forward.append((QueueBlock(df, root_gather if first else 0.0), count))
            backward.append(
                (
                    QueueBlock(db, 0.0, *((root_scatter, root_replica) if first else (0.0, 0.0))),
                    count,
                )
            )
            continue
        if root_unit and zero >= 3 and kind in ROOT_UNIT_KINDS:  # one root kind: exposed whole
            forward.append((QueueBlock(df + gather), count))
            backward.append((QueueBlock(db + cost.scatter_s + cost.replica_s), count))
            continue
        slowed_f = contended_s(df, cost.forward.compute_s, 0.0, ((gather, cost.zero_share[0]),))
        back = cost.bwd_gather_s  # hpZ: the backward's gather inside its group (hpz.py)
        slowed_b = contended_s(db, cost.backward.compute_s, 0.0, (
            (back + cost.scatter_s, cost.zero_share[1]),
            (cost.replica_s, cost.replica_share),
        ))  # fmt: skip
        forward.append((QueueBlock(slowed_f, gather), count))
        backward.append((QueueBlock(slowed_b, back, cost.scatter_s, cost.replica_s), count))
    forward_s = pass_time(forward, depth)
    backward_s = pass_time(list(reversed(backward)), depth)
    added = forward_s + backward_s - timing.forward_s - timing.backward_s
    exposed = dict(timing.exposed_s)
    label = "zero_gather" if zero >= 3 else "zero_scatter"
    exposed[label] = exposed.get(label, 0.0) + added
    if exposed[label] < 0.0:  # hidden better than per block: less of both to charge
        exposed[CONTENTION] = max(0.0, exposed.get(CONTENTION, 0.0) + exposed[label])
        exposed[label] = 0.0
    return replace(
        timing, forward_s=forward_s, backward_s=backward_s, exposed_s=tuple(sorted(exposed.items()))
    )


def sync_timing(
    groups: Sequence[tuple[float, int, int, int]],
    backward_runs: Sequence[tuple[float, int]],
) -> tuple[float, float]:
    """(total, latest) of a chunk's reductions on one stream: ``groups`` are (seconds, first,
    step, count) in backward positions, ``backward_runs`` the blocks' backward seconds.

    Reductions run in position order, each no earlier than the end of its block; started with
    the stream free at ``f`` and the chunk's last backward starting at ``s``, the stream is free
    again at ``max(f + total, s + latest)``, where ``latest`` is the largest (end of a block that
    has reductions + the seconds of the reductions from there on).
    """
    total, latest, _ = sync_and_hidden_s(groups, backward_runs, hidden=False)
    return total, latest


def hidden_sync_s(
    groups: Sequence[tuple[float, int, int, int]],
    backward_runs: Sequence[tuple[float, int]],
) -> float:
    """Seconds of a chunk's reductions (``groups`` and ``backward_runs`` as in
    :func:`sync_timing`) that run while its last backward still computes: on a stream free
    when that backward starts, each no earlier than the end of its block and after the ones
    before it, counted up to the backward's end."""
    return sync_and_hidden_s(groups, backward_runs, hidden=True)[2]


def sync_and_hidden_s(
    groups: Sequence[tuple[float, int, int, int]],
    backward_runs: Sequence[tuple[float, int]],
    hidden: bool = True,
) -> tuple[float, float, float]:
    """:func:`sync_timing`'s (total, latest) and, with ``hidden``, :func:`hidden_sync_s`
    (else 0.0), from one pass over the reductions' positions and the blocks' ends (a chunk
    asks for both)."""
    seconds_at: dict[int, float] = {}
    total = 0.0
    for seconds, first, step, count in groups:
        for position in range(first, first + step * count, step):
            seconds_at[position] = seconds_at.get(position, 0.0) + seconds
        total += seconds * count
    if not seconds_at:
        return 0.0, float("-inf"), 0.0
    ends: list[float] = []  # ends[i]: end of the block at backward position i
    now = 0.0
    for seconds, count in backward_runs:
        for _ in range(count):
            now += seconds
            ends.append(now)
    positions = sorted(seconds_at)
    latest, tail = float("-inf"), 0.0
    for position in reversed(positions):
        tail += seconds_at[position]
        latest = max(latest, ends[position] + tail)
    hidden_s = free = 0.0
    if hidden:
        for position in positions:
            start = max(free, ends[position])
            free = start + seconds_at[position]
            if start < now:
                hidden_s += min(free, now) - start
    return total, latest, hidden_s
