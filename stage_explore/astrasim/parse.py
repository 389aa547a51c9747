"""Reading what ASTRA-sim prints: every rank's ``finished`` line and its statistics.

Holds :class:`RankReport` (one rank), :class:`AstraSimReport` (all ranks that reported) and
:func:`parse_output`. Lines look like (a logger prefix before ``sys[``, 1 cycle = 1 ns)::

    [workload] [info] sys[1] finished, 1087986 cycles, exposed communication 671084 cycles.
    [statistics] [info] sys[1], Wall time: 1087986
    [statistics] [info] sys[1], GPU time: 416902
    [statistics] [info] sys[1], Compute bound percentage: 100.000%

Parsing never fails: a line that matches neither form is skipped, and deciding whether a run is
complete (every rank finished) is the caller's job (:mod:`~stage_explore.astrasim.run`). A rank
that reports twice keeps its last report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles\.")
_STATISTIC = re.compile(r"sys\[(\d+)\], ([A-Za-z][A-Za-z ]*?): ([-+]?\d+(?:\.\d+)?)(%?)\s*$")


def statistic_key(label: str, percent: bool) -> str:
    """``"Average compute utilization"`` + ``%`` → ``"average_compute_utilization_percent"``."""
    key = "_".join(label.lower().split())
    return f"{key}_percent" if percent and "percent" not in key else key


@dataclass(frozen=True, slots=True, kw_only=True)
class RankReport:
    """One rank's result, in cycles (ns).

    ``gpu_time_cycles`` and friends are ``None`` when the statistics line is absent;
    ``statistics`` holds every statistics line by :func:`statistic_key` (percentages in %).
    """

    rank: int
    finished_cycles: int
    exposed_communication_cycles: int
    wall_time_cycles: int | None = None
    gpu_time_cycles: int | None = None
    comm_time_cycles: int | None = None
    statistics: Mapping[str, float] = field(default_factory=dict)

    @property
    def compute_cycles(self) -> int:
        """GPU compute time: the statistics line, else finished − exposed communication."""
        if self.gpu_time_cycles is not None:
            return self.gpu_time_cycles
        return self.finished_cycles - self.exposed_communication_cycles

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "finished_cycles": self.finished_cycles,
            "exposed_communication_cycles": self.exposed_communication_cycles,
            "wall_time_cycles": self.wall_time_cycles,
            "gpu_time_cycles": self.gpu_time_cycles,
            "comm_time_cycles": self.comm_time_cycles,
            "statistics": dict(self.statistics),
        }


@dataclass(frozen=True, slots=True)
class AstraSimReport:
    """Every rank that printed a ``finished`` line, by rank."""

    ranks: Mapping[int, RankReport]

    def missing(self, world_size: int) -> tuple[int, ...]:
        """Ranks in 0 … world_size−1 without a ``finished`` line."""
        return tuple(rank for rank in range(world_size) if rank not in self.ranks)

    def unexpected(self, world_size: int) -> tuple[int, ...]:
        """Reported ranks outside 0 … world_size−1."""
        return tuple(sorted(rank for rank in self.ranks if rank >= world_size))

    @property
    def slowest(self) -> RankReport:
        """The rank that finished last (the lowest such rank on a tie)."""
        if not self.ranks:
            raise ValueError("no rank reported")
        return max(self.ranks.values(), key=lambda r: (r.finished_cycles, -r.rank))

    @property
    def makespan_cycles(self) -> int:
        return self.slowest.finished_cycles

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": {str(rank): r.to_dict() for rank, r in sorted(self.ranks.items())}}


def parse_output(lines: str | Iterable[str]) -> AstraSimReport:
    """The ranks' results in ASTRA-sim's output (its text, or an iterable of lines)."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    finished: dict[int, tuple[int, int]] = {}
    statistics: dict[int, dict[str, float]] = {}
    for line in lines:
        if "sys[" not in line:
            continue
        match = _FINISHED.search(line)
        if match is not None:
            finished[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
            continue
        match = _STATISTIC.search(line)
        if match is not None:
            key = statistic_key(match.group(2), bool(match.group(4)))
            statistics.setdefault(int(match.group(1)), {})[key] = float(match.group(3))
    ranks = {}
    for rank, (cycles, exposed) in sorted(finished.items()):
        stats = statistics.get(rank, {})

        def cycles_of(key: str, stats: dict[str, float] = stats) -> int | None:
            return int(stats[key]) if key in stats else None

        ranks[rank] = RankReport(
            rank=rank, finished_cycles=cycles, exposed_communication_cycles=exposed,
            wall_time_cycles=cycles_of("wall_time"), gpu_time_cycles=cycles_of("gpu_time"),
            comm_time_cycles=cycles_of("comm_time"), statistics=stats,
        )  # fmt: skip
    return AstraSimReport(ranks)
