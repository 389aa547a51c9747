"""s19 mbrecipe: the selective recompute of Megatron-Bridge's MoE performance configs on
Blackwell, read for an inferred row whose layout is a config's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.parallel.vocab import Recompute
from stage_explore.validation.infer_bridge_moe import BRIDGE_MOE_RECIPES
from stage_explore.validation.run import evaluate_cases
from tests.explore.infer_helpers import inferred_case

#: A DGX-B200 DeepSeek-V3 row of the Megatron-Bridge 26.04 table (the package's MBX rows' form).
BRIDGE_B200 = {
    "id": "MBR-1", "source": "NVIDIA Megatron-Bridge performance summary (26.04 container)",
    "source_table": "26.04 NeMo Container, Pre-Training Performance, Model: DeepSeekV3",
    "model": "DeepSeekV3", "seq_len": "4096", "global_batch_seqs": "4096", "micro_batch": "1",
    "tp": "1", "pp": "16", "cp": "1", "ep": "8", "precision": "MXFP8",
    "dp_sharding": "DDP (FSDP 0)", "gpu": "B200", "num_gpus": "256",
    "tokens_per_s_per_gpu": "2815",
}  # fmt: skip
#: The GB300 row's form: MBS 2, PP 2 VP 8, EP 32.
BRIDGE_GB300 = {
    **BRIDGE_B200, "id": "MBR-2", "gpu": "GB300 (B300 in NVL72)", "micro_batch": "2",
    "pp": "2", "vpp": "8", "ep": "32", "tokens_per_s_per_gpu": "4965",
}  # fmt: skip


@pytest.mark.parametrize(("cells", "modules"), [
    ({}, ("mla_up_proj",)),
    ({"gpu": "B300"}, ("mla_up_proj",)),
    ({"precision": "BF16"}, ("mla_up_proj",)),
    ({"gpu": "GB200 (B200 in NVL72)", "pp": "4", "vpp": "4", "ep": "64"}, ("mla_up_proj",)),
    ({"model": "GPT OSS 120B", "gpu": "GB200 (B200 in NVL72)", "num_gpus": "64", "pp": "1",
      "ep": "64", "micro_batch": "4", "global_batch_seqs": "1280", "precision": "BF16"},
     ("layernorm", "moe_act")),
])  # fmt: skip
def test_a_bridge_moe_row_at_a_configs_layout_takes_its_recompute(
    cells: dict[str, str], modules: tuple[str, ...]
) -> None:
    case = inferred_case({**BRIDGE_B200, **cells})
    assert case.parallel.recompute.value == "selective"
    assert tuple(case.parallel.recompute_modules) == modules
    assert any("recompute_modules" in a and "Megatron-Bridge" in a for a in case.assumptions)


@pytest.mark.parametrize("cells", [
    {"pp": "8", "vpp": "2", "ep": "32"},                   # a layout no stored config sets
    {"recompute": "none"},                                 # the row states its recompute
    {"source": "NVIDIA NeMo performance summary (25.04 container)"},  # before 25.11
    {"source": "a DeepSeek-V3 run", "source_table": ""},  # no Megatron-Bridge container
    {"gpu": "H100"},                                       # not a Blackwell config of the table
    {"model": "GPT OSS 120B", "gpu": "GB300 (B300 in NVL72)", "num_gpus": "64", "pp": "1",
     "ep": "64", "micro_batch": "4", "global_batch_seqs": "1280", "precision": "BF16"},
])  # fmt: skip
def test_other_rows_keep_their_recompute(cells: dict[str, str]) -> None:
    case = inferred_case({**BRIDGE_B200, **cells})
    assert not any("Megatron-Bridge performance config of" in a for a in case.assumptions)


def test_the_config_s_hybridep_is_timed_as_deepep_s_traffic() -> None:
    """s21 mbxrecipe: HybridEP sends what DeepEP sends (Hybrid-EP_Implementation.md §8), so the
    26.04 B200 config's dispatcher is costed with DeepEP's traffic — at HybridEP's own rates
    (moe_hybridep, s21 hybridep) — and the recompute note says so."""
    case = inferred_case(BRIDGE_B200)
    (note,) = [a for a in case.assumptions if "Megatron-Bridge performance config of" in a]
    assert "timed as DeepEP's traffic at its own published rates" in note
    assert dict(case.framework_options).get("moe_hybridep") is True


def test_the_gb300_config_s_recompute_makes_its_micro_batch_2_fit() -> None:
    """Without the config's mla_up_proj recompute the GB300 MBS 2 layout needs ~312 GiB of 260."""
    case = inferred_case(BRIDGE_GB300)
    assert tuple(case.parallel.recompute_modules) == ("mla_up_proj",)
    none = replace(case.parallel, recompute=Recompute.NONE, recompute_modules=())
    bare = replace(case, parallel=none)
    recomputed, plain = evaluate_cases([case, bare])
    assert recomputed.evaluated and "out of memory" not in recomputed.note
    assert "out of memory" in plain.note


def test_every_recipe_names_its_source_file_and_commit() -> None:
    for r in BRIDGE_MOE_RECIPES:
        assert "workload_base_configs.py" in r.why
        assert any(c in r.why for c in ("0fa501ac", "f0e2c37e", "07eea52d"))
        assert r.modules and r.unmodelled
