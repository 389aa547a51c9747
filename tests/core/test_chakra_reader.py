"""Decoding Chakra files: the real ASTRA-sim inputs, other tools' encodings, malformed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.examples import sample_run_programs
from stage_core.chakra.reader import decode_trace, read_trace_file, read_trace_set
from stage_core.chakra.schema import GlobalMetadata, Node, NodeType
from stage_core.chakra.traceset import ForeignNode
from stage_core.chakra.wire import encode_varint
from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind
from tests.fixtures import SAMPLE_RUN

MIB = 1 << 20


@pytest.fixture(scope="module")
def sample_run() -> Path:
    if not SAMPLE_RUN.is_dir():
        pytest.fail(f"reference data missing: {SAMPLE_RUN.resolve()} must hold the ASTRA-sim run")
    return SAMPLE_RUN


def test_sample_run_decodes_to_its_documented_contents(sample_run: Path) -> None:
    trace_set = read_trace_set(sample_run)
    assert trace_set.world_size == 4
    assert trace_set.groups == {"1": (0, 1), "2": (2, 3)}
    assert trace_set.foreign == {}
    for rank, nodes in trace_set.ranks.items():
        fwd, all_reduce, transfer, all_gather, bwd = nodes
        assert [node.id for node in nodes] == [1, 2, 3, 4, 5]
        assert [node.data_deps for node in nodes] == [(), (1,), (2,), (3,), (4,)]
        assert all(node.ctrl_deps == () for node in nodes)
        assert (fwd.name, fwd.kind, fwd.flops, fwd.tensor_bytes) == (
            "fwd_matmul", NodeKind.COMP, 2 * 4096**3, 3 * 4096**2 * 2)
        assert (bwd.name, bwd.kind, bwd.flops, bwd.tensor_bytes) == (
            "bwd_matmul", NodeKind.COMP, 4 * 4096**3, 3 * 4096**2 * 2)
        assert (all_reduce.name, all_reduce.collective, all_reduce.comm_bytes) == (
            "tp_all_reduce", CollectiveKind.ALL_REDUCE, 64 * MIB)
        assert all_reduce.group == ((0, 1) if rank < 2 else (2, 3))
        gather = all_gather
        assert (gather.name, gather.collective, gather.comm_bytes, gather.group) == (
            "dp_all_gather", CollectiveKind.ALL_GATHER, 8 * MIB, None)
        expected = (("pp_send_act", NodeKind.SEND, rank + 2) if rank < 2
                    else ("pp_recv_act", NodeKind.RECV, rank - 2))
        assert (transfer.name, transfer.kind, transfer.peer) == expected
        assert (transfer.comm_bytes, transfer.tag) == (16 * MIB, 7)
    assert trace_set.ranks == sample_run_programs()


def test_read_trace_file_needs_the_group_table_for_pg_name(sample_run: Path) -> None:
    groups = json.loads((sample_run / "comm_group.json").read_text())
    nodes = read_trace_file(sample_run / "workload.3.et", groups)
    assert nodes == list(sample_run_programs()[3])
    with pytest.raises(ConfigError, match="names pg_name '2', but no group table"):
        read_trace_file(sample_run / "workload.3.et")


def _stream(*nodes: Any) -> bytes:
    parts = [GlobalMetadata(version="0.0.4"), *nodes]
    encoded = [message.SerializeToString() for message in parts]
    return b"".join(encode_varint(len(chunk)) + chunk for chunk in encoded)


def _node(node_id: int, node_type: int, **attributes: tuple[str, Any]) -> Any:
    message = Node(id=node_id, name=f"n{node_id}", type=node_type)
    for name, (field, value) in attributes.items():
        attribute = message.attr.add(name=name)
        if field.endswith("_list"):
            getattr(attribute, field).values.extend(value)
        else:
            setattr(attribute, field, value)
    return message


@pytest.mark.parametrize(
    "kind",
    ["int32", "int64", "uint32", "uint64", "sint32", "sint64",
     "fixed32", "fixed64", "sfixed32", "sfixed64"],
)
def test_any_integer_kind_is_accepted(kind: str) -> None:
    field = f"{kind}_val"
    data = _stream(
        _node(1, NodeType.COMM_SEND_NODE, comm_src=(field, 3), comm_dst=(field, 9),
              comm_size=(field, 123456), comm_tag=(field, 42)),
        _node(2, NodeType.COMP_NODE, num_ops=(field, 1000), tensor_size=(field, 64)),
    )
    send, comp = decode_trace(data).nodes
    assert (send.kind, send.peer, send.comm_bytes, send.tag) == (NodeKind.SEND, 9, 123456, 42)
    assert (comp.flops, comp.tensor_bytes) == (1000, 64)


def test_negative_signed_kinds_decode_to_negative_values() -> None:
    data = _stream(
        _node(1, NodeType.COMM_RECV_NODE, comm_src=("int32_val", 1), comm_size=("sint64_val", 8),
              comm_tag=("int32_val", -5)),
        _node(2, NodeType.COMM_RECV_NODE, comm_src=("sfixed64_val", 1), comm_size=("int64_val", 8),
              comm_tag=("sint32_val", -7)),
    )
    assert [node.tag for node in decode_trace(data).nodes] == [-5, -7]


def test_unpacked_dependencies_and_unknown_fields_are_accepted() -> None:
    body = bytearray(Node(id=4, name="x", type=NodeType.COMP_NODE).SerializeToString())
    body += b"\x28\x01\x28\x02"  # data_deps as two unpacked varints
    body += b"\x20\x03"  # one unpacked ctrl dep
    body += b"\xa0\x06\x05"  # unknown field 100, varint
    node = Node()
    node.ParseFromString(bytes(body))  # protobuf agrees the bytes are valid
    data = _stream() + encode_varint(len(body)) + bytes(body)
    (decoded,) = decode_trace(data).nodes
    assert (decoded.data_deps, decoded.ctrl_deps) == ((1, 2), (3,))


def test_inputs_and_outputs_are_read_from_string_lists() -> None:
    data = _stream(_node(1, NodeType.COMP_NODE, inputs=("string_list", ["w", "64", "x", "8"]),
                         outputs=("string_list", ["y", "16"])))
    (node,) = decode_trace(data).nodes
    assert node.inputs == (("w", 64), ("x", 8)) and node.outputs == (("y", 16),)


def test_foreign_nodes_are_kept_apart() -> None:
    data = _stream(
        _node(1, NodeType.METADATA_NODE),
        _node(2, NodeType.COMM_COLL_NODE, comm_type=("int64_val", 5), comm_size=("int64_val", 4)),
        _node(3, NodeType.COMP_NODE),
    )
    decoded = decode_trace(data)
    assert [node.id for node in decoded.nodes] == [3]
    assert decoded.foreign == (
        ForeignNode(1, "n1", "METADATA_NODE"), ForeignNode(2, "n2", "COMM_COLL_NODE(BROADCAST)"),
    )


def test_empty_file_has_no_nodes() -> None:
    assert decode_trace(b"").nodes == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_stream(_node(1, NodeType.COMP_NODE, num_ops=("double_val", 2.0))),
         "'num_ops' must be an integer, got double"),
        (_stream(_node(1, NodeType.COMP_NODE, num_ops=("bool_val", True))),
         "'num_ops' must be an integer, got bool"),
        (_stream(_node(1, NodeType.COMM_COLL_NODE, comm_type=("int64_val", 0),
                       comm_size=("int64_val", 4), pg_name=("int64_val", 1))),
         "'pg_name' must be a string, got int64"),
        (_stream(_node(1, NodeType.COMM_COLL_NODE, comm_type=("int64_val", 0),
                       comm_size=("int64_val", 4), pg_name=("string_val", "9"))),
         "pg_name '9', which is not in the group table"),
        (_stream(_node(1, NodeType.COMM_SEND_NODE, comm_size=("int64_val", 4),
                       comm_tag=("int64_val", 1))),
         "lacks the required attribute 'comm_dst'"),
        (_stream(_node(1, NodeType.COMP_NODE, inputs=("string_list", ["w"]))),
         "'inputs' must be a string list of name, size pairs"),
        (_stream(_node(1, NodeType.COMP_NODE))[:-2], "truncated"),
        (b"\x05\x0a\x05", "truncated"),
        (b"\x80", "truncated varint"),
    ],
)
def test_malformed_input_is_a_config_error(data: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode_trace(data, groups={"1": [0, 1]}, source="x.et")


def test_read_trace_file_refuses_foreign_nodes(tmp_path: Path) -> None:
    path = tmp_path / "workload.0.et"
    path.write_bytes(_stream(_node(1, NodeType.METADATA_NODE)))
    with pytest.raises(ConfigError, match="METADATA_NODE, which STAGE's trace IR cannot hold"):
        read_trace_file(path)
    assert read_trace_set(tmp_path).foreign == {0: (ForeignNode(1, "n1", "METADATA_NODE"),)}


def test_trace_set_with_a_missing_rank_is_refused(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        (tmp_path / f"workload.{rank}.et").write_bytes(_stream(_node(1, NodeType.COMP_NODE)))
    with pytest.raises(ConfigError, match=r"workload\.2\.et \(1 file\) is missing"):
        read_trace_set(tmp_path)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("nothing", "holds no workload.<rank>.et files"),
        ("bad groups", "comm_group.json: group id must be a decimal string > 0"),
        ("not a dir", "is not a directory"),
    ],
)
def test_unreadable_trace_sets(tmp_path: Path, setup: str, message: str) -> None:
    directory = tmp_path
    if setup == "bad groups":
        (tmp_path / "workload.0.et").write_bytes(_stream())
        (tmp_path / "comm_group.json").write_text('{"0": [0]}')
    elif setup == "not a dir":
        directory = tmp_path / "missing"
    with pytest.raises(ConfigError, match=message):
        read_trace_set(directory)
