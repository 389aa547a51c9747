"""The emitter of a stage template's nodes and the helpers that append one piece of it.

Holds :class:`Emitter` (its append order is the node-id order, the order ASTRA-sim issues ready
nodes by; ring attention's messages), :func:`emit_block` (a block phase's instructions),
:func:`emit_indexed` (one part of a split backward), :func:`emit_sync` (gradient
synchronisations after a block position), :func:`emit_param_gather` (a parameter bucket's
all-gather ahead of its forward) and :func:`emit_pass_end` (what a framework runs at a pass's
end). Each appends where it is called: the order of the nodes is decided by the schedule walk
that calls them (:func:`stage_core.lower.nodes.stage_nodes`) alone.
"""

from __future__ import annotations

from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.lower.program import StageProgram
from stage_core.lower.program_node import (
    PARAM_GATHER,
    PASS_END_BWD,
    PASS_END_FWD,
    RING_TAG_BASE,
    SYNC,
    NodeSource,
    PassEnd,
    ProgramNode,
)
from stage_core.trace import NodeKind, TraceNode


class Emitter:
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


def emit_block(
    em: Emitter,
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


def emit_indexed(
    em: Emitter,
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


def emit_sync(
    em: Emitter,
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


def emit_param_gather(
    em: Emitter,
    stage: StageProgram,
    bucket: tuple[int, int],
    prefix: str,
    deps: tuple[int, ...],
    ctrl: tuple[int, ...],
) -> int:
    """Emit one parameter bucket's all-gather ahead of its forward (phase
    :data:`~.program_node.PARAM_GATHER`)."""
    index, size = bucket
    op = stage.sync[index]
    node = TraceNode(
        0, f"{prefix}.param_all_gather", NodeKind.COLL, deps, ctrl,
        collective=op.collective, comm_bytes=size,
    )  # fmt: skip
    return em.add(node, op.axes, source=("", PARAM_GATHER, index))


def emit_pass_end(
    em: Emitter,
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
