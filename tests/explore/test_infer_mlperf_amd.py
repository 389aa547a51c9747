"""AMD's MLPerf Training v5.1 Llama 3.1 8B implementation (:mod:`stage_explore.validation
.infer_mlperf_amd`, 6 Dec 2026, s23 mlperfaudit): a row naming that round and AMD's
implementation takes what its ``src/train.py`` sets, not the megatron-core profile's defaults
(fp32 gradient reduction, 16-bit parameters, overlapped gradient reduce-scatter and parameter
all-gather)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case

MI355X = {
    "model": "Llama 3.1 8B", "gpu": "AMD Instinct MI355X (288 GB HBM3e)", "precision": "FP8",
    "num_gpus": "8", "global_batch_seqs": "32", "micro_batch": "2",
}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "model", "amd"),
    [
        # AMD's own submission and another submitter's run of AMD's implementation
        ("MLPerf Training v5.1, AMD closed division (NeMo 2.3, Megatron-LM)", "Llama 3.1 8B",
         True),
        ("MLPerf Training v5.1, Dell closed division (AMD's Llama 3.1 8B implementation "
         "(PyTorch on ROCm 7.0.1))", "Llama 3.1 8B", True),
        # another round: not this implementation's settings
        ("MLPerf Training v6.0, AMD closed division (MXFP4)", "Llama 3.1 8B", False),
        # NVIDIA's NeMo implementation run by another submitter: another rule's
        ("MLPerf Training v5.1, Cisco closed division (the NVIDIA NeMo Llama 3.1 8B "
         "implementation)", "Llama 3.1 8B", False),
        # not the 8B benchmark (the implementation trains only Llama 3.1 8B)
        ("MLPerf Training v5.1, AMD closed division", "Llama 3 70B", False),
    ],
)  # fmt: skip
def test_a_row_naming_amds_v51_8b_implementation_runs_its_train_py(
    source: str, model: str, amd: bool
) -> None:
    case = inferred_case(**{**MI355X, "source": source, "model": model})
    options = dict(case.framework_options)
    assert (options.get("overlap_grad_reduce") is False) is amd
    assert (options.get("overlap_param_gather") is False) is amd
    assert (case.parallel.grad_fp32 is False) is (amd or "NVIDIA" in source)
    if amd:
        assert options.get("fp8_param_gather") is True
        assert options.get("fp8_amax_reduction") == "tp_cp"
        assert options.get("native_cross_entropy") is True
        assert case.parallel.fp8_recipe.value == "delayed"
        assert any("train.py" in a for a in case.assumptions)


def test_amds_implementation_in_bf16_keeps_16_bit_parameters() -> None:
    source = "MLPerf Training v5.1, AMD closed division"
    options = dict(inferred_case(**{**MI355X, "source": source, "precision": "BF16"})
                   .framework_options)  # fmt: skip
    assert options.get("overlap_grad_reduce") is False
    assert "fp8_param_gather" not in options and "fp8_amax_reduction" not in options


def test_the_four_mi355x_rows_run_amds_implementation() -> None:
    """AMD's, Dell's, Supermicro's and GigaComputing's MLPerf v5.1 8B rows (one 8-GPU MI355X
    node each) all take the implementation's settings."""
    rows = [r for r in read_csv(data_dir() / "published_runs_no_setup.csv")
            if r["id"].startswith("MLPERF-L31-8B-MI355X-V51-")]  # fmt: skip
    assert len(rows) == 4
    for row in rows:
        (case,) = row_cases(row, "published_runs_no_setup.csv", 1, data_dir())
        assert case.parallel is not None and case.parallel.grad_fp32 is False
        options = dict(case.framework_options)
        assert options["overlap_grad_reduce"] is False and options["fp8_param_gather"] is True
