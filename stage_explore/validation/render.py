"""Text and Markdown forms of a :class:`~stage_explore.validation.report.ValidationReport`
(``stage validate`` and ``stage validate --markdown``, which writes
``benchmarks/results/validation.md``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from stage_explore.validation.report import ValidationReport, rankings
from stage_explore.validation.run import RowResult
from stage_explore.validation.setups import data_dir


def _pct(value: Any) -> str:
    if value is None or not isinstance(value, float | int) or not math.isfinite(value):
        return "—"
    return f"{value * 100:.2f} %"


def _row_cells(r: RowResult) -> list[str]:
    setup = r.to_dict()["setup"]
    if not r.evaluated:
        return [r.case.id, r.case.metric, "—", f"{r.case.measured:.4g}", "—", "not evaluated: "
                + r.note]  # fmt: skip
    note = ("in-sample" if r.case.in_sample else "held out") + (f"; {r.note}" if r.note else "")
    return [
        r.case.id, r.case.metric, f"{r.predicted:.4g}", f"{r.case.measured:.4g}",
        f"{r.error * 100:+.1f} %", f"{setup}, {r.case.framework} ({note})",
    ]  # fmt: skip


#: What the text and Markdown reports say about the inferred sources.
INFERRED_NOTE = (
    "rows no setups.toml source claims, evaluated with a setup inferred from their CSV "
    "columns (held out; every inference is an assumption of the row; docs/validation.md, "
    "'Rows without a setup')"
)


#: The widest source name the text table prints whole (an inferred source's name is its
#: CSV ``source`` text, which may be a sentence).
NAME_WIDTH = 60


def _name(source: str, width: int) -> str:
    return source if len(source) <= width else source[: width - 1] + "…"


def _summary_lines(report: ValidationReport, sources: list[str], width: int) -> list[str]:
    lines = []
    for source in sources:
        s = report.source_summary(source)
        loso = (s.get("leave_one_source_out") or {}).get("mae")
        lines.append(
            f"{_name(source, width):<{width}} {s['rows_evaluated']:>4}/{s['rows_total']:<4} "
            f"{_pct(s['in_sample_mae']):>14} {_pct(s['held_out_mae']):>13} {_pct(loso):>9}"
        )
    return lines


def _inferred_text(report: ValidationReport, width: int) -> list[str]:
    """The inferred sources' summary and their assumptions (each listed once)."""
    if not report.inferred_sources:
        return []
    lines = ["", f"inferred setups: {INFERRED_NOTE}"]
    lines += _summary_lines(report, report.inferred_sources, width)
    for source in report.inferred_sources:
        assumptions = dict.fromkeys(a for r in report.rows_of(source) for a in r.case.assumptions)
        lines += [f"  {source}:", *(f"    - {a}" for a in assumptions)]
    return lines


def to_text(report: ValidationReport) -> str:
    """Per-source summary (the inferred sources apart), rankings, targets and the rows (vTrain
    rows summarised), after the row count."""
    lines = [f"published runs and setups: {report.source}"]
    if report.count is not None:
        lines.append(report.count.line())
    if report.check is not None:
        lines.append(report.check.line())
        lines += [f"  {w.text()}" for w in report.check.warnings]
    lines.append("")
    width = min(NAME_WIDTH, max([10, *(len(source) for source in report.sources)]))
    header = (
        f"{'source':<{width}} {'rows':>9} {'in-sample MAE':>14} {'held-out MAE':>13} "
        f"{'LOSO MAE':>9}"
    )
    lines += [header, "-" * len(header)]
    lines += _summary_lines(report, report.configured_sources, width)
    lines += _inferred_text(report, width)
    lines.append("")
    for ranking in rankings(report.results):
        lines.append(
            f"ranking {ranking.group}: Spearman {ranking.spearman:.4f}, predicted best measured "
            f"+{ranking.best_gap * 100:.1f} % from the best ({ranking.configurations} configs)"
        )
    lines += ["", "targets (issue #11):"]
    for target in report.targets():
        lines.append(f"  [{'PASS' if target.passed else 'FAIL'}] {target.name}: {target.detail}")
    lines += ["", f"{'id':<42} {'metric':<20} {'predicted':>10} {'measured':>10} {'error':>8}"]
    for r in report.results:
        if r.case.group and r.evaluated:
            continue
        cells = _row_cells(r)
        lines.append(f"{cells[0]:<42} {cells[1]:<20} {cells[2]:>10} {cells[3]:>10} "
                     f"{cells[4]:>8}  {cells[5]}")  # fmt: skip
    return "\n".join(lines)


def _table(report: ValidationReport, sources: list[str]) -> list[str]:
    """The Markdown summary table of ``sources``."""
    lines = [
        "| source | what | system | framework | rows evaluated | in-sample MAE | held-out MAE "
        "| leave-one-source-out MAE |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for source in sources:
        s = report.source_summary(source)
        loso = s.get("leave_one_source_out") or {}
        lines.append(
            f"| {source} | {s['title']} | {s['system']} | {', '.join(s['frameworks'])} | "
            f"{s['rows_evaluated']} of {s['rows_total']} | {_pct(s['in_sample_mae'])} | "
            f"{_pct(s['held_out_mae'])} | {_pct(loso.get('mae')) if loso else '—'} |"
        )
    return lines


def _provenance(report: ValidationReport) -> str:
    """The command and the runs a markdown report comes from (s22 review: it always said
    ``stage validate --loso --markdown`` on the package's data, also for a run without
    ``--loso`` or with ``--data`` elsewhere)."""
    packaged = not report.source or Path(report.source).resolve() == data_dir().resolve()
    data = "" if packaged else f" --data {report.source}"
    command = f"stage validate{data}{' --loso' if report.loso is not None else ''} --markdown"
    if packaged:
        runs = (
            "the published runs shipped in `stage_explore/data` and their setups "
            "(`stage_explore/data/setups.toml`"
        )
    else:
        runs = (
            f"the published runs in `{report.source}` and their setups (a `setups.toml` beside "
            "them, else inferred from each row's columns"
        )
    return f"Generated by `{command}` from {runs}: every assumption for what a source omits, "


def to_markdown(report: ValidationReport) -> str:
    """The whole of ``benchmarks/results/validation.md``."""
    lines = [
        "# Validation of the analytical backend against published runs",
        "",
        _provenance(report) + "with its reason). Error = (predicted − measured) / measured. A "
        "row is **in-sample** when a constant of the model was chosen by looking at it; the "
        "rest are **held out**. See `docs/validation.md`.",
        "",
    ]
    if report.count is not None:
        lines += [f"Rows: {report.count.line()}.", ""]
    if report.check is not None:  # docs/validation.md, 'Rows checked against themselves'
        lines += [f"{report.check.line().capitalize()}.", ""]
        lines += [f"- {w.text()}" for w in report.check.warnings]
        lines += [""] if report.check.warnings else []
    lines += _table(report, report.configured_sources)
    if report.inferred_sources:
        lines += ["", f"Inferred setups: {INFERRED_NOTE}.", ""]
        lines += _table(report, report.inferred_sources)
    if report.loso is None:
        lines += ["", "Leave-one-source-out: not computed (`stage validate --loso`)."]
    ranked = rankings(report.results)
    if ranked:
        lines += ["", "## Ranking (vTrain sweeps)", "",
                  "| group | configurations | Spearman | predicted best | measured best | gap |",
                  "|---|---:|---:|---|---|---:|"]  # fmt: skip
        for k in ranked:
            lines.append(
                f"| {k.group} | {k.configurations} | {k.spearman:.4f} | {k.predicted_best} | "
                f"{k.measured_best} | +{k.best_gap * 100:.1f} % |"
            )
    lines += ["", "## Targets (issue #11)", "", "| target | result | detail |", "|---|---|---|"]
    for t in report.targets():
        lines.append(f"| {t.name} | {'pass' if t.passed else '**FAIL**'} | {t.detail} |")
    for source in report.sources:
        s = report.source_summary(source)
        lines += ["", f"## {source}: {s['title']}", ""]
        if source in report.inferred_sources:
            lines += [f"Setup inferred: {INFERRED_NOTE}.", ""]
        if s.get("leave_one_source_out"):
            loso = s["leave_one_source_out"]
            if "mae" in loso:
                fitted = ", ".join(f"{k} {v:.3g}" for k, v in loso["fitted"].items())
                lines += [f"Leave-one-source-out: fitted on {', '.join(loso['trained_on'])} "
                          f"({loso['train_rows']} rows, {_pct(loso['train_mae'])}): {fitted}; "
                          f"MAE here {_pct(loso['mae'])}.", ""]  # fmt: skip
            else:
                lines += [f"Leave-one-source-out: {loso['reason']}.", ""]
        lines += [
            "| id | metric | predicted | measured | error | setup |",
            "|---|---|---:|---:|---:|---|",
        ]
        lines += ["| " + " | ".join(_row_cells(r)) + " |" for r in report.rows_of(source)]
        assumptions = dict.fromkeys(a for r in report.rows_of(source) for a in r.case.assumptions)
        if assumptions:
            lines += ["", "Assumptions:", *(f"- {a}" for a in assumptions)]
    return "\n".join(lines) + "\n"
