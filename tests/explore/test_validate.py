"""``stage validate``: every published run, against the accuracy targets of the analytical
backend (KOR22-T5 iteration time ≤ 5 % mean absolute error, NAR21-T1 TFLOP/s per GPU ≤ 10 %,
KOR22-F1 peak memory within 10 % per row), and the report's shape. The whole CSV takes a few
seconds, so it runs in the default suite."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_explore.cli import main
from stage_explore.validate import (
    NARAYANAN_SETUPS,
    ValidationReport,
    block_of,
    default_csv_path,
    megatron_flops,
    run_validation,
    setup,
)

pytestmark = pytest.mark.skipif(not default_csv_path().is_file(), reason="no published_runs.csv")


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return run_validation()


def test_every_row_is_checked(report: ValidationReport) -> None:
    counts = {
        block: sum(c.block == block for c in report.checks) for block in report.mean_abs_error()
    }
    assert counts == {"KOR22-T5": 8, "NAR21-T1": 10, "KOR22-F1": 4}


def test_korthikanti_iteration_times_within_5_percent(report: ValidationReport) -> None:
    assert report.mean_abs_error()["KOR22-T5"] <= 0.05
    assert all(abs(c.error) <= 0.08 for c in report.checks if c.block == "KOR22-T5")


def test_narayanan_throughput_within_10_percent(report: ValidationReport) -> None:
    assert report.mean_abs_error()["NAR21-T1"] <= 0.10


def test_korthikanti_peak_memory_within_10_percent(report: ValidationReport) -> None:
    assert all(abs(c.error) <= 0.10 for c in report.checks if c.block == "KOR22-F1")


def test_narayanan_setups_come_from_the_artifact() -> None:
    # examples/sc21/run_table_1.sh: 145B runs tp 8, pp 8, micro-batch 2, 5 layers per virtual
    # stage (vpp 2), "local" DDP; 1T no interleaving.
    with default_csv_path().open(newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    model, parallel = setup(rows["NAR21-T1-7"])
    assert (parallel.micro_batch, parallel.vpp, str(parallel.schedule)) == (2, 2, "interleaved")
    assert parallel.grad_fp32 is False and parallel.num_micro_batches == 48
    model, parallel = setup(rows["NAR21-T1-10"])
    assert (parallel.micro_batch, parallel.vpp) == (1, 1)
    assert len(NARAYANAN_SETUPS) == 10


def test_megatron_flops_is_the_papers_formula() -> None:
    model = get_flavor("megatron-gpt-1t")
    b, s, layers, h, v = 3072, 2048, 128, 25600, 51200
    expected = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert megatron_flops(model, 3072) == pytest.approx(expected, rel=1e-15)


def test_block_names() -> None:
    assert block_of("KOR22-T5-22B-full") == "KOR22-T5" and block_of("NAR21-T1-10") == "NAR21-T1"


def test_cli_json_has_rows_and_block_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["mean_abs_error"]) == {"KOR22-T5", "NAR21-T1", "KOR22-F1"}
    row = data["rows"][0]
    assert {"id", "metric", "predicted", "measured", "error"} <= set(row)
    assert row["error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])


def test_cli_text_and_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    text = capsys.readouterr().out
    assert "KOR22-T5-1T-selsp" in text and "mean |error| NAR21-T1:" in text
    assert main(["validate", "--markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("| id | metric |") and "| KOR22-F1 | 4 |" in markdown


def test_cli_csv_option_and_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = default_csv_path().read_text().splitlines()
    subset = tmp_path / "runs.csv"
    kept = [line for line in lines if line.startswith("KOR22-T5-22B")]
    subset.write_text("\n".join([lines[0], *kept]) + "\n")
    assert main(["validate", "--json", "--csv", str(subset)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in data["rows"]] == ["KOR22-T5-22B-full", "KOR22-T5-22B-selsp"]
    assert main(["validate", "--csv", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read published runs" in err
    with pytest.raises(ConfigError, match="cannot read"):
        run_validation(tmp_path / "missing.csv")
