"""The further held-out set's path (s13 hidden): a published-runs CSV given to ``validate --data``
as a file, its rows written by someone else in the package's schema, each one evaluated with an
inferred setup or reported with a one-line reason, never stopping the run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stage_explore.cli import main
from stage_explore.validation.setups import data_dir, read_csv

DATA = data_dir()
HELD_OUT = "published_runs_held_out.csv"
TEMPLATE = "MBD-H100-25.11-LLAMA3_8B"


def _template() -> tuple[list[str], dict[str, str]]:
    rows = read_csv(DATA / HELD_OUT)
    (row,) = [r for r in rows if r["id"] == TEMPLATE]
    return list(rows[0]), row


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    header, _ = _template()
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _row(row_id: str, **cells: str) -> dict[str, str]:
    _, row = _template()
    return {**row, "id": row_id, "source": "A further held-out table", **cells}


def test_a_csv_file_given_to_data_is_evaluated_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: ``validate --data rows.csv`` stopped with 'is a file: expected a folder'."""
    runs = _write(tmp_path / "rows.csv", [_row("HID-1"), _row("HID-2", precision="FP4")])
    _write(tmp_path / "published_runs_other.csv", [_row("OTHER-1")])  # a sibling: not read
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in payload["rows"]}
    assert set(rows) == {"HID-1", "HID-2"}
    assert rows["HID-1"]["predicted"] > 0 and rows["HID-1"]["source"].startswith("INFERRED: ")
    assert "no FP4 precision" in rows["HID-2"]["not_evaluated_reason"]
    assert payload["accounting"]["files"] == {"rows.csv": 2}


def test_a_file_outside_the_data_folder_finds_the_package_system_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row stating a cluster the package's ``systems/`` holds runs on that file wherever its
    CSV lies (the folder of the file has no ``systems/``)."""
    teton = (
        "Grand Teton: 8x H100 96GB HBM2e (2.4 TB/s) per host fully connected with NVLink, "
        "backend RDMA 400 Gb/s per GPU"
    )
    runs = _write(
        tmp_path / "rows.csv", [_row("HID-1", gpu="H100 96GB HBM2e (500 W)", interconnect=teton)]
    )
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["system"] == "systems/grand-teton-h100.toml"
