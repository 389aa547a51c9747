"""Writing trace sets: one Chakra ``.et`` file per rank plus ``comm_group.json``, or JSON.

Holds:

- :func:`write_trace_set`: per-rank programs → ``<prefix>.<rank>.et`` for every rank and
  ``comm_group.json``, streamed one rank at a time;
- :class:`RankClass`, :class:`RankMember` and :func:`write_rank_classes`: the same files from
  one program per class of symmetric ranks, each class encoded once (see
  :class:`~stage_core.chakra.encode.RankTemplate`) — the fast path for large rank counts;
- :func:`expand_rank_classes`: the per-rank programs that a list of rank classes stands for;
- :func:`trace_set_json` / :func:`write_trace_json`: the readable JSON form.

Both binary writers produce identical bytes for the same ranks, and identical bytes on every run:
group ids are assigned in first-use order (:mod:`stage_core.chakra.groups`). Files named
``<prefix>.<rank>.et`` with a rank beyond the new world size, left by an earlier run in the same
directory, are removed so that the directory holds one coherent trace set.

JSON form: one file for all ranks, an object with ``format`` ("chakra-et-json"), ``version``,
``units`` (and ``bytes_per_element`` for "stage" units), ``comm_groups`` (as in
``comm_group.json``) and ``ranks`` (rank id → list of nodes, one node per line, each
``{"id", "name", "type", "data_deps", "ctrl_deps", "attr"}`` with the Chakra attributes by name
in file order). It holds exactly the information of the ``.et`` files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from stage_core.chakra.encode import CHAKRA_VERSION, ChakraEncoder, RankTemplate, encode_program
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
    if not prefix or "/" in prefix:
        raise ConfigError(f"`prefix` must be a non-empty file name prefix, but got {prefix!r}")
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.et")
        for path in directory.iterdir():
            match = pattern.fullmatch(path.name)
            if match and int(match.group(1)) >= world_size:
                path.unlink()
    except OSError as error:
        raise ConfigError(f"cannot write traces into {directory}: {error}") from error
    return directory


def _write_file(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as error:
        raise ConfigError(f"cannot write {path}: {error}") from error


class _Dims:
    """``involved_dim`` per pg_name, computed once per group."""

    def __init__(self, involved_dim: InvolvedDim | None, registry: GroupRegistry) -> None:
        self._function = involved_dim
        self._registry = registry
        self._cache: dict[str | None, tuple[bool, ...] | None] = {}

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
    for rank, program in ranks.items():
        pg_names = assign_pg_names({rank: program}, registry)[rank]
        node_dims = [dims(name) for name in pg_names] if involved_dim is not None else None
        data = encode_program(encoder, program, rank, pg_names, node_dims)
        _write_file(directory / trace_file_name(prefix, rank), data)
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
    ranks = [rank for rank, _, _ in order]
    if ranks != list(range(len(ranks))) or not ranks:
        repeated = sorted(rank for rank, count in Counter(ranks).items() if count > 1)
        missing = sorted(set(range(max(ranks, default=-1) + 1)) - set(ranks))
        raise ConfigError(
            "rank classes must cover ranks 0..N-1 exactly once, but ranks "
            f"{repeated[:8]} repeat and ranks {missing[:8]} are missing"
        )
    return order


def write_rank_classes(
    out_dir: Path | str,
    classes: Sequence[RankClass],
    prefix: str = "workload",
    *,
    units: str = "bytes",
    bytes_per_element: int | None = None,
    involved_dim: InvolvedDim | None = None,
    progress: ProgressCallback | None = None,
) -> WrittenTraceSet:
    """Write the trace set of ``classes``: the same bytes as :func:`write_trace_set` on
    :func:`expand_rank_classes`, with each class's program encoded once.
    """
    order = _class_order(classes)
    world_size = len(order)
    encoder = ChakraEncoder(unit_scale(units, bytes_per_element))
    directory = _prepare_directory(out_dir, prefix, world_size)
    registry = GroupRegistry(world_size)
    dims = _Dims(involved_dim, registry)
    templates: dict[int, RankTemplate] = {}
    nodes = total = 0
    for rank, index, member in order:
        template = templates.get(index)
        if template is None:
            template = encoder.compile(classes[index].program, classes[index].rank)
            templates[index] = template
        if not set(member.groups) <= set(template.groups) or not set(member.peers) <= set(
            template.peers
        ):
            raise ConfigError(
                f"rank {rank}: its `groups`/`peers` maps name groups or peers that the class "
                f"program (written for rank {classes[index].rank}) does not use"
            )
        member_groups, member_peers = member.groups, member.peers
        pg_names = [registry.pg_name(member_groups.get(group, group)) for group in template.groups]
        peers = [member_peers.get(peer, peer) for peer in template.peers]
        node_dims = [dims(name) for name in pg_names] if involved_dim is not None else None
        data = template.emit_file(rank, pg_names, peers, node_dims)
        _write_file(directory / trace_file_name(prefix, rank), data)
        nodes += len(classes[index].program)
        total += len(data)
        if progress is not None:
            progress(rank + 1, world_size)
    write_comm_groups(directory / COMM_GROUP_FILE, registry.groups)
    return WrittenTraceSet(directory, prefix, world_size, registry.groups, nodes, total)


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
    path = Path(path)
    text = trace_set_json(
        programs, units=units, bytes_per_element=bytes_per_element, involved_dim=involved_dim
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot write {path}: {error}") from error
    return path
