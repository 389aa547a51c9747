"""The fast Chakra encoder against the protobuf message classes, byte for byte."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage_core.chakra.encode import ChakraEncoder, encode_program
from stage_core.chakra.mapping import UnitScale, unit_scale
from stage_core.chakra.reference import encode_file_reference, node_message, parse_stream
from stage_core.chakra.schema import AttributeProto
from stage_core.chakra.wire import decode_varint, encode_int64, encode_varint
from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

UINT64 = st.integers(0, 2**64 - 1)
SIZE = st.integers(0, 2**63 - 1)
NAMES = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
PG_NAMES = st.none() | st.integers(1, 10**6).map(str)
DIMS = st.none() | st.lists(st.booleans(), max_size=4).map(tuple)
TENSORS = st.lists(st.tuples(NAMES, SIZE), max_size=3).map(tuple)


@st.composite
def trace_nodes(draw: st.DrawFn, ids: st.SearchStrategy[int] = UINT64) -> TraceNode:
    kind = draw(st.sampled_from(list(NodeKind)))
    deps = st.lists(UINT64, max_size=4).map(tuple)
    node = TraceNode(
        id=draw(ids), name=draw(NAMES), kind=kind, data_deps=draw(deps), ctrl_deps=draw(deps),
        inputs=draw(TENSORS), outputs=draw(TENSORS),
    )
    if kind is NodeKind.COMP:
        return replace(node, flops=draw(SIZE), tensor_bytes=draw(SIZE))
    if kind is NodeKind.COLL:
        groups = st.sets(st.integers(0, 63), min_size=1).map(lambda ranks: tuple(sorted(ranks)))
        group = draw(st.none() | groups)
        return replace(
            node, collective=draw(st.sampled_from(list(CollectiveKind))),
            comm_bytes=draw(SIZE), group=group,
        )
    return replace(node, comm_bytes=draw(SIZE), peer=draw(st.integers(0, 2**40)), tag=draw(SIZE))


def _delimited(message: object) -> bytes:
    data: bytes = message.SerializeToString()  # type: ignore[attr-defined]
    return encode_varint(len(data)) + data


@settings(max_examples=400, derandomize=True, deadline=None)
@given(trace_nodes(), st.integers(0, 2**40), PG_NAMES, DIMS)
def test_encode_node_matches_serialize_to_string(
    node: TraceNode, rank: int, pg_name: str | None, dims: tuple[bool, ...] | None
) -> None:
    encoder = ChakraEncoder()
    expected = _delimited(node_message(node, rank, pg_name, dims))
    assert encoder.encode_node(node, rank, pg_name, dims) == expected
    # The cached second encoding is the same bytes.
    assert encoder.encode_node(node, rank, pg_name, dims) == expected


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    st.lists(trace_nodes(ids=st.integers(0, 300)), min_size=1, max_size=12),
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.data(),
)
def test_template_emits_the_same_bytes_as_node_by_node(
    program: list[TraceNode], template_rank: int, member_rank: int, data: st.DataObject
) -> None:
    encoder = ChakraEncoder()
    template = encoder.compile(program, template_rank)
    pg_names = [data.draw(PG_NAMES) for _ in template.groups]
    dims = [data.draw(DIMS) for _ in template.groups]
    peers = [data.draw(st.integers(0, 10**6)) for _ in template.peers]
    group_names = dict(zip(template.groups, pg_names, strict=True))
    group_dims = dict(zip(template.groups, dims, strict=True))
    peer_map = dict(zip(template.peers, peers, strict=True))
    member_program = [
        replace(node, peer=peer_map[node.peer]) if node.kind in (NodeKind.SEND, NodeKind.RECV)
        else node
        for node in program
    ]
    node_names = [group_names.get(node.group) if node.kind is NodeKind.COLL else None
                  for node in program]
    node_dims = [group_dims.get(node.group) if node.kind is NodeKind.COLL else None
                 for node in program]
    expected = encode_file_reference(member_program, member_rank, node_names, node_dims)
    assert template.emit_file(member_rank, pg_names, peers, dims) == expected
    assert encode_program(ChakraEncoder(), member_program, member_rank, node_names, node_dims) == (
        expected
    )


def test_template_slots_are_in_order_of_first_use() -> None:
    program = [
        TraceNode(1, "a", NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE, group=(2, 3)),
        TraceNode(2, "b", NodeKind.SEND, peer=7, tag=0),
        TraceNode(3, "c", NodeKind.COLL, collective=CollectiveKind.ALL_GATHER, group=None),
        TraceNode(4, "d", NodeKind.RECV, peer=5, tag=0),
        TraceNode(5, "e", NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE, group=(2, 3)),
    ]
    template = ChakraEncoder().compile(program, 2)
    assert template.groups == ((2, 3), None)
    assert template.peers == (7, 5)
    with pytest.raises(ConfigError, match="needs 2 group ids and 2 peers"):
        template.emit_file(0, ["1"], [1, 2])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**35, 2**63 - 1, 2**64 - 1])
def test_varint_round_trips(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [-1, -(2**63), 5, 2**63 - 1])
def test_int64_encoding_matches_protobuf(value: int) -> None:
    message = AttributeProto(int64_val=value)
    assert message.SerializeToString() == b"\x48" + encode_int64(value)


@pytest.mark.parametrize("value", [-(2**63) - 1, 2**63])
def test_int64_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(ConfigError, match="int64"):
        encode_int64(value)


def test_metadata_is_version_0_0_4() -> None:
    metadata, nodes = parse_stream(ChakraEncoder().metadata())
    assert metadata.version == "0.0.4" and nodes == []


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (TraceNode(1, "c", NodeKind.COLL, comm_bytes=4), "has no `collective`"),
        (TraceNode(1, "s", NodeKind.SEND, comm_bytes=4, tag=1), "needs a peer"),
        (TraceNode(1, "r", NodeKind.RECV, comm_bytes=4, peer=1), "needs a tag"),
        (TraceNode(-1, "x", NodeKind.COMP), "id must be in"),
        (TraceNode(1, "x", NodeKind.COMP, data_deps=(-2,)), "dependency must be in"),
        (TraceNode(1, "x", NodeKind.COMP, flops=-5), "flops must be in"),
        (TraceNode(1, "x", NodeKind.COMP, tensor_bytes=2**63), "tensor_bytes must be in"),
        (TraceNode(1, "x\ud800", NodeKind.COMP), "not encodable as UTF-8"),
    ],
)
def test_invalid_nodes_are_refused_with_their_name(node: TraceNode, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ChakraEncoder().encode_node(node, 0)


def test_stage_units_divide_sizes_and_halve_flops() -> None:
    node = TraceNode(1, "mm", NodeKind.COMP, flops=2 * 10**9 + 1, tensor_bytes=6000,
                     inputs=(("w", 4000),))
    scale = unit_scale("stage", bytes_per_element=2)
    message = node_message(node, 0, scale=scale)
    attributes = {attribute.name: attribute for attribute in message.attr}
    assert attributes["num_ops"].int64_val == 10**9
    assert attributes["tensor_size"].int64_val == 3000
    assert list(attributes["inputs"].string_list.values) == ["w", "2000"]
    assert ChakraEncoder(scale).encode_node(node, 0) == _delimited(message)
    with pytest.raises(ConfigError, match="not a whole number of 4-byte elements"):
        ChakraEncoder(UnitScale("stage", 4, 2)).encode_node(replace(node, tensor_bytes=6), 0)


@pytest.mark.parametrize(
    ("units", "bytes_per_element", "message"),
    [("stage", None, "needs an integer"), ("stage", 0, "needs an integer"),
     ("bytes", 2, "only applies"), ("elements", None, "must be 'bytes' or 'stage'")],
)
def test_unit_options_are_validated(
    units: str, bytes_per_element: int | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        unit_scale(units, bytes_per_element)
