"""s26 mbvergap: Megatron-Bridge's full-iteration MXFP8 MoE recipes (26.06 and later containers)
read for an inferred row — the experts as Transformer Engine's fused grouped MLP
(``moe_grouped_kernel``) and the expert-parallel overlap (``moe_comm_overlap``) at a layout those
recipes set — and the overlap read where a row's text names "expert-parallel communication
overlap"."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_bridge_graphs import FULL_ITERATION
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import Case
from tests.explore.infer_helpers import inferred_case

#: A model-verification card's GB300 Qwen3-30B-A3B performance entry (the MBVER rows' form).
GB300_QWEN3 = {
    "id": "MBG-1",
    "source": "NVIDIA Megatron-Bridge model verification card (Qwen/Qwen3-30B-A3B), "
    "pretrain_performance on GB300 (base container nvcr.io/nvidia/nemo:26.06)",
    "source_table": "docs/model-verification/models/qwen3-30b-a3b.md, 'pretrain_performance'",
    "model": "Qwen3-30B-A3B", "seq_len": "4096", "moe": "not stated (mock data)",
    "global_batch_seqs": "512", "micro_batch": "8", "tp": "1", "pp": "1", "dp": "8", "cp": "1",
    "ep": "8", "precision": "MXFP8", "gpu": "GB300", "num_gpus": "8",
    "tokens_per_s_per_gpu": "44773.361",
}  # fmt: skip
GB200_DSV3 = {
    **GB300_QWEN3, "id": "MBG-2", "model": "DeepSeek-V3", "gpu": "GB200", "num_gpus": "256",
    "global_batch_seqs": "4096", "micro_batch": "1", "pp": "4", "vpp": "4", "dp": "64",
    "ep": "64", "source": GB300_QWEN3["source"].replace("26.06", "26.08.rc5"),
}  # fmt: skip
GB200_QWEN3_235B = {
    **GB300_QWEN3, "id": "MBG-3", "model": "Qwen3-235B-A22B", "gpu": "GB200", "num_gpus": "256",
    "global_batch_seqs": "8192", "micro_batch": "1", "pp": "8", "vpp": "3", "dp": "32",
    "ep": "32", "source": GB300_QWEN3["source"].replace("26.06", "26.08"),
}  # fmt: skip


def _options(case: Case) -> dict[str, object]:
    return dict(case.framework_options)


@pytest.mark.parametrize("row", [GB300_QWEN3, GB200_DSV3, GB200_QWEN3_235B])
def test_a_26_06_mxfp8_row_at_a_full_iteration_recipe_s_layout(row: dict[str, str]) -> None:
    case = inferred_case(row)
    options = _options(case)
    assert options.get("moe_grouped_kernel") is True
    assert options.get("moe_comm_overlap") is True
    (note,) = [a for a in case.assumptions if "full-iteration MXFP8 MoE recipe" in a]
    assert "perf_recipes" in note and "NVTE_CUTEDSL_FUSED_GROUPED_MLP" in note
    # the GB200 / GB300 Qwen3 rule of the 26.04 scripts (no overlap) does not speak for it
    assert not any("moe_comm_overlap false" in a for a in case.assumptions)
    (result,) = evaluate_cases([case])
    assert result.predicted > 0


@pytest.mark.parametrize("cells", [
    # the 26.04 performance summary's row at the same layout ran scoped TE graphs
    {"source": "NVIDIA Megatron-Bridge performance summary (26.04 container)", "source_table": ""},
    {"precision": "BF16"},  # the full-iteration helper is the MXFP8 recipes'
    # s26 mbvergen: model x GPU pairs whose MXFP8 recipes run no full-iteration helper
    {"model": "Kimi-K2", "gpu": "GB300", "num_gpus": "256", "pp": "4", "vpp": "4", "ep": "64",
     "dp": "64", "micro_batch": "2", "global_batch_seqs": "4096"},  # DeepSeek-V3 architecture
    {"model": "Qwen3-235B-A22B", "gpu": "B300", "num_gpus": "256", "pp": "8", "ep": "8",
     "dp": "32", "micro_batch": "2", "global_batch_seqs": "8192"},
    # the functional recipe: Transformer Engine graphs of the router and preprocessing
    {"notes": "Transformer Engine CUDA graphs for moe_router and moe_preprocess remain active"},
    {"source": "a Qwen3-30B run (nemo:26.06)", "source_table": ""},  # not Megatron-Bridge
])  # fmt: skip
def test_other_rows_keep_the_per_expert_path(cells: dict[str, str]) -> None:
    case = inferred_case({**GB300_QWEN3, **cells})
    assert not _options(case).get("moe_grouped_kernel", False)
    assert not any("full-iteration MXFP8 MoE recipe" in a for a in case.assumptions)


def test_every_recipe_names_its_file_and_commit() -> None:
    for entry in FULL_ITERATION:
        assert "perf_recipes/" in entry.why and "(" in entry.why
        assert entry.system in ("gb200-nvl72", "gb300-nvl72", "b300")


@pytest.mark.parametrize("cells", [
    # the GB300 Qwen3-235B card's statement: PP 4 EP 32 MBS 2, its virtual pipeline not stated
    {"model": "Qwen3-235B-A22B", "num_gpus": "256", "pp": "4", "ep": "32", "dp": "64",
     "micro_batch": "2", "global_batch_seqs": "8192"},
    {"micro_batch": "4"},  # another layout of the GB300 Qwen3-30B recipe's model and GPU
    {"gpu": "B300"},  # qwen/b300/qwen3_moe.py's Qwen3-30B MXFP8 recipe runs the helper too
    {"model": "GPT-OSS-120B", "gpu": "GB200", "num_gpus": "64", "ep": "64", "dp": "64",
     "micro_batch": "4", "global_batch_seqs": "1280"},
])  # fmt: skip
def test_any_layout_of_a_full_iteration_model_and_gpu(cells: dict[str, str]) -> None:
    """s26 mbvergen: the recipes decide by model and GPU, not by layout."""
    case = inferred_case({**GB300_QWEN3, **cells})
    options = _options(case)
    assert options.get("moe_grouped_kernel") is True
    assert options.get("moe_comm_overlap") is True
    (note,) = [a for a in case.assumptions if "full-iteration MXFP8 MoE recipe" in a]
    assert "whatever its layout" in note


H100_TEXT = {
    **GB300_QWEN3, "id": "MBG-4", "gpu": "H100", "num_gpus": "16", "ep": "16", "dp": "16",
    "micro_batch": "1", "global_batch_seqs": "1024", "precision": "bf16",
}  # fmt: skip


@pytest.mark.parametrize(("text", "on"), [
    ("expert-parallel communication overlap is active with delayed weight-gradient compute "
     "disabled", True),
    ("expert_parallel_communication_overlap: off", False),
    ("no overlap named", False),
])  # fmt: skip
def test_the_text_s_expert_parallel_communication_overlap(text: str, on: bool) -> None:
    case = inferred_case({**H100_TEXT, "notes": text})
    assert bool(_options(case).get("moe_comm_overlap", False)) is on
