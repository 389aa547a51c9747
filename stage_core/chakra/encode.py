"""Fast pure-Python encoder of :class:`~stage_core.trace.TraceNode` into Chakra ``Node`` bytes.

Holds:

- :class:`ChakraEncoder`: encodes single nodes (:meth:`ChakraEncoder.encode_node`), caching
  attribute bytes by value and node bytes by node, and compiles whole rank programs into
  :class:`RankTemplate` objects;
- :class:`RankTemplate`: a rank program pre-encoded once, which then emits the file of every
  rank that runs the same program with only the differing fields re-encoded;
- :func:`encode_program`: one rank's whole file, node by node.

Bytes produced are identical to ``SerializeToString`` of the message classes in
:mod:`stage_core.chakra.schema` (fields in number order, proto3 defaults omitted, packed deps,
oneof values always present), each message preceded by its length as a varint, one
``GlobalMetadata`` (version :data:`CHAKRA_VERSION`) first. Which attributes a node gets is
decided by :func:`stage_core.chakra.mapping.attribute_plan`.

Template API. ``template = encoder.compile(program, rank)`` encodes ``program`` as run by
``rank`` and records its *slots*: ``template.groups`` (the distinct communicator groups of its
collectives, in order of first use) and ``template.peers`` (the distinct send/recv peers, in
order of first use). ``template.emit_file(member_rank, pg_names, peers)`` returns the complete
file (GlobalMetadata first) of a rank running the same program, where ``pg_names[i]`` is that
rank's group id in place of ``template.groups[i]`` (``None``: all ranks) and ``peers[j]`` its
peer in place of ``template.peers[j]``. Everything else — ids, names, deps, sizes, tags — is
shared, pre-encoded bytes; only the length prefixes of the nodes holding a slot and the slot
attributes themselves (cached by value) are assembled per rank.
``template.file_size(...)`` (same arguments) is that file's length, counted without assembling
it: what a trace set's bytes are before any file is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from stage_core.chakra.mapping import (
    GROUP,
    OWN_RANK,
    PEER,
    UnitScale,
    attribute_plan,
    describe,
)
from stage_core.chakra.wire import (
    encode_int64,
    encode_length_delimited,
    encode_varint,
)
from stage_core.errors import ConfigError
from stage_core.trace import NodeKind, TraceNode

#: Layouts (see :meth:`RankTemplate._layout`) kept per template.
_LAYOUT_CACHE_LIMIT = 64

#: ``GlobalMetadata.version`` written in every file.
CHAKRA_VERSION = "0.0.4"

# Wire tags (field number << 3 | wire type) of the fields written.
_ATTR_NAME = b"\x0a"
_INT64_VAL = b"\x48"
_BOOL_VAL = b"\xd8\x01"
_BOOL_LIST = b"\xe2\x01"
_STRING_VAL = b"\xea\x01"
_STRING_LIST = b"\xf2\x01"
_NODE_ID = b"\x08"
_NODE_NAME = b"\x12"
_NODE_TYPE = b"\x18"
_NODE_CTRL_DEPS = b"\x22"
_NODE_DATA_DEPS = b"\x2a"
_NODE_DURATION_MICROS = b"\x38"
_NODE_ATTR = b"\x52"


def _attr_message(name: str, tag: bytes, value: bytes) -> bytes:
    encoded_name = name.encode()
    body = _ATTR_NAME + encode_varint(len(encoded_name)) + encoded_name + tag + value
    return _NODE_ATTR + encode_varint(len(body)) + body


def _string(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(f"{what} is not encodable as UTF-8: {value!r}") from error


def _packed(values: tuple[int, ...]) -> bytes:
    return b"".join([encode_varint(value) for value in values])


# A template's file for one tuple of slot-value lengths: static chunks, the picker that
# interleaves them with the slot values, and the chunks' total bytes (RankTemplate._layout).
_Layout = tuple[list[bytes], Callable[[list[bytes]], Any], int]

# A node's body as pieces: static bytes, or a (marker, attribute name, value) hole.
_Hole = tuple[str, str, object]
_Piece = bytes | _Hole


@dataclass(frozen=True, slots=True)
class _Slot:
    """Which per-rank attribute fills a hole: OWN_RANK / PEER (slot index) / GROUP (index)."""

    marker: str
    attribute: str
    index: int


class ChakraEncoder:
    """Encodes trace nodes to length-delimited Chakra messages, caching repeated fragments.

    An encoder holds caches (attribute bytes by value, node bytes by node); use one encoder per
    trace set. It is not thread-safe.
    """

    def __init__(self, scale: UnitScale | None = None, *, node_cache_limit: int = 1 << 18) -> None:
        self.scale = UnitScale() if scale is None else scale
        self._int_attributes: dict[tuple[str, int], bytes] = {}
        self._group_attributes: dict[tuple[str | None, tuple[bool, ...] | None], bytes] = {}
        self._nodes: dict[tuple[TraceNode, object], bytes] = {}
        self._node_cache_limit = node_cache_limit

    # -- fragments -------------------------------------------------------------------------

    def metadata(self) -> bytes:
        """The length-delimited ``GlobalMetadata`` (version :data:`CHAKRA_VERSION`)."""
        body = encode_length_delimited(b"\x0a", CHAKRA_VERSION.encode())
        return encode_varint(len(body)) + body

    def int_attribute(self, name: str, value: int) -> bytes:
        """An encoded ``attr`` field holding ``name`` = ``int64_val`` ``value`` (cached)."""
        key = (name, value)
        cached = self._int_attributes.get(key)
        if cached is None:
            cached = _attr_message(name, _INT64_VAL, encode_int64(value))
            self._int_attributes[key] = cached
        return cached

    def group_attributes(self, pg_name: str | None, involved_dim: tuple[bool, ...] | None) -> bytes:
        """Encoded ``pg_name`` (absent when ``None``) and ``involved_dim`` attributes (cached)."""
        key = (pg_name, involved_dim)
        cached = self._group_attributes.get(key)
        if cached is None:
            parts = []
            if pg_name is not None:
                text = _string(pg_name, "pg_name")
                value = encode_varint(len(text)) + text
                parts.append(_attr_message("pg_name", _STRING_VAL, value))
            if involved_dim is not None:
                packed = bytes(1 if flag else 0 for flag in involved_dim)
                bool_list = encode_length_delimited(b"\x0a", packed) if packed else b""
                value = encode_varint(len(bool_list)) + bool_list
                parts.append(_attr_message("involved_dim", _BOOL_LIST, value))
            cached = b"".join(parts)
            self._group_attributes[key] = cached
        return cached

    def _static_attribute(self, name: str, kind: str, value: object) -> bytes:
        if kind == "int64":
            assert isinstance(value, int)
            return self.int_attribute(name, value)
        if kind == "bool":
            return _attr_message(name, _BOOL_VAL, b"\x01" if value else b"\x00")
        assert kind == "string_list" and isinstance(value, list)
        body = b"".join(
            encode_length_delimited(b"\x0a", _string(item, f"attribute {name!r}")) for item in value
        )
        return _attr_message(name, _STRING_LIST, encode_varint(len(body)) + body)

    def _pieces(self, node: TraceNode) -> list[_Piece]:
        """The node body as static bytes and holes, adjacent static bytes merged."""
        plan = attribute_plan(node, self.scale)  # validates the node first
        head = [_NODE_ID + encode_varint(node.id)] if node.id else []
        if node.name:
            encoded_name = _string(node.name, f"name of {describe(node)}")
            head.append(_NODE_NAME + encode_varint(len(encoded_name)) + encoded_name)
        head.append(_NODE_TYPE + encode_varint(int(node.kind)))
        if node.ctrl_deps:
            head.append(encode_length_delimited(_NODE_CTRL_DEPS, _packed(node.ctrl_deps)))
        if node.data_deps:
            head.append(encode_length_delimited(_NODE_DATA_DEPS, _packed(node.data_deps)))
        if node.duration_micros:
            duration = node.duration_micros
            if isinstance(duration, bool) or not isinstance(duration, int) or duration < 0:
                raise ConfigError(
                    f"duration_micros of {describe(node)} must be an integer >= 0, "
                    f"but got {duration!r}"
                )
            head.append(_NODE_DURATION_MICROS + encode_varint(duration))
        pieces: list[_Piece] = []
        static = b"".join(head)
        for name, kind, value in plan:
            if kind in (OWN_RANK, PEER, GROUP):
                pieces.append(static)
                pieces.append((kind, name, value))
                static = b""
            else:
                static += self._static_attribute(name, kind, value)
        pieces.append(static)
        return [piece for piece in pieces if piece != b""]

    # -- single nodes ----------------------------------------------------------------------

    def encode_node(
        self,
        node: TraceNode,
        rank: int,
        pg_name: str | None = None,
        involved_dim: tuple[bool, ...] | None = None,
    ) -> bytes:
        """Encode one node of ``rank``'s file, length prefix included.

        ``pg_name`` is the id of the node's group (``None``: all ranks, no attribute);
        ``involved_dim`` is written when not ``None``. Both only matter for collectives.
        """
        kind = node.kind
        variant: object = None
        if kind is NodeKind.COLL:
            variant = (pg_name, involved_dim)
        elif kind is NodeKind.SEND or kind is NodeKind.RECV:
            variant = rank
        key = (node, variant)
        cached = self._nodes.get(key)
        if cached is not None:
            return cached
        parts: list[bytes] = []
        for piece in self._pieces(node):
            if isinstance(piece, bytes):
                parts.append(piece)
                continue
            marker, attribute, value = piece
            if marker == GROUP:
                parts.append(self.group_attributes(pg_name, involved_dim))
            elif marker == OWN_RANK:
                parts.append(self.int_attribute(attribute, rank))
            else:
                assert isinstance(value, int)
                parts.append(self.int_attribute(attribute, value))
        body = b"".join(parts)
        encoded = encode_varint(len(body)) + body
        if len(self._nodes) >= self._node_cache_limit:
            self._nodes.clear()
        self._nodes[key] = encoded
        return encoded

    # -- templates -------------------------------------------------------------------------

    def compile(self, program: Sequence[TraceNode], rank: int) -> RankTemplate:
        """Pre-encode ``program`` as run by ``rank`` (see the module docstring)."""
        groups: dict[tuple[int, ...] | None, int] = {}
        peers: dict[int, int] = {}
        slots: dict[_Slot, int] = {}
        parts: list[bytes] = []
        run: list[bytes] = [self.metadata()]  # static bytes not yet appended to ``parts``
        length_holes: list[tuple[int, int, tuple[int, ...]]] = []
        slot_holes: list[tuple[int, int]] = []

        def hole() -> int:
            parts.append(b"".join(run))
            run.clear()
            parts.append(b"")
            return len(parts) - 1

        for node in program:
            pieces = self._pieces(node)
            static = [piece for piece in pieces if isinstance(piece, bytes)]
            if len(static) == len(pieces):
                body = b"".join(static)
                run.append(encode_varint(len(body)) + body)
                continue
            length_at = hole()
            refs: list[int] = []
            for piece in pieces:
                if isinstance(piece, bytes):
                    run.append(piece)
                    continue
                marker, attribute, value = piece
                if marker == GROUP:
                    assert value is None or isinstance(value, tuple)
                    slot = _Slot(GROUP, attribute, groups.setdefault(value, len(groups)))
                elif marker == PEER:
                    assert isinstance(value, int)
                    slot = _Slot(PEER, attribute, peers.setdefault(value, len(peers)))
                else:
                    slot = _Slot(OWN_RANK, attribute, 0)
                number = slots.setdefault(slot, len(slots))
                refs.append(number)
                slot_holes.append((hole(), number))
            length_holes.append((length_at, sum(map(len, static)), tuple(refs)))
        parts.append(b"".join(run))
        return RankTemplate(
            encoder=self,
            rank=rank,
            groups=tuple(groups),
            peers=tuple(peers),
            slots=tuple(slots),
            parts=(parts, length_holes, slot_holes),
        )


class RankTemplate:
    """A rank program encoded once; :meth:`emit_file` produces any member rank's file.

    Built by :meth:`ChakraEncoder.compile`. ``groups`` and ``peers`` list the per-rank slots in
    order of first use in the program; ``rank`` is the rank the program was written for.
    """

    def __init__(
        self,
        *,
        encoder: ChakraEncoder,
        rank: int,
        groups: tuple[tuple[int, ...] | None, ...],
        peers: tuple[int, ...],
        slots: tuple[_Slot, ...],
        parts: tuple[list[bytes], list[tuple[int, int, tuple[int, ...]]], list[tuple[int, int]]],
    ) -> None:
        self.rank = rank
        self.groups = groups
        self.peers = peers
        self._encoder = encoder
        self._slots = slots
        self._parts, self._length_holes, self._slot_holes = parts
        uses = [0] * len(slots)  # how many holes each slot's value fills
        for _, number in self._slot_holes:
            uses[number] += 1
        self._uses = uses
        self._layouts: dict[tuple[int, ...], _Layout] = {}

    def emit_file(
        self,
        rank: int,
        pg_names: Sequence[str | None],
        peers: Sequence[int],
        involved_dims: Sequence[tuple[bool, ...] | None] | None = None,
    ) -> bytes:
        """The whole ``.et`` file of ``rank``: its group ids and peers fill the template slots.

        ``pg_names``, ``involved_dims`` align with :attr:`groups`; ``peers`` with :attr:`peers`.
        """
        values = self._values(rank, pg_names, peers, involved_dims)
        chunks, pick, _ = self._layout_of(values)
        return b"".join(pick(chunks + values))

    def file_size(
        self,
        rank: int,
        pg_names: Sequence[str | None],
        peers: Sequence[int],
        involved_dims: Sequence[tuple[bool, ...] | None] | None = None,
    ) -> int:
        """``len(emit_file(...))`` with the same arguments, without assembling the file: the
        static bytes of the layout for these slot values (cached per their lengths) plus each
        value's length times the holes it fills."""
        values = self._values(rank, pg_names, peers, involved_dims)
        filled = sum([len(value) * uses for value, uses in zip(values, self._uses, strict=True)])
        return self._layout_of(values)[2] + filled

    def _layout_of(self, values: list[bytes]) -> _Layout:
        lengths = tuple([len(value) for value in values])
        layout = self._layouts.get(lengths)
        return self._layout(lengths) if layout is None else layout

    def _values(
        self,
        rank: int,
        pg_names: Sequence[str | None],
        peers: Sequence[int],
        involved_dims: Sequence[tuple[bool, ...] | None] | None,
    ) -> list[bytes]:
        """The encoded slot values of ``rank``'s file, in slot order (arguments checked)."""
        if len(pg_names) != len(self.groups) or len(peers) != len(self.peers):
            raise ConfigError(
                f"rank {rank}: the template needs {len(self.groups)} group ids and "
                f"{len(self.peers)} peers, but got {len(pg_names)} and {len(peers)}"
            )
        if involved_dims is not None and len(involved_dims) != len(self.groups):
            raise ConfigError(
                f"rank {rank}: `involved_dims` must align with the template's "
                f"{len(self.groups)} groups, but got {len(involved_dims)} entries"
            )
        encoder = self._encoder
        values: list[bytes] = []
        for slot in self._slots:
            if slot.marker == GROUP:
                dims = None if involved_dims is None else involved_dims[slot.index]
                values.append(encoder.group_attributes(pg_names[slot.index], dims))
            elif slot.marker == PEER:
                values.append(encoder.int_attribute(slot.attribute, peers[slot.index]))
            else:
                values.append(encoder.int_attribute(slot.attribute, rank))
        return values

    def _layout(self, lengths: tuple[int, ...]) -> _Layout:
        """The file for slot values of ``lengths``: static chunks (length prefixes filled in),
        a picker that orders chunks and slot values (appended after the chunks) into the
        file's parts, and the chunks' total bytes. Cached per ``lengths``: ranks whose slot
        values have equal lengths share everything but the values themselves."""
        parts: list[bytes | None] = list(self._parts)
        for index, base, refs in self._length_holes:
            length = base
            for slot_number in refs:
                length += lengths[slot_number]
            parts[index] = encode_varint(length)
        holes = dict(self._slot_holes)
        chunks: list[bytes] = []
        order: list[int] = []
        run: list[bytes] = []
        for index, part in enumerate(parts):
            if index in holes:
                chunks.append(b"".join(run))
                order.append(len(chunks) - 1)
                order.append(-1 - holes[index])
                run = []
            else:
                assert part is not None
                run.append(part)
        chunks.append(b"".join(run))
        order.append(len(chunks) - 1)
        # Slot values follow the chunks in the list the picker reads.
        resolved = [place if place >= 0 else len(chunks) - 1 - place for place in order]
        picker = itemgetter(*resolved) if len(resolved) > 1 else (lambda items: (items[0],))
        if len(self._layouts) >= _LAYOUT_CACHE_LIMIT:
            self._layouts.clear()
        layout = (chunks, picker, sum(map(len, chunks)))
        self._layouts[lengths] = layout
        return layout


def encode_program(
    encoder: ChakraEncoder,
    program: Sequence[TraceNode],
    rank: int,
    pg_names: Sequence[str | None],
    involved_dims: Sequence[tuple[bool, ...] | None] | None = None,
) -> bytes:
    """The whole ``.et`` file of ``rank`` running ``program``, node by node.

    ``pg_names[i]`` (and ``involved_dims[i]``) belong to ``program[i]`` (ignored unless it is a
    collective).
    """
    encode = encoder.encode_node
    parts = [encoder.metadata()]
    if involved_dims is None:
        for node, pg_name in zip(program, pg_names, strict=True):
            parts.append(encode(node, rank, pg_name))
    else:
        for node, pg_name, dims in zip(program, pg_names, involved_dims, strict=True):
            parts.append(encode(node, rank, pg_name, dims))
    return b"".join(parts)


__all__ = [
    "CHAKRA_VERSION",
    "ChakraEncoder",
    "RankTemplate",
    "encode_program",
]
