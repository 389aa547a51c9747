"""``run_validation``: every published run of ``stage_explore/data`` (or another folder holding
the same files and a ``setups.toml``) evaluated, with the optional leave-one-source-out fit."""

from __future__ import annotations

from pathlib import Path

from stage_explore.validation.loso import leave_one_source_out
from stage_explore.validation.report import ValidationReport
from stage_explore.validation.run import BackendFactory, evaluate_cases
from stage_explore.validation.setups import data_dir, load_cases, load_setups


def run_validation(
    folder: str | Path | None = None, factory: BackendFactory | None = None, loso: bool = False
) -> ValidationReport:
    """Evaluate every row of every source of ``folder``'s ``setups.toml`` (default: the
    package's data); ``loso`` adds the leave-one-source-out figure (minutes, not seconds)."""
    where = Path(folder) if folder is not None else data_dir()
    sources, _ = load_setups(where / "setups.toml")
    results = evaluate_cases(load_cases(where), factory)
    figure = leave_one_source_out(results, factory) if loso else None
    titles = {s.name: s.title for s in sources}
    return ValidationReport(tuple(results), str(where), titles, figure)
