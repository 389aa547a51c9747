"""A user's pass over validate / calibrate / eval / explore (7 Dec 2026, s29 review): each test
is a bad input that was read as something else, or lost silently, before this session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_explore.cli import main
from stage_explore.validation.infer_fields import Uninferable
from stage_explore.validation.infer_system import infer_system

#: A run of the README's calibrate example (NVIDIA DGX Cloud, Llama 3.1 8B on 64 H100s).
HEADER = (
    "id,model,layers,hidden,ffn,heads,kv_heads,vocab,seq_len,global_batch_seqs,micro_batch,"
    "tp,pp,dp,cp,sp,vpp,recompute,precision,zero,iter_time_s,gpu"
)
RUN = "llama3-8b,32,4096,14336,32,8,128256,8192,1024,1,1,1,32,2,no,1,none,bf16,1,13.08"


@pytest.mark.parametrize("gpu", ["H1000", "B2000", "RTX A1000", "A1000", "H2000", "A8000"])
def test_a_part_number_with_a_further_digit_is_no_preset(gpu: str) -> None:
    """A typo'd or other part (``H1000``; the RTX A1000 workstation card) was read as the
    preset whose part number it starts with (H100, A100) and evaluated as that GPU."""
    with pytest.raises(Uninferable, match=f"gpu '{gpu}' matches no system preset"):
        infer_system(gpu)


@pytest.mark.parametrize(
    ("gpu", "preset"),
    [("H100", "h100-80gb"), ("8xH100-80GB", "h100-80gb"), ("A100-SXM4-40GB", "a100-40gb"),
     ("GH200", "h200"), ("B200 192GB", "b200"), ("GB200 NVL72", "gb200-nvl72")],
)  # fmt: skip
def test_the_parts_themselves_still_read(gpu: str, preset: str) -> None:
    assert infer_system(gpu).value == preset


def test_calibrate_warns_of_a_typod_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``stage calibrate`` fitted an ``H1000`` run as an H100 one with no warning (the cell read
    as the fitted system's own part); it now names the cell and what it expected."""
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{HEADER}\nr1,{RUN},H1000\n")
    main(["calibrate", "--runs", str(runs), "--system", "h100-80gb", "--fit", "memory",
          "--no-loo"])  # fmt: skip
    out = capsys.readouterr().out
    assert "warning: r1: gpu 'H1000' matches no system preset (expected one of" in out
    assert "fitted as h100-80gb's H100-SXM5-80GB all the same" in out


def test_the_resume_hint_keeps_the_runs_options() -> None:
    """The interrupted run's hint dropped ``--trials`` / ``--executor`` / ``--address``: the
    command it printed continued to the study's own budget on a new Ray instance."""
    from stage_explore.cli import build_parser
    from stage_explore.cli.explore import resume_command

    args = build_parser().parse_args(
        ["explore", "gpt3_175b_a100", "--out", "my results", "--trials", "1500",
         "--executor", "local"]
    )  # fmt: skip
    assert resume_command(args) == (
        "stage explore gpt3_175b_a100 --out 'my results' --trials 1500 --executor local --resume"
    )
    plain = build_parser().parse_args(["explore", "quickstart", "--resume"])
    assert resume_command(plain) == "stage explore quickstart --out results --resume"


def test_validate_names_the_schema_column_a_header_is_close_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header ``iter_time`` (not ``iter_time_s``): a file with no other measured column was
    refused, and a row of a file with one was "no measured value", the near miss unnamed in
    both (calibrate named it, validate did not)."""
    runs = tmp_path / "mine.csv"
    header = HEADER.replace("iter_time_s", "iter_time")
    runs.write_text(f"{header}\nr1,{RUN},H100\n")
    assert main(["validate", "--data", str(runs), "--json"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(
        "; its header lacks a measured column (iter_time (looks like iter_time_s))"
    )
    runs.write_text(f"{header},tflops_per_gpu,num_gpus\nr1,{RUN},H100,,64\n")
    main(["validate", "--data", str(runs), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["accounting"]["columns_not_read"] == [  # zero's hint: s30 review3
        "mine.csv (zero (stage calibrate's column; give it as dp_sharding here), "
        "iter_time (looks like iter_time_s))"
    ]
    (row,) = data["rows"]
    assert not row["evaluated"] and "no measured value" in row["not_evaluated_reason"]


def test_report_names_the_metric_a_misspelt_objective_is_close_to() -> None:
    """``--objectives step_tme_s`` was told to take a direction (``step_tme_s:min``), which then
    failed as no column: the close metric was never named."""
    from stage_core.errors import ConfigError
    from stage_explore.report import parse_objective_option

    with pytest.raises(ConfigError, match=r"'step_tme_s' is not a metric .*; expected step_time_s"):
        parse_objective_option("step_tme_s")
    with pytest.raises(ConfigError, match="'foo' has no default direction"):
        parse_objective_option("foo")


def test_validate_reports_each_row_evaluated(tmp_path: Path) -> None:
    """``stage validate`` evaluated its ~1,000 rows (20-50 s) with nothing on screen; the rows
    now report ``progress(done, total)``, which the command line draws in place on a terminal."""
    from stage_explore.validation.suite import run_validation

    runs = tmp_path / "mine.csv"
    runs.write_text(f"{HEADER}\nr1,{RUN},H100\nr2,{RUN.replace(',13.08', ',-1')},H100\n")
    calls: list[tuple[int, int]] = []
    report = run_validation(runs, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 2), (2, 2)] and len(report.results) == 2


def test_a_nonpositive_second_rate_cell_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``iter_time_s = -13`` beside a ``tokens_per_s_per_gpu`` cell: the row was measured by
    the tokens/s cell and the bad one skipped with no word (the self-check skips a
    non-positive cell)."""
    runs = tmp_path / "mine.csv"
    header = HEADER + ",tokens_per_s_per_gpu,num_gpus"
    runs.write_text(f"{header}\nr1,{RUN.replace(',13.08', ',-13')},H100,10020.8,64\n")
    main(["validate", "--data", str(runs), "--json"])
    data = json.loads(capsys.readouterr().out)
    (row,) = [r for r in data["rows"] if r["metric"] != "peak_mem_gib"]
    assert row["evaluated"] and row["metric"] == "tokens_per_s_per_gpu"
    (warning,) = data["data_warnings"]
    assert warning["columns"] == ["iter_time_s", "iter_time_s"] and warning["values"] == [-13, -13]
    assert warning["why"] == (
        "expected a positive number; the row is measured by its tokens_per_s_per_gpu"
    )
