"""Rows of s27 hidden21 (MLPerf Training GPT-3 175B submissions of NVIDIA's NeMo 1.x implementation
by NVIDIA, Azure+NVIDIA (v3.1) and Oracle (v4.1), added to published_runs_no_setup.csv): the v3.1
implementation runs userbuffers without CUDA multicast — its config_common.sh, stored in the
Azure+NVIDIA folder (mlcommons/training_results_v3.1 f33f9444), exports UB_SKIPMC=1 — while the
v4.0 / v4.1 ones unset it (Oracle's v4.1 copy, swsok/training_results_v4.1 8821c703)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_mlperf_round import mlperf_training_round
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case

V31 = "MLPerf Training v3.1, NVIDIA closed division (eos-dfw_n512_ngc23.09_nemo)"
AZURE = "MLPerf Training v3.1, Azure+NVIDIA closed division (ND_H100_v5 x1344)"
V41 = "MLPerf Training v4.1, Oracle closed division (3072xBM.GPU.H100.8, NeMo 24.09)"


def _options(source: str) -> dict[str, object]:
    case = inferred_case(**{
        "source": source, "model": "GPT3 175B", "layers": "96", "hidden": "12288",
        "heads": "96", "vocab": "50257", "seq_len": "2048", "global_batch_seqs": "2048",
        "micro_batch": "1", "tp": "4", "pp": "8", "vpp": "12", "dp": "128", "num_gpus": "4096",
        "gpu": "H100-SXM5-80GB", "precision": "fp8",
    })  # fmt: skip
    return dict(case.framework_options) | {"_said": "\n".join(case.assumptions)}


@pytest.mark.parametrize("source", [V31, AZURE, "MLPerf Training v3.1, NVIDIA closed division"])
def test_the_v31_gpt3_implementation_runs_userbuffers_without_multicast(source: str) -> None:
    mine = _options(source)
    assert mine["ub_multicast"] is False, mine
    assert "UB_SKIPMC=1" in str(mine["_said"])


def test_the_v41_gpt3_implementation_keeps_multicast() -> None:
    assert "ub_multicast" not in _options(V41)


def test_the_package_rows_of_this_round_read_their_rounds() -> None:
    rows = {r["id"]: r for r in read_csv(data_dir() / "published_runs_no_setup.csv")}
    for name, multicast in (
        ("MLPERF-GPT3-H100-V31-768", False),
        ("MLPERF-GPT3-H100-V31-AZURE-10752", False),
        ("MLPERF-GPT3-H100-V41-ORACLE-1536", None),
        ("MLPERF-GPT3-H100-V41-ORACLE-3072", None),
    ):
        (case, *_) = row_cases(rows[name], "published_runs_no_setup.csv", 1)
        options = dict(case.framework_options)
        assert options.get("ub_multicast") is multicast, name
        assert case.parallel is not None and case.parallel.tp == 4 and case.parallel.pp == 8


@pytest.mark.parametrize(
    "text",
    [
        "MLPerf Training v5.1, AMD closed division",
        "MLPerf v5.1 Training, AMD closed division",
        "the MLPerf 5.1 training benchmark suite",
        "MLPerf Training 5.1",
        "MLPerf™ Training v5.1",
        "MLPerf-Training: v5.1",
        "MLPerf Training round 5.1",
    ],
)
def test_every_spelling_of_a_training_round_reads_the_round(text: str) -> None:
    assert mlperf_training_round(text) == (5, 1)


@pytest.mark.parametrize(
    "text",
    [
        "MLPerf Inference v5.1, datacenter",
        "MLPerf Training closed-division result log (result_0.txt)",
        "MLPERF-GPT3-H100-V31-768",
        "the MLPerf C4 SentencePiece model",
    ],
)
def test_no_training_round_is_read_where_none_is_named(text: str) -> None:
    assert mlperf_training_round(text) is None


def test_a_gpt3_row_spelling_the_round_first_reads_its_implementation() -> None:
    """Without a container in the text the round dates the implementation (v3.1: 23.09)."""
    mine = _options("MLPerf v3.1 Training, NVIDIA closed division")
    assert mine["distributed_fused_adam"] == "fp32" and mine["ub_multicast"] is False, mine


def test_the_amd_row_spelled_otherwise_reads_as_the_package_row() -> None:
    rows = {r["id"]: r for r in read_csv(data_dir() / "published_runs_no_setup.csv")}
    package = rows["MLPERF-L31-8B-MI355X-V51-8"]
    spelled = {
        name: value.replace("MLPerf Training v5.1", "MLPerf v5.1 Training")
        for name, value in package.items()
    }
    assert spelled != package
    (mine, *_) = row_cases(spelled, "extra.csv", 1)
    (theirs, *_) = row_cases(package, "published_runs_no_setup.csv", 1)
    assert dict(mine.framework_options) == dict(theirs.framework_options)
    assert dict(theirs.framework_options).get("fp8_param_gather") is True


def test_a_stated_tp_comm_overlap_and_ub_skipmc_are_read_on_an_mlperf_row() -> None:
    """The v5.1 GB200 405B configs export TP_COMM_OVERLAP=False and UB_SKIPMC=1 (mlcommons/
    training_results_v5.1 4da2d1cd config_GB200_640x4x24xtp4pp8cp2_cg_fp4.sh); the package
    row states them and is read so; the same row without those statements keeps the defaults."""
    rows = {r["id"]: r for r in read_csv(data_dir() / "published_runs_no_setup.csv")}
    package = rows["MLPERF-L405B-GB200-V51-2560"]
    (case, *_) = row_cases(package, "published_runs_no_setup.csv", 1)
    options = dict(case.framework_options)
    assert options["tp_comm_overlap"] is False and options["ub_multicast"] is False
    silent = {
        name: value.replace("TP_COMM_OVERLAP=False, UB_SKIPMC=1, ", "")
        for name, value in package.items()
    }
    assert silent != package
    (bare, *_) = row_cases(silent, "extra.csv", 1)
    assert "tp_comm_overlap" not in dict(bare.framework_options)
    assert "ub_multicast" not in dict(bare.framework_options)


def test_stated_switches_are_read_only_on_mlperf_rows() -> None:
    mine = inferred_case(
        source="NeMo 25.09 container, DGX-H100", notes="TP_COMM_OVERLAP=False", tp="2", dp="4"
    )
    assert dict(mine.framework_options).get("tp_comm_overlap") is not False
