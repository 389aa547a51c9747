"""``run_validation``: every published run of ``stage_explore/data`` (or another folder holding
published-runs CSVs, with or without a ``setups.toml``) evaluated, with the optional
leave-one-source-out fit. Rows no ``setups.toml`` source claims are evaluated with inferred
setups (:mod:`~stage_explore.validation.infer`) and every row read is counted
(:mod:`~stage_explore.validation.accounting`)."""

from __future__ import annotations

from pathlib import Path

from stage_core.errors import ConfigError
from stage_explore.validation.accounting import count_rows
from stage_explore.validation.infer import inferred_cases
from stage_explore.validation.loso import leave_one_source_out
from stage_explore.validation.report import ValidationReport
from stage_explore.validation.run import BackendFactory, evaluate_cases
from stage_explore.validation.setups import configured_cases, data_dir, load_setups


def run_validation(
    folder: str | Path | None = None, factory: BackendFactory | None = None, loso: bool = False
) -> ValidationReport:
    """Evaluate every row of every published-runs CSV of ``folder`` (default: the package's
    data): with its ``setups.toml`` source, else with an inferred setup; ``loso`` adds the
    leave-one-source-out figure (minutes, not seconds)."""
    where = Path(folder) if folder is not None else data_dir()
    if where.is_file():
        raise ConfigError(
            f"published runs folder {str(where)!r} is a file: expected a folder of "
            f"published-runs CSVs, e.g. the one holding it, {str(where.parent)!r}"
        )
    if not where.is_dir():
        raise ConfigError(f"published runs folder {str(where)!r} not found")
    setups = where / "setups.toml"
    sources, rows = load_setups(setups) if setups.is_file() else ([], {})
    inferred, files, ignored = inferred_cases(where, sources)
    cases = configured_cases(where, sources, rows) + inferred
    if not cases:
        raise ConfigError(
            f"{str(where)!r} holds no published runs: expected published_runs*.csv files "
            "(published_runs.csv's columns) and optionally a setups.toml"
        )
    results = evaluate_cases(cases, factory)
    figure = leave_one_source_out(results, factory) if loso else None
    titles = {s.name: s.title for s in sources}
    for case in inferred:
        titles.setdefault(case.source, f"{case.source} (setup inferred from the CSV)")
    count = count_rows(results, files, ignored, len({(c.file, c.line) for c in inferred}))
    return ValidationReport(tuple(results), str(where), titles, figure, count)
