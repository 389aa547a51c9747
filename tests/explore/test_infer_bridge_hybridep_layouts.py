"""s21 review: every layout of the stored Megatron-Bridge performance configs that set
``moe_flex_dispatcher_backend="hybridep"`` is keyed in ``BRIDGE_HYBRIDEP``, not only those of
the visible rows — DeepSeek-V3 on GB300 at PP 4 VP 4 EP 64 (BF16_V1), on B300 at PP 8 VP 2 EP 8
(04264182 B300_V1 / NVFP4_V1 MBS 2; f0e2c37e BF16_V2), GPT-OSS 120B on GB300 at EP 16 MBS 4
(FP8_MX_V2, 07eea52d); DeepSeek-V3's H100 configs at PP 8 VP 4 / VP 2 EP 64 from 26.01 (s21
bridgefix: the 26.xx deepseek_llm_pretrain.py reads that backend; before, the recipe's DeepEP)."""

from __future__ import annotations

import pytest

from tests.explore.infer_helpers import inferred_case

#: A Megatron-Bridge 26.04 table row's form (the MBX rows').
ROW = {
    "id": "MBH-1", "source": "NVIDIA Megatron-Bridge performance summary (26.04 container)",
    "source_table": "26.04 NeMo Container, Pre-Training Performance, Model: DeepSeekV3",
    "model": "DeepSeekV3", "seq_len": "4096", "global_batch_seqs": "2048", "micro_batch": "1",
    "tp": "1", "pp": "4", "vpp": "4", "cp": "1", "ep": "64", "precision": "BF16",
    "dp_sharding": "DDP (FSDP 0)", "gpu": "GB300 (B300 in NVL72)", "num_gpus": "256",
    "tokens_per_s_per_gpu": "4000",
}  # fmt: skip


def _on_hybridep(cells: dict[str, str]) -> bool:
    case = inferred_case({**ROW, **cells})
    return any("on HybridEP" in a for a in case.assumptions)


@pytest.mark.parametrize("cells", [
    {},  # DeepSeek-V3 GB300 BF16_V1: PP 4 VP 4 EP 64
    {"gpu": "B300", "pp": "8", "vpp": "2", "ep": "8"},  # B300_V1 (04264182), BF16_V2 (f0e2c37e)
    {"gpu": "B300", "pp": "8", "vpp": "2", "ep": "8", "micro_batch": "2"},  # B300 NVFP4_V1
    {"model": "GPT OSS 120B", "pp": "1", "vpp": "", "ep": "16", "micro_batch": "4",
     "num_gpus": "64", "global_batch_seqs": "1280", "precision": "MXFP8"},  # GB300 FP8_MX_V2
])  # fmt: skip
def test_every_stored_hybridep_layout_is_keyed(cells: dict[str, str]) -> None:
    assert _on_hybridep(cells)


@pytest.mark.parametrize("cells", [
    {"source": "NVIDIA Megatron-Bridge performance summary (25.11 container)"},  # before 26.01
    {"gpu": "B300", "pp": "8", "vpp": "4", "ep": "8"},  # no stored config's layout
    {"model": "GPT OSS 120B", "pp": "1", "vpp": "", "ep": "64", "micro_batch": "4",
     "num_gpus": "64", "global_batch_seqs": "1280"},  # GB300 BF16 EP 64: no backend
])  # fmt: skip
def test_other_layouts_are_not(cells: dict[str, str]) -> None:
    assert not _on_hybridep(cells)


#: A Megatron-Bridge DeepSeek-V3 H100 row at the stored H100 configs' layout (TP 2, PP 8, EP 64).
H100 = {"gpu": "H100", "tp": "2", "pp": "8", "vpp": "4", "ep": "64", "num_gpus": "1024",
        "global_batch_seqs": "8192", "precision": "FP8"}  # fmt: skip


@pytest.mark.parametrize("vpp", ["4", "2"])  # H100_V1 / V2; H100_FP8_SC_V2 at VP 2
def test_deepseek_v3_h100_26xx_takes_hybridep_not_the_old_recipes_deepep(vpp: str) -> None:
    """s21 bridgefix (review item 3): the 26.xx deepseek_llm_pretrain.py (69655bff) reads the
    backend from the workload base config, HybridEP on every H100 config (04264182 / f0e2c37e);
    the 25.xx file's enable_deepep=True (01328424) must not win over it."""
    case = inferred_case({**ROW, **H100, "vpp": vpp})
    options = dict(case.framework_options)
    assert options.get("moe_hybridep") is True
    assert not options.get("moe_deepep", False)
    assert options.get("overlap_grad_reduce") is False


def test_deepseek_v3_h100_25xx_keeps_deepep() -> None:
    source = "NVIDIA Megatron-Bridge performance summary (25.09 container)"
    case = inferred_case({**ROW, **H100, "source": source})
    options = dict(case.framework_options)
    assert options.get("moe_deepep") is True
    assert not options.get("moe_hybridep", False)


def test_deepseek_v3_b200_v2_deepep_layout_takes_deepep() -> None:
    """s21 bridgefix (review item 4): DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 / NVFP4_V2
    (04264182) set moe_flex_dispatcher_backend "deepep" at PP 8 VP 2 EP 32: such a 26.xx row
    runs DeepEP's kernels, not HybridEP and not the all-to-all."""
    cells = {"gpu": "B200", "pp": "8", "vpp": "2", "ep": "32", "global_batch_seqs": "4096",
             "precision": "MXFP8"}  # fmt: skip
    options = dict(inferred_case({**ROW, **cells}).framework_options)
    assert options.get("moe_deepep") is True
    assert not options.get("moe_hybridep", False)
    source = "NVIDIA Megatron-Bridge performance summary (25.11 container)"
    before = dict(inferred_case({**ROW, **cells, "source": source}).framework_options)
    assert not before.get("moe_deepep", False)


#: GPT-OSS 120B on GB200 at EP 64 MBS 4 (the V1 / V2 configs' layout), a 26.04 row.
GPT_OSS_GB200 = {"model": "GPT OSS 120B", "gpu": "GB200", "pp": "1", "vpp": "", "ep": "64",
                 "micro_batch": "4", "num_gpus": "64", "global_batch_seqs": "1280"}  # fmt: skip


@pytest.mark.parametrize(("cells", "hybridep"), [
    ({"precision": "MXFP8"}, True),  # GB200_FP8_MX_V2 (07eea52d)
    ({"precision": "BF16"}, False),  # GB200_BF16_V2: no backend in 07eea52d
    ({"precision": "MXFP8", "global_batch_seqs": "512"}, False),  # FP8_MX_V1 = BF16_V1
])  # fmt: skip
def test_gpt_oss_gb200_hybridep_keyed_on_recipe_and_batch(
    cells: dict[str, str], hybridep: bool
) -> None:
    """s21 bridgefix (review item 2): GB200_FP8_MX_V2 sets HybridEP at the GB200 BF16 configs'
    layout (EP 64, MBS 4), so the MXFP8 recipe and its GBS 1280 tell it apart."""
    assert _on_hybridep({**GPT_OSS_GB200, **cells}) is hybridep
