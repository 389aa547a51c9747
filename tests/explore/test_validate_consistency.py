"""A row's own columns checked against each other (s20 datacheck): the band of FLOP-count
conventions, the rates each cell implies, the layout's arithmetic, and where the warnings show
(``stage validate``, ``stage calibrate``, ``stage check RUNS.csv``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.models import get_flavor, list_flavors
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.consistency import (
    SLACK,
    layout_warnings,
    rate_warnings,
    stated_cell,
    system_peaks,
)
from stage_explore.validation.flop_band import flop_band
from stage_explore.validation.render import to_markdown, to_text
from stage_explore.validation.run import megatron_flops
from stage_explore.validation.suite import check_data, run_validation
from tests.explore.published_rows import template, write_rows

LLAMA = get_flavor("llama3-8b")  # seq_len 8192, untied 128,256 vocabulary
#: 8 H100s, data parallel, 128 sequences per step.
LAYOUT = ParallelConfig(dp=8, micro_batch=1, global_batch=128, precision=Precision.BF16)
PEAKS = system_peaks(load_system("h100-80gb"), "bf16")


def _cells(**cells: float) -> dict[str, str]:
    return {k: f"{v:.6g}" for k, v in cells.items()}


#: The dense decoders validate compares TFLOP/s rows of: every GPT, Llama, PaLM and Nemotron-4
#: flavor (Nemotron-H's Mamba-2 mixers and the MoE flavors are counted otherwise).
DENSE = [name for name in list_flavors() if name.startswith(("gpt3-", "megatron-gpt-", "llama",
                                                             "palm-", "nemotron-4-"))]  # fmt: skip


@pytest.mark.parametrize("name", DENSE)
def test_the_band_holds_the_count_validate_compares_tflops_with(name: str) -> None:
    model = get_flavor(name)
    band = flop_band(model)
    validate = megatron_flops(model, 1, False) / model.seq_len
    assert band.conventions["megatron"] == pytest.approx(validate, rel=8e-4)  # docs: 0.07 %
    assert band.low < validate < band.high


def test_the_dense_flavors_are_all_there() -> None:
    assert len(DENSE) >= 25 and {"gpt3-125m", "palm-540b", "nemotron-4-340b"} <= set(DENSE)


def test_the_band_counts_an_moe_model_by_its_active_experts() -> None:
    model = get_flavor("qwen3-30b-a3b")
    band = flop_band(model)
    total = 6 * sum(model.layer_params(i) for i in range(model.layers))
    assert band.low < total / 5  # 8 of 128 experts per token, not all of them
    assert band.high < total / 2


def test_recompute_widens_the_band_only_when_the_run_recomputes() -> None:
    none, full = flop_band(LLAMA), flop_band(LLAMA, "full")
    assert "recompute" not in none.conventions
    assert full.high == pytest.approx(none.high * 4 / 3, rel=1e-9)  # llm-foundry's HFU: x 4/3
    assert full.low == none.low


def test_a_cell_rounds_by_its_last_written_digit() -> None:
    assert stated_cell("2,557") == (2557.0, pytest.approx(0.5 / 2557))
    assert stated_cell("0.95") == (0.95, pytest.approx(0.005 / 0.95))
    assert stated_cell("") is None and stated_cell("n/a") is None and stated_cell("0") is None


def test_a_consistent_row_is_not_flagged() -> None:
    tokens = 14_451.0
    flops = tokens * flop_band(LLAMA).conventions["causal"] / 1e12
    step = 128 * 8192 / (tokens * 8)
    cells = _cells(tokens_per_s_per_gpu=tokens, tflops_per_gpu=flops, iter_time_s=step,
                   mfu_pct=100 * flops * 1e12 / PEAKS["bf16"])  # fmt: skip
    assert rate_warnings("ok", cells, LLAMA, LAYOUT, PEAKS) == []


def test_a_doubled_tflops_cell_is_flagged_naming_both_columns_and_values() -> None:
    tokens = 14_451.0
    flops = 2 * tokens * flop_band(LLAMA).conventions["megatron"] / 1e12
    cells = _cells(tokens_per_s_per_gpu=tokens, tflops_per_gpu=flops)
    (warning,) = rate_warnings("slip", cells, LLAMA, LAYOUT, PEAKS, ("runs.csv", 3))
    assert warning.columns == ("tokens_per_s_per_gpu", "tflops_per_gpu")
    assert warning.values == (14_451.0, pytest.approx(flops, rel=1e-5))
    text = warning.text()
    assert text.startswith("slip (runs.csv, row 3): tokens_per_s_per_gpu 14451 and tflops_per_gpu")
    assert "\n" not in text


def test_a_rate_per_node_is_flagged_against_the_step_time() -> None:
    step = 128 * 8192 / (14_451 * 8)
    cells = _cells(tokens_per_s_per_gpu=8 * 14_451, iter_time_s=step)  # per node of 8 GPUs
    (warning,) = rate_warnings("node", cells, LLAMA, LAYOUT, PEAKS)
    assert warning.columns == ("tokens_per_s_per_gpu", "iter_time_s")
    assert "8.00x apart" in warning.why


def test_an_mfu_on_a_peak_the_run_does_not_have_is_flagged() -> None:
    flops = 14_451 * flop_band(LLAMA).conventions["megatron"] / 1e12
    fp8 = load_system("h100-80gb").accelerator.peak("fp8")
    cells = _cells(tflops_per_gpu=flops, mfu_pct=100 * flops * 1e12 / fp8 / 2)  # half of it
    assert [w.columns for w in rate_warnings("mfu", cells, LLAMA, LAYOUT, PEAKS)] == [
        ("tflops_per_gpu", "mfu_pct")
    ]
    # an FP8 run's MFU may be counted against the FP8 peak: that alone is not a slip
    cells = _cells(tflops_per_gpu=flops, mfu_pct=100 * flops * 1e12 / fp8)
    fp8_peaks = system_peaks(load_system("h100-80gb"), "fp8")
    assert rate_warnings("fp8", cells, LLAMA, LAYOUT, fp8_peaks) == []


def test_the_slack_is_the_only_room_beyond_the_band_and_the_rounding() -> None:
    tokens = 14_451.0
    top = flop_band(LLAMA).high
    near, far = (tokens * top * (1 + k * SLACK) / 1e12 for k in (0.5, 2.0))
    inside = _cells(tokens_per_s_per_gpu=tokens, tflops_per_gpu=near)
    outside = _cells(tokens_per_s_per_gpu=tokens, tflops_per_gpu=far)
    assert rate_warnings("in", inside, LLAMA, LAYOUT, PEAKS) == []
    assert len(rate_warnings("out", outside, LLAMA, LAYOUT, PEAKS)) == 1


def test_the_layout_must_add_up() -> None:
    good = {"tp": "2", "pp": "2", "dp": "2", "num_gpus": "8", "micro_batch": "2",
            "global_batch_seqs": "64"}  # fmt: skip
    assert layout_warnings("ok", good) == []
    (batch,) = layout_warnings("gbs", {**good, "global_batch_seqs": "66"})
    assert batch.columns == ("global_batch_seqs", "micro_batch") and batch.values == (66, 2)
    assert "GBS = MBS·DP·GA" in batch.why
    (gpus,) = layout_warnings("gpus", {**good, "num_gpus": "16"})
    assert gpus.columns == ("num_gpus", "dp") and "not 16" in gpus.why
    # dp from num_gpus when the row leaves it empty
    assert len(layout_warnings("dp", {**good, "dp": "", "global_batch_seqs": "66"})) == 1


def _folder(tmp_path: Path) -> Path:
    """A data folder of two copies of the package's Llama 3 8B H100 row: one as published
    (14,451 tokens/s/GPU at 744 TFLOP/s), one with its TFLOP/s doubled."""
    _, row = template()
    slipped = {**row, "id": "SLIP-1", "tflops_per_gpu": "1488"}
    write_rows(tmp_path / "published_runs_extra.csv", [{**row, "id": "OK-1"}, slipped])
    return tmp_path


def test_validate_lists_the_flagged_row_and_keeps_every_other_key(tmp_path: Path) -> None:
    report = run_validation(_folder(tmp_path))
    assert report.check is not None and (report.check.rows, report.check.compared) == (2, 2)
    (warning,) = report.check.warnings
    assert (warning.id, warning.line, warning.values) == ("SLIP-1", 2, (14451.0, 1488.0))
    data = report.to_dict()
    assert set(data) == {"source", "rows", "mean_abs_error", "sources", "leave_one_source_out",
                         "targets", "accounting", "data_warnings"}  # fmt: skip
    assert [w["id"] for w in data["data_warnings"]] == ["SLIP-1"]
    # the check moves nothing: both rows evaluated and predicted alike
    assert [r["id"] for r in data["rows"]] == ["OK-1", "SLIP-1"]
    assert data["rows"][0]["predicted"] == data["rows"][1]["predicted"]
    assert "1 flagged" in to_text(report) and "SLIP-1 (published_runs_extra.csv, row 2)" in (
        to_markdown(report)
    )


def test_the_package_data_flags_only_the_known_slips() -> None:
    """The H100 Qwen3-30B row's TFLOP/s cell, and the DGX Cloud Llama 4 Maverick README's MFU
    cell at 128 GB200 in BF16 (18.71 %: its own example divides by the 4.9 PFLOP/s FP8 peak;
    the 256 / 512-GPU cells, 37.1 / 36.4 %, are on the BF16 peak), kept as published (s24)."""
    check = check_data()
    assert {w.id for w in check.warnings} == {
        "MBX-H100-26.02-QWEN3_30B_A3B-CS", "DGXC2505-LLAMA4-MAVERICK-GB200-BF16-128",
    }  # fmt: skip
    assert check.compared > 500


def test_stage_check_on_a_runs_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _folder(tmp_path) / "published_runs_extra.csv"
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("1 flagged") and out[1].startswith("warning: SLIP-1 (")
    assert main(["check", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["data_warnings"][0]["id"] == "SLIP-1"
    _, row = template()
    write_rows(path, [row])
    assert main(["check", str(path)]) == 0


def test_calibrate_warns_of_a_run_whose_columns_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = ("id,model,layers,hidden,ffn,heads,vocab,seq_len,global_batch_seqs,micro_batch,tp,pp,"
              "dp,sp,vpp,recompute,precision,iter_time_s,tokens_per_s_per_gpu")  # fmt: skip
    layout = "megatron-gpt-1.7b,2,2048,8192,16,51200,2048,64,2,1,1,16,no,1,none,bf16"
    # 64 x 2048 tokens in 0.2 s on 16 GPUs: 40,960 tokens/s per GPU; b states it per node of 8
    text = "\n".join([header, f"a,{layout},0.2,40960", f"b,{layout},0.2,327680", ""])
    path = tmp_path / "runs.csv"
    path.write_text(text, encoding="utf-8")
    argv = ["calibrate", "--runs", str(path), "--system", "a100-80gb", "--fit", "memory",
            "--no-loo"]  # fmt: skip
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning: b ")]
    assert len(lines) == 1 and lines[0].startswith(
        "warning: b (runs.csv, row 2): tokens_per_s_per_gpu 327680 and iter_time_s 0.2 disagree: "
    )
    assert main([*argv, "--json"]) == 0
    (warning,) = json.loads(capsys.readouterr().out)["data_warnings"]
    assert (warning["id"], warning["columns"]) == ("b", ["tokens_per_s_per_gpu", "iter_time_s"])
