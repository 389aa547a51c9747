"""s21 mbxrecipe: the expert dispatch of Megatron-Bridge's MoE performance configs read for an
inferred row — HybridEP (DeepEP's traffic at HybridEP's own rates, ``moe_hybridep``: s21
hybridep) where a 26.xx config of the row's layout
sets it, and no all-to-all overlap on the GB200 / GB300 Qwen3 configs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_explore.validation.infer_bridge_dispatch import BRIDGE_HYBRIDEP
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import Case
from tests.explore.infer_helpers import inferred_case

#: The DGX-H100 Qwen3-30B-A3B row of the Megatron-Bridge 26.04 table (the MBX rows' form).
H100_QWEN3 = {
    "id": "MBD-1", "source": "NVIDIA Megatron-Bridge performance summary (26.04 container)",
    "source_table": "26.04 NeMo Container, Pre-Training Performance, Model: Qwen3_30B_a3B",
    "model": "Qwen3_30B_a3B", "seq_len": "4096", "global_batch_seqs": "1024",
    "micro_batch": "1", "tp": "1", "pp": "1", "cp": "1", "ep": "16", "precision": "FP8",
    "dp_sharding": "DDP (FSDP 0)", "gpu": "H100-SXM5-80GB", "num_gpus": "16",
    "tokens_per_s_per_gpu": "8901",
}  # fmt: skip
GB200_QWEN3 = {
    **H100_QWEN3, "id": "MBD-2", "gpu": "GB200 (B200 in NVL72)", "num_gpus": "8", "ep": "8",
    "micro_batch": "4", "global_batch_seqs": "512", "precision": "MXFP8",
}  # fmt: skip
GB300_DSV3 = {
    **H100_QWEN3, "id": "MBD-3", "model": "DeepSeekV3", "gpu": "GB300 (B300 in NVL72)",
    "num_gpus": "256", "pp": "2", "vpp": "8", "ep": "32", "micro_batch": "2",
    "global_batch_seqs": "2048", "precision": "MXFP8",
}  # fmt: skip
#: A Qwen3-235B row at the GB300 FP8-MX V2 config's layout (PP 4 VP 12, EP 32, MBS 2).
GB300_QWEN3_235B = {
    **H100_QWEN3, "id": "MBD-4", "model": "Qwen3_235B_a22B", "gpu": "GB300 (B300 in NVL72)",
    "num_gpus": "256", "pp": "4", "vpp": "12", "ep": "32", "micro_batch": "2",
    "global_batch_seqs": "8192", "precision": "MXFP8",
}  # fmt: skip


def _hybridep(case: Case) -> bool:
    return any("on HybridEP" in a for a in case.assumptions)


@pytest.mark.parametrize("row", [
    H100_QWEN3,
    GB200_QWEN3,
    {**GB200_QWEN3, "source": "NVIDIA Megatron-Bridge performance summary (26.02 container)"},
    GB300_DSV3,
    GB300_QWEN3_235B,
])  # fmt: skip
def test_a_26xx_row_at_a_hybridep_config_s_layout_dispatches_on_hybridep(
    row: dict[str, str],
) -> None:
    case = inferred_case(row)
    options = dict(case.framework_options)
    assert options.get("moe_hybridep") is True
    assert not options.get("moe_deepep", False)
    (note,) = [a for a in case.assumptions if "on HybridEP" in a]
    assert "Hybrid-EP_Implementation.md" in note and "moe_flex_dispatcher_backend" in note


@pytest.mark.parametrize("cells", [
    # the 25.11 files set no flex backend (0fa501ac): the same layout keeps the all-to-all
    {"source": "NVIDIA Megatron-Bridge performance summary (25.11 container)"},
    {"micro_batch": "1"},  # the B200 / GB200 MBS-1 layout: no stored config's HybridEP
    {"gpu": "B200", "micro_batch": "1"},  # the earlier B200 config (MBS 1) sets no backend
    {"model": "Qwen3_235B_a22B", "gpu": "B300", "num_gpus": "64", "pp": "8"},  # alltoall
    {"model": "GPT OSS 120B", "num_gpus": "64", "ep": "64", "precision": "BF16"},  # EP 64
    {"source": "a Qwen3-30B run (26.04 container)", "source_table": ""},  # not Bridge
])  # fmt: skip
def test_other_rows_keep_the_all_to_all(cells: dict[str, str]) -> None:
    case = inferred_case({**GB200_QWEN3, **cells})
    assert not _hybridep(case)
    assert not dict(case.framework_options).get("moe_deepep", False)
    assert not dict(case.framework_options).get("moe_hybridep", False)


def test_hybridep_moves_the_h100_ep16_row_s_inter_node_all_to_all() -> None:
    """EP 16 spans two DGX-H100 nodes: HybridEP sends a token once per remote node where the
    NCCL all-to-all sends each of its (on average four) remote experts' copies."""
    case = inferred_case(H100_QWEN3)
    nccl = replace(case, framework_options=tuple(
        (k, v) for k, v in case.framework_options if k != "moe_hybridep"
    ))  # fmt: skip
    hybrid, alltoall = evaluate_cases([case, nccl])
    assert hybrid.evaluated and alltoall.evaluated
    assert hybrid.predicted > 1.3 * alltoall.predicted


def test_every_hybridep_config_names_its_file_and_commit() -> None:
    for config in BRIDGE_HYBRIDEP:
        assert "workload_base_configs.py" in config.why
        assert any(c in config.why for c in ("01b2977e", "04264182", "f0e2c37e", "07eea52d"))
        assert config.layouts


@pytest.mark.parametrize(("row", "overlap"), [
    (GB300_QWEN3_235B, False),  # GB300 V2: no moe_a2a_overlap in any stored version
    ({**GB300_QWEN3_235B, "gpu": "GB200 (B200 in NVL72)", "pp": "8", "vpp": "3",
      "micro_batch": "1"}, False),
    ({**GB300_QWEN3_235B, "gpu": "H100-SXM5-80GB", "tp": "2", "pp": "8", "vpp": "4",
      "micro_batch": "1", "precision": "FP8"}, True),  # H100 V1: moe_a2a_overlap=True
])  # fmt: skip
def test_the_qwen3_configs_overlap_the_all_to_all_only_off_gb200_and_gb300(
    row: dict[str, str], overlap: bool
) -> None:
    case = inferred_case(row)
    assert dict(case.framework_options).get("moe_comm_overlap") is overlap


#: The DGX-H100 Qwen3-235B row's layout of the Megatron-Bridge 25.09 table (TP 2, PP 8, VP 4,
#: EP 32; s29 qwen2509): the container whose runs read the earlier configs/qwen3/ family.
H100_QWEN3_235B_2509 = {
    **H100_QWEN3, "id": "MBD-5", "source": "NVIDIA Megatron-Bridge performance summary "
    "(25.09 container)", "model": "Qwen3_235B_a22B", "num_gpus": "256", "tp": "2", "pp": "8",
    "vpp": "4", "ep": "32", "global_batch_seqs": "2048",
}  # fmt: skip
B200_QWEN3_235B_2509 = {
    **H100_QWEN3_235B_2509, "id": "MBD-6", "gpu": "B200", "num_gpus": "64", "tp": "1",
    "vpp": "2", "ep": "8", "global_batch_seqs": "1024",
}  # fmt: skip
LATER = "NVIDIA Megatron-Bridge performance summary (25.11 container)"


@pytest.mark.parametrize("row", [H100_QWEN3_235B_2509, B200_QWEN3_235B_2509])
def test_a_25_09_qwen3_row_reads_the_earlier_family_without_the_all_to_all_overlap(
    row: dict[str, str],
) -> None:
    case = inferred_case(row)
    assert dict(case.framework_options).get("moe_comm_overlap") is False
    (note,) = [a for a in case.assumptions if "container 25.09" in a and "all-to-all" in a]
    assert "configs/qwen3/" in note and "PR #1451" in note


@pytest.mark.parametrize("row", [H100_QWEN3_235B_2509, B200_QWEN3_235B_2509])
def test_a_later_container_of_the_same_layout_keeps_the_later_family_s_overlap(
    row: dict[str, str],
) -> None:
    case = inferred_case({**row, "source": LATER})
    assert dict(case.framework_options).get("moe_comm_overlap") is True
    assert not any("container 25.09" in a for a in case.assumptions)


@pytest.mark.parametrize(("source", "tp_overlap"), [
    (H100_QWEN3_235B_2509["source"], True),  # configs/qwen3: tp_comm_overlap=True
    (LATER, False),  # configs/qwen/qwen3_llm_pretrain.py 05c0c90f: tp_comm_overlap=False
])  # fmt: skip
def test_the_h100_qwen3_235b_tp_overlap_follows_the_container_s_family(
    source: str, tp_overlap: bool
) -> None:
    case = inferred_case({**H100_QWEN3_235B_2509, "source": source})
    assert dict(case.framework_options).get("tp_comm_overlap") is tp_overlap
