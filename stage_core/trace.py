"""The flat per-rank trace: the common currency between lowering, trace files and simulators.

A :class:`TraceNode` is one node of one rank's execution graph, with exact integer FLOPs and
bytes. Lowering produces, for every distinct rank program, a list of nodes; the Chakra writer
encodes them, the reader decodes them back, ``stage check`` verifies them, and the analytical
backend simulates them.

Conventions (see ``docs/reference/chakra_et.md``):

- ``comm_bytes`` of a collective follows ASTRA-sim: ALL_REDUCE the whole buffer; REDUCE_SCATTER
  the whole input; ALL_GATHER the per-rank input shard; ALL_TO_ALL the whole send buffer.
- ``group`` is the sorted tuple of global rank ids taking part in a collective; ``None`` means
  all ranks.
- Node ids are unique within a rank; ``data_deps`` and ``ctrl_deps`` refer to ids of the same
  rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class NodeKind(IntEnum):
    """Chakra ``NodeType`` values that STAGE emits (never METADATA_NODE)."""

    COMP = 4
    SEND = 5
    RECV = 6
    COLL = 7


class CollectiveKind(StrEnum):
    """Closed vocabulary of collectives; values are the names used in JSON output."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"


#: Chakra ``CollectiveCommType`` numbers.
CHAKRA_COMM_TYPE: dict[CollectiveKind, int] = {
    CollectiveKind.ALL_REDUCE: 0,
    CollectiveKind.ALL_GATHER: 2,
    CollectiveKind.ALL_TO_ALL: 6,
    CollectiveKind.REDUCE_SCATTER: 7,
}


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One node of a rank's trace.

    Only the fields that belong to ``kind`` are meaningful: ``flops``/``tensor_bytes`` for
    COMP; ``collective``/``comm_bytes``/``group`` for COLL; ``peer``/``comm_bytes``/``tag`` for
    SEND (peer = destination) and RECV (peer = source). ``duration_micros`` (COMP only; 0:
    none) is Chakra's ``duration_micros``, the node's time in whole microseconds, which
    ASTRA-sim replays instead of its roofline when ``roofline-enabled`` is 0.
    """

    id: int
    name: str
    kind: NodeKind
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    flops: int = 0
    tensor_bytes: int = 0
    collective: CollectiveKind | None = None
    comm_bytes: int = 0
    group: tuple[int, ...] | None = None
    peer: int = -1
    tag: int = -1
    inputs: tuple[tuple[str, int], ...] = field(default=())
    outputs: tuple[tuple[str, int], ...] = field(default=())
    duration_micros: int = 0
