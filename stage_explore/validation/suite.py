"""``run_validation``: every published run of ``stage_explore/data`` (or another folder holding
published-runs CSVs, with or without a ``setups.toml``, or one such CSV file) evaluated, with the
optional leave-one-source-out fit. Rows no ``setups.toml`` source claims are evaluated with
inferred setups (:mod:`~stage_explore.validation.infer`), every row read is counted
(:mod:`~stage_explore.validation.accounting`) and checked against itself
(:mod:`~stage_explore.validation.consistency`)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_explore.validation.accounting import count_rows
from stage_explore.validation.consistency import DataCheck, case_warnings
from stage_explore.validation.csv_cells import SCHEMA_COLUMNS, unread_column
from stage_explore.validation.infer import MEASURED_COLUMNS, inferred_cases, is_runs_csv
from stage_explore.validation.loso import leave_one_source_out
from stage_explore.validation.report import ValidationReport
from stage_explore.validation.run import BackendFactory, evaluate_cases
from stage_explore.validation.setups import (
    Case,
    SourceSetup,
    configured_cases,
    data_dir,
    load_setups,
)


def _one_file(path: Path) -> tuple[Path, str, Path]:
    """``(folder, file name, systems folder)`` of a published-runs CSV given as ``--data``: its
    folder's ``setups.toml`` and ``systems/`` when it has them; a folder without ``systems/``
    takes the package's system files, so that a row states the same cluster wherever its file
    lies. A file that is not a published-runs CSV is a one-line :class:`ConfigError`."""
    if path.suffix.lower() != ".csv" or not is_runs_csv(path):
        raise ConfigError(
            f"published runs file {str(path)!r} is not a published-runs CSV: expected a .csv "
            "whose header has id, gpu and a measured column (tokens_per_s_per_gpu, "
            "iter_time_s, tflops_per_gpu, mfu_pct or peak_mem_gib), or a folder of them"
            + _header_hint(path)
        )
    folder = path.parent
    return folder, path.name, folder if (folder / "systems").is_dir() else data_dir()


def _header_hint(path: Path) -> str:
    """``; its header lacks gpu and a measured column (iter_time (looks like iter_time_s))``:
    what a ``.csv``'s header misses and its columns close to a schema column (7 Dec 2026, s29
    review: a header ``iter_time`` was refused without naming the near miss); "" for another
    file or an unreadable one."""
    if path.suffix.lower() != ".csv":
        return ""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = [c.strip() for c in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return ""
    names = {c.lower() for c in header}
    missing = [c for c in ("id", "gpu") if c not in names]
    if not names & set(MEASURED_COLUMNS):
        missing.append("a measured column")
    close = [unread_column(c) for c in header if c.lower() not in SCHEMA_COLUMNS]
    close = [c for c in close if " (looks like " in c]
    near = f" ({', '.join(close)})" if close else ""
    return f"; its header lacks {' and '.join(missing)}{near}" if missing else ""


@dataclass(frozen=True, slots=True)
class DataCases:
    """The cases of a data folder or file (:func:`data_cases`) and what was read to make them."""

    where: Path
    given: str
    sources: list[SourceSetup]
    setups: dict[str, dict[str, Any]]
    cases: list[Case]
    inferred: list[Case]
    files: list[tuple[str, int]]
    ignored: list[str]
    unread: list[str]


def data_cases(folder: str | Path | None = None) -> DataCases:
    """Every row of every published-runs CSV of ``folder`` (default: the package's data), or
    of the one CSV file ``folder`` names, as a case: with its ``setups.toml`` source, else with
    an inferred setup; nothing evaluated."""
    where = Path(folder) if folder is not None else data_dir()
    given, only, systems = str(where), None, None
    if where.is_file():
        where, only, systems = _one_file(where)
    elif not where.is_dir():
        raise ConfigError(f"published runs folder or CSV file {str(where)!r} not found")
    setups = where / "setups.toml"
    sources, rows = load_setups(setups) if setups.is_file() else ([], {})
    if only is not None:
        sources = [s for s in sources if s.file == only]
    inferred, files, ignored, unread = inferred_cases(where, sources, only, systems)
    cases = configured_cases(where, sources, rows) + inferred
    if not cases:
        raise ConfigError(
            f"{given!r} holds no published runs: expected published_runs*.csv files "
            "(published_runs.csv's columns) and optionally a setups.toml"
        )
    return DataCases(where, given, sources, rows, cases, inferred, files, ignored, unread)


def check_data(folder: str | Path | None = None) -> DataCheck:
    """The rows of ``folder`` (:func:`data_cases`) checked against themselves
    (:mod:`~stage_explore.validation.consistency`), nothing evaluated."""
    data = data_cases(folder)
    return case_warnings(data.cases, data.where, data.sources, data.setups)


def run_validation(
    folder: str | Path | None = None,
    factory: BackendFactory | None = None,
    loso: bool = False,
    loso_progress: Callable[[int, int, str], None] | None = None,
    loso_jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> ValidationReport:
    """Evaluate every row of every published-runs CSV of ``folder`` (default: the package's
    data), or of the one CSV file ``folder`` names: with its ``setups.toml`` source, else with
    an inferred setup; ``loso`` adds the leave-one-source-out figure (minutes, not seconds),
    reporting each source to ``loso_progress``, in ``loso_jobs`` processes
    (:func:`~stage_explore.validation.loso.leave_one_source_out`); ``progress(done, total)``
    after each row evaluated (:func:`~stage_explore.validation.run.evaluate_cases`)."""
    if folder is not None:
        expect(folder, (str, Path), "folder", "a folder of published-runs CSVs or one CSV file")
    data = data_cases(folder)
    results = evaluate_cases(data.cases, factory, progress=progress)
    figure = (
        leave_one_source_out(results, factory, progress=loso_progress, jobs=loso_jobs)
        if loso
        else None
    )
    titles = {s.name: s.title for s in data.sources}
    for case in data.inferred:
        titles.setdefault(case.source, f"{case.source} (setup inferred from the CSV)")
    lines = len({(c.file, c.line) for c in data.inferred})
    count = count_rows(results, data.files, data.ignored, lines, data.unread)
    # the rows checked against themselves: read only, no prediction moves
    check = case_warnings(data.cases, data.where, data.sources, data.setups)
    return ValidationReport(tuple(results), data.given, titles, figure, count, check)
