"""The best result of each searched precision: what ``stage explore`` prints after a study
that searches ``precision`` (the question "bf16 or fp8 for this model on this system?").

Contents:
    :func:`precision_lines`
        one line per precision: its feasible trials and best value of the first objective, or,
        when none is feasible, its most common reason (a precision the system cannot run is
        recorded infeasible with the backend's one-line reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def precision_lines(frame: pd.DataFrame, metric: str, minimise: bool) -> list[str]:
    """Per precision of ``frame`` (records with a ``precision`` column), in order of first
    appearance: ``precision fp8: 4 ok, 0 infeasible; best step_time_s 0.0685 (trial 1)``."""
    if not {"precision", metric} <= set(frame.columns) or not len(frame):
        return []
    lines = []
    for precision, group in frame.groupby("precision", sort=False):
        ok = group[group["status"] == "ok"]
        infeasible = group[group["status"] == "infeasible"]
        line = f"precision {precision}: {len(ok)} ok, {len(infeasible)} infeasible"
        values = ok[metric].dropna()
        if len(values):
            best = values.idxmin() if minimise else values.idxmax()
            line += f"; best {metric} {values[best]:.6g} (trial {int(ok.loc[best, 'trial'])})"
        elif len(infeasible):
            reason = str(infeasible["reason"].value_counts().index[0])
            line += f"; none feasible: {reason}"
        lines.append(line)
    return lines
