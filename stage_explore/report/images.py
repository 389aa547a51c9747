"""PNG images of a report, drawn with matplotlib's object API (no pyplot global state).

Contents:
    :func:`write_images`   ``<stem>-front.png`` (trials and the Pareto front) and
                           ``<stem>-convergence.png`` (best value so far per trial).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from stage_explore.study.spec import Direction

if TYPE_CHECKING:
    from stage_explore.report import Report


def _log_if_wide(values: npt.NDArray[np.float64]) -> str:
    finite = values[np.isfinite(values)]
    return (
        "log"
        if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100
        else "linear"
    )


def write_images(report: Report, stem: Path) -> list[Path]:
    """Write the report's PNG images next to ``stem``; the paths written."""
    from matplotlib.figure import Figure

    ok = report.frame[report.frame["status"] == "ok"]
    (x_name, _), *rest = report.objectives
    y_name, x_name = (rest[0][0], x_name) if rest else (x_name, "trial")
    written = []

    figure = Figure(figsize=(7, 4.5), dpi=100)
    axes = figure.add_subplot()
    axes.scatter(ok[x_name], ok[y_name], s=8, color="#9aa5b1", alpha=0.6, label="feasible trials")
    front = report.front.sort_values(x_name)
    axes.plot(
        front[x_name],
        front[y_name],
        "o-",
        color="#e8590c",
        markersize=5,
        label="Pareto front" if rest else "best",
    )
    axes.set_xscale(_log_if_wide(ok[x_name].to_numpy(np.float64)))
    axes.set_yscale(_log_if_wide(ok[y_name].to_numpy(np.float64)))
    axes.set_xlabel(x_name)
    axes.set_ylabel(y_name)
    axes.set_title(f"study {report.study}")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path = stem.with_name(stem.name + "-front.png")
    figure.savefig(path, format="png")
    written.append(path)

    name, direction = report.objectives[0]
    ordered = ok.sort_values("trial")
    values = ordered[name].to_numpy(np.float64)
    best = (
        np.minimum.accumulate(values)
        if direction is Direction.MIN
        else np.maximum.accumulate(values)
    )
    figure = Figure(figsize=(7, 3.5), dpi=100)
    axes = figure.add_subplot()
    axes.step(ordered["trial"], best, where="post", color="#e8590c")
    axes.set_xlabel("trial")
    axes.set_ylabel(f"best {name} so far")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path = stem.with_name(stem.name + "-convergence.png")
    figure.savefig(path, format="png")
    written.append(path)
    return written
