"""The Chakra schema built in Python: field numbers, enums, and the real ASTRA-sim inputs."""

from __future__ import annotations

import pytest

from stage_core.chakra.reference import parse_stream
from stage_core.chakra.schema import (
    ATTRIBUTE_VALUE_FIELDS,
    FILE_DESCRIPTOR,
    AttributeProto,
    CollectiveCommType,
    Node,
    NodeType,
    message_class,
)
from stage_core.trace import CHAKRA_COMM_TYPE, NodeKind
from tests.fixtures import SAMPLE_RUN


def test_node_field_numbers() -> None:
    fields = {field.name: field.number for field in Node.DESCRIPTOR.fields}
    assert fields == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5,
        "start_time_micros": 6, "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10,
    }
    assert Node.DESCRIPTOR.fields_by_name["data_deps"].is_packed


def test_attribute_oneof_holds_thirty_values() -> None:
    oneof = AttributeProto.DESCRIPTOR.oneofs_by_name["value"]
    numbers = sorted(field.number for field in oneof.fields)
    assert numbers == list(range(3, 33)) == sorted(ATTRIBUTE_VALUE_FIELDS)
    by_name = {field.name: field.number for field in oneof.fields}
    assert (by_name["int64_val"], by_name["bool_list"], by_name["string_val"]) == (9, 28, 29)
    assert message_class("StringList").DESCRIPTOR.fields[0].number == 1


def test_enums_match_the_chakra_numbers() -> None:
    assert [member.value for member in NodeType] == list(range(8))
    assert (int(CollectiveCommType.REDUCE_SCATTER), int(CollectiveCommType.BARRIER)) == (7, 9)
    for kind in NodeKind:
        assert NodeType[{4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE",
                         7: "COMM_COLL_NODE"}[int(kind)]] == int(kind)
    for collective, number in CHAKRA_COMM_TYPE.items():
        assert CollectiveCommType[collective.name] == number
    assert FILE_DESCRIPTOR.package == "ChakraProtoMsg" and FILE_DESCRIPTOR.syntax == "proto3"


@pytest.mark.parametrize("rank", range(4))
def test_message_classes_parse_and_reserialize_the_sample_run(rank: int) -> None:
    if not SAMPLE_RUN.is_dir():
        pytest.fail(f"reference data missing: {SAMPLE_RUN.resolve()} (the shared reference tree)")
    data = (SAMPLE_RUN / f"workload.{rank}.et").read_bytes()
    metadata, nodes = parse_stream(data)
    assert metadata.version == "0.0.4"
    assert [node.name for node in nodes][::2] == ["fwd_matmul", "pp_send_act" if rank < 2
                                                  else "pp_recv_act", "bwd_matmul"]
    rebuilt = b"".join(
        len(message.SerializeToString()).to_bytes(1, "little") + message.SerializeToString()
        for message in [metadata, *nodes]
    )
    assert rebuilt == data
