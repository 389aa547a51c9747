"""Ranks and network coordinates: where a rank sits and which dims a group spans.

Holds :func:`coordinates` (rank → coordinate per network dim, dim 0 varying fastest, as in
ASTRA-sim), :class:`GroupSpan` and :func:`group_span` (the distinct coordinates a communicator
group takes in every dim, hence the dims it spans and its ranks per dim, and the smallest block
of members below each dim).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from stage_core.errors import ConfigError


def coordinates(rank: int, dim_sizes: Sequence[int]) -> tuple[int, ...]:
    """The coordinate of ``rank`` in every dim, dim 0 varying fastest."""
    coords = []
    for size in dim_sizes:
        coords.append(rank % size)
        rank //= size
    return tuple(coords)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpan:
    """The members of a group and how many distinct coordinates they take in every dim."""

    members: tuple[int, ...]
    counts: tuple[int, ...]
    #: Per dim, the fewest members sharing one coordinate in every dim above it: the smallest
    #: block a hierarchical collective has reduced into when it leaves that dim (for a regular
    #: group the product of the counts up to the dim; 8 + 4 ranks on two 8-GPU nodes: 4 on the
    #: node dim, whose 4 NICs then carry the node's share).
    blocks: tuple[int, ...] = ()
    #: Per dim, the hops of one flat ring through the members in rank order (the path a chunk
    #: of NCCL's ring all-gather or reduce-scatter travels: ``len(members) − 1`` hops) whose
    #: highest differing coordinate is that dim: the links of that dim the ring crosses (64
    #: ranks on eight 8-GPU nodes: 56 hops on NVLink, 7 across the nodes).
    hops: tuple[int, ...] = ()

    @property
    def dims(self) -> tuple[int, ...]:
        """The dims the group spans (more than one coordinate)."""
        return tuple(index for index, count in enumerate(self.counts) if count > 1)

    @property
    def regular(self) -> bool:
        """True when the members are every combination of their coordinates (a sub-grid)."""
        return len(self.members) == math.prod(self.counts)


def group_span(dim_sizes: Sequence[int], group: Sequence[int]) -> GroupSpan:
    """The :class:`GroupSpan` of ``group`` on dims of ``dim_sizes`` (dim 0 fastest)."""
    members = tuple(sorted(group))
    world = math.prod(dim_sizes)
    if len(set(members)) != len(members):
        raise ConfigError(f"communicator group {list(group)} lists a rank more than once")
    if members and not 0 <= members[0] <= members[-1] < world:
        raise ConfigError(f"communicator group {list(group)} has ranks outside 0..{world - 1}")
    coords = [coordinates(member, dim_sizes) for member in members]
    counts = tuple(len({c[index] for c in coords}) for index in range(len(dim_sizes)))
    # per dim, the members sharing each coordinate tuple of the dims above it
    above = [Counter(c[index + 1 :] for c in coords) for index in range(len(dim_sizes))]
    blocks = tuple(min(counter.values(), default=0) for counter in above)
    # the distinct coordinate tuples from dim j up (members: every rank's own): a ring in rank
    # order crosses a dim-j-or-above boundary between two of them, units[j] − 1 hops in all
    units = [len(members), *(len(counter) for counter in above)]
    hops = tuple(units[index] - units[index + 1] for index in range(len(dim_sizes)))
    return GroupSpan(members=members, counts=counts, blocks=blocks, hops=hops)
