"""A whole trace set in memory: every rank's nodes plus the communicator groups.

Holds :class:`TraceSet` (what the reader returns and the checker and dumper take),
:class:`ForeignNode` (a node read from a file whose type STAGE's trace IR does not hold, kept so
that the checker can report it and still see the dependency graph whole),
:func:`normalize_programs` (validates that programs cover ranks 0 … N−1) and
:func:`trace_set_from_programs` (a trace set built in memory, with group ids assigned exactly as
the writers assign them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stage_core.chakra.groups import GroupRegistry
from stage_core.errors import ConfigError
from stage_core.trace import NodeKind, TraceNode

#: Per-rank programs as accepted by the writers: rank → nodes, or a sequence indexed by rank.
Programs = Mapping[int, Sequence[TraceNode]] | Sequence[Sequence[TraceNode]]


@dataclass(frozen=True, slots=True)
class ForeignNode:
    """A node whose type STAGE does not emit, e.g. ``METADATA_NODE`` or a BROADCAST collective.

    ``type_name`` is the Chakra node type name, with the collective type in parentheses for
    collectives (``"COMM_COLL_NODE(BROADCAST)"``).
    """

    id: int
    name: str
    type_name: str
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TraceSet:
    """Every rank's trace (ranks 0 … N−1, nodes in file order) and the group table.

    ``groups`` maps a group id (``pg_name``) to its sorted ranks, as in ``comm_group.json``;
    the nodes themselves carry their groups as rank tuples (``None``: all ranks).
    ``warnings`` are one-line notes of what the reader accepted only for compatibility (traces
    of the published STAGE generator), for the user to see.
    """

    ranks: Mapping[int, tuple[TraceNode, ...]]
    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    foreign: Mapping[int, tuple[ForeignNode, ...]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)


def normalize_programs(programs: Programs) -> dict[int, Sequence[TraceNode]]:
    """Programs as a dict over ranks 0 … N−1, in rank order; anything else is a ConfigError."""
    if isinstance(programs, Mapping):
        ranks = sorted(programs)
        if ranks != list(range(len(ranks))):
            raise ConfigError(
                f"programs must cover ranks 0..{len(ranks) - 1} exactly, but got ranks "
                f"{ranks[:8]}{' …' if len(ranks) > 8 else ''}"
            )
        result = {rank: programs[rank] for rank in ranks}
    else:
        result = dict(enumerate(programs))
    if not result:
        raise ConfigError("a trace set needs at least one rank, but got no programs")
    return result


def assign_pg_names(
    programs: Mapping[int, Sequence[TraceNode]], registry: GroupRegistry
) -> dict[int, list[str | None]]:
    """Every node's ``pg_name`` (``None`` unless a collective on a proper sub-group), per rank.

    Ranks are visited in ascending order, so ids are assigned in first-use order.
    """
    names: dict[int, list[str | None]] = {}
    pg_name = registry.pg_name
    for rank in sorted(programs):
        names[rank] = [
            pg_name(node.group) if node.kind is NodeKind.COLL else None for node in programs[rank]
        ]
    return names


def trace_set_from_programs(programs: Programs) -> TraceSet:
    """A :class:`TraceSet` of in-memory programs (for checking without writing files).

    Group ids follow the writers' first-use order. Groups are not validated here, so that
    :func:`~stage_core.chakra.check.check_trace_set` can report bad ones.
    """
    ranks = normalize_programs(programs)
    all_ranks = tuple(range(len(ranks)))
    groups: dict[tuple[int, ...], str] = {}
    for rank in sorted(ranks):
        for node in ranks[rank]:
            group = node.group
            if node.kind is NodeKind.COLL and group is not None and group != all_ranks:
                groups.setdefault(group, str(len(groups) + 1))
    return TraceSet(
        ranks={rank: tuple(nodes) for rank, nodes in ranks.items()},
        groups={name: group for group, name in groups.items()},
    )
