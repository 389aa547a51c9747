"""The trace node of a stage template and the vocabulary its emitters share.

Holds :class:`ProgramNode` (a trace node whose communicator group is still a tuple of mesh axes
and whose point-to-point peer is a shift along an axis), :data:`NodeSource` (where a node comes
from: block kind, phase, index) and the phases besides a block's ``fwd`` and ``bwd``
(:data:`ZERO_GATHER`, :data:`ZERO_SCATTER`, :data:`SYNC`, :data:`OPTIMIZER`,
:data:`PARAM_GATHER`, :data:`BWD_B`, :data:`BWD_W`, :data:`PASS_END_FWD`, :data:`PASS_END_BWD`),
the callers' hooks' types (:data:`Instructions`, :data:`PassEnd`) and the message tags
(:func:`message_tag`, :data:`RING_TAG_BASE`). The schedule walk that emits the nodes is
:func:`stage_core.lower.nodes.stage_nodes`; the cost models read these phases to time a node as
the instruction it comes from (:mod:`stage_explore.analytical.trace_mode`).

Tags of point-to-point messages are ``1 + ((sender_stage·m + micro_batch)·2 + direction)``,
unique per step and computed identically by sender and receiver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.trace import TraceNode

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
    index into :func:`~.zero_nodes.zero_collectives`), of a synchronisation op (``("", SYNC,
    index into StageProgram.sync)``) or the optimizer (``("", OPTIMIZER, 0)``); empty for pipeline
    transfers and ring-attention messages."""

    node: TraceNode
    group_axes: tuple[str, ...] = ()
    peer_shift: int = 0
    peer_axis: str = "pp"
    source: NodeSource | None = None


#: Phases of :attr:`ProgramNode.source` besides a block's ``fwd`` and ``bwd``.
ZERO_GATHER, ZERO_SCATTER, SYNC, OPTIMIZER = "zero_gather", "zero_scatter", "sync", "optimizer"

#: The phase of a parameter all-gather run ahead of its chunk's first forward, bucket by
#: bucket (``gathers_ahead``: :func:`~.nodes.stage_nodes`); its index is the step-end gather's in
#: ``StageProgram.sync``, its bytes the bucket's share of that gather.
PARAM_GATHER = "param_gather"

#: The phases of a split backward's B and W parts when the caller emits a block's instructions
#: (``instructions``: :func:`~.nodes.stage_nodes`), its index into that part's instructions.
BWD_B, BWD_W = "bwd_b", "bwd_w"

#: How a block's instructions are emitted for a phase (``fwd`` or ``bwd``): by default as
#: bound (``block.fwd`` / ``block.bwd``).
Instructions = Callable[[BoundBlock, str], tuple[Instr, ...]]

#: The phases of an instruction a framework runs at the end of a chunk's forward or backward
#: pass, before its pipeline send (``pass_end``: :func:`~.nodes.stage_nodes`; e.g. Transformer
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
