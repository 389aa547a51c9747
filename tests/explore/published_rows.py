"""Rows written in the published-runs schema for the inferred-setup tests: a package row to
copy (an H100 Llama 3 8B Megatron-Bridge row of the held-out file), a minimal row of the
columns the inference needs and its inferred case, and a CSV writer with the package file's
header."""

from __future__ import annotations

import csv
from pathlib import Path

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case, data_dir
from tests.explore.package_cases import package_cases

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


def minimal_row(**cells: str) -> dict[str, str]:
    """An 8-GPU H100 Llama 3 8B BF16 row of only the columns the inference needs, ``cells``
    overriding them."""
    base = {
        "id": "X-1", "source": "", "source_table": "", "notes": "", "model": "Llama 3 8B",
        "gpu": "H100-SXM5-80GB", "precision": "bf16", "global_batch_seqs": "128", "tp": "1",
        "pp": "1", "cp": "1", "num_gpus": "8", "tokens_per_s_per_gpu": "1000",
    }  # fmt: skip
    return {**base, **cells}


def inferred_case(**cells: str) -> Case:
    """The inferred setup of :func:`minimal_row` with ``cells`` (it must evaluate)."""
    (case, *_) = row_cases(minimal_row(**cells), "extra.csv", 1)
    assert case.parallel is not None and case.model is not None, case.reason
    return case


def assert_inferred_as_hand(
    file: str, source: str, fields: tuple[str, ...], options: tuple[str, ...]
) -> None:
    """Every time row of ``source`` (package file ``file``) set up by the inference alone has the
    hand-written setup's ``fields`` ("part.name", e.g. "parallel.sp") and framework ``options``."""
    cases = [c for c in package_cases() if c.source == source and c.metric != "peak_mem_gib"]
    rows = {r["id"]: r for r in read_csv(data_dir() / file)}
    assert cases
    for hand in cases:
        (mine, *_) = row_cases(rows[hand.id], file, hand.line, data_dir())
        for field in fields:
            part, name = field.split(".")
            assert getattr(getattr(mine, part), name) == getattr(getattr(hand, part), name), (
                hand.id,
                field,
            )
        ours, theirs = dict(mine.framework_options), dict(hand.framework_options)
        for option in options:
            assert ours.get(option) == theirs.get(option), (hand.id, option)
