"""PNG images of a report, drawn with matplotlib's object API (no pyplot global state).

Contents:
    :func:`write_images`   ``<stem>-front.png`` (trials and the Pareto front) and
                           ``<stem>-convergence.png`` (best value so far per trial).

Axes are in display units with their unit in the label (:mod:`.units`: GiB, seconds, USD, %),
and the layout is tightened so no tick label is clipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from stage_explore.report.units import display

if TYPE_CHECKING:
    import pandas as pd

    from stage_explore.report import Report


def _log_if_wide(values: npt.NDArray[np.float64]) -> str:
    finite = values[np.isfinite(values)]
    return (
        "log"
        if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100
        else "linear"
    )


def _shown(frame: pd.DataFrame, name: str) -> npt.NDArray[np.float64]:
    values: npt.NDArray[np.float64] = frame[name].to_numpy(np.float64) * display(name).scale
    return values


def _label(name: str, scale: str) -> str:
    return display(name).label + (", log scale" if scale == "log" else "")


def _no_feasible(report: Report, stem: Path, suffix: str) -> Path:
    """An image that says the study has no feasible trial to plot."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 2), dpi=100)
    axes = figure.add_subplot()
    axes.set_axis_off()
    axes.set_title(f"study {report.study}")
    axes.text(0.5, 0.5, f"no feasible trial: every trial is {_statuses(report)}",
              ha="center", va="center", transform=axes.transAxes)  # fmt: skip
    path = stem.with_name(stem.name + suffix)
    figure.savefig(path, format="png")
    return path


def _statuses(report: Report) -> str:
    counts = report.frame["status"].value_counts()
    return " or ".join(str(status) for status in counts.index) or "missing"


def write_images(report: Report, stem: Path) -> list[Path]:
    """Write the report's PNG images next to ``stem``; the paths written."""
    from matplotlib.figure import Figure

    ok = report.frame[report.frame["status"] == "ok"]
    (x_name, _), *rest = report.objectives
    y_name, x_name = (rest[0][0], x_name) if rest else (x_name, "trial")
    written = []

    if ok.empty:  # s25 review: empty axes from -0.04 to 0.04 with a legend of nothing
        return [
            _no_feasible(report, stem, "-front.png"),
            _no_feasible(report, stem, "-convergence.png"),
        ]
    figure = Figure(figsize=(7, 4.5), dpi=100)
    axes = figure.add_subplot()
    xs, ys = _shown(ok, x_name), _shown(ok, y_name)
    axes.scatter(xs, ys, s=8, color="#9aa5b1", alpha=0.6, label="feasible trials")
    front = report.front.sort_values(x_name)
    axes.plot(
        _shown(front, x_name),
        _shown(front, y_name),
        "o-",
        color="#e8590c",
        markersize=5,
        label="Pareto front" if rest else "best",
    )
    x_scale, y_scale = _log_if_wide(xs), _log_if_wide(ys)
    axes.set_xscale(x_scale)
    axes.set_yscale(y_scale)
    axes.set_xlabel(_label(x_name, x_scale))
    axes.set_ylabel(_label(y_name, y_scale))
    axes.set_title(f"study {report.study}")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path = stem.with_name(stem.name + "-front.png")
    figure.savefig(path, format="png")
    written.append(path)

    name, _ = report.objectives[0]
    figure = Figure(figsize=(7, 3.5), dpi=100)
    axes = figure.add_subplot()
    series = report.convergence()
    for study, rows in series:  # one line per study: trial numbers restart in each
        best = rows["best"].to_numpy(np.float64) * display(name).scale
        color = "#e8590c" if len(series) == 1 else None
        axes.step(rows["trial"], best, where="post", color=color, label=study or None)
    if len(series) > 1:
        axes.legend(title="study")
    axes.set_xlabel("trial")
    axes.set_ylabel(f"best {display(name).label}\nso far")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path = stem.with_name(stem.name + "-convergence.png")
    figure.savefig(path, format="png")
    written.append(path)
    return written
