"""Rows of s23 hidden8 (NVIDIA's MLPerf Training v3.1 GPT-3 175B submissions on ngc23.09, added to
published_runs_no_setup.csv): the inference reads the v3.1 implementation as its stored files
set it, not as the v4.0 / v4.1 ones (mlcommons/training_results_v3.1 f33f9444
NVIDIA/benchmarks/gpt3/implementations/pytorch: conf/custom.yaml maps no fp8_params;
conf/tp_overlap/h100tp4pp8mbs1.yaml runs proj_fprop / fc2_fprop as plain pipelines)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case as _case

V31 = "MLPerf Training v3.1, NVIDIA closed division (eos-dfw_n512_ngc23.09_nemo)"
V40 = "MLPerf Training v4.0, NVIDIA closed division (eos-dfw_n1344_ngc24.04_nemo, NeMo 24.04)"
LATER = ("fp8_param_gather", "ub_proj_fprop_fp8_buf", "ub_fc2_fprop_atomic_gemm")


def _gpt3(source: str, **cells: str) -> dict[str, object]:
    case = _case(**{
        "source": source, "model": "GPT3 175B", "layers": "96", "hidden": "12288",
        "heads": "96", "vocab": "50257", "seq_len": "2048", "global_batch_seqs": "2048",
        "micro_batch": "1", "tp": "4", "pp": "8", "vpp": "12", "dp": "128", "num_gpus": "4096",
        "gpu": "H100-SXM5-80GB", "precision": "fp8", **cells,
    })  # fmt: skip
    return dict(case.framework_options) | {"_said": "\n".join(case.assumptions)}


def test_the_v31_implementation_has_no_fp8_parameters_nor_the_v40_scatter_settings() -> None:
    v31 = _gpt3(V31)
    assert not any(name in v31 for name in LATER), v31
    assert v31["distributed_fused_adam"] == "fp32" and v31["ub_bulk_sm_margin"] is False
    assert "h100tp4pp8mbs1.yaml" in str(v31["_said"])
    v40 = _gpt3(V40)  # the same layout one round later keeps its own settings
    assert all(v40[name] is True for name in LATER), v40


@pytest.mark.parametrize("source", ["MLPerf Training v3.1, NVIDIA closed division", V31])
def test_a_v31_row_with_or_without_its_container_reads_the_23_09_implementation(
    source: str,
) -> None:
    mine = _gpt3(source)
    assert mine["distributed_fused_adam"] == "fp32" and "fp8_param_gather" not in mine
    assert "container 23.09" in str(mine["_said"]) or "v3.1" in str(mine["_said"])


def test_the_package_v31_rows_are_evaluated_with_the_v31_settings() -> None:
    path = data_dir() / "published_runs_no_setup.csv"
    rows = [r for r in read_csv(path) if r["id"].startswith("MLPERF-GPT3-H100-V31-")]
    assert len(rows) == 7  # s23 hidden8's 5, s27 hidden21's 768-GPU and Azure rows
    for row in rows:
        (case, *_) = row_cases(row, "published_runs_no_setup.csv", 1)
        options = dict(case.framework_options)
        assert not any(name in options for name in LATER), row["id"]
        assert case.parallel is not None and case.parallel.vpp == 12
