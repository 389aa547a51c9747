"""The self-contained HTML report: inline SVG plots with hover tooltips, and tables.

Contents:
    :class:`Scale`        a linear or log axis mapping values to pixels, with tick labels.
    :func:`scatter_svg`   an SVG scatter of all feasible trials with the Pareto front
                          highlighted (points carry an index into a JSON table for tooltips).
    :func:`render_html`   the whole page. No CDN, no external file: it works offline.

Each plot appears once, as inline SVG; the PNG images written beside the page (for slides and
papers) are linked, not shown again. Axes and headers carry units (:mod:`.units`): memory in
GiB, times in seconds, costs in USD.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stage_explore.report.tables import format_value
from stage_explore.report.units import display, in_display_units, tick_label
from stage_explore.wording import counted

if TYPE_CHECKING:
    import pandas as pd

    from stage_explore.report import Report

_WIDTH, _HEIGHT = 680, 420
_LEFT, _RIGHT, _TOP, _BOTTOM = 92, 24, 20, 50
_MAX_POINTS = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """Maps ``[low, high]`` (log10 when ``log``) onto pixels ``[start, end]``."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    @staticmethod
    def fit(values: np.ndarray[Any, Any], start: float, end: float) -> Scale:
        """A scale covering ``values`` (log when positive and spanning over two decades)."""
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        log = low > 0 and high / low > 100
        if log:
            low, high = math.log10(low), math.log10(high)
        pad = (high - low) * 0.05 or max(abs(high) * 0.05, 1e-9)
        return Scale(low=low - pad, high=high + pad, start=start, end=end, log=log)

    def __call__(self, value: float) -> float:
        position = math.log10(value) if self.log else value
        return self.start + (position - self.low) / (self.high - self.low) * (self.end - self.start)

    def ticks(self, count: int = 6) -> list[tuple[float, str]]:
        """Round tick positions with their labels."""
        if self.log:
            decades = range(math.ceil(self.low), math.floor(self.high) + 1)
            return [(10.0**d, tick_label(10.0**d, 10.0**d)) for d in decades]
        raw = (self.high - self.low) / count
        step = 10 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if raw <= step * m)
        first = math.ceil(self.low / step) * step
        values = [first + k * step for k in range(int((self.high - first) / step) + 1)]
        return [(value, tick_label(round(value, 12), step)) for value in values]


def _axes(x: Scale, y: Scale, x_label: str, y_label: str) -> list[str]:
    parts = [
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_WIDTH - _LEFT - _RIGHT}" '
        f'height="{_HEIGHT - _TOP - _BOTTOM}" class="frame"/>'
    ]
    for value, label in x.ticks():
        px = x(value)
        parts.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{_TOP}" y2="{_HEIGHT - _BOTTOM}" class="grid"/>'
            f'<text x="{px:.1f}" y="{_HEIGHT - _BOTTOM + 16}" text-anchor="middle">{label}</text>'
        )
    for value, label in y.ticks():
        py = y(value)
        parts.append(
            f'<line x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{py:.1f}" y2="{py:.1f}" class="grid"/>'
            f'<text x="{_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{label}</text>'
        )
    parts.append(
        f'<text x="{(_LEFT + _WIDTH - _RIGHT) / 2}" y="{_HEIGHT - 8}" text-anchor="middle" '
        f'class="label">{html.escape(x_label)}</text>'
    )
    parts.append(
        f'<text transform="translate(16 {(_TOP + _HEIGHT - _BOTTOM) / 2}) rotate(-90)" '
        f'text-anchor="middle" class="label">{html.escape(y_label)}</text>'
    )
    return parts


def _tooltip_rows(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, str]]:
    headers = [display(name).header for name in columns]
    return [
        {header: format_value(value) for header, value in zip(headers, row, strict=True)}
        for row in in_display_units(frame, columns).itertuples(index=False)
    ]


def _values(frame: pd.DataFrame, name: str) -> np.ndarray[Any, Any]:
    """A column in its display unit (GiB for bytes, % for utilisation)."""
    if not len(frame):
        return np.zeros(0)
    values: np.ndarray[Any, Any] = frame[name].to_numpy(np.float64) * display(name).scale
    return values


def _axis_label(name: str, scale: Scale) -> str:
    return display(name).label + (", log scale" if scale.log else "")


def scatter_svg(report: Report, plot_id: str) -> tuple[str, list[dict[str, str]], str]:
    """The scatter SVG, its tooltip table, and a caption."""
    ok = report.frame[report.frame["status"] == "ok"]
    (x_name, _), *rest = report.objectives
    if rest:
        y_name, x_values_name = rest[0][0], x_name
    else:
        y_name, x_values_name = x_name, "trial"
    front_index = set(report.front.index)
    others = ok[~ok.index.isin(front_index)]
    shown = others.iloc[:: max(1, math.ceil(len(others) / _MAX_POINTS))]
    points = [*((index, False) for index in shown.index), *((i, True) for i in report.front.index)]
    columns = report.columns()
    table = _tooltip_rows(ok.loc[[index for index, _ in points]], columns) if points else []
    x = Scale.fit(_values(ok, x_values_name), _LEFT, _WIDTH - _RIGHT)
    y = Scale.fit(_values(ok, y_name), _HEIGHT - _BOTTOM, _TOP)
    parts = _axes(x, y, _axis_label(x_values_name, x), _axis_label(y_name, y))
    x_scale, y_scale = display(x_values_name).scale, display(y_name).scale
    circles, front_xy = [], []
    for number, (index, on_front) in enumerate(points):
        px = x(float(ok.at[index, x_values_name]) * x_scale)
        py = y(float(ok.at[index, y_name]) * y_scale)
        css = "front" if on_front else "point"
        circles.append(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{5 if on_front else 3}" class="{css}" '
            f'data-i="{number}"/>'
        )
        if on_front:
            front_xy.append((px, py))
    if len(front_xy) > 1:  # drawn under the points, over the grid
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in sorted(front_xy))
        parts.append(f'<polyline points="{path}" class="front-line"/>')
    parts += circles
    caption = (
        f"{len(ok)} feasible trials ({len(shown) + len(report.front)} drawn), "
        f"front of {len(report.front)} highlighted"
    )
    svg = (
        f'<svg id="{plot_id}" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" '
        f'height="{_HEIGHT}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )
    return svg, table, caption


def _convergence_svg(report: Report) -> str:
    name, _ = report.objectives[0]
    series = report.convergence()
    if all(rows.empty for _, rows in series):
        return "<p>No feasible trial.</p>"
    scale = display(name).scale
    trials = np.concatenate([rows["trial"].to_numpy(np.float64) for _, rows in series])
    bests = np.concatenate([rows["best"].to_numpy(np.float64) * scale for _, rows in series])
    x = Scale.fit(trials, _LEFT, _WIDTH - _RIGHT)
    y = Scale.fit(bests, _HEIGHT - _BOTTOM, _TOP)
    parts = _axes(x, y, "trial", "best " + _axis_label(name, y) + " so far")
    for study, rows in series:  # one line per study: trial numbers restart in each
        if rows.empty:
            continue
        trial_numbers = rows["trial"].to_numpy(np.float64)
        points = zip(trial_numbers, rows["best"].to_numpy(np.float64) * scale, strict=True)
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        title = f"<title>study {html.escape(study)}</title>" if study else ""
        parts.append(f'<polyline points="{path}" class="front-line">{title}</polyline>')
        if study:
            t_end, v_end = float(rows["trial"].iloc[-1]), float(rows["best"].iloc[-1]) * scale
            parts.append(
                f'<text x="{x(t_end) - 4:.1f}" y="{y(v_end) - 4:.1f}" text-anchor="end" '
                f'class="label">{html.escape(study)}</text>'
            )
    return (
        f'<svg viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def _html_table(frame: pd.DataFrame, columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(display(name).header)}</th>" for name in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(format_value(v))}</td>" for v in row) + "</tr>"
        for row in in_display_units(frame, columns).itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:2px 8px;text-align:right;
border-bottom:1px solid #ddd}th{background:#f3f3f3}svg text{font-size:11px;fill:#444}
.label{font-size:12px;fill:#222}.frame{fill:none;stroke:#888}.grid{stroke:#eee}
.point{fill:#9aa5b1;fill-opacity:.6}.front{fill:#e8590c;stroke:#7a2e06}
.front-line{fill:none;stroke:#e8590c;stroke-width:1.5}circle:hover{stroke:#000;stroke-width:2}
#tip{position:fixed;display:none;background:#fff;border:1px solid #888;padding:6px;
font:12px monospace;pointer-events:none;white-space:pre;box-shadow:2px 2px 6px #0003}"""

_SCRIPT = """const tip=document.getElementById('tip');
for(const svg of document.querySelectorAll('svg[data-table]')){
 const rows=JSON.parse(document.getElementById(svg.dataset.table).textContent);
 svg.addEventListener('mousemove',e=>{const i=e.target.dataset.i;
  if(i===undefined){tip.style.display='none';return;}
  tip.textContent=Object.entries(rows[+i]).map(([k,v])=>k.padEnd(18)+v).join('\\n');
  tip.style.left=(e.clientX+14)+'px';tip.style.top=(e.clientY+14)+'px';tip.style.display='block';});
 svg.addEventListener('mouseleave',()=>{tip.style.display='none';});}"""


def render_html(report: Report, images: list[Path]) -> str:
    """The report page; ``images`` (PNG versions of its plots) are linked by relative name."""
    svg, table, caption = scatter_svg(report, "scatter")
    svg = svg.replace("<svg ", '<svg data-table="scatter-data" ', 1)
    data = json.dumps(table).replace("</", "<\\/")
    columns = report.columns()
    sections = [
        f"<h1>Study {html.escape(report.study)}</h1>",
        f"<p>{html.escape(report.counts_text())}. "
        f"Records: {html.escape(str(report.directory))}</p>",
    ]
    for status in ("infeasible", "failed", "infrastructure_failed"):
        other = report.other_reasons(status)
        reasons = [*report.reasons(status), *([other] if other else [])]
        if reasons:
            items = "".join(
                f"<li>×{count}: {html.escape(reason)}</li>" for reason, count in reasons
            )
            summary = f"<summary>Most frequent {status} reasons</summary>"
            sections.append(f"<details>{summary}<ul>{items}</ul></details>")
    names = " and ".join(
        f"{display(name).label} [{direction}]" for name, direction in report.objectives
    )
    sections += [
        f"<h2>Trials and Pareto front of {html.escape(names)}</h2>",
        svg,
        f"<p>{html.escape(caption)}. Hover a point for its configuration.</p>",
        f'<script type="application/json" id="scatter-data">{data}</script>',
        f"<h2>Pareto front ({counted(len(report.front), 'configuration')})</h2>",
        _html_table(report.front, columns),
        f"<h2>Convergence of {html.escape(display(report.objectives[0][0]).label)}</h2>",
        _convergence_svg(report),
    ]
    for metric, rows in report.best.items():
        sections += [
            f"<h2>Best by {html.escape(display(metric).label)}</h2>",
            _html_table(rows, columns),
        ]
    if images:
        links = ", ".join(
            f'<a href="{html.escape(image.name)}">{html.escape(image.name)}</a>' for image in images
        )
        sections.append(f"<p>The plots as PNG images, beside this page: {links}.</p>")
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>STAGE study {html.escape(report.study)}</title><style>{_STYLE}</style></head>"
        f'<body>{"".join(sections)}<div id="tip"></div><script>{_SCRIPT}</script></body></html>'
    )
