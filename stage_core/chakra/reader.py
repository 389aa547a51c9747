"""Reading Chakra ``.et`` files back into trace nodes, with a pure-Python decoder.

Holds :func:`decode_trace` (bytes → :class:`DecodedTrace`), :func:`read_trace_file` (one rank's
file → its :class:`~stage_core.trace.TraceNode` list) and :func:`read_trace_set` (a directory
of ``<prefix>.<rank>.et`` files plus ``comm_group.json`` → :class:`TraceSet`).

The decoder accepts files written by other tools: any integer attribute kind (int32, int64,
uint32, uint64, sint32, sint64, fixed32, fixed64, sfixed32, sfixed64) where an integer is
expected, packed or unpacked dependency lists, unknown fields and attributes (skipped). A
floating-point or boolean value where an integer is expected, an integer ``pg_name``, a
``pg_name`` missing from the group table, a missing required attribute or a malformed stream is
a :class:`~stage_core.errors.ConfigError` naming the file and node. ``pg_name`` absent, empty or
"0" means all ranks (``group=None``). Nodes of types the trace IR does not hold (METADATA,
MEM_LOAD/STORE, INVALID, collectives other than the four STAGE emits) are returned as
:class:`~stage_core.chakra.traceset.ForeignNode` by :func:`decode_trace` and
:func:`read_trace_set`, and refused by :func:`read_trace_file`.

Traces of the published STAGE generator (``symbolic_tensor_graph``, Chakra 0.0.4 backend) are
read too, with warnings (:data:`LENIENT`; :attr:`TraceSet.warnings` holds one line per kind,
with counts and the first node): its ``inputs``/``outputs`` tensor sizes written as
floating-point strings (``"4096.0"``) are read as the integers they equal, and an
``inputs``/``outputs`` attribute that carries no value at all (its empty lists, e.g. the outputs
of communication nodes) as no tensors, and a collective naming its group with the legacy
integer attribute ``comm_group`` instead of ``pg_name`` as that group id. A fractional size
stays an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from stage_core.chakra.groups import COMM_GROUP_FILE, read_comm_groups
from stage_core.chakra.schema import (
    ATTRIBUTE_VALUE_FIELDS,
    SCALAR_KINDS,
    CollectiveCommType,
    NodeType,
)
from stage_core.chakra.traceset import ForeignNode, TraceSet
from stage_core.chakra.wire import (
    WIRE_LENGTH,
    decode_packed,
    decode_scalar,
    decode_varint,
    message_fields,
)
from stage_core.errors import ConfigError
from stage_core.trace import CHAKRA_COMM_TYPE, CollectiveKind, NodeKind, TraceNode

_COLLECTIVES: dict[int, CollectiveKind] = {value: kind for kind, value in CHAKRA_COMM_TYPE.items()}
_NODE_KINDS: dict[int, NodeKind] = {int(kind): kind for kind in NodeKind}
#: The integer kinds of :data:`~stage_core.chakra.schema.SCALAR_KINDS` (``int32`` …
#: ``sfixed64``; not ``double``, ``float``, ``bool``, ``string``, ``bytes``).
_INTEGER_KINDS = frozenset(kind for kind in SCALAR_KINDS if "int" in kind or "fixed" in kind)


class _Malformed(Exception):
    """Raised inside the decoder; turned into a ConfigError naming the file."""


@dataclass(frozen=True, slots=True)
class DecodedTrace:
    """One decoded rank file: metadata version, STAGE nodes and foreign nodes, in file order.

    ``notes`` counts the nodes read with leniency by :data:`LENIENT` code and attribute
    (``"float:inputs"``, ``"valueless:outputs"``); ``first_noted`` names the first such node per
    code.
    """

    version: str
    nodes: tuple[TraceNode, ...]
    foreign: tuple[ForeignNode, ...]
    notes: Mapping[str, int] = field(default_factory=dict)
    first_noted: Mapping[str, str] = field(default_factory=dict)


def _attribute(data: bytes) -> tuple[str, str, object]:
    """Decode an ``AttributeProto``: (name, value kind such as "int64" or "bool_list", value)."""
    name = ""
    kind = "none"
    value: object = None
    for number, wire, raw in message_fields(data, 0, len(data)):
        if number == 1 and isinstance(raw, bytes):
            name = raw.decode("utf-8", errors="replace")
        elif number in ATTRIBUTE_VALUE_FIELDS:
            _, scalar_kind, is_list = ATTRIBUTE_VALUE_FIELDS[number]
            if not is_list:
                kind, value = scalar_kind, decode_scalar(scalar_kind, wire, raw)
                continue
            if not isinstance(raw, bytes):
                raise _Malformed(f"{scalar_kind}_list with wire type {wire}")
            items: list[object] = []
            for item_number, item_wire, item in message_fields(raw, 0, len(raw)):
                if item_number != 1:
                    continue
                if item_wire == WIRE_LENGTH and scalar_kind not in ("string", "bytes"):
                    assert isinstance(item, bytes)
                    items.extend(decode_packed(scalar_kind, item))
                else:
                    items.append(decode_scalar(scalar_kind, item_wire, item))
            kind, value = f"{scalar_kind}_list", items
    return name, kind, value


def _deps(wire: int, raw: int | bytes) -> list[int]:
    if isinstance(raw, bytes):
        return [value for value in decode_packed("uint64", raw) if isinstance(value, int)]
    return [raw]


class _NodeAttributes:
    """A node's attributes by name (first occurrence wins), with typed accessors.

    ``notes`` collects the :data:`LENIENT` codes of what was accepted only for compatibility.
    """

    def __init__(self, attributes: dict[str, tuple[str, object]], what: str) -> None:
        self._attributes = attributes
        self._what = what
        self.notes: list[str] = []

    def integer(self, name: str, required: bool) -> int:
        if name not in self._attributes:
            if required:
                raise _Malformed(f"{self._what} lacks the required attribute {name!r}")
            return 0
        kind, value = self._attributes[name]
        if kind not in _INTEGER_KINDS or not isinstance(value, int):
            raise _Malformed(f"{self._what}: attribute {name!r} must be an integer, got {kind}")
        return value

    def has(self, name: str) -> bool:
        return name in self._attributes

    def string(self, name: str) -> str | None:
        if name not in self._attributes:
            return None
        kind, value = self._attributes[name]
        if kind != "string" or not isinstance(value, str):
            raise _Malformed(f"{self._what}: attribute {name!r} must be a string, got {kind}")
        return value

    def tensors(self, name: str) -> tuple[tuple[str, int], ...]:
        if name not in self._attributes:
            return ()
        kind, value = self._attributes[name]
        if kind == "none":  # the published STAGE generator's empty lists
            self.notes.append(f"valueless:{name}")
            return ()
        if kind != "string_list" or not isinstance(value, list) or len(value) % 2:
            raise _Malformed(f"{self._what}: {name!r} must be a string list of name, size pairs")
        pairs = []
        for tensor, size in zip(value[::2], value[1::2], strict=True):
            if not isinstance(size, str) or not size.isascii():
                raise _Malformed(f"{self._what}: {name!r} size {size!r} is not an integer")
            if size.isdigit():
                pairs.append((str(tensor), int(size)))
                continue
            whole = _whole_float(size)
            if whole is None:
                raise _Malformed(
                    f"{self._what}: {name!r} size {size!r} is not an integer (nor a "
                    "floating-point number equal to one)"
                )
            self.notes.append(f"float:{name}")
            pairs.append((str(tensor), whole))
        return tuple(pairs)


_FLOAT = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?")


def _whole_float(text: str) -> int | None:
    """The integer a decimal floating-point literal such as ``"4096.0"`` or ``"1e+16"`` equals
    exactly; ``None`` for anything else (a fraction, a sign, ``inf``, ``nan``)."""
    if not _FLOAT.fullmatch(text):
        return None
    value = Decimal(text)
    if value != value.to_integral_value():
        return None
    return int(value)


#: What the reader accepts only for compatibility with the published STAGE generator
#: (``symbolic_tensor_graph``), by note code: reported as warnings, never silently.
LENIENT: dict[str, str] = {
    "valueless": (
        "carry {attribute!r} attributes without a value (the published STAGE generator writes "
        "its empty tensor lists so, e.g. the outputs of communication nodes); read as no tensors"
    ),
    "float": (
        "give {attribute!r} tensor sizes as floating-point numbers (the published STAGE "
        "generator writes them so); read as the integers they equal"
    ),
    "legacy": (
        "name their group with an integer {attribute!r} attribute instead of the string "
        "pg_name (the published STAGE generator's legacy form); read as that group id"
    ),
}


def _group(
    pg_name: str | None, groups: Mapping[str, Sequence[int]] | None, what: str
) -> tuple[int, ...] | None:
    if pg_name is None or pg_name in ("", "0"):
        return None
    if groups is None:
        raise _Malformed(
            f"{what} names pg_name {pg_name!r}, but no group table was given (a trace folder "
            f"needs the {COMM_GROUP_FILE} written with its traces)"
        )
    if pg_name not in groups:
        raise _Malformed(f"{what} names pg_name {pg_name!r}, which is not in the group table")
    return tuple(sorted(groups[pg_name]))


def _node(
    data: bytes, groups: Mapping[str, Sequence[int]] | None
) -> tuple[TraceNode | ForeignNode, tuple[str, ...]]:
    """The decoded node and the :data:`LENIENT` codes of what it needed leniency for."""
    node_id = 0
    name = ""
    node_type = 0
    data_deps: list[int] = []
    ctrl_deps: list[int] = []
    raw_attributes: list[bytes] = []
    duration_micros = 0
    for number, wire, raw in message_fields(data, 0, len(data)):
        if number == 1 and isinstance(raw, int):
            node_id = raw
        elif number == 2 and isinstance(raw, bytes):
            name = raw.decode("utf-8", errors="replace")
        elif number == 3 and isinstance(raw, int):
            node_type = raw
        elif number == 4:
            ctrl_deps.extend(_deps(wire, raw))
        elif number == 5:
            data_deps.extend(_deps(wire, raw))
        elif number == 7 and isinstance(raw, int):
            duration_micros = raw
        elif number == 10 and isinstance(raw, bytes):
            raw_attributes.append(raw)
    what = f"node {node_id} {name!r}"
    by_name: dict[str, tuple[str, object]] = {}
    for raw in raw_attributes:
        attribute_name, value_kind, value = _attribute(raw)
        by_name.setdefault(attribute_name, (value_kind, value))
    attributes = _NodeAttributes(by_name, what)
    kind = _NODE_KINDS.get(node_type)
    type_name = (
        NodeType(node_type).name
        if node_type in NodeType._value2member_map_
        else (f"NodeType({node_type})")
    )
    collective: CollectiveKind | None = None
    if kind is NodeKind.COLL:
        comm_type = attributes.integer("comm_type", required=True)
        collective = _COLLECTIVES.get(comm_type)
        if collective is None:
            known = comm_type in CollectiveCommType._value2member_map_
            comm_name = CollectiveCommType(comm_type).name if known else str(comm_type)
            type_name, kind = f"{type_name}({comm_name})", None
    if kind is None:
        return ForeignNode(node_id, name, type_name, tuple(data_deps), tuple(ctrl_deps)), ()
    flops = tensor_bytes = size = 0
    peer = tag = -1
    group: tuple[int, ...] | None = None
    if kind is NodeKind.COMP:
        flops = attributes.integer("num_ops", required=False)
        tensor_bytes = attributes.integer("tensor_size", required=False)
    else:
        size = attributes.integer("comm_size", required=True)
        if kind is NodeKind.COLL:
            pg_name = attributes.string("pg_name")
            if pg_name is None and attributes.has("comm_group"):
                # the published generator's legacy form: the group id as an integer
                pg_name = str(attributes.integer("comm_group", required=True))
                attributes.notes.append("legacy:comm_group")
            group = _group(pg_name, groups, what)
        else:
            peer_attribute = "comm_dst" if kind is NodeKind.SEND else "comm_src"
            peer = attributes.integer(peer_attribute, required=True)
            tag = attributes.integer("comm_tag", required=True)
    inputs = attributes.tensors("inputs")
    outputs = attributes.tensors("outputs")
    node = TraceNode(
        id=node_id,
        name=name,
        kind=kind,
        data_deps=tuple(data_deps),
        ctrl_deps=tuple(ctrl_deps),
        flops=flops,
        tensor_bytes=tensor_bytes,
        collective=collective,
        comm_bytes=size,
        group=group,
        peer=peer,
        tag=tag,
        inputs=inputs,
        outputs=outputs,
        duration_micros=duration_micros if kind is NodeKind.COMP else 0,
    )
    return node, tuple(dict.fromkeys(attributes.notes))


#: Decoded nodes (with their :data:`LENIENT` note codes) by their message bytes, shared by the
#: files of one trace set (whose nodes repeat across ranks); valid for one group table only.
NodeCache = dict[bytes, tuple[TraceNode | ForeignNode, tuple[str, ...]]]
_NODE_CACHE_LIMIT = 1 << 20


def decode_trace(
    data: bytes,
    groups: Mapping[str, Sequence[int]] | None = None,
    source: str = "<bytes>",
    cache: NodeCache | None = None,
) -> DecodedTrace:
    """Decode one rank file's bytes; ``groups`` (id → ranks) resolves ``pg_name``.

    An empty input decodes to no nodes; otherwise the first message is the GlobalMetadata.
    ``cache`` (see :data:`NodeCache`) skips decoding messages already seen with ``groups``.
    """
    if cache is None:
        cache = {}
    data = bytes(data)
    version = ""
    nodes: list[TraceNode] = []
    foreign: list[ForeignNode] = []
    notes: dict[str, int] = {}
    first_noted: dict[str, str] = {}
    position = 0
    index = 0
    try:
        while position < len(data):
            length, position = decode_varint(data, position)
            end = position + length
            if end > len(data):
                raise _Malformed(f"message {index} is truncated ({length} bytes announced)")
            if index == 0:
                for number, _, raw in message_fields(data, position, end):
                    if number == 1 and isinstance(raw, bytes):
                        version = raw.decode("utf-8", errors="replace")
            else:
                message = data[position:end]
                entry = cache.get(message)
                if entry is None:
                    entry = _node(message, groups)
                    if len(cache) >= _NODE_CACHE_LIMIT:
                        cache.clear()
                    cache[message] = entry
                node, node_notes = entry
                for note in node_notes:
                    if note not in notes:
                        first_noted[note] = f"{source} node {node.id} {node.name!r}"
                    notes[note] = notes.get(note, 0) + 1
                if isinstance(node, TraceNode):
                    nodes.append(node)
                else:
                    foreign.append(node)
            position = end
            index += 1
    except (_Malformed, ValueError) as error:
        raise ConfigError(f"{source}: malformed Chakra trace: {error}") from error
    return DecodedTrace(version, tuple(nodes), tuple(foreign), notes, first_noted)


def lenient_warnings(
    notes: Mapping[str, int], first_noted: Mapping[str, str], ranks: Mapping[str, int]
) -> tuple[str, ...]:
    """One warning line per note code: how many nodes in how many ranks, and the first one.

    ``notes``: nodes per code; ``ranks``: ranks per code; ``first_noted``: first node per code.
    """
    lines = []
    for code in sorted(notes):
        kind, _, attribute = code.partition(":")
        what = LENIENT[kind].format(attribute=attribute)
        lines.append(
            f"{notes[code]} node(s) in {ranks.get(code, 1)} rank(s) {what} "
            f"(first: {first_noted.get(code, '?')})"
        )
    return tuple(lines)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from error


def read_trace_file(
    path: Path | str, groups: Mapping[str, Sequence[int]] | None = None
) -> list[TraceNode]:
    """The nodes of one ``.et`` file, in file order.

    ``groups`` (id → ranks, as in ``comm_group.json``) is needed when collectives name a
    ``pg_name``. A node whose type the trace IR does not hold is a ConfigError.
    """
    path = Path(path)
    decoded = decode_trace(_read_bytes(path), groups, str(path))
    if decoded.foreign:
        first = decoded.foreign[0]
        raise ConfigError(
            f"{path}: node {first.id} {first.name!r} is a {first.type_name}, which STAGE's "
            f"trace IR cannot hold ({len(decoded.foreign)} such node(s))"
        )
    return list(decoded.nodes)


def read_trace_set(
    directory: Path | str,
    prefix: str = "workload",
    progress: Callable[[int, int], None] | None = None,
) -> TraceSet:
    """Read ``<prefix>.<rank>.et`` for ranks 0 … N−1 and ``comm_group.json`` (if present).

    Missing ranks (a gap in 0 … N−1) or no trace file at all are a ConfigError. ``progress``
    is called with (ranks read, ranks) after each rank.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory} is not a directory")
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.et")
    try:
        names = [path.name for path in directory.iterdir()]
    except OSError as error:
        raise ConfigError(f"cannot list {directory}: {error.strerror or error}") from error
    files = {int(match.group(1)): name for name in names if (match := pattern.fullmatch(name))}
    if not files:
        raise ConfigError(f"{directory} holds no {prefix}.<rank>.et files")
    missing = sorted(set(range(max(files) + 1)) - set(files))
    if missing:
        shown = ", ".join(f"{prefix}.{rank}.et" for rank in missing[:5])
        said = "1 file) is" if len(missing) == 1 else f"{len(missing)} files) are"
        raise ConfigError(
            f"{directory}: ranks 0..{max(files)} need one file each, but {shown}"
            f"{' …' if len(missing) > 5 else ''} ({said} missing"
        )
    group_file = directory / COMM_GROUP_FILE
    table = read_comm_groups(group_file) if group_file.exists() else None
    groups = table or {}
    ranks: dict[int, tuple[TraceNode, ...]] = {}
    foreign: dict[int, tuple[ForeignNode, ...]] = {}
    cache: NodeCache = {}
    notes: dict[str, int] = {}
    noted_ranks: dict[str, int] = {}
    first_noted: dict[str, str] = {}
    for done, rank in enumerate(sorted(files), start=1):
        path = directory / files[rank]
        decoded = decode_trace(_read_bytes(path), table, str(path), cache)
        if progress is not None:
            progress(done, len(files))
        ranks[rank] = decoded.nodes
        if decoded.foreign:
            foreign[rank] = decoded.foreign
        for code, count in decoded.notes.items():
            first_noted.setdefault(code, decoded.first_noted[code])
            notes[code] = notes.get(code, 0) + count
            noted_ranks[code] = noted_ranks.get(code, 0) + 1
    warnings = lenient_warnings(notes, first_noted, noted_ranks)
    return TraceSet(ranks=ranks, groups=groups, foreign=foreign, warnings=warnings)
