"""Writing trace sets: one Chakra ``.et`` file per rank plus ``comm_group.json``, or JSON.

Holds:

- :func:`write_trace_set`: per-rank programs → ``<prefix>.<rank>.et`` for every rank and
  ``comm_group.json``, streamed one rank at a time;
- :class:`RankClass`, :class:`RankMember` and :func:`write_rank_classes`: the same files from
  one program per class of symmetric ranks, each class encoded once (see
  :class:`~stage_core.chakra.encode.RankTemplate`);
- :class:`ClassColumns` and :func:`write_class_columns`: the same, with the members' groups and
  peers as integer columns — the fast path for large rank counts (what ``stage trace`` uses);
  files are written over forked workers (:mod:`stage_core.chakra.filesink`);
  :func:`compile_class_columns` encodes such a set without writing it
  (:class:`CompiledTraceSet`: its exact bytes before any file exists, then the files);
- :func:`expand_rank_classes`: the per-rank programs that a list of rank classes stands for;
- :func:`trace_set_json` / :func:`write_trace_json`: the readable JSON form.

All binary writers produce identical bytes for the same ranks, whatever the number of worker
processes, and identical bytes on every run: group ids are assigned in first-use order
(:mod:`stage_core.chakra.groups`). Files named
``<prefix>.<rank>.et`` with a rank beyond the new world size, left by an earlier run in the same
directory, are removed so that the directory holds one coherent trace set.

JSON form: one file for all ranks, an object with ``format`` ("chakra-et-json"), ``version``,
``units`` (and ``bytes_per_element`` for "stage" units), ``comm_groups`` (as in
``comm_group.json``) and ``ranks`` (rank id → list of nodes, one node per line, each
``{"id", "name", "type", "data_deps", "ctrl_deps", "attr"}`` with the Chakra attributes by name
in file order). It holds exactly the information of the ``.et`` files.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from stage_core.arguments import expect
from stage_core.chakra.encode import CHAKRA_VERSION, ChakraEncoder, RankTemplate, encode_program
from stage_core.chakra.filesink import (
    check_workers,
    removed_if_incomplete,
    write_file,
    write_rank_files,
)
from stage_core.chakra.groups import COMM_GROUP_FILE, GroupRegistry, write_comm_groups
from stage_core.chakra.mapping import GROUP, OWN_RANK, attribute_plan, unit_scale
from stage_core.chakra.schema import NodeType
from stage_core.chakra.traceset import Programs, assign_pg_names, normalize_programs
from stage_core.errors import ConfigError
from stage_core.trace import NodeKind, TraceNode

#: Called after each rank file with (ranks written, total ranks).
ProgressCallback = Callable[[int, int], None]
#: Network dimensions a group spans (ASTRA-sim ``involved_dim``), or ``None`` to omit it; it
#: receives the group's ranks, ``None`` for all ranks, and is called once per distinct group.
InvolvedDim = Callable[[tuple[int, ...] | None], tuple[bool, ...] | None]

_NODE_TYPE_NAMES = {kind: NodeType(int(kind)).name for kind in NodeKind}
_Key = TypeVar("_Key")


@dataclass(frozen=True, slots=True)
class WrittenTraceSet:
    """What a writer produced."""

    directory: Path
    prefix: str
    world_size: int
    groups: dict[str, tuple[int, ...]]
    node_count: int
    byte_count: int


@dataclass(frozen=True, slots=True)
class RankMember:
    """A rank that runs a class's program, and how its communication differs.

    ``groups`` maps a group of the class's program to this rank's group in its place (``None``:
    all ranks); ``peers`` maps a send/recv peer of the program to this rank's peer. Groups and
    peers not listed are the same as in the program.
    """

    rank: int
    groups: Mapping[tuple[int, ...] | None, tuple[int, ...] | None] = field(default_factory=dict)
    peers: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RankClass:
    """Ranks that run one program up to their groups, peers and own rank.

    ``program`` is written as run by ``rank``; ``members`` lists every rank of the class
    (``rank`` included, normally with empty maps).
    """

    program: Sequence[TraceNode]
    rank: int
    members: Sequence[RankMember]


def trace_file_name(prefix: str, rank: int) -> str:
    """``<prefix>.<rank>.et``."""
    return f"{prefix}.{rank}.et"


def _prepare_directory(out_dir: Path | str, prefix: str, world_size: int) -> Path:
    expect(out_dir, (str, os.PathLike), "out_dir", "the folder to write the traces into")
    if not isinstance(prefix, str) or not prefix or "/" in prefix:
        raise ConfigError(f"`prefix` must be a non-empty file name prefix, but got {prefix!r}")
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(
            f"out_dir: expected a folder to write the traces into, but {directory} is a file"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        names = sorted(path.name for path in directory.iterdir())
        _refuse_another_set(directory, prefix, names)
        pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.et")
        for name in names:
            match = pattern.fullmatch(name)
            if match and int(match.group(1)) >= world_size:
                (directory / name).unlink()
    except OSError as error:
        raise ConfigError(f"cannot write traces into {directory}: {error}") from error
    return directory


_TRACE_FILE = re.compile(r"(.+)\.(\d+)\.et")


def _refuse_another_set(directory: Path, prefix: str, names: Sequence[str]) -> None:
    """A ConfigError when ``directory`` holds ``.et`` files of another prefix: a folder has one
    ``comm_group.json``, so a second set would leave the first with the other's groups (s24
    review: ``--prefix foo`` into a folder of ``workload.*.et`` wrote beside them)."""
    others = [m for m in map(_TRACE_FILE.fullmatch, names) if m and m.group(1) != prefix]
    if others:
        first = others[0]
        raise ConfigError(
            f"{directory} holds another trace set ({first.group(0)} …, prefix {first.group(1)!r}) "
            f"and one comm_group.json serves a folder: writing prefix {prefix!r} beside it "
            "would give that set these groups; write into another folder or remove that set"
        )


class _Dims:
    """``involved_dim`` per pg_name, computed once per group."""

    def __init__(self, involved_dim: InvolvedDim | None, registry: GroupRegistry) -> None:
        self._function = involved_dim
        self._registry = registry
        self._cache: dict[str | None, tuple[bool, ...] | None] = {}

    @property
    def enabled(self) -> bool:
        """Whether an ``involved_dim`` function was given."""
        return self._function is not None

    def __call__(self, pg_name: str | None) -> tuple[bool, ...] | None:
        if self._function is None:
            return None
        if pg_name not in self._cache:
            group = None if pg_name is None else self._registry.groups[pg_name]
            dims = self._function(group)
            self._cache[pg_name] = None if dims is None else tuple(bool(flag) for flag in dims)
        return self._cache[pg_name]


def write_trace_set(
    out_dir: Path | str,
    programs: Programs,
    prefix: str = "workload",
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
    progress: ProgressCallback | None = None,
) -> WrittenTraceSet:
    """Write ``<prefix>.<rank>.et`` for every rank of ``programs`` and ``comm_group.json``.

    ``units``: "bytes" (bytes and FLOPs) or "stage" (element counts and multiply-accumulates;
    give ``bytes_per_element``). Files are written rank by rank, each from its encoded bytes.
    """
    ranks = normalize_programs(programs)
    encoder = ChakraEncoder(unit_scale(units, bytes_per_element))
    directory = _prepare_directory(out_dir, prefix, len(ranks))
    registry = GroupRegistry(len(ranks))
    dims = _Dims(involved_dim, registry)
    nodes = total = 0
    names = functools.partial(trace_file_name, prefix)
    with removed_if_incomplete(directory, names, len(ranks), (COMM_GROUP_FILE,)):
        for rank, program in ranks.items():
            pg_names = assign_pg_names({rank: program}, registry)[rank]
            node_dims = [dims(name) for name in pg_names] if involved_dim is not None else None
            data = encode_program(encoder, program, rank, pg_names, node_dims)
            write_file(directory / names(rank), data)
            nodes += len(program)
            total += len(data)
            if progress is not None:
                progress(rank + 1, len(ranks))
        write_comm_groups(directory / COMM_GROUP_FILE, registry.groups)
    return WrittenTraceSet(directory, prefix, len(ranks), registry.groups, nodes, total)


def _class_order(classes: Sequence[RankClass]) -> list[tuple[int, int, RankMember]]:
    order = sorted(
        (
            (member.rank, index, member)
            for index, rank_class in enumerate(classes)
            for member in rank_class.members
        ),
        key=lambda item: item[0],
    )
    _check_cover([rank for rank, _, _ in order])
    return order


def _check_cover(ranks: Sequence[int]) -> None:
    """``ranks`` sorted must be 0 … N−1, each once; a ConfigError naming the faults otherwise."""
    ordered = sorted(ranks)
    if ordered != list(range(len(ordered))) or not ordered:
        repeated = sorted(rank for rank, count in Counter(ordered).items() if count > 1)
        missing = sorted(set(range(max(ordered, default=-1) + 1)) - set(ordered))
        raise ConfigError(
            "rank classes must cover ranks 0..N-1 exactly once, but ranks "
            f"{repeated[:8]} repeat and ranks {missing[:8]} are missing"
        )


@dataclass(frozen=True, slots=True)
class ClassColumns:
    """Ranks that run one program, their groups and peers given as columns (one per member).

    ``program`` is written as run by ``rank``; ``ranks`` lists every member (``rank`` included).
    ``groups`` maps each group of the program (``None``: all ranks) to a column holding, per
    member, the index of that member's group in the group table passed to
    :func:`write_class_columns`; ``peers`` maps each send/recv peer of the program to the
    column of the members' peers. This is the form to use for many ranks: nothing per rank is
    hashed but small integers.
    """

    program: Sequence[TraceNode]
    rank: int
    ranks: Sequence[int]
    groups: Mapping[tuple[int, ...] | None, Sequence[int]]
    peers: Mapping[int, Sequence[int]]


def _program_slots(
    program: Sequence[TraceNode],
) -> tuple[list[tuple[int, ...] | None], list[int]]:
    """The distinct groups of the program's collectives and peers of its sends and receives."""
    groups: dict[tuple[int, ...] | None, None] = {}
    peers: dict[int, None] = {}
    for node in program:
        if node.kind is NodeKind.COLL:
            groups.setdefault(node.group)
        elif node.kind is NodeKind.SEND or node.kind is NodeKind.RECV:
            peers.setdefault(node.peer)
    return list(groups), list(peers)


def _columns_of(
    classes: Sequence[RankClass],
) -> tuple[list[ClassColumns], list[tuple[int, ...] | None]]:
    """The column form of ``classes`` and its group table."""
    table: dict[tuple[int, ...] | None, int] = {}
    result = []
    for rank_class in classes:
        groups, peers = _program_slots(rank_class.program)
        for member in rank_class.members:
            if not set(member.groups) <= set(groups) or not set(member.peers) <= set(peers):
                raise ConfigError(
                    f"rank {member.rank}: its `groups`/`peers` maps name groups or peers that "
                    f"the class program (written for rank {rank_class.rank}) does not use"
                )
        group_columns = {
            group: [
                table.setdefault(target, len(table))
                for target in (member.groups.get(group, group) for member in rank_class.members)
            ]
            for group in groups
        }
        peer_columns = {
            peer: [member.peers.get(peer, peer) for member in rank_class.members] for peer in peers
        }
        ranks = [member.rank for member in rank_class.members]
        result.append(
            ClassColumns(rank_class.program, rank_class.rank, ranks, group_columns, peer_columns)
        )
    return result, list(table)


def write_rank_classes(
    out_dir: Path | str,
    classes: Sequence[RankClass],
    prefix: str = "workload",
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> WrittenTraceSet:
    """Write the trace set of ``classes``: the same bytes as :func:`write_trace_set` on
    :func:`expand_rank_classes`, with each class's program encoded once.
    """
    _class_order(classes)
    columns, table = _columns_of(classes)
    return write_class_columns(
        out_dir,
        columns,
        table,
        prefix,
        units=units,
        bytes_per_element=bytes_per_element,
        involved_dim=involved_dim,
        progress=progress,
        workers=workers,
    )


def write_class_columns(
    out_dir: Path | str,
    classes: Sequence[ClassColumns],
    group_table: Sequence[tuple[int, ...] | None],
    prefix: str = "workload",
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    compile_progress: ProgressCallback | None = None,
) -> WrittenTraceSet:
    """Write the trace set of ``classes`` (see :class:`ClassColumns`): the same bytes as
    :func:`write_trace_set` on the programs they stand for (``compile_progress``: called with
    (classes encoded, classes) as each class's template is compiled).

    :func:`compile_class_columns`, then :meth:`CompiledTraceSet.write` over ``workers``
    processes (``None``: as many as there are CPUs, up to 4; see
    :mod:`stage_core.chakra.filesink`). The bytes do not depend on ``workers``.
    """
    check_workers(workers)  # before the folder is touched
    _check_cover([rank for rank_class in classes for rank in rank_class.ranks])
    world_size = sum(len(rank_class.ranks) for rank_class in classes)
    _prepare_directory(out_dir, prefix, world_size)  # a bad folder or prefix before the work
    compiled = compile_class_columns(
        classes, group_table, units=units, bytes_per_element=bytes_per_element,
        involved_dim=involved_dim, compile_progress=compile_progress,
    )  # fmt: skip
    return compiled.write(out_dir, prefix, progress=progress, workers=workers)


class CompiledTraceSet:
    """A trace set of rank classes encoded, not yet written (:func:`compile_class_columns`):
    :meth:`byte_count` is the exact size of its ``.et`` files, known before any is written;
    :meth:`write` writes them."""

    def __init__(
        self,
        classes: Sequence[ClassColumns],
        templates: list[RankTemplate],
        rank_slots: tuple[list[int], list[int], list[list[str | None]], list[list[list[int]]]],
        registry: GroupRegistry,
        dims: _Dims,
    ) -> None:
        self.world_size = len(rank_slots[0])
        self.node_count = sum(len(c.program) * len(c.ranks) for c in classes)
        self._templates = templates
        self._class_of, self._member_of, self._pg_names, self._peer_columns = rank_slots
        self._registry = registry
        self._dims = dims
        self._involved = dims.enabled

    def _arguments(
        self, rank: int
    ) -> tuple[RankTemplate, list[str | None], list[int], list[tuple[bool, ...] | None] | None]:
        index, member = self._class_of[rank], self._member_of[rank]
        names = self._pg_names[rank]
        node_dims = [self._dims(name) for name in names] if self._involved else None
        peers = [column[member] for column in self._peer_columns[index]]
        return self._templates[index], names, peers, node_dims

    def emit(self, rank: int) -> bytes:
        """The ``.et`` file of ``rank``."""
        template, names, peers, node_dims = self._arguments(rank)
        return template.emit_file(rank, names, peers, node_dims)

    def byte_count(self) -> int:
        """The total bytes of the ``.et`` files, exactly as :meth:`write` would write them
        (each rank's file length counted from its template, nothing assembled)."""
        total = 0
        for rank in range(self.world_size):
            template, names, peers, node_dims = self._arguments(rank)
            total += template.file_size(rank, names, peers, node_dims)
        return total

    def write(
        self,
        out_dir: Path | str,
        prefix: str = "workload",
        *,
        progress: ProgressCallback | None = None,
        workers: int | None = None,
    ) -> WrittenTraceSet:
        """Write ``<prefix>.<rank>.et`` for every rank and ``comm_group.json`` into ``out_dir``
        (see :func:`write_class_columns`)."""
        check_workers(workers)
        directory = _prepare_directory(out_dir, prefix, self.world_size)
        file_name = functools.partial(trace_file_name, prefix)
        with removed_if_incomplete(directory, file_name, self.world_size, (COMM_GROUP_FILE,)):
            total = write_rank_files(
                directory, file_name, self.emit, self.world_size, workers=workers,
                progress=progress,
            )  # fmt: skip
            write_comm_groups(directory / COMM_GROUP_FILE, self._registry.groups)
        groups = self._registry.groups
        return WrittenTraceSet(directory, prefix, self.world_size, groups, self.node_count, total)


def compile_class_columns(
    classes: Sequence[ClassColumns],
    group_table: Sequence[tuple[int, ...] | None],
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
    compile_progress: ProgressCallback | None = None,
) -> CompiledTraceSet:
    """Encode the trace set of ``classes`` (see :class:`ClassColumns`) without writing it.

    Each class's template is compiled once; group ids are assigned in one pass over the ranks
    in ascending order (so the bytes are those every writer produces).
    """
    _check_cover([rank for rank_class in classes for rank in rank_class.ranks])
    world_size = sum(len(rank_class.ranks) for rank_class in classes)
    encoder = ChakraEncoder(unit_scale(units, bytes_per_element))
    registry = GroupRegistry(world_size)
    dims = _Dims(involved_dim, registry)
    class_of = [0] * world_size
    member_of = [0] * world_size
    templates: list[RankTemplate] = []
    group_columns: list[list[list[int]]] = []
    peer_columns: list[list[list[int]]] = []
    for index, rank_class in enumerate(classes):
        for member, rank in enumerate(rank_class.ranks):
            class_of[rank], member_of[rank] = index, member
        template = encoder.compile(rank_class.program, rank_class.rank)
        templates.append(template)
        if compile_progress is not None:
            compile_progress(len(templates), len(classes))
        group_columns.append(
            [_column(rank_class.groups, group, rank_class, "group") for group in template.groups]
        )
        peer_columns.append(
            [_column(rank_class.peers, peer, rank_class, "peer") for peer in template.peers]
        )
    unset = object()
    pg_of: list[object] = [unset] * len(group_table)
    pg_names: list[list[str | None]] = []
    for rank in range(world_size):
        member = member_of[rank]
        names: list[str | None] = []
        for column in group_columns[class_of[rank]]:
            index = column[member]
            if not 0 <= index < len(group_table):
                raise ConfigError(
                    f"rank {rank}: group index {index} is outside the group table "
                    f"(0..{len(group_table) - 1})"
                )
            name = pg_of[index]
            if name is unset:
                name = pg_of[index] = registry.pg_name(group_table[index])
            assert name is None or isinstance(name, str)
            names.append(name)
        pg_names.append(names)
    slots = (class_of, member_of, pg_names, peer_columns)
    return CompiledTraceSet(classes, templates, slots, registry, dims)


def _column(
    columns: Mapping[_Key, Sequence[int]], key: _Key, rank_class: ClassColumns, what: str
) -> list[int]:
    column = columns.get(key)
    if column is None or len(column) != len(rank_class.ranks):
        raise ConfigError(
            f"the class of rank {rank_class.rank} needs a column of {len(rank_class.ranks)} "
            f"entries for its {what} {key!r}, but got "
            f"{'none' if column is None else len(column)}"
        )
    return [int(value) for value in column]


def expand_rank_classes(classes: Sequence[RankClass]) -> dict[int, tuple[TraceNode, ...]]:
    """The per-rank programs that ``classes`` stand for, in rank order."""
    programs: dict[int, tuple[TraceNode, ...]] = {}
    for rank, index, member in _class_order(classes):
        program = []
        for node in classes[index].program:
            if node.kind is NodeKind.COLL and node.group in member.groups:
                node = replace(node, group=member.groups[node.group])
            elif node.kind in (NodeKind.SEND, NodeKind.RECV) and node.peer in member.peers:
                node = replace(node, peer=member.peers[node.peer])
            program.append(node)
        programs[rank] = tuple(program)
    return programs


def trace_set_json(
    programs: Programs,
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
) -> str:
    """The JSON form of a trace set (see the module docstring), as text."""
    ranks = normalize_programs(programs)
    scale = unit_scale(units, bytes_per_element)
    registry = GroupRegistry(len(ranks))
    dims = _Dims(involved_dim, registry)
    rank_blocks = []
    for rank, program in ranks.items():
        pg_names = assign_pg_names({rank: program}, registry)[rank]
        lines = []
        for node, pg_name in zip(program, pg_names, strict=True):
            attributes: dict[str, object] = {}
            for name, kind, value in attribute_plan(node, scale):
                if kind == GROUP:
                    if pg_name is not None:
                        attributes["pg_name"] = pg_name
                    node_dims = dims(pg_name)
                    if node_dims is not None:
                        attributes["involved_dim"] = list(node_dims)
                else:  # OWN_RANK is this rank; PEER and static kinds carry their value
                    attributes[name] = rank if kind == OWN_RANK else value
            entry = {
                "id": node.id,
                "name": node.name,
                "type": _NODE_TYPE_NAMES[node.kind],
                "data_deps": list(node.data_deps),
                "ctrl_deps": list(node.ctrl_deps),
                "attr": attributes,
            }
            lines.append("      " + json.dumps(entry))
        body = ",\n".join(lines)
        rank_blocks.append(f'    "{rank}": [\n{body}\n    ]' if lines else f'    "{rank}": []')
    header: dict[str, object] = {
        "format": "chakra-et-json",
        "version": CHAKRA_VERSION,
        "units": scale.units,
    }
    if scale.units == "stage":
        header["bytes_per_element"] = scale.bytes_per_element
    head = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in header.items())
    groups = json.dumps({key: list(value) for key, value in registry.groups.items()})
    ranks_text = ",\n".join(rank_blocks)
    return f'{{\n{head},\n  "comm_groups": {groups},\n  "ranks": {{\n{ranks_text}\n  }}\n}}\n'


def write_trace_json(
    path: Path | str,
    programs: Programs,
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
) -> Path:
    """Write :func:`trace_set_json` to ``path`` (one file for all ranks); return the path."""
    expect(path, (str, os.PathLike), "path", "the JSON file to write")
    path = Path(path)
    text = trace_set_json(
        programs, units=units, bytes_per_element=bytes_per_element, involved_dim=involved_dim
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot write {path}: {error}") from error
    write_file(path, text.encode("utf-8"))  # a failed write leaves no truncated file (s24 review)
    return path
