"""Rows written in the published-runs schema for the inferred-setup tests: a package row to
copy (an H100 Llama 3 8B Megatron-Bridge row of the held-out file) and a CSV writer with the
package file's header."""

from __future__ import annotations

import csv
from pathlib import Path

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.setups import data_dir

HELD_OUT = "published_runs_held_out.csv"
TEMPLATE = "MBD-H100-25.11-LLAMA3_8B"


def template() -> tuple[list[str], dict[str, str]]:
    """The held-out file's header and the template row (a copy of each)."""
    rows = read_csv(data_dir() / HELD_OUT)
    (row,) = [r for r in rows if r["id"] == TEMPLATE]
    return list(rows[0]), dict(row)


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    """Write ``rows`` to ``path`` as a published-runs CSV with the package header."""
    header, _ = template()
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return path
