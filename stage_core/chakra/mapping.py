"""The TraceNode → Chakra attribute mapping, shared by the binary and JSON writers.

Holds:

- :class:`UnitScale` and :func:`unit_scale`: the ``units`` option ("bytes": bytes and FLOPs;
  "stage": element counts and multiply-accumulates, for comparison with the published
  generator — sizes divided by bytes per element, FLOPs halved, rounding odd counts down);
- :func:`emitted_num_ops` and :func:`as_written`: the one adjustment of a node on its way
  out (a compute node without FLOPs is written with ``num_ops`` 1);
- :func:`attribute_plan`: the ordered Chakra attributes of a node, with the per-rank values
  (own rank, peer, communicator group) left as markers, plus validation of the node.

Mapping. Every node gets ``is_cpu_op`` = false first. COMP_NODE: ``num_ops`` (FLOPs),
``tensor_size`` (bytes); see :func:`emitted_num_ops` for the one adjustment. COMM_COLL_NODE:
``comm_type``, ``comm_size``, then ``pg_name`` (absent for all ranks) and ``involved_dim`` (only
when given) at the GROUP marker. COMM_SEND_NODE: ``comm_src`` (own rank), ``comm_dst`` (peer),
``comm_size``, ``comm_tag``. COMM_RECV_NODE: ``comm_src`` (peer), ``comm_dst`` (own rank),
``comm_size``, ``comm_tag``. Then ``inputs``/``outputs`` when the node has them, as ``string_list``
attributes of alternating tensor name and size: the form ASTRA-sim's memory tracker reads (the
``Node.inputs`` and ``Node.outputs`` IOInfo fields stay empty). Integers are written as
``int64_val``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from stage_core.chakra.wire import INT64_MAX, UINT64_LIMIT
from stage_core.errors import ConfigError
from stage_core.trace import CHAKRA_COMM_TYPE, NodeKind, TraceNode

Units = Literal["bytes", "stage"]

# Markers of the per-rank values in an attribute plan.
OWN_RANK: Literal["own_rank"] = "own_rank"
PEER: Literal["peer"] = "peer"
GROUP: Literal["group"] = "group"


@dataclass(frozen=True, slots=True)
class UnitScale:
    """Divisors applied to sizes (``bytes_per_element``) and to FLOPs (``flops_per_op``)."""

    units: Units = "bytes"
    bytes_per_element: int = 1
    flops_per_op: int = 1

    def size(self, size_bytes: int, what: str) -> int:
        """A byte size in output units; a size that is not whole elements is an error."""
        count, remainder = divmod(size_bytes, self.bytes_per_element)
        if remainder:
            raise ConfigError(
                f"{what} of {size_bytes} bytes is not a whole number of "
                f"{self.bytes_per_element}-byte elements"
            )
        return count

    def ops(self, flops: int) -> int:
        """FLOPs in output units (multiply-accumulates round down for odd FLOP counts)."""
        return flops // self.flops_per_op


def emitted_num_ops(ops: int, tensor_size: int) -> int:
    """The ``num_ops`` written for a compute node of ``ops`` FLOPs (in output units) that moves
    ``tensor_size`` bytes: ``ops``, except that a node that moves memory but does no arithmetic
    (an embedding lookup, a copy, a mask) gets 1.

    Why: with ``roofline-enabled`` ASTRA-sim times a node as ``num_ops / min(peak,
    local_mem_bw · num_ops/tensor_size)``, which is 0/0 when ``num_ops`` is 0; the event queue
    then aborts (``event_time_ns >= current_time``). With 1 the roofline's memory roof gives
    ``tensor_size / local_mem_bw``, the time of moving the node's bytes, which is the honest cost
    of a memory-bound op; the extra FLOP (1/peak, femtoseconds) is below ASTRA-sim's 1 ns tick.
    A node with ``tensor_size`` 0 is skipped by ASTRA-sim whatever its ``num_ops``, so it is
    written as it is.
    """
    return 1 if ops == 0 and tensor_size > 0 else ops


def as_written(node: TraceNode) -> TraceNode:
    """``node`` as a Chakra file in bytes units holds it (and the reader returns it): a compute
    node's FLOPs are :func:`emitted_num_ops`; everything else is unchanged."""
    if node.kind is not NodeKind.COMP:
        return node
    num_ops = emitted_num_ops(node.flops, node.tensor_bytes)
    return node if num_ops == node.flops else replace(node, flops=num_ops)


def unit_scale(units: str = "bytes", bytes_per_element: int | None = None) -> UnitScale:
    """Validate the ``units`` option: "bytes" (default) or "stage" with ``bytes_per_element``."""
    if units == "bytes":
        if bytes_per_element is not None:
            raise ConfigError(
                f"`bytes_per_element` only applies to units='stage', but got {bytes_per_element=}"
            )
        return UnitScale()
    if units == "stage":
        if (
            isinstance(bytes_per_element, bool)
            or not isinstance(bytes_per_element, int)
            or (bytes_per_element < 1)
        ):
            raise ConfigError(
                "units='stage' needs an integer `bytes_per_element` >= 1, "
                f"but got {bytes_per_element!r}"
            )
        return UnitScale("stage", bytes_per_element, 2)
    raise ConfigError(f"`units` must be 'bytes' or 'stage', but got {units!r}")


#: One attribute of a plan: (name, kind, value). Kinds: "bool", "int64", "string_list", or a
#: marker — OWN_RANK / PEER (value: the attribute name's integer, resolved per rank) and GROUP
#: (pg_name and involved_dim, resolved per rank).
PlannedAttribute = tuple[str, str, object]


def describe(node: TraceNode) -> str:
    return f"node {node.id} {node.name!r}"


def _check_uint64(value: int, what: str) -> None:
    if value < 0 or value >= UINT64_LIMIT:
        raise ConfigError(f"{what} must be in [0, 2**64), but got {value}")


def _check_size(value: int, what: str) -> None:
    if value < 0 or value > INT64_MAX:
        raise ConfigError(f"{what} must be in [0, 2**63), but got {value}")


def _io_list(pairs: tuple[tuple[str, int], ...], scale: UnitScale, what: str) -> list[str]:
    values: list[str] = []
    for tensor_name, size_bytes in pairs:
        _check_size(size_bytes, f"{what} tensor {tensor_name!r}")
        values.append(tensor_name)
        values.append(str(scale.size(size_bytes, f"{what} tensor {tensor_name!r}")))
    return values


def attribute_plan(node: TraceNode, scale: UnitScale = UnitScale()) -> tuple[PlannedAttribute, ...]:
    """The Chakra attributes of ``node`` in emission order, with per-rank values as markers.

    Validates the node (kind, ids, sizes, peers, tags) and raises :class:`ConfigError` naming it.
    """
    what = describe(node)
    _check_uint64(node.id, f"{what}: id")
    for dep in node.data_deps + node.ctrl_deps:
        _check_uint64(dep, f"{what}: dependency")
    plan: list[PlannedAttribute] = [("is_cpu_op", "bool", False)]
    kind = node.kind
    if kind is NodeKind.COMP:
        _check_size(node.flops, f"{what}: flops")
        _check_size(node.tensor_bytes, f"{what}: tensor_bytes")
        tensor_size = scale.size(node.tensor_bytes, f"{what}: tensor_bytes")
        plan.append(("num_ops", "int64", emitted_num_ops(scale.ops(node.flops), tensor_size)))
        plan.append(("tensor_size", "int64", tensor_size))
    elif kind is NodeKind.COLL:
        if node.collective is None:
            raise ConfigError(f"{what} is a collective but has no `collective` kind")
        _check_size(node.comm_bytes, f"{what}: comm_bytes")
        plan.append(("comm_type", "int64", CHAKRA_COMM_TYPE[node.collective]))
        plan.append(("comm_size", "int64", scale.size(node.comm_bytes, f"{what}: comm_bytes")))
        plan.append(("pg_name", GROUP, node.group))
    elif kind is NodeKind.SEND or kind is NodeKind.RECV:
        _check_size(node.comm_bytes, f"{what}: comm_bytes")
        if node.peer < 0 or node.peer > INT64_MAX:
            raise ConfigError(f"{what} is a send/recv and needs a peer rank >= 0, got {node.peer}")
        if node.tag < 0 or node.tag > INT64_MAX:
            raise ConfigError(f"{what} is a send/recv and needs a tag >= 0, got {node.tag}")
        if kind is NodeKind.SEND:
            plan.append(("comm_src", OWN_RANK, None))
            plan.append(("comm_dst", PEER, node.peer))
        else:
            plan.append(("comm_src", PEER, node.peer))
            plan.append(("comm_dst", OWN_RANK, None))
        plan.append(("comm_size", "int64", scale.size(node.comm_bytes, f"{what}: comm_bytes")))
        plan.append(("comm_tag", "int64", node.tag))
    else:
        raise ConfigError(f"{what} has kind {kind!r}, which STAGE does not emit")
    if node.inputs:
        plan.append(("inputs", "string_list", _io_list(node.inputs, scale, f"{what}: input")))
    if node.outputs:
        plan.append(("outputs", "string_list", _io_list(node.outputs, scale, f"{what}: output")))
    return tuple(plan)
