"""A runs CSV whose rows do not match its header, a malformed ``setups.toml`` beside it, and
``stage calibrate --model-base`` end in one-line errors or are read as documented (s22 review:
a row shorter than the header was a ``'NoneType' object has no attribute 'strip'`` traceback in
``validate --data``, ``check`` and ``calibrate``; a longer one, e.g. ``2,410`` typed with a
thousands separator, a traceback in ``calibrate``; ``sources = 1`` in a ``validate --data``
folder's setups.toml a traceback, an unknown key there ignored; an unknown ``--model-base``
passed unseen while every row named its model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.calibrate import user_cases
from stage_explore.cli import main
from stage_explore.validation.csv_cells import read_csv

HEADER = "id,model,layers,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,sp,recompute,iter_time_s"
ROW = "r1,llama3-8b,2,4096,16,1,1,1,8,no,none,1.5"
PUBLISHED = Path(__file__).parents[2] / "stage_explore" / "data" / "published_runs.csv"


def _csv(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_short_row_reads_its_missing_cells_as_empty(tmp_path: Path) -> None:
    path = _csv(tmp_path, HEADER, "r1,llama3-8b,2")
    [row] = read_csv(path)
    assert row["iter_time_s"] == "" and row["tp"] == "" and None not in row
    [case] = user_cases(path, "h100-80gb", "megatron-core", "megatron-gpt-1.7b")
    assert case.reason == "the source gives no iter_time_s"


@pytest.mark.parametrize("command", ["validate", "check"])
def test_validate_and_check_read_a_short_published_row(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, first, *rest = PUBLISHED.read_text(encoding="utf-8").splitlines()
    path = _csv(tmp_path, header, ",".join(first.split(",")[:6]), *rest[:2])
    argv = ["validate", "--data", str(path)] if command == "validate" else ["check", str(path)]
    assert main(argv) == 0
    assert "3 read" in capsys.readouterr().out


@pytest.mark.parametrize("row", [f"{ROW},", ROW.replace(",1.5", ",1,500")])
def test_calibrate_refuses_a_row_longer_than_its_header(
    row: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, HEADER, row)
    argv = ["calibrate", "--runs", str(path), "--system", "h100-80gb", "--no-loo"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "row 1 (r1): the row has 13 cells but the header 12" in err


def test_an_unknown_model_base_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, HEADER, ROW)
    argv = ["calibrate", "--runs", str(path), "--system", "h100-80gb", "--no-loo"]
    assert main([*argv, "--model-base", "Llama 3.1 8B"]) == 2
    err = capsys.readouterr().err
    expected = "error: --model-base: unknown model flavor 'Llama 3.1 8B'; close names: llama3-8b"
    assert err.startswith(f"stage calibrate: {expected}") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sources = 1", "`sources` must hold [sources.NAME] tables, but got 1"),
        ("rows = [1]", "`rows` must hold [rows.NAME] tables, but got [1]"),
        ("[sources]\nX = 1", '`sources.X` must be a table ([sources."X"]), but got 1'),
        ("[source.X]\nsystem = 'h100-80gb'", "unknown key 'source'; expected [sources.NAME]"),
    ],
)
def test_a_malformed_setups_toml_is_a_one_line_error(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, first, *_ = PUBLISHED.read_text(encoding="utf-8").splitlines()
    (tmp_path / "published_runs.csv").write_text(f"{header}\n{first}\n", encoding="utf-8")
    (tmp_path / "setups.toml").write_text(text + "\n", encoding="utf-8")
    assert main(["validate", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
