"""Rows of s25 hidden14 (MoE pre-training runs outside NVIDIA's performance tables, added to
published_runs_no_setup.csv): torchtitan's pipeline micro-batch size 1 since
pytorch/torchtitan#1073 (April 2025; torchtitan/config/job_config.py 000204a4
``pipeline_parallel_microbatch_size``), and fp32 master weights a NeMo AutoModel MoE row
states (not AutoModel's own MoE classes' bf16 model states)."""

from __future__ import annotations

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case

FILE = "published_runs_no_setup.csv"
NEBIUS = "NEBIUS-TT-DSV3-671B-B200-256-BF16"
AUTOMODEL = "BIONEMO-AUTOMODEL-MIXTRAL-8X7B-B200-BF16-DP8"
#: A torchtitan pipeline row: 64 GPUs at PP 2 and DP 32, 256 sequences (local batch 8).
TORCHTITAN_PP = {
    "source": "torchtitan", "model": "Llama 3 8B", "num_gpus": "64", "pp": "2", "dp": "32",
    "global_batch_seqs": "256", "seq_len": "8192", "dp_sharding": "FSDP2",
}  # fmt: skip


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def test_a_torchtitan_row_naming_its_local_batch_size_runs_pipeline_micro_batches_of_one() -> None:
    named = inferred_case(**{**TORCHTITAN_PP, "source_table": "local batch LBS=8"})
    assert named.parallel is not None and named.parallel.micro_batch == 1
    assert any("pytorch/torchtitan#1073" in a for a in named.assumptions)


def test_a_torchtitan_row_dated_after_april_2025_runs_pipeline_micro_batches_of_one() -> None:
    dated = inferred_case(**{**TORCHTITAN_PP, "notes": "run of 2025-09"})
    assert dated.parallel is not None and dated.parallel.micro_batch == 1


def test_an_undated_torchtitan_row_keeps_the_stage_count_of_micro_batches() -> None:
    """Before #1073 the removed pipeline_parallel_microbatches defaulted to the stage count:
    2 micro-batches of the local batch 8."""
    undated = inferred_case(**TORCHTITAN_PP)
    assert undated.parallel is not None and undated.parallel.micro_batch == 4
    early = inferred_case(**{**TORCHTITAN_PP, "notes": "run of 2025-02"})
    assert early.parallel is not None and early.parallel.micro_batch == 4


def test_the_nebius_deepseek_v3_row_fits_with_micro_batches_of_one() -> None:
    """LBS 64 over PP 2: 64 micro-batches of one 8,192-token sequence (32 of 64 did not fit:
    the prediction was out of memory at 539 GiB)."""
    (case, *_) = row_cases(_package(NEBIUS), FILE, 1)
    assert case.parallel is not None and case.parallel.micro_batch == 1, case.reason


def test_an_automodel_moe_row_stating_fp32_master_weights_keeps_them() -> None:
    (case, *_) = row_cases(_package(AUTOMODEL), FILE, 1)
    options = dict(case.framework_options)
    assert "bf16_model_states" not in options
    assert any("fp32 master weights, as the row states" in a for a in case.assumptions)


def test_an_automodel_moe_row_stating_nothing_takes_the_moe_classes_bf16_states() -> None:
    row = _package(AUTOMODEL)
    row["notes"] = row["notes"].replace("with FP32 main weights", "")
    (case, *_) = row_cases(row, FILE, 1)
    assert dict(case.framework_options).get("bf16_model_states") is True
