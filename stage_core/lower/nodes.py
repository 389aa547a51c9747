"""Stage programs as trace nodes: one template per pipeline stage, materialised per rank.

:func:`stage_nodes` turns a :class:`~stage_core.lower.program.StageProgram` into an ordered list
of :class:`ProgramNode` s: trace nodes whose communicator group is still a tuple of mesh axes
and whose point-to-point peer is a shift along ``pp``. Node ids follow the schedule (ASTRA-sim
issues ready nodes in id order); data dependencies follow the tensors (so communication overlaps
independent compute); a control dependency chains each task to the previous one, encoding the
pipeline schedule. :func:`materialize` binds a template to one rank.

Each node says where it comes from (:attr:`ProgramNode.source`: a block kind, a phase and an
index), so a cost model can time it as the analytical backend times that instruction
(:mod:`stage_explore.analytical.trace_mode`); ``instructions`` lets the caller emit a block's
instructions as a framework runs them (fused, overlaps applied) instead of as bound — under a
split backward its B and W parts (phases :data:`BWD_B` and :data:`BWD_W`) on their own.

Tags of point-to-point messages are ``1 + ((sender_stage·m + micro_batch)·2 + direction)``,
unique per step and computed identically by sender and receiver.

One module on purpose (over 600 lines): the schedule walk (:func:`_stage_nodes`) and the
emitters it calls for ZeRO, synchronisation, parameter-gather, ring and pass-end nodes share
the private ``_Emitter``, whose append order is the node-id order ASTRA-sim issues ready nodes
by; split across modules, that one ordering invariant would be too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.elide import elide_empty
from stage_core.lower.experts import data_axes
from stage_core.lower.param_buckets import param_buckets
from stage_core.lower.program import (
    AFTER_BACKWARD,
    PIPELINE_ENDS,
    PIPELINE_MIRROR,
    ProgramSet,
    StageProgram,
    Workload,
)
from stage_core.lower.schedule import SPLIT_BACKWARD, Task, overlapped
from stage_core.lower.weightgrad import split_backward
from stage_core.mesh import Mesh
from stage_core.plans import DP_REPLICATE
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

#: Where a template node comes from: (block kind, phase, index) (:attr:`ProgramNode.source`).
NodeSource = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class ProgramNode:
    """A trace node of a stage template: ``group_axes`` for collectives; for sends and receives
    the peer is ``peer_shift`` (+1 or −1, wrapping) along ``peer_axis`` (pp, or cp for ring
    attention). ``source`` is where the node comes from: ``(block kind, phase, index)`` of a
    block's instruction (phase ``fwd`` or ``bwd``, or :data:`BWD_B` / :data:`BWD_W` for the
    parts of a split backward emitted by the caller; the index into the instructions emitted
    for that phase), of a ZeRO collective (phase :data:`ZERO_GATHER` or :data:`ZERO_SCATTER`, the
    index into :func:`_zero_collectives`), of a synchronisation op (``("", SYNC, index into
    StageProgram.sync)``) or the optimizer (``("", OPTIMIZER, 0)``); empty for pipeline
    transfers and ring-attention messages."""

    node: TraceNode
    group_axes: tuple[str, ...] = ()
    peer_shift: int = 0
    peer_axis: str = "pp"
    source: NodeSource | None = None


#: Phases of :attr:`ProgramNode.source` besides a block's ``fwd`` and ``bwd``.
ZERO_GATHER, ZERO_SCATTER, SYNC, OPTIMIZER = "zero_gather", "zero_scatter", "sync", "optimizer"

#: The phase of a parameter all-gather run ahead of its chunk's first forward, bucket by
#: bucket (``gathers_ahead``: :func:`stage_nodes`); its index is the step-end gather's in
#: ``StageProgram.sync``, its bytes the bucket's share of that gather.
PARAM_GATHER = "param_gather"

#: The phases of a split backward's B and W parts when the caller emits a block's instructions
#: (``instructions``: :func:`stage_nodes`), its index into that part's instructions.
BWD_B, BWD_W = "bwd_b", "bwd_w"

#: How a block's instructions are emitted for a phase (``fwd`` or ``bwd``): by default as
#: bound (``block.fwd`` / ``block.bwd``).
Instructions = Callable[[BoundBlock, str], tuple[Instr, ...]]

#: The phases of an instruction a framework runs at the end of a chunk's forward or backward
#: pass, before its pipeline send (``pass_end``: :func:`stage_nodes`; e.g. Transformer
#: Engine's FP8 amax all-reduce at the exit of ``fp8_autocast`` and after the backward); the
#: source's index is the chunk's index.
PASS_END_FWD, PASS_END_BWD = "fwd_end", "bwd_end"

#: What a framework runs at the end of a chunk's pass (the chunk's index, whether it is the
#: backward): one instruction or None.
PassEnd = Callable[[int, bool], Instr | None]


#: Tags of ring-attention messages start here (pipeline tags stay far below).
RING_TAG_BASE = 1 << 30


def message_tag(sender_stage: int, micro_batch: int, micro_batches: int, backward: bool) -> int:
    return 1 + ((sender_stage * micro_batches + micro_batch) * 2 + (1 if backward else 0))


class _Emitter:
    def __init__(self) -> None:
        self.nodes: list[ProgramNode] = []
        self.ring_messages = 0

    def add(
        self,
        node: TraceNode,
        group_axes: tuple[str, ...] = (),
        peer_shift: int = 0,
        peer_axis: str = "pp",
        source: NodeSource | None = None,
    ) -> int:
        node = replace(node, id=len(self.nodes))
        self.nodes.append(ProgramNode(node, group_axes, peer_shift, peer_axis, source))
        return node.id

    def ring(self, instr: Instr, name: str, deps: tuple[int, ...], ctrl: tuple[int, ...]) -> int:
        """Ring attention: each step sends the chunk held to the next rank and receives the
        previous rank's; a step forwards what the one before received."""
        (axis,) = instr.axes
        last = -1
        for step in range(instr.ring_steps):
            tag = RING_TAG_BASE + self.ring_messages
            self.ring_messages += 1
            send = TraceNode(
                0,
                f"{name}.send{step}",
                NodeKind.SEND,
                deps,
                ctrl,
                comm_bytes=instr.comm_bytes,
                tag=tag,
            )
            self.add(send, peer_shift=1, peer_axis=axis)
            recv = TraceNode(
                0,
                f"{name}.recv{step}",
                NodeKind.RECV,
                deps,
                ctrl,
                comm_bytes=instr.comm_bytes,
                tag=tag,
            )
            last = self.add(recv, peer_shift=-1, peer_axis=axis)
            deps, ctrl = (last,), ()
        return last

    def instr(
        self,
        instr: Instr,
        name: str,
        deps: tuple[int, ...],
        ctrl: tuple[int, ...] = (),
        source: NodeSource | None = None,
    ) -> int:
        if instr.kind == "ring":
            return self.ring(instr, name, deps, ctrl)
        if instr.collective is not None:
            node = TraceNode(
                0,
                name,
                NodeKind.COLL,
                deps,
                ctrl,
                collective=instr.collective,
                comm_bytes=instr.comm_bytes,
                inputs=instr.inputs,
                outputs=instr.outputs,
            )
            return self.add(node, instr.axes, source=source)
        node = TraceNode(
            0,
            name,
            NodeKind.COMP,
            deps,
            ctrl,
            flops=instr.flops,
            tensor_bytes=instr.bytes_read + instr.bytes_written,
            inputs=instr.inputs,
            outputs=instr.outputs,
        )
        return self.add(node, source=source)


def _data_axes(workload: Workload, expert: bool) -> tuple[str, ...]:
    return data_axes(workload.axis_sizes, workload.expert_axes, expert)


def _zero_collectives(workload: Workload, block: BoundBlock, gather: bool) -> list[Instr]:
    """ZeRO-3 parameter all-gathers (``gather``) or ZeRO-2/3 gradient reduce-scatters of a block;
    under hybrid sharding each reduce-scatter over the shard group is followed by an all-reduce
    of the rank's gradient shard over the replicas (``dpr``), as FSDP's ``HYBRID_SHARD`` does
    after every backward (``_reduce_grad``: ``reduce_scatter`` then ``all_reduce`` over the
    inter-node group; FSDP2 HSDP likewise)."""
    by_axes: dict[tuple[str, ...], int] = {}
    replicas = workload.axis_sizes[DP_REPLICATE] > 1 and not gather
    replicated = 0  # gradient-shard bytes all-reduced over the replicas
    data_of = {  # the data axes by weight.expert, and how many ranks share a copy over them
        expert: (axes, math.prod(workload.axis_sizes[a] for a in axes))
        for expert in {weight.expert for weight in block.weights}
        for axes in (_data_axes(workload, expert),)
    }
    for weight in block.weights:
        axes, factor = data_of[weight.expert]
        if not axes:
            continue
        if gather:
            by_axes[axes] = by_axes.get(axes, 0) + weight.elements // factor * workload.weight_bytes
        else:
            by_axes[axes] = by_axes.get(axes, 0) + weight.elements * workload.grad_bytes
            if replicas and DP_REPLICATE in weight.grad_axes:
                replicated += weight.elements // factor * workload.grad_bytes
    kind = CollectiveKind.ALL_GATHER if gather else CollectiveKind.REDUCE_SCATTER
    name = "zero.param_all_gather" if gather else "zero.grad_reduce_scatter"
    result = [
        Instr(name, "step", "comm", collective=kind, axes=a, comm_bytes=s)
        for a, s in by_axes.items()
    ]
    if replicated:
        all_reduce = CollectiveKind.ALL_REDUCE
        axes = (DP_REPLICATE,)
        result.append(
            Instr("zero.grad_replica_all_reduce", "step", "comm", collective=all_reduce,
                  axes=axes, comm_bytes=replicated)
        )  # fmt: skip
    return result


def _block(
    em: _Emitter,
    instrs: tuple[Instr, ...],
    prefix: str,
    entry: tuple[int, ...],
    ctrl: tuple[int, ...],
    source: tuple[str, str] = ("", ""),
) -> int:
    """Emit a block's instructions; those without in-block deps depend on ``entry``; the first
    also carries the control dependency ``ctrl`` (the schedule's order). ``source``: the
    block kind and phase the nodes come from."""
    ids: list[int] = []
    for index, instr in enumerate(instrs):
        deps = tuple(ids[d] for d in instr.deps) if instr.deps else entry
        node_ctrl = ctrl if not ids else ()
        name = f"{prefix}.{instr.name}"
        ids.append(em.instr(instr, name, deps, node_ctrl, (*source, index)))
    return ids[-1] if ids else (entry[0] if entry else -1)


def _emit_indexed(
    em: _Emitter,
    instrs: tuple[Instr, ...],
    indices: tuple[int, ...],
    prefix: str,
    entry: tuple[int, ...],
    ctrl: tuple[int, ...],
    known: dict[int, int],
    source: tuple[str, str] = ("", ""),
) -> dict[int, int]:
    """Emit ``instrs[i]`` for ``i`` in ``indices`` (one part of a split backward); a dependency
    on an instruction emitted before (``known``: the B part, for W) keeps its node, one without
    dependencies waits for ``entry``; the first carries ``ctrl``. Returns index → node id."""
    ids: dict[int, int] = {}
    for i in indices:
        instr = instrs[i]
        deps = tuple(ids[d] if d in ids else known[d] for d in instr.deps if d in ids or d in known)
        name = f"{prefix}.{instr.name}"
        ids[i] = em.instr(instr, name, deps or entry, ctrl if not ids else (), (*source, i))
    return ids


def _sync_nodes(
    em: _Emitter,
    stage: StageProgram,
    chunk: int | None,
    after: int,
    deps: tuple[int, ...],
    sync_ids: list[int],
) -> None:
    """Emit the gradient synchronisations of ``stage`` scheduled ``after`` a block position (of
    ``chunk``; ``None``: any chunk, for the step-end ones), each waiting for ``deps``; their node
    ids go to ``sync_ids`` (the optimizer waits for all of them)."""
    for index, op in enumerate(stage.sync):
        if op.after == after and (chunk is None or op.chunk == chunk):
            node = TraceNode(
                0,
                f"step.c{op.chunk}.{op.name}",
                NodeKind.COLL,
                deps,
                collective=op.collective,
                comm_bytes=op.comm_bytes,
            )
            sync_ids.append(em.add(node, op.axes, source=("", SYNC, index)))


def _param_gather(
    em: _Emitter,
    stage: StageProgram,
    bucket: tuple[int, int],
    prefix: str,
    deps: tuple[int, ...],
    ctrl: tuple[int, ...],
) -> int:
    """Emit one parameter bucket's all-gather ahead of its forward (:data:`PARAM_GATHER`)."""
    index, size = bucket
    op = stage.sync[index]
    node = TraceNode(
        0, f"{prefix}.param_all_gather", NodeKind.COLL, deps, ctrl,
        collective=op.collective, comm_bytes=size,
    )  # fmt: skip
    return em.add(node, op.axes, source=("", PARAM_GATHER, index))


def _weight_nodes(
    em: _Emitter,
    programs: ProgramSet,
    stage: StageProgram,
    task: Task,
    ctrl: tuple[int, ...],
    b_ids: dict[tuple[int, int, int], dict[int, int]],
    sync_ids: list[int],
    last_mb: dict[int, int],
    instructions: Instructions | None = None,
    pass_end: PassEnd | None = None,
    held: bool = False,
) -> tuple[int | None, tuple[int, ...]]:
    """A W task: every block's weight-gradient instructions (backward block order), waiting for
    their inputs from the same micro-batch's B; then ZeRO-2/3 gradient scatters and, after the
    chunk's last W, the gradient synchronisation. ``held`` (``zero_held``): no per-block
    scatters; after the chunk's last W its held reduce-scatters (:func:`_held_scatters`: the
    pipelining stage's ``perform_reduce_grad`` / last-backward ``post_backward`` after every
    B and W of the chunk). Returns the task's last node and what the rank's next task waits
    for besides it (the held scatters' replica all-reduces too).
    ``instructions``: the W part as the caller emits it (phase :data:`BWD_W`, its dependencies
    within W; those on B are dropped, as :func:`~stage_core.lower.weightgrad.split_backward`
    drops them: B ran before, so an instruction without one waits for the task's entry).
    ``pass_end``'s backward instruction follows the task's last node (:func:`_pass_end`)."""
    workload = programs.workload
    chunk = stage.chunks[task.chunk]
    mb = task.micro_batch
    entry = ctrl
    last: int | None = ctrl[0] if ctrl else None
    for position, block in enumerate(reversed(chunk.blocks)):
        prefix = f"W{mb}.c{chunk.index}.b{position}.{block.kind}"
        known = b_ids.pop((chunk.index, mb, position), {})
        if instructions is not None:
            instrs = instructions(block, BWD_W)
            end = _block(em, instrs, prefix, entry, ctrl, (block.kind, BWD_W))
            ids = {len(instrs) - 1: end} if instrs else {}
        else:
            ids = _emit_indexed(
                em, block.bwd, split_backward(block).weight_grad_index, prefix, entry, ctrl,
                known, (block.kind, "bwd"),
            )  # fmt: skip
        if ids:
            ctrl = ()
            last = max(ids.values())
            entry = (last,)
        if workload.parallel.zero >= 2 and last is not None and not held:
            for i, instr in enumerate(_zero_collectives(workload, block, gather=False)):
                sync_ids.append(em.instr(  # the optimizer needs the reduced shards
                    instr, f"{prefix}.{instr.name}", (last,), (), (block.kind, ZERO_SCATTER, i)
                ))  # fmt: skip
        if mb == last_mb[chunk.index] and last is not None:
            _sync_nodes(em, stage, chunk.index, position, (last,), sync_ids)
    drained: tuple[int, ...] = ()
    if held and mb == last_mb[chunk.index] and last is not None:
        held_from = len(sync_ids)
        blocks = list(reversed(chunk.blocks))
        last = _held_scatters(em, workload, blocks, f"W{mb}.c{chunk.index}", last, sync_ids)
        drained = tuple(sync_ids[held_from:])
    if pass_end is not None:
        last = _pass_end(em, pass_end, chunk.index, True, f"W{mb}.c{chunk.index}", last, entry)
    return last, drained


def _unit(
    workload: Workload,
    blocks: list[BoundBlock],
    k: int,
    gather: bool,
    backward: bool,
    root: frozenset[str],
    regather: frozenset[str] = frozenset(),
) -> list[tuple[int, int, Instr]]:
    """The ZeRO gathers (``gather``) or reduce-scatters issued for the block at position ``k``
    of a pass (``blocks`` in the pass's order), each as (the position of the block it is for,
    its index in :func:`_zero_collectives`, instruction): the block's own, or for a block of
    FSDP's root unit (its kind in ``root``) the whole unit's at the unit's first position
    (a forward's gathers) or last one (a backward's scatters), and no gathers in a
    backward. A backward's gathers of a block whose kind is in ``regather`` are issued twice
    (the recomputed forward's, then the backward's own)."""
    if blocks[k].kind not in root:
        own = list(enumerate(_zero_collectives(workload, blocks[k], gather)))
        twice = gather and backward and blocks[k].kind in regather
        return [(k, i, x) for i, x in own] + ([(k, i, x) for i, x in own] if twice else [])
    if gather and backward:
        return []
    members = [j for j, block in enumerate(blocks) if block.kind in root]
    if k != (members[0] if gather else members[-1]):
        return []
    return [
        (j, i, x)
        for j in members
        for i, x in enumerate(_zero_collectives(workload, blocks[j], gather))
    ]


def _held_scatters(
    em: _Emitter,
    workload: Workload,
    blocks: list[BoundBlock],
    prefix: str,
    last: int,
    sync_ids: list[int],
) -> int:
    """Under ``zero_held`` (:func:`stage_nodes`): every block's gradient reduce-scatters
    (``blocks`` in backward order) after the chunk's last backward ``last``, each after the one
    before, a replica all-reduce after its scatter; all of them go to ``sync_ids``. Returns the
    last reduce-scatter (the caller's next node also waits for the replica all-reduces)."""
    previous = last
    for position, block in enumerate(blocks):
        scattered: tuple[int, ...] = ()
        for i, instr in enumerate(_zero_collectives(workload, block, gather=False)):
            deps: tuple[int, ...] = (previous,) if previous >= 0 else ()
            if instr.axes == (DP_REPLICATE,):
                deps = scattered  # FSDP's replica all-reduce waits for the scatter
            name = f"{prefix}.b{position}.{block.kind}.{instr.name}"
            node_id = em.instr(instr, name, deps, (), (block.kind, ZERO_SCATTER, i))
            if instr.axes != (DP_REPLICATE,):
                previous = node_id
            scattered = (*scattered, node_id)
        sync_ids.extend(scattered)
    return previous


def _pass_end(
    em: _Emitter,
    pass_end: PassEnd,
    chunk: int,
    backward: bool,
    prefix: str,
    last: int | None,
    ctrl: tuple[int, ...],
) -> int | None:
    """Emit what the framework runs at the end of a chunk's pass (``pass_end``), after the
    pass's last node ``last`` (or, with none, after ``ctrl``); returns the new last node."""
    instr = pass_end(chunk, backward)
    if instr is None:
        return last
    deps = (last,) if last is not None and last >= 0 else ctrl
    phase = PASS_END_BWD if backward else PASS_END_FWD
    return em.instr(instr, f"{prefix}.{instr.name}", deps, (), ("", phase, chunk))


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """How :func:`stage_nodes` emits what a framework runs around a stage's blocks (each field
    off by default: the program as bound).

    ``zero_prefetch``: ZeRO-3's gathers as the frameworks issue them, a block's gather at the
    pre-hook of the block that many before it in its pass (0: its own), waiting for the
    compute before that block (the pass's first ones for the pass's start); hybrid sharding's
    replica all-reduce after its block's reduce-scatter, and the optimizer after every
    reduce-scatter (the analytical backend's ``zero3_prefetch_units``; ``zero_queue.py`` in
    stage_explore). Under ZeRO-2 and -3 a backward pass ends once its reduce-scatters and
    replica all-reduces have: its pipeline send, the rank's next task and the step's
    synchronisation after the backward wait for them (DeepSpeed's
    ``independent_gradient_partition_epilogue`` synchronises its reduction stream, FSDP's
    post-backward final callback makes the compute stream wait for the reduce-scatter and
    all-reduce streams); a pass-end instruction (``pass_end``) waits for the compute only.
    None: each gather before its own block, waiting only for the gather before it; no
    node waits for a reduce-scatter.

    ``gathers_ahead(chunk)``: the chunk's step-end parameter all-gather runs as the previous
    step's, ahead of the chunk's first forward, one bucket at a time
    (:func:`~stage_core.lower.param_buckets.param_buckets`, phase :data:`PARAM_GATHER`): the
    first block of a bucket waits for its gather, which the first block of the bucket before
    dispatched once its own had ended (Megatron-Core's ``overlap_param_gather``: the forward
    pre-hook's ``finish_param_sync`` waits for its bucket's all-gather, then starts the next
    one); the first bucket's is dispatched by the first block's pre-hook.

    ``pass_end``: an instruction a framework runs at the end of each forward and backward of
    a chunk (under a split backward after its W), before the pass's pipeline send and the
    rank's next task, beside none of the chunk's gradient reductions (source ``("",``
    :data:`PASS_END_FWD` or :data:`PASS_END_BWD` ``, chunk index)``).

    ``zero_held`` (ZeRO-3): a chunk's parameters stay gathered for the whole step, as FSDP2
    under pipeline parallelism keeps them (``fully_shard(reshard_after_forward=False)``, the
    pipelining stage's no-sync backward): its blocks' gathers only in its first forward, none
    in a backward, and its gradient reduce-scatters (with hybrid sharding's replica
    all-reduces) all after its last backward, one after the other, before that backward's
    pipeline send and the rank's next task (``backward_maybe_with_nosync`` calls every unit's
    ``post_backward`` after the last backward, each waiting for the previous reduce-scatter);
    under a split backward after its last W (the weight-gradient pass the last backward call
    makes, the rank's next task waiting for them; no W scatters per micro-batch).

    ``zero_root`` (ZeRO-3 with ``zero_prefetch``): the block kinds of FSDP's root unit (the
    embedding and the head, wrapped by the root ``fully_shard`` / FSDP1 root instance): one
    unit, its gathers issued together for the first of them in a forward, none in a
    backward (the root stays gathered), its reduce-scatters together after the last of them
    in a backward (:func:`_unit`).

    ``zero_regather`` (ZeRO-3 with ``zero_prefetch``): the block kinds whose backward gathers
    their parameters twice, queued together where the block's backward gather is issued and
    both waited for by its backward (DeepSpeed ZeRO-3 with activation checkpointing: the
    recomputed forward's pre-forward fetch, its post-forward release, then the backward's
    pre-backward fetch)."""

    zero_prefetch: int | None = None
    gathers_ahead: Callable[[int], bool] | None = None
    pass_end: PassEnd | None = None
    zero_held: bool = False
    zero_root: frozenset[str] = frozenset()
    zero_regather: frozenset[str] = frozenset()


def stage_nodes(
    programs: ProgramSet,
    stage: StageProgram,
    instructions: Instructions | None = None,
    *,
    keep_empty: bool = False,
    options: NodeOptions | None = None,
) -> list[ProgramNode]:
    """The template node list of one pipeline stage; ``instructions`` gives the instructions a
    block's phase emits (by default as bound; under a split backward it is asked for the B
    and W parts, :data:`BWD_B` and :data:`BWD_W`, each with its own dependencies, as
    :func:`~stage_core.lower.weightgrad.split_backward` renumbers them). Compute nodes
    without FLOPs or bytes (an add's backward) are left out, their dependencies passed on
    (:func:`stage_core.lower.elide.elide_empty`), unless ``keep_empty`` (a caller that times
    nodes by their source, not by their counts).

    ``options`` (:class:`NodeOptions`): how a framework runs ZeRO's collectives and what it
    adds at a pass's end; the default emits the program as bound."""
    opts = options or NodeOptions()
    split = str(programs.workload.parallel.schedule) in SPLIT_BACKWARD
    if (opts.zero_root or opts.zero_regather) and (split or opts.zero_prefetch is None):
        raise ConfigError(
            "zero_root and zero_regather need zero_prefetch and a schedule that does not split"
        )
    nodes = _stage_nodes(programs, stage, instructions, opts)
    return nodes if keep_empty else elide_empty(nodes)


def _stage_nodes(
    programs: ProgramSet,
    stage: StageProgram,
    instructions: Instructions | None,
    options: NodeOptions,
) -> list[ProgramNode]:
    zero_prefetch, gathers_ahead, pass_end = (
        options.zero_prefetch,
        options.gathers_ahead,
        options.pass_end,
    )
    zero_held, zero_root, zero_regather = (
        options.zero_held,
        options.zero_root,
        options.zero_regather,
    )
    workload = programs.workload
    p, vpp, m = workload.parallel.pp, workload.parallel.vpp, workload.micro_batches
    last_stage = p * vpp - 1
    zero = workload.parallel.zero
    em = _Emitter()
    previous: int | None = None
    waits: tuple[int, ...] = ()  # what the next task waits for besides `previous`
    last_mb_backward = {  # DualPipe: chunk 0 runs micro-batches 0…m/2−1, chunk 1 the rest
        c.index: max(t.micro_batch for t in stage.tasks if t.chunk == c.index) for c in stage.chunks
    }
    first_forward = {  # zero_held: the chunk's parameters are gathered in this forward only
        c.index: next(t.micro_batch for t in stage.tasks if t.chunk == c.index and t.phase == "F")
        for c in stage.chunks
    }
    kind = str(workload.parallel.schedule)
    split = kind in SPLIT_BACKWARD  # B and W apart (lower/weightgrad.py)
    pairs = overlapped(kind, stage.stage, p, m, vpp)
    b_ids: dict[tuple[int, int, int], dict[int, int]] = {}  # (chunk, mb, position) → B ids
    pair_ctrl: tuple[int, ...] | None = None
    sync_ids: list[int] = []
    last_gather = -1
    seen: set[int] = set()  # chunks whose first forward has been emitted
    ahead: set[int] = set()  # chunks whose parameter gathers ran ahead of their first forward
    for index, task in enumerate(stage.tasks):
        chunk = stage.chunks[task.chunk]
        j, mb, backward = chunk.stage, task.micro_batch, task.phase == "B"
        ctrl: tuple[int, ...] = ((previous,) if previous is not None else ()) + waits
        waits = ()
        if pair_ctrl is not None:  # DualPipe: the pair's backward does not wait for its forward
            ctrl, pair_ctrl = pair_ctrl, None
        if index in pairs:
            pair_ctrl = ctrl
        if task.phase == "W":
            previous, waits = _weight_nodes(
                em, programs, stage, task, ctrl, b_ids, sync_ids, last_mb_backward, instructions,
                pass_end, zero_held and zero >= 3,
            )  # fmt: skip
            continue
        # the pipeline neighbour: ±1 along pp; DualPipe's second chunk runs the other way
        toward = -1 if kind == "dualpipe" and task.chunk == 1 else 1
        tag = "B" if backward else "F"
        entry: tuple[int, ...] = ()
        receive_from = j + 1 if backward else j - 1
        if 0 <= receive_from <= last_stage:
            node = TraceNode(
                0,
                f"{tag}{mb}.c{chunk.index}.recv",
                NodeKind.RECV,
                (),
                ctrl,
                comm_bytes=stage.boundary_bytes,
                tag=message_tag(receive_from, mb, m, backward),
            )
            entry = (em.add(node, peer_shift=(1 if backward else -1) * toward),)
            ctrl = ()
        blocks = list(reversed(chunk.blocks)) if backward else list(chunk.blocks)
        buckets = None
        if not backward and gathers_ahead is not None and chunk.index not in seen:
            seen.add(chunk.index)
            buckets = param_buckets(stage, chunk.index) if gathers_ahead(chunk.index) else None
            if buckets is not None:
                ahead.add(chunk.index)
        pending: tuple[int, ...] = ()  # the gather the next bucket's first block waits for
        last = -1
        gathered: dict[int, tuple[int, ...]] = {}  # under zero_prefetch: position → gathers
        gathers = zero >= 3 and not (zero_held and (backward or mb != first_forward[chunk.index]))
        drained: list[int] = []  # under zero_prefetch: the reductions the pass's end waits for
        for position, block in enumerate(blocks):
            prefix = f"{tag}{mb}.c{chunk.index}.b{position}.{block.kind}"
            if buckets is not None and position in buckets:  # the block's forward pre-hook
                if not pending:  # the first bucket's gather, dispatched here
                    pending = (_param_gather(em, stage, buckets[position], prefix, entry, ctrl),)
                ready, later = pending, [p for p in buckets if p > position]
                if later:  # the next bucket's, once this one's has ended
                    after = (*ready, *entry)
                    pending = (_param_gather(em, stage, buckets[min(later)], prefix, after, ctrl),)
                entry = (*entry, *ready)
            if not gathers:
                pass
            elif zero_prefetch is None:
                # Parameter gathers are prefetched: each waits only for the previous gather.
                for i, instr in enumerate(_zero_collectives(workload, block, gather=True)):
                    deps: tuple[int, ...] = (last_gather,) if last_gather >= 0 else ()
                    name, source = f"{prefix}.{instr.name}", (block.kind, ZERO_GATHER, i)
                    last_gather = em.instr(instr, name, deps, ctrl, source)
                    entry = (*entry, last_gather)
            else:
                # As the frameworks queue them: at this block's pre-hook, after the compute
                # before it, the gather of the block `zero_prefetch` ahead (at the pass's
                # start also the ones before it)
                first = 0 if position == 0 else position + zero_prefetch
                for k in range(first, position + zero_prefetch + 1):
                    if k >= len(blocks) or k in gathered:
                        continue
                    gather_ids = []
                    unit = _unit(workload, blocks, k, True, backward, zero_root, zero_regather)
                    for at, i, instr in unit:
                        name = f"{tag}{mb}.c{chunk.index}.b{at}.{blocks[at].kind}.{instr.name}"
                        source = (blocks[at].kind, ZERO_GATHER, i)
                        gather_ids.append(em.instr(instr, name, entry, ctrl, source))
                    gathered[k] = tuple(gather_ids)
                entry = (*entry, *gathered.pop(position, ()))
            phase = "bwd" if backward else "fwd"
            if instructions is not None and not (backward and split):
                instrs = instructions(block, phase)
            else:
                instrs = block.bwd if backward else block.fwd
            if backward and split and instructions is not None:  # B as the caller emits it
                instrs = instructions(block, BWD_B)
                last = _block(em, instrs, prefix, entry, ctrl, (block.kind, BWD_B))
            elif backward and split:
                ids = _emit_indexed(
                    em, instrs, split_backward(block).input_grad_index, prefix, entry, ctrl, {},
                    (block.kind, "bwd"),
                )  # fmt: skip
                b_ids[(chunk.index, mb, position)] = ids
                last = max(ids.values(), default=entry[0] if entry else -1)
            else:
                last = _block(em, instrs, prefix, entry, ctrl, (block.kind, phase))
            if instrs:
                ctrl = ()
            entry = (last,)
            if backward and zero >= 2 and not split and not zero_held:
                scattered: tuple[int, ...] = ()
                reduced: tuple[int, ...] = ()  # the unit's reduce-scatters
                unit = _unit(workload, blocks, position, False, True, zero_root)
                if zero_prefetch is not None:  # a unit's scatters, then its replica all-reduces
                    unit.sort(key=lambda member: member[2].axes == (DP_REPLICATE,))
                for at, i, instr in unit:
                    source = (blocks[at].kind, ZERO_SCATTER, i)
                    deps = entry
                    replica = instr.axes == (DP_REPLICATE,)
                    if zero_prefetch is not None and replica:
                        deps = reduced  # FSDP's replica all-reduce waits for the unit's scatter
                    name = f"{tag}{mb}.c{chunk.index}.b{at}.{blocks[at].kind}.{instr.name}"
                    node_id = em.instr(instr, name, deps, (), source)
                    scattered = (*scattered, node_id)
                    reduced = reduced if replica else (*reduced, node_id)
                if zero_prefetch is not None:
                    sync_ids.extend(scattered)  # the optimizer needs the reduced shards
                    drained.extend(scattered)
            if backward and mb == last_mb_backward[chunk.index] and not split:
                _sync_nodes(em, stage, chunk.index, position, (last,), sync_ids)
        last_one = mb == last_mb_backward[chunk.index]
        if backward and zero_held and zero >= 3 and last_one and not split:  # split: after W
            held_from = len(sync_ids)
            last = _held_scatters(em, workload, blocks, f"{tag}{mb}.c{chunk.index}", last, sync_ids)
            drained.extend(sync_ids[held_from:])  # FSDP2's final callback: the replicas' too
        if pass_end is not None and not (backward and split):  # a split one's after its W
            end = _pass_end(em, pass_end, chunk.index, backward, f"{tag}{mb}.c{chunk.index}",
                            last, ctrl or entry)  # fmt: skip
            last = -1 if end is None else end
        send_to = j - 1 if backward else j + 1
        if 0 <= send_to <= last_stage:
            node = TraceNode(
                0,
                f"{tag}{mb}.c{chunk.index}.send",
                NodeKind.SEND,
                ((last,) if last >= 0 else ()) + tuple(drained),
                comm_bytes=stage.boundary_bytes,
                tag=message_tag(j, mb, m, backward),
            )
            last = em.add(node, peer_shift=(-1 if backward else 1) * toward)
        previous = last if last >= 0 else previous
        waits = tuple(drained)
    after_step = ((previous,) if previous is not None else ()) + waits
    _sync_nodes(em, stage, None, AFTER_BACKWARD, after_step, sync_ids)
    if stage.optimizer is None:  # a serving step: forward only, no update
        return em.nodes
    step_deps = tuple(sync_ids) + ((previous,) if previous is not None else ())
    optimizer = em.instr(stage.optimizer, "step.optimizer", step_deps, (), ("", OPTIMIZER, 0))
    for index, op in enumerate(stage.sync):
        if op.after == -1 and op.chunk not in ahead:
            node = TraceNode(
                0,
                f"step.c{op.chunk}.{op.name}",
                NodeKind.COLL,
                (optimizer,),
                collective=op.collective,
                comm_bytes=op.comm_bytes,
            )
            em.add(node, op.axes, source=("", SYNC, index))
    return em.nodes


def pipeline_ends(rank: int, names: tuple[str, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The ranks at the first and the last pipeline stage with ``rank``'s other coordinates."""
    coords = []
    remaining = rank
    for size in reversed(sizes):
        coords.append(remaining % size)
        remaining //= size
    coords.reverse()
    stage = names.index("pp")
    stride = 1
    for size in sizes[stage + 1 :]:
        stride *= size
    base = rank - coords[stage] * stride
    return (base, base + (sizes[stage] - 1) * stride)


def peer_of(mesh: Mesh, rank: int, shift: int, axis: str = "pp") -> int:
    """The rank ``shift`` steps along ``axis`` from ``rank`` (wrapping)."""
    coords = mesh.coordinates(rank)
    size = mesh.size(axis)
    assert isinstance(size, int)
    coords[axis] = (coords[axis] + shift) % size
    return mesh.rank_of(coords)


def materialize(template: list[ProgramNode], rank: int, mesh: Mesh) -> Iterator[TraceNode]:
    """The concrete nodes of ``rank``: groups and peers bound (slow path; for tests and JSON).
    A group of every rank is ``None``, as Chakra writes it (no ``pg_name``)."""
    groups: dict[tuple[str, ...], tuple[int, ...] | None] = {}
    world = 1
    for name in mesh.names:
        world *= int(mesh.size(name))
    peers: dict[tuple[str, int], int] = {}
    for item in template:
        node = item.node
        if node.kind == NodeKind.COLL:
            if item.group_axes not in groups:
                if item.group_axes == (PIPELINE_ENDS,):
                    sizes = tuple(int(mesh.size(n)) for n in mesh.names)
                    group = pipeline_ends(rank, mesh.names, sizes)
                elif item.group_axes == (PIPELINE_MIRROR,):
                    mirror = mesh.coordinates(rank)
                    mirror["pp"] = int(mesh.size("pp")) - 1 - mirror["pp"]
                    group = tuple(sorted((rank, mesh.rank_of(mirror))))
                else:
                    group = mesh.group(rank, item.group_axes)
                groups[item.group_axes] = None if len(group) == world else group  # all ranks
            yield replace(node, group=groups[item.group_axes])
        elif node.kind in (NodeKind.SEND, NodeKind.RECV):
            key = (item.peer_axis, item.peer_shift)
            if key not in peers:
                peers[key] = peer_of(mesh, rank, item.peer_shift, item.peer_axis)
            yield replace(node, peer=peers[key])
        else:
            yield node
