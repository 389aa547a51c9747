"""Protocol-buffer wire-format primitives shared by the Chakra encoder and decoder.

Holds varint encoding (:func:`encode_varint`, with a table for small values), the wire-type
constants, and decoding: varints, zigzag and two's complement, a message's raw fields
(:func:`message_fields`), scalar values of every protobuf kind (:func:`decode_scalar`) and packed
lists (:func:`decode_packed`); decoding errors are :class:`ValueError`. Only the parts of the
wire format that Chakra traces use are here; the format itself is described at
https://protobuf.dev/programming-guides/encoding/.
"""

from __future__ import annotations

import struct

from stage_core.errors import ConfigError

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LENGTH = 2
WIRE_FIXED32 = 5

UINT64_LIMIT = 1 << 64
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def _encode_varint_slow(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Encoded varints of 0 … 16383 (every length prefix of a Chakra node in practice).
SMALL_VARINTS: tuple[bytes, ...] = tuple(_encode_varint_slow(value) for value in range(1 << 14))


def encode_varint(value: int) -> bytes:
    """Encode a non-negative integer < 2**64 as a base-128 varint."""
    if 0 <= value < 16384:
        return SMALL_VARINTS[value]
    if value < 0 or value >= UINT64_LIMIT:
        raise ConfigError(f"varint value must be in [0, 2**64), but got {value}")
    return _encode_varint_slow(value)


def encode_int64(value: int) -> bytes:
    """Encode an ``int64`` (or ``int32``) field value: negatives as 10-byte two's complement."""
    if value < 0:
        if value < INT64_MIN:
            raise ConfigError(f"int64 value must be >= -2**63, but got {value}")
        return _encode_varint_slow(value + UINT64_LIMIT)
    if value > INT64_MAX:
        raise ConfigError(f"int64 value must be < 2**63, but got {value}")
    return encode_varint(value)


def encode_length_delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: ``tag``, the payload's length as a varint, the payload."""
    return tag + encode_varint(len(payload)) + payload


def decode_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """Decode the varint at ``position``; return (value, position after it).

    Raises :class:`ValueError` on a truncated or over-long varint (the decoder turns it into a
    :class:`~stage_core.errors.ConfigError` naming the file).
    """
    result = 0
    shift = 0
    end = len(data)
    while True:
        if position >= end:
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def to_signed(value: int, bits: int) -> int:
    """Reinterpret an unsigned ``bits``-bit pattern as two's complement."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def zigzag_decode(value: int) -> int:
    """Decode a zigzag-encoded ``sint32``/``sint64`` value."""
    return (value >> 1) ^ -(value & 1)


#: Wire type of each scalar kind that is not a varint.
WIRE_OF_KIND: dict[str, int] = {
    "double": WIRE_FIXED64,
    "fixed64": WIRE_FIXED64,
    "sfixed64": WIRE_FIXED64,
    "float": WIRE_FIXED32,
    "fixed32": WIRE_FIXED32,
    "sfixed32": WIRE_FIXED32,
    "string": WIRE_LENGTH,
    "bytes": WIRE_LENGTH,
}


def message_fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int | bytes]]:
    """The fields of the message in ``data[start:end]``: (number, wire type, value)."""
    fields: list[tuple[int, int, int | bytes]] = []
    position = start
    while position < end:
        key, position = decode_varint(data, position)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == WIRE_VARINT:
            value, position = decode_varint(data, position)
        elif wire == WIRE_LENGTH:
            length, position = decode_varint(data, position)
            value = data[position : position + length]
            position += length
        elif wire == WIRE_FIXED64:
            value = int.from_bytes(data[position : position + 8], "little")
            position += 8
        elif wire == WIRE_FIXED32:
            value = int.from_bytes(data[position : position + 4], "little")
            position += 4
        else:
            raise ValueError(f"unsupported wire type {wire} in field {number}")
        if position > end:
            raise ValueError("message truncated")
        fields.append((number, wire, value))
    return fields


def decode_scalar(kind: str, wire: int, value: int | bytes) -> object:
    """Convert one raw field value of ``kind`` (e.g. "sint64") to Python."""
    expected = WIRE_OF_KIND.get(kind, WIRE_VARINT)
    if wire != expected:
        raise ValueError(f"{kind} value with wire type {wire}")
    if isinstance(value, bytes):
        if kind == "string":
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError("string is not valid UTF-8") from error
        return value
    if kind in ("int32", "sfixed32"):
        return to_signed(value, 32)
    if kind in ("int64", "sfixed64"):
        return to_signed(value, 64)
    if kind == "uint32":
        return value & 0xFFFFFFFF
    if kind in ("sint32", "sint64"):
        return zigzag_decode(value)
    if kind == "bool":
        return value != 0
    if kind == "double":
        return struct.unpack("<d", value.to_bytes(8, "little"))[0]
    if kind == "float":
        return struct.unpack("<f", value.to_bytes(4, "little"))[0]
    return value  # uint64, fixed32, fixed64


def decode_packed(kind: str, data: bytes) -> list[object]:
    """The values of a packed repeated field of ``kind``."""
    if kind in ("double", "fixed64", "sfixed64", "float", "fixed32", "sfixed32"):
        wire = WIRE_OF_KIND[kind]
        width = 8 if wire == WIRE_FIXED64 else 4
        if len(data) % width:
            raise ValueError(f"packed {kind} list of {len(data)} bytes")
        return [
            decode_scalar(kind, wire, int.from_bytes(data[index : index + width], "little"))
            for index in range(0, len(data), width)
        ]
    values: list[object] = []
    position = 0
    while position < len(data):
        raw, position = decode_varint(data, position)
        values.append(decode_scalar(kind, WIRE_VARINT, raw))
    return values
