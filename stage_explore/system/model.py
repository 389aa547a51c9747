"""The hardware description as data: network dims and the system.

Holds:

- :class:`Topology` and :class:`CollectiveAlgorithm`, the closed vocabularies of a network dim;
- :class:`CollectiveAlgorithms` and :class:`NetworkDim`, one level of the network;
- :class:`System`, an accelerator (:mod:`~stage_explore.system.accelerator`) plus its network
  dims from the scale-up domain outwards.

Ranks map to network coordinates as in ASTRA-sim: dimension 0 varies fastest in the rank id, so
with dims of sizes ``(8, 1024)`` ranks 0–7 share a node and rank 8 starts the next node.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.accelerator import Accelerator
from stage_explore.system.checks import (
    BYTES_PER_S_FLOOR,
    LINK_SECONDS_CEILING,
    check_fraction,
    check_positive,
    check_rate,
    check_seconds,
)
from stage_explore.system.ranks import coordinates


class Topology(StrEnum):
    """How the ranks of one network dim are connected."""

    RING = "ring"
    SWITCH = "switch"
    FULLY_CONNECTED = "fully_connected"


class CollectiveAlgorithm(StrEnum):
    """The algorithm a collective uses on one network dim."""

    RING = "ring"
    DIRECT = "direct"
    HALVING_DOUBLING = "halving_doubling"


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveAlgorithms:
    """The algorithm each collective kind uses on one network dim."""

    all_reduce: CollectiveAlgorithm = CollectiveAlgorithm.RING
    all_gather: CollectiveAlgorithm = CollectiveAlgorithm.RING
    reduce_scatter: CollectiveAlgorithm = CollectiveAlgorithm.RING
    all_to_all: CollectiveAlgorithm = CollectiveAlgorithm.DIRECT

    def for_kind(self, kind: CollectiveKind) -> CollectiveAlgorithm:
        algorithm: CollectiveAlgorithm = getattr(self, kind.value)
        return algorithm

    def to_dict(self) -> dict[str, str]:
        return {kind.value: self.for_kind(kind).value for kind in CollectiveKind}


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkDim:
    """One level of the network.

    ``bandwidth_bytes_per_s`` is per rank and per direction (for a ring: the link to each
    neighbour). ``latency_s`` is the time of an empty message between two ranks of this dim
    (through the switch for a switch), the α of the α–β model. ``bus_efficiency`` (optional) is
    the fraction of the link bandwidth that NCCL's bus bandwidth reaches on large messages
    (nccl-tests' ``busbw``); ``collective_overhead_s`` a fixed cost per collective on this dim
    (kernel launch and protocol set-up), which makes small messages reach a lower bus bandwidth.
    ``small_message_overhead_s`` (optional): NCCL's fixed cost per call with its low-latency
    (LL) protocol, which its tuner picks for small messages (a lower fixed cost, a quarter to a
    third of the bus bandwidth; an NCCL all-reduce, all-gather or reduce-scatter takes the
    faster protocol: :mod:`stage_explore.analytical.collectives`, "NCCL's protocols"). None:
    no figure, every NCCL call is timed with ``collective_overhead_s`` alone.
    ``bus_efficiency_by_ranks`` (optional, needs ``bus_efficiency``): ``(ranks, fraction)``
    pairs, the bus bandwidth fraction NCCL reaches for a collective over exactly that many
    ranks of this dim, in place of ``bus_efficiency`` (on an A100 NVSwitch node nccl-tests'
    all-reduce bus bandwidth grows with the group: ~191 / 216 / 226 GB/s over 2 / 4 / 8 GPUs).
    ``bus_efficiency_scaling`` (optional): ``(ranks, factor)`` points, the factor on the
    achieved bandwidth of a ring collective (all-reduce, reduce-scatter, all-gather; not
    all-to-all) over ``ranks`` ranks of this dim — the bus bandwidth NCCL reaches falling as a
    ring spans more nodes of a scale-out fabric. Between two points the factor is interpolated
    linearly in ``log2(ranks)``; it is 1 below the first point and held at the last point's
    value beyond it (not extrapolated): :meth:`scaling_factor`.
    The α–β mode reads both; an ASTRA-sim configuration keeps one bandwidth per dim.
    ``nccl_channels`` (optional): the thread blocks (one per channel, each holding an SM) an
    NCCL collective over a group whose outermost dim is this one runs on every GPU of it; the
    analytical backend slows compute that overlaps such a collective by that share of the SMs
    (:mod:`stage_explore.analytical.contention`). None: no figure, no slowdown.
    ``nccl_channels_by_ranks`` (optional, needs ``nccl_channels``): ``(ranks, channels)``
    pairs, the channels of a collective over a group of exactly that many ranks whose
    outermost dim is this one, in place of ``nccl_channels`` (RCCL opens 32 / 24 channels for
    2- / 4-GPU groups of an 8x MI300X node, 64 for all 8): :meth:`channels_for`.
    ``nvls_efficiency`` (optional, needs ``bus_efficiency``): the fraction of the link
    bandwidth, per direction, that NVLink SHARP multicast traffic (``multimem.ld_reduce`` /
    ``multimem.st`` through the switch) reaches on this dim, read off NCCL's NVLS all-reduce
    (its algorithm bandwidth times ``1 + 1/n``: each GPU sends and receives ``S (1 + 1/n)``,
    NVIDIA/nccl#1083). The
    analytical backend times Transformer Engine's userbuffers multicast reduce-scatters and
    all-gathers with it (:mod:`stage_explore.analytical.ub_multicast`). None: the dim has no
    multicast (no NVSwitch with SHARP, or no figure); those kernels are timed as rings.
    """

    name: str = ""
    size: int
    topology: Topology
    bandwidth_bytes_per_s: float
    latency_s: float
    algorithms: CollectiveAlgorithms = field(default_factory=CollectiveAlgorithms)
    bus_efficiency: float | None = None
    collective_overhead_s: float = 0.0
    small_message_overhead_s: float | None = None
    bus_efficiency_by_ranks: tuple[tuple[int, float], ...] = ()
    bus_efficiency_scaling: tuple[tuple[int, float], ...] = ()
    nccl_channels: int | None = None
    nccl_channels_by_ranks: tuple[tuple[int, int], ...] = ()
    nvls_efficiency: float | None = None

    def __post_init__(self) -> None:
        label = f"network dim {self.name!r}" if self.name else "network dim"
        if self.nvls_efficiency is not None:
            check_fraction(self.nvls_efficiency, f"{label} `nvls_efficiency`")
            if self.bus_efficiency is None:
                raise ConfigError(f"{label} `nvls_efficiency` needs `bus_efficiency` as well")
        channels = self.nccl_channels
        if channels is not None and (
            isinstance(channels, bool) or not isinstance(channels, int) or channels < 1
        ):
            raise ConfigError(
                f"{label} `nccl_channels` must be an integer >= 1, but got {channels!r}"
            )
        if self.bus_efficiency is not None:
            check_fraction(self.bus_efficiency, f"{label} `bus_efficiency`")
        self._check_by_ranks(label)
        self._check_channels_by_ranks(label)
        self._check_scaling(label)
        check_seconds(
            self.collective_overhead_s, f"{label} `collective_overhead_s`", LINK_SECONDS_CEILING
        )
        if self.small_message_overhead_s is not None:
            check_seconds(
                self.small_message_overhead_s,
                f"{label} `small_message_overhead_s`",
                LINK_SECONDS_CEILING,
            )
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ConfigError(f"{label} `size` must be an integer >= 1, but got {self.size!r}")
        try:
            object.__setattr__(self, "topology", Topology(self.topology))
        except ValueError:
            known = ", ".join(t.value for t in Topology)
            raise ConfigError(
                f"{label} `topology` must be one of {known}, but got {self.topology!r}"
            ) from None
        check_rate(
            self.bandwidth_bytes_per_s, f"{label} `bandwidth_bytes_per_s`", BYTES_PER_S_FLOOR,
            "bytes/s", "GB/s", 1e9,
        )  # fmt: skip
        check_seconds(self.latency_s, f"{label} `latency_s`", LINK_SECONDS_CEILING)
        for kind in CollectiveKind:
            algorithm = self.algorithms.for_kind(kind)
            if algorithm is CollectiveAlgorithm.HALVING_DOUBLING and self.size & (self.size - 1):
                raise ConfigError(
                    f"{label}: halving_doubling for {kind.value} needs a power-of-two size, "
                    f"but got size={self.size}"
                )

    def _check_rank_keys(self, key: str, ranks_list: list[int]) -> None:
        """A per-group-size table's keys: whole rank counts from 2 to this dim's size, each
        once; ``key`` names the table in the one-line error."""
        seen: set[int] = set()
        for ranks in ranks_list:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= self.size:
                raise ConfigError(
                    f"{key} keys must be rank counts from 2 to the dim's size {self.size}, "
                    f"but got {ranks!r}"
                )
            if ranks in seen:
                raise ConfigError(f"{key} lists {ranks} ranks twice")
            seen.add(ranks)

    def _check_by_ranks(self, label: str) -> None:
        pairs = self.bus_efficiency_by_ranks
        if pairs and self.bus_efficiency is None:
            raise ConfigError(f"{label} `bus_efficiency_by_ranks` needs `bus_efficiency` as well")
        self._check_rank_keys(f"{label} `bus_efficiency_by_ranks`", [n for n, _ in pairs])
        for ranks, fraction in pairs:
            check_fraction(fraction, f"{label} `bus_efficiency_by_ranks.{ranks}`")

    def _check_channels_by_ranks(self, label: str) -> None:
        key = f"{label} `nccl_channels_by_ranks`"
        if self.nccl_channels_by_ranks and self.nccl_channels is None:
            raise ConfigError(f"{key} needs `nccl_channels` as well")
        self._check_rank_keys(key, [n for n, _ in self.nccl_channels_by_ranks])
        for ranks, channels in self.nccl_channels_by_ranks:
            if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
                raise ConfigError(f"{key}.{ranks} must be an integer >= 1, but got {channels!r}")

    def channels_for(self, ranks: int) -> int | None:
        """The NCCL channels of a collective over a group of ``ranks`` ranks whose outermost
        dim is this one: ``nccl_channels_by_ranks[ranks]`` when listed, else ``nccl_channels``
        (None: no figure)."""
        for count, channels in self.nccl_channels_by_ranks:
            if count == ranks:
                return channels
        return self.nccl_channels

    def _check_scaling(self, label: str) -> None:
        previous = 1
        for ranks, factor in self.bus_efficiency_scaling:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks <= previous:
                raise ConfigError(
                    f"{label} `bus_efficiency_scaling` keys must be increasing rank counts >= 2, "
                    f"but got {ranks!r} after {previous}"
                )
            previous = ranks
            check_fraction(factor, f"{label} `bus_efficiency_scaling.{ranks}`")

    def scaling_factor(self, ranks: int) -> float:
        """The factor on this dim's achieved bandwidth for a ring collective over ``ranks`` of
        its ranks (``bus_efficiency_scaling``): 1 below the first point, the last point's factor
        beyond the last, linear in ``log2(ranks)`` between two points."""
        points = self.bus_efficiency_scaling
        if not points or ranks < points[0][0]:
            return 1.0
        for (low, low_factor), (high, high_factor) in itertools.pairwise(points):
            if ranks <= high:
                share = math.log2(ranks / low) / math.log2(high / low)
                return low_factor + share * (high_factor - low_factor)
        return points[-1][1]

    def multicast_factor(self) -> float | None:
        """The factor on this dim's achieved bandwidth (scaled by ``bus_efficiency``) for NVLink
        SHARP multicast traffic: ``nvls_efficiency / bus_efficiency``; None without
        ``nvls_efficiency`` (no multicast)."""
        if self.nvls_efficiency is None or not self.bus_efficiency:
            return None
        return self.nvls_efficiency / self.bus_efficiency

    def bandwidth_factor(self, ranks: int) -> float:
        """The factor on this dim's achieved bandwidth (scaled by ``bus_efficiency``) for a
        collective over ``ranks`` of its ranks: ``bus_efficiency_by_ranks[ranks] /
        bus_efficiency`` when listed, else 1."""
        for count, fraction in self.bus_efficiency_by_ranks:
            if count == ranks and self.bus_efficiency:
                return fraction / self.bus_efficiency
        return 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            "topology": self.topology.value,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "latency_s": self.latency_s,
            "algorithms": self.algorithms.to_dict(),
            **({} if self.bus_efficiency is None else {"bus_efficiency": self.bus_efficiency}),
            **(
                {"collective_overhead_s": self.collective_overhead_s}
                if self.collective_overhead_s
                else {}
            ),
            **(
                {"small_message_overhead_s": self.small_message_overhead_s}
                if self.small_message_overhead_s is not None
                else {}
            ),
            **(
                {"bus_efficiency_by_ranks": {str(n): f for n, f in self.bus_efficiency_by_ranks}}
                if self.bus_efficiency_by_ranks
                else {}
            ),
            **(
                {"bus_efficiency_scaling": {str(n): f for n, f in self.bus_efficiency_scaling}}
                if self.bus_efficiency_scaling
                else {}
            ),
            **({} if self.nccl_channels is None else {"nccl_channels": self.nccl_channels}),
            **(
                {"nccl_channels_by_ranks": {str(n): c for n, c in self.nccl_channels_by_ranks}}
                if self.nccl_channels_by_ranks
                else {}
            ),
            **({} if self.nvls_efficiency is None else {"nvls_efficiency": self.nvls_efficiency}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    """An accelerator and its network dims, from the scale-up domain outwards.

    The product of the dim sizes is the largest number of GPUs the system describes; a design
    point may use fewer. Dim 0 varies fastest in the rank id.
    """

    name: str
    accelerator: Accelerator
    network: tuple[NetworkDim, ...]
    description: str = ""
    price_per_gpu_hour: float | None = None
    power_w: float | None = None

    def __post_init__(self) -> None:
        if not self.network:
            raise ConfigError(f"system {self.name!r} needs at least one network dim")
        object.__setattr__(self, "network", tuple(self.network))
        expect(self.accelerator, Accelerator, f"system {self.name!r} `accelerator`")
        for dim in self.network:
            expect(dim, NetworkDim, f"system {self.name!r} `network` dim", "NetworkDim(size=…, …)")
        if self.price_per_gpu_hour is not None:
            check_positive(self.price_per_gpu_hour, f"system {self.name!r} `price_per_gpu_hour`")
        if self.power_w is not None:
            check_positive(self.power_w, f"system {self.name!r} `power_w`")

    @property
    def dim_sizes(self) -> tuple[int, ...]:
        return tuple(dim.size for dim in self.network)

    @property
    def max_gpus(self) -> int:
        return math.prod(self.dim_sizes)

    def coordinates(self, rank: int) -> tuple[int, ...]:
        """The coordinate of ``rank`` in every network dim (dim 0 fastest)."""
        if not 0 <= rank < self.max_gpus:
            raise ConfigError(
                f"rank {rank} is outside system {self.name!r}, which has {self.max_gpus} GPUs"
            )
        return coordinates(rank, self.dim_sizes)

    def rank_of(self, coordinates: tuple[int, ...]) -> int:
        """The rank at ``coordinates`` (dim 0 fastest)."""
        rank = 0
        for coordinate, size in zip(reversed(coordinates), reversed(self.dim_sizes), strict=True):
            rank = rank * size + coordinate
        return rank

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "accelerator": self.accelerator.to_dict(),
            "network": [dim.to_dict() for dim in self.network],
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "power_w": self.power_w,
        }
