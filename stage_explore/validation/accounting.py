"""The row count of ``stage validate``: every row of every CSV it reads is evaluated or
reported as not evaluated, and the count says so (``N rows read, N evaluated, N not
evaluated``), so that a row lost on the way would show as ``unaccounted``.

A row is keyed by its file and 1-based data row (:attr:`~stage_explore.validation.setups.Case
.file`, ``.line``); it is evaluated when any of its cases is (a row may serve a throughput and a
memory source).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stage_explore.validation.run import RowResult


@dataclass(frozen=True, slots=True)
class RowCount:
    """What ``stage validate`` read and what became of each row."""

    #: ``(file, rows)`` for every CSV read.
    files: tuple[tuple[str, int], ...]
    evaluated: int
    #: ``(file:id, source)`` of each row none of whose cases was evaluated.
    not_evaluated: tuple[tuple[str, str], ...]
    #: ``file:line`` of rows read that no case covers (a loss: empty unless there is a bug).
    unaccounted: tuple[str, ...]
    #: CSV files of the folder that were not read, each with why.
    ignored_files: tuple[str, ...]
    #: Rows no ``setups.toml`` source claims, evaluated with an inferred setup.
    inferred: int
    #: ``file (col, col)`` of each CSV with inferred rows whose header has columns not in
    #: the schema (not read: said once, here).
    unread_columns: tuple[str, ...] = ()

    @property
    def rows_read(self) -> int:
        return sum(rows for _, rows in self.files)

    def line(self) -> str:
        """``N rows read (files), N evaluated, N not evaluated (by source …)``."""
        read = ", ".join(f"{name} {rows}" for name, rows in self.files)
        text = f"{self.rows_read} rows read ({read}), {self.evaluated} evaluated"
        by_source = Counter(source for _, source in self.not_evaluated)
        text += f", {len(self.not_evaluated)} not evaluated"
        if by_source:
            text += (
                " (reason given on each row; "
                + ", ".join(f"{source} {n}" for source, n in by_source.items())
                + ")"
            )
        if self.inferred:
            rows = "row" if self.inferred == 1 else "rows"
            text += f"; {self.inferred} {rows} with an inferred setup (no setups.toml source)"
        if self.unaccounted:
            text += f"; {len(self.unaccounted)} UNACCOUNTED: {', '.join(self.unaccounted)}"
        if self.ignored_files:
            text += f"; files not read: {'; '.join(self.ignored_files)}"
        if self.unread_columns:
            text += f"; columns not in the schema, not read: {'; '.join(self.unread_columns)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": {name: rows for name, rows in self.files},
            "rows_read": self.rows_read,
            "rows_evaluated": self.evaluated,
            "rows_not_evaluated": [f"{ref} ({source})" for ref, source in self.not_evaluated],
            "rows_inferred": self.inferred,
            "rows_unaccounted": list(self.unaccounted),
            "files_not_read": list(self.ignored_files),
            **({"columns_not_read": list(self.unread_columns)} if self.unread_columns else {}),
        }


def count_rows(
    results: Sequence[RowResult],
    files: Sequence[tuple[str, int]],
    ignored: Sequence[str],
    inferred: int,
    unread: Sequence[str] = (),
) -> RowCount:
    """The :class:`RowCount` of ``results`` over the rows of ``files`` (``unread``: the files'
    columns not in the schema, :attr:`RowCount.unread_columns`)."""
    by_row: dict[tuple[str, int], list[RowResult]] = {}
    for result in results:
        by_row.setdefault((result.case.file, result.case.line), []).append(result)
    evaluated, not_evaluated, unaccounted = 0, [], []
    for name, rows in files:
        for line in range(1, rows + 1):
            mine = by_row.get((name, line), [])
            if not mine:
                unaccounted.append(f"{name}:{line}")
            elif any(r.evaluated for r in mine):
                evaluated += 1
            else:
                not_evaluated.append((f"{name}:{mine[0].case.id}", mine[0].case.source))
    return RowCount(
        tuple(files), evaluated, tuple(not_evaluated), tuple(unaccounted), tuple(ignored),
        inferred, tuple(unread),
    )  # fmt: skip
