"""Reference (slow) Chakra encoding and decoding through the protobuf message classes.

Holds :func:`node_message` (a ``TraceNode`` as a ``ChakraProtoMsg.Node`` message, written
straight from the mapping rules without the fast encoder's machinery),
:func:`encode_file_reference` (a whole rank file via ``SerializeToString``) and
:func:`parse_stream` (a length-delimited stream parsed into messages). The fast encoder is tested
byte for byte against these; they also serve as a fallback for tools that want message objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stage_core.chakra.encode import CHAKRA_VERSION
from stage_core.chakra.mapping import UnitScale, emitted_num_ops
from stage_core.chakra.schema import GlobalMetadata, Node, NodeType
from stage_core.chakra.wire import decode_varint, encode_varint
from stage_core.errors import ConfigError
from stage_core.trace import CHAKRA_COMM_TYPE, NodeKind, TraceNode

_NODE_TYPES = {
    NodeKind.COMP: NodeType.COMP_NODE,
    NodeKind.SEND: NodeType.COMM_SEND_NODE,
    NodeKind.RECV: NodeType.COMM_RECV_NODE,
    NodeKind.COLL: NodeType.COMM_COLL_NODE,
}


def _add_int(message: Any, name: str, value: int) -> None:
    attribute = message.attr.add()
    attribute.name = name
    attribute.int64_val = value


def _add_io(message: Any, name: str, pairs: tuple[tuple[str, int], ...], scale: UnitScale) -> None:
    if not pairs:
        return
    attribute = message.attr.add()
    attribute.name = name
    for tensor, size in pairs:
        attribute.string_list.values.append(tensor)
        attribute.string_list.values.append(str(scale.size(size, tensor)))


def node_message(
    node: TraceNode,
    rank: int,
    pg_name: str | None = None,
    involved_dim: tuple[bool, ...] | None = None,
    scale: UnitScale | None = None,
) -> Any:
    """``node`` of ``rank`` as a ``Node`` message (same mapping as the fast encoder)."""
    scale = UnitScale() if scale is None else scale
    message = Node()
    message.id = node.id
    message.name = node.name
    message.type = int(_NODE_TYPES[node.kind])
    message.ctrl_deps.extend(node.ctrl_deps)
    message.data_deps.extend(node.data_deps)
    cpu = message.attr.add()
    cpu.name = "is_cpu_op"
    cpu.bool_val = False
    if node.kind is NodeKind.COMP:
        tensor_size = scale.size(node.tensor_bytes, "tensor_bytes")
        _add_int(message, "num_ops", emitted_num_ops(scale.ops(node.flops), tensor_size))
        _add_int(message, "tensor_size", tensor_size)
    elif node.kind is NodeKind.COLL:
        if node.collective is None:
            raise ConfigError(f"node {node.id} is a collective without `collective`")
        _add_int(message, "comm_type", CHAKRA_COMM_TYPE[node.collective])
        _add_int(message, "comm_size", scale.size(node.comm_bytes, "comm_bytes"))
        if pg_name is not None:
            attribute = message.attr.add()
            attribute.name = "pg_name"
            attribute.string_val = pg_name
        if involved_dim is not None:
            attribute = message.attr.add()
            attribute.name = "involved_dim"
            attribute.bool_list.SetInParent()
            attribute.bool_list.values.extend(involved_dim)
    else:
        source, destination = (rank, node.peer) if node.kind is NodeKind.SEND else (node.peer, rank)
        _add_int(message, "comm_src", source)
        _add_int(message, "comm_dst", destination)
        _add_int(message, "comm_size", scale.size(node.comm_bytes, "comm_bytes"))
        _add_int(message, "comm_tag", node.tag)
    _add_io(message, "inputs", node.inputs, scale)
    _add_io(message, "outputs", node.outputs, scale)
    return message


def _delimited(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return encode_varint(len(data)) + data


def encode_file_reference(
    program: Sequence[TraceNode],
    rank: int,
    pg_names: Sequence[str | None],
    involved_dims: Sequence[tuple[bool, ...] | None] | None = None,
    scale: UnitScale | None = None,
) -> bytes:
    """A whole rank file through the message classes; ``pg_names`` align with ``program``."""
    dims = [None] * len(program) if involved_dims is None else list(involved_dims)
    parts = [_delimited(GlobalMetadata(version=CHAKRA_VERSION))]
    for node, pg_name, node_dims in zip(program, pg_names, dims, strict=True):
        parts.append(_delimited(node_message(node, rank, pg_name, node_dims, scale)))
    return b"".join(parts)


def parse_stream(data: bytes) -> tuple[Any, list[Any]]:
    """Parse a rank file into its ``GlobalMetadata`` and its ``Node`` messages."""
    messages: list[bytes] = []
    position = 0
    while position < len(data):
        length, position = decode_varint(data, position)
        messages.append(data[position : position + length])
        position += length
    if not messages:
        raise ConfigError("empty trace stream: no GlobalMetadata")
    metadata = GlobalMetadata()
    metadata.ParseFromString(messages[0])
    nodes = []
    for chunk in messages[1:]:
        node = Node()
        node.ParseFromString(chunk)
        nodes.append(node)
    return metadata, nodes
