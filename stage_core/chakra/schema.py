"""The Chakra execution-trace protobuf schema, built in Python at import time.

Holds:

- :data:`FILE_DESCRIPTOR`: a ``FileDescriptorProto`` equivalent to Chakra's ``et_def.proto``
  (proto3, package ``ChakraProtoMsg``), written from the schema facts in
  ``docs/reference/chakra_et.md`` — no ``protoc``, no generated module;
- the message classes made from it with ``message_factory``: :data:`GlobalMetadata`,
  :data:`Node`, :data:`IOInfo`, :data:`AttributeProto` and one ``*List`` class per list kind;
- :class:`NodeType` and :class:`CollectiveCommType`, the two enums, as ``IntEnum``;
- :data:`ATTRIBUTE_VALUE_FIELDS`: the ``AttributeProto`` oneof, field number → (field name,
  scalar kind, is-list), shared by the pure-Python encoder and decoder.

This is the reference implementation: the fast encoder in :mod:`stage_core.chakra.encode` is
tested byte for byte against these classes' ``SerializeToString``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"

_Field = descriptor_pb2.FieldDescriptorProto


class NodeType(IntEnum):
    """Chakra ``NodeType``."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    """Chakra ``CollectiveCommType``."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


#: Scalar kinds of the ``AttributeProto`` oneof, in field-number order (``double`` is 3/4,
#: ``float`` 5/6, … ``bytes`` 31/32): each kind has a ``<kind>_val`` and a ``<kind>_list``.
SCALAR_KINDS: tuple[str, ...] = (
    "double",
    "float",
    "int32",
    "int64",
    "uint32",
    "uint64",
    "sint32",
    "sint64",
    "fixed32",
    "fixed64",
    "sfixed32",
    "sfixed64",
    "bool",
    "string",
    "bytes",
)

_PROTO_TYPE: dict[str, int] = {
    "double": _Field.TYPE_DOUBLE,
    "float": _Field.TYPE_FLOAT,
    "int32": _Field.TYPE_INT32,
    "int64": _Field.TYPE_INT64,
    "uint32": _Field.TYPE_UINT32,
    "uint64": _Field.TYPE_UINT64,
    "sint32": _Field.TYPE_SINT32,
    "sint64": _Field.TYPE_SINT64,
    "fixed32": _Field.TYPE_FIXED32,
    "fixed64": _Field.TYPE_FIXED64,
    "sfixed32": _Field.TYPE_SFIXED32,
    "sfixed64": _Field.TYPE_SFIXED64,
    "bool": _Field.TYPE_BOOL,
    "string": _Field.TYPE_STRING,
    "bytes": _Field.TYPE_BYTES,
}

#: ``AttributeProto`` oneof: field number → (field name, scalar kind, is a ``*List``).
ATTRIBUTE_VALUE_FIELDS: dict[int, tuple[str, str, bool]] = {}
for _index, _kind in enumerate(SCALAR_KINDS):
    ATTRIBUTE_VALUE_FIELDS[3 + 2 * _index] = (f"{_kind}_val", _kind, False)
    ATTRIBUTE_VALUE_FIELDS[4 + 2 * _index] = (f"{_kind}_list", _kind, True)


def list_message_name(kind: str) -> str:
    """Name of the ``*List`` message of a scalar kind: ``int64`` → ``Int64List``."""
    return kind[0].upper() + kind[1:] + "List"


def _field(
    name: str,
    number: int,
    field_type: int,
    *,
    repeated: bool = False,
    type_name: str | None = None,
    oneof_index: int | None = None,
) -> descriptor_pb2.FieldDescriptorProto:
    field = descriptor_pb2.FieldDescriptorProto(name=name, number=number)
    field.type = field_type
    field.label = _Field.LABEL_REPEATED if repeated else _Field.LABEL_OPTIONAL
    if type_name is not None:
        field.type_name = f".{PACKAGE}.{type_name}"
    if oneof_index is not None:
        field.oneof_index = oneof_index
    return field


def _message(
    name: str, fields: list[descriptor_pb2.FieldDescriptorProto]
) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    message.field.extend(fields)
    return message


def _enum(name: str, values: type[IntEnum]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for member in values:
        enum.value.add(name=member.name, number=int(member))
    return enum


def build_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """Build the ``FileDescriptorProto`` of the Chakra ET schema."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="stage_chakra_et_def.proto", package=PACKAGE, syntax="proto3"
    )
    proto.enum_type.append(_enum("NodeType", NodeType))
    proto.enum_type.append(_enum("CollectiveCommType", CollectiveCommType))
    message = _Field.TYPE_MESSAGE
    proto.message_type.append(
        _message(
            "GlobalMetadata",
            [
                _field("version", 1, _Field.TYPE_STRING),
                _field("attr", 2, message, repeated=True, type_name="AttributeProto"),
            ],
        )
    )
    proto.message_type.append(
        _message(
            "IOInfo",
            [
                _field("values", 1, _Field.TYPE_STRING),
                _field("shapes", 2, _Field.TYPE_STRING),
                _field("types", 3, _Field.TYPE_STRING),
            ],
        )
    )
    proto.message_type.append(
        _message(
            "Node",
            [
                _field("id", 1, _Field.TYPE_UINT64),
                _field("name", 2, _Field.TYPE_STRING),
                _field("type", 3, _Field.TYPE_ENUM, type_name="NodeType"),
                _field("ctrl_deps", 4, _Field.TYPE_UINT64, repeated=True),
                _field("data_deps", 5, _Field.TYPE_UINT64, repeated=True),
                _field("start_time_micros", 6, _Field.TYPE_UINT64),
                _field("duration_micros", 7, _Field.TYPE_UINT64),
                _field("inputs", 8, message, type_name="IOInfo"),
                _field("outputs", 9, message, type_name="IOInfo"),
                _field("attr", 10, message, repeated=True, type_name="AttributeProto"),
            ],
        )
    )
    attribute_fields = [
        _field("name", 1, _Field.TYPE_STRING),
        _field("doc_string", 2, _Field.TYPE_STRING),
    ]
    for number, (name, kind, is_list) in ATTRIBUTE_VALUE_FIELDS.items():
        if is_list:
            attribute_fields.append(
                _field(name, number, message, type_name=list_message_name(kind), oneof_index=0)
            )
        else:
            attribute_fields.append(_field(name, number, _PROTO_TYPE[kind], oneof_index=0))
    attribute = _message("AttributeProto", attribute_fields)
    attribute.oneof_decl.add(name="value")
    proto.message_type.append(attribute)
    for kind in SCALAR_KINDS:
        values = _field("values", 1, _PROTO_TYPE[kind], repeated=True)
        proto.message_type.append(_message(list_message_name(kind), [values]))
    return proto


#: The schema as a ``FileDescriptorProto`` (built once, at import).
FILE_DESCRIPTOR: descriptor_pb2.FileDescriptorProto = build_file_descriptor()

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(FILE_DESCRIPTOR)


def message_class(name: str) -> Any:
    """The message class of ``ChakraProtoMsg.<name>`` (e.g. ``"Node"``, ``"BoolList"``)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


GlobalMetadata: Any = message_class("GlobalMetadata")
Node: Any = message_class("Node")
IOInfo: Any = message_class("IOInfo")
AttributeProto: Any = message_class("AttributeProto")
