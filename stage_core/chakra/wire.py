"""Protocol-buffer wire-format primitives shared by the Chakra encoder and decoder.

Holds varint encoding (:func:`encode_varint`, with a table for small values), zigzag
decoding, two's-complement conversion for signed kinds, and the wire-type constants. Only the
parts of the wire format that Chakra traces use are here; the format itself is described at
https://protobuf.dev/programming-guides/encoding/.
"""

from __future__ import annotations

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
