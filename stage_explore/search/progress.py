"""What the driver reports: progress snapshots while a study runs, a summary when it ends.

Contents:
    :class:`Progress`       trials done, by status, the best so far and the rate.
    :class:`RefineProgress` a two-stage study's re-evaluation of the front: points done, by
                            status.
    :class:`StudySummary`   where the records are, the final progress, why the run stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A snapshot of a running study (``rate_per_s`` counts this run's trials only).

    ``done`` counts distinct configurations (records); ``repeats`` counts proposals of a
    configuration already proposed, answered from its first evaluation; ``sampler_s`` is the
    time spent proposing and telling (the search's own cost). ``infrastructure_failed``
    counts trials lost to the machinery after their retries (``--resume`` re-runs them);
    ``where`` says where trials run (e.g. ``ray: 2 nodes, 4 CPUs``).
    """

    study: str
    done: int
    total: int | None
    ok: int
    infeasible: int
    failed: int
    best: str
    rate_per_s: float
    elapsed_s: float
    repeats: int = 0
    sampler_s: float = 0.0
    infrastructure_failed: int = 0
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "study": self.study,
            "done": self.done,
            "total": self.total,
            "ok": self.ok,
            "infeasible": self.infeasible,
            "failed": self.failed,
            "best": self.best,
            "rate_per_s": self.rate_per_s,
            "elapsed_s": self.elapsed_s,
            "repeats": self.repeats,
            "sampler_s": self.sampler_s,
            "infrastructure_failed": self.infrastructure_failed,
            "where": self.where,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RefineProgress:
    """A two-stage study's re-evaluation of the screened front by its second ``backend``:
    ``done`` of ``total`` points (those not refined by an earlier run), ``ok`` of them
    feasible, ``failed`` failed (or lost to the infrastructure), the rest infeasible."""

    backend: str
    done: int
    total: int
    ok: int
    failed: int
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "backend": self.backend,
            "done": self.done,
            "total": self.total,
            "ok": self.ok,
            "failed": self.failed,
            "elapsed_s": self.elapsed_s,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySummary:
    """How a run of a study ended. ``stopped_by``: budget, grid (every point of an enumerated
    space evaluated), exhausted (a sampler found no configuration left), time limit or
    interrupted."""

    directory: Path
    progress: Progress
    resumed: int
    stopped_by: str
    #: The front's re-evaluation (two-stage studies whose search ended), else None.
    refined: RefineProgress | None = None

    @property
    def interrupted(self) -> bool:
        """Whether the run was stopped by a signal before its budget was spent."""
        return self.stopped_by == "interrupted"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "directory": str(self.directory),
            "progress": self.progress.to_dict(),
            "resumed": self.resumed,
            "stopped_by": self.stopped_by,
            "refined": None if self.refined is None else self.refined.to_dict(),
        }
