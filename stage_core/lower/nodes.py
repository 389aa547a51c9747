"""Stage programs as trace nodes: one template per pipeline stage, materialised per rank.

:func:`stage_nodes` turns a :class:`~stage_core.lower.program.StageProgram` into an ordered list
of :class:`~stage_core.lower.program_node.ProgramNode` s: trace nodes whose communicator group
is still a tuple of mesh axes and whose point-to-point peer is a shift along ``pp``. Node ids
follow the schedule (ASTRA-sim issues ready nodes in id order); data dependencies follow the
tensors (so communication overlaps independent compute); a control dependency chains each task
to the previous one, encoding the pipeline schedule. :func:`materialize` binds a template to
one rank.

Holds the schedule-order walk (:func:`stage_nodes` with its :class:`NodeOptions`; a split
backward's W task, ``_weight_nodes``) and :func:`materialize`. The walk alone decides the node
order: the pieces it appends come from :mod:`stage_core.lower.node_emit` (the emitter, a block's
nodes, synchronisation, parameter-gather and pass-end nodes) and
:mod:`stage_core.lower.zero_nodes` (ZeRO's collectives), each appended where the walk calls it;
the node vocabulary (sources' phases, message tags) is :mod:`stage_core.lower.program_node`.

Each node says where it comes from (``ProgramNode.source``: a block kind, a phase and an
index), so a cost model can time it as the analytical backend times that instruction
(:mod:`stage_explore.analytical.trace_mode`); ``instructions`` lets the caller emit a block's
instructions as a framework runs them (fused, overlaps applied) instead of as bound — under a
split backward its B and W parts (phases ``bwd_b`` and ``bwd_w``) on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from stage_core.errors import ConfigError
from stage_core.lower.elide import elide_empty
from stage_core.lower.node_emit import (
    Emitter,
    emit_block,
    emit_indexed,
    emit_param_gather,
    emit_pass_end,
    emit_sync,
)
from stage_core.lower.param_buckets import param_buckets
from stage_core.lower.program import (
    AFTER_BACKWARD,
    PIPELINE_ENDS,
    PIPELINE_MIRROR,
    ProgramSet,
    StageProgram,
)
from stage_core.lower.program_node import (
    BWD_B,
    BWD_W,
    OPTIMIZER,
    SYNC,
    ZERO_GATHER,
    ZERO_SCATTER,
    Instructions,
    PassEnd,
    ProgramNode,
    message_tag,
)
from stage_core.lower.schedule import SPLIT_BACKWARD, Task, overlapped
from stage_core.lower.weightgrad import split_backward
from stage_core.lower.zero_nodes import emit_held_scatters, zero_collectives, zero_unit
from stage_core.mesh import Mesh
from stage_core.plans import DP_REPLICATE
from stage_core.trace import NodeKind, TraceNode


def _weight_nodes(
    em: Emitter,
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
    unsynced: bool = False,
) -> tuple[int | None, tuple[int, ...]]:
    """A W task: every block's weight-gradient instructions (backward block order), waiting for
    their inputs from the same micro-batch's B; then ZeRO-2/3 gradient scatters and, after the
    chunk's last W, the gradient synchronisation. ``held`` (``zero_held``): no per-block
    scatters; after the chunk's last W its held reduce-scatters
    (:func:`~.zero_nodes.emit_held_scatters`: the pipelining stage's ``perform_reduce_grad`` /
    last-backward ``post_backward`` after every B and W of the chunk); ``unsynced``
    (``zero_no_sync`` before the chunk's last micro-batch): no per-block scatters. Returns
    the task's last node and what the rank's next task waits for besides it (the held
    scatters' replica all-reduces too). ``instructions``: the W part as the caller emits it (phase
    :data:`BWD_W`, its dependencies within W; those on B are dropped, as
    :func:`~stage_core.lower.weightgrad.split_backward` drops them: B ran before, so an
    instruction without one waits for the task's entry). ``pass_end``'s backward instruction
    follows the task's last node (:func:`~.node_emit.emit_pass_end`)."""
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
            end = emit_block(em, instrs, prefix, entry, ctrl, (block.kind, BWD_W))
            ids = {len(instrs) - 1: end} if instrs else {}
        else:
            ids = emit_indexed(
                em, block.bwd, split_backward(block).weight_grad_index, prefix, entry, ctrl,
                known, (block.kind, "bwd"),
            )  # fmt: skip
        if ids:
            ctrl = ()
            last = max(ids.values())
            entry = (last,)
        if workload.parallel.zero >= 2 and last is not None and not held and not unsynced:
            scattered: tuple[int, ...] = ()  # the block's reduce-scatters
            for i, instr in enumerate(zero_collectives(workload, block, gather=False)):
                # hybrid sharding's replica all-reduce reduces the scattered shard: it waits
                # for the block's scatter, as the unsplit backward's (torch FSDP1
                # _runtime_utils._reduce_grad, FSDP2 foreach_reduce: reduce-scatter, then the
                # all-reduce of its output over the replicate group)
                replica = instr.axes == (DP_REPLICATE,)
                deps = scattered if replica and scattered else (last,)
                node_id = em.instr(
                    instr, f"{prefix}.{instr.name}", deps, (), (block.kind, ZERO_SCATTER, i)
                )
                sync_ids.append(node_id)  # the optimizer needs the reduced shards
                if not replica:
                    scattered = (*scattered, node_id)
        if mb == last_mb[chunk.index] and last is not None:
            emit_sync(em, stage, chunk.index, position, (last,), sync_ids)
    drained: tuple[int, ...] = ()
    if held and mb == last_mb[chunk.index] and last is not None:
        held_from = len(sync_ids)
        blocks = list(reversed(chunk.blocks))
        last = emit_held_scatters(em, workload, blocks, f"W{mb}.c{chunk.index}", last, sync_ids)
        drained = tuple(sync_ids[held_from:])
    if pass_end is not None:
        last = emit_pass_end(em, pass_end, chunk.index, True, f"W{mb}.c{chunk.index}", last, entry)
    return last, drained


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
    (:func:`~stage_core.lower.param_buckets.param_buckets`, phase
    :data:`~.program_node.PARAM_GATHER`): the first block of a bucket waits for its gather,
    which the first block of the bucket before dispatched once its own had ended
    (Megatron-Core's ``overlap_param_gather``: the forward pre-hook's ``finish_param_sync``
    waits for its bucket's all-gather, then starts the next one); the first bucket's is
    dispatched by the first block's pre-hook.

    ``pass_end``: an instruction a framework runs at the end of each forward and backward of
    a chunk (under a split backward after its W), before the pass's pipeline send and the
    rank's next task, beside none of the chunk's gradient reductions (source ``("",``
    :data:`~.program_node.PASS_END_FWD` or :data:`~.program_node.PASS_END_BWD` ``, chunk index)``).

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
    in a backward (:func:`~.zero_nodes.zero_unit`).

    ``zero_regather`` (ZeRO-3 with ``zero_prefetch``): the block kinds whose backward gathers
    their parameters twice, queued together where the block's backward gather is issued and
    both waited for by its backward (DeepSpeed ZeRO-3 with activation checkpointing: the
    recomputed forward's pre-forward fetch, its post-forward release, then the backward's
    pre-backward fetch).

    ``zero_no_sync`` (ZeRO-2 and -3): FSDP's gradient sync off on every micro-batch but a chunk's
    last (FSDP2 ``set_requires_gradient_sync(False)``, FSDP1 ``no_sync()``): the gathers as
    without it, the blocks' reduce-scatters (and replica all-reduces) only in the backward of
    the chunk's last micro-batch, under a split backward after its W (``post_backward``
    returns before the reduce-scatter while ``reduce_grads`` / ``_sync_gradients`` is off)."""

    zero_prefetch: int | None = None
    gathers_ahead: Callable[[int], bool] | None = None
    pass_end: PassEnd | None = None
    zero_held: bool = False
    zero_root: frozenset[str] = frozenset()
    zero_regather: frozenset[str] = frozenset()
    zero_no_sync: bool = False


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
    zero_no_sync = options.zero_no_sync
    workload = programs.workload
    p, vpp, m = workload.parallel.pp, workload.parallel.vpp, workload.micro_batches
    last_stage = p * vpp - 1
    zero = workload.parallel.zero
    em = Emitter()
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
                zero_no_sync and zero >= 2 and mb != last_mb_backward[chunk.index],
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
                    pending = (
                        emit_param_gather(em, stage, buckets[position], prefix, entry, ctrl),
                    )
                ready, later = pending, [p for p in buckets if p > position]
                if later:  # the next bucket's, once this one's has ended
                    after = (*ready, *entry)
                    pending = (
                        emit_param_gather(em, stage, buckets[min(later)], prefix, after, ctrl),
                    )
                entry = (*entry, *ready)
            if not gathers:
                pass
            elif zero_prefetch is None:
                # Parameter gathers are prefetched: each waits only for the previous gather.
                for i, instr in enumerate(zero_collectives(workload, block, gather=True)):
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
                    unit = zero_unit(workload, blocks, k, True, backward, zero_root, zero_regather)
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
                last = emit_block(em, instrs, prefix, entry, ctrl, (block.kind, BWD_B))
            elif backward and split:
                ids = emit_indexed(
                    em, instrs, split_backward(block).input_grad_index, prefix, entry, ctrl, {},
                    (block.kind, "bwd"),
                )  # fmt: skip
                b_ids[(chunk.index, mb, position)] = ids
                last = max(ids.values(), default=entry[0] if entry else -1)
            else:
                last = emit_block(em, instrs, prefix, entry, ctrl, (block.kind, phase))
            if instrs:
                ctrl = ()
            entry = (last,)
            unsynced = zero_no_sync and zero >= 2 and mb != last_mb_backward[chunk.index]
            if backward and zero >= 2 and not split and not zero_held and not unsynced:
                scattered: tuple[int, ...] = ()
                reduced: tuple[int, ...] = ()  # the unit's reduce-scatters
                unit = zero_unit(workload, blocks, position, False, True, zero_root)
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
                emit_sync(em, stage, chunk.index, position, (last,), sync_ids)
        last_one = mb == last_mb_backward[chunk.index]
        if backward and zero_held and zero >= 3 and last_one and not split:  # split: after W
            held_from = len(sync_ids)
            last = emit_held_scatters(
                em, workload, blocks, f"{tag}{mb}.c{chunk.index}", last, sync_ids
            )
            drained.extend(sync_ids[held_from:])  # FSDP2's final callback: the replicas' too
        if pass_end is not None and not (backward and split):  # a split one's after its W
            end = emit_pass_end(em, pass_end, chunk.index, backward, f"{tag}{mb}.c{chunk.index}",
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
    emit_sync(em, stage, None, AFTER_BACKWARD, after_step, sync_ids)
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
