"""Rows of s24 hidden11 (Llama 4 Maverick / Scout pre-training runs, added to
published_runs_no_setup.csv): the inference sets Llama 4 up as NeMo 2.0's Llama4Config builds
it (NVIDIA-NeMo/Speech 7b2c814e nemo/collections/llm/gpt/model/llama.py) instead of refusing a
mixture of experts of no known family, and reads the NeMo 2.0 Llama 4 performance recipes'
MegatronTokenDropCallback (nemo/collections/llm/recipes/llama4_e128.py 0e449b1a)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case, minimal_row

FILE = "published_runs_no_setup.csv"
MAVERICK = "DGXC2505-LLAMA4-MAVERICK-H100-BF16-512"
SCOUT = "NEMO2507-GB200-LLAMA4-SCOUT"


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def test_the_maverick_rows_are_nemos_llama4_experts128_config() -> None:
    (case, *_) = row_cases(_package(MAVERICK), FILE, 1)
    spec = case.model
    assert spec is not None and not case.reason, case.reason
    assert (spec.layers, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.vocab) == (
        48, 5120, 16384, 40, 8, 202048,
    )  # fmt: skip
    assert (spec.num_experts, spec.top_k, spec.expert_ffn, spec.num_shared_experts) == (
        128, 1, 8192, 1,
    )  # fmt: skip
    # every other layer is MoE (Llama4Experts128Config moe_layer_freq [0, 1] * 24)
    assert spec.moe_layer_interval == 2 and spec.first_k_dense == 0
    assert any("Llama4Experts128Config" in a for a in case.assumptions)


def test_the_scout_row_is_llama4_experts16_config_with_an_moe_block_in_every_layer() -> None:
    (case, *_) = row_cases(_package(SCOUT), FILE, 1)
    spec = case.model
    assert spec is not None and not case.reason, case.reason
    assert (spec.num_experts, spec.top_k, spec.expert_ffn, spec.moe_layer_interval) == (
        16, 1, 8192, 1,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "experts"),
    [("Llama-4-Maverick-17B-128E", 128), ("llama4_e128", 128), ("LLAMA4-Scout-LLM", 16),
     ("Llama-4-Scout-17B-16E", 16), ("llama4 e16", 16)],
)  # fmt: skip
def test_llama4_spellings_name_their_variant(model: str, experts: int) -> None:
    case = inferred_case(model=model, gpu="H100-SXM5-80GB", num_gpus="64", ep="8")
    assert case.model is not None and case.model.num_experts == experts


def test_a_llama4_row_naming_no_variant_is_not_evaluated_with_a_reason() -> None:
    (case, *_) = row_cases(minimal_row(model="Llama 4", moe="16 experts, top-1"), "x.csv", 1)
    assert case.model is None and "of no known family" in case.reason


def test_the_nemo_25_04_recipe_pads_llama4_experts_to_capacity_but_not_a_later_container() -> None:
    """The DGX Cloud Llama 4 rows run NeMo 25.04.01's pretrain_llama4_e128.py (token drop, read);
    NeMo 25.07's scripts were not read, so its Scout row stays dropless."""
    (maverick, *_) = row_cases(_package(MAVERICK), FILE, 1)
    assert maverick.model is not None and maverick.model.capacity_factor == 1.0
    assert any("pretrain_llama4_e128.py" in a for a in maverick.assumptions)
    (scout, *_) = row_cases(_package(SCOUT), FILE, 1)
    assert scout.model is not None and scout.model.capacity_factor is None


MLPERF_V60 = (
    "MLPERF-DSV3-GB300-V60-256", "MLPERF-DSV3-GB300-V60-512", "MLPERF-DSV3-GB200-V60-512",
    "MLPERF-DSV3-GB200-V60-2048", "MLPERF-GPTOSS20B-GB300-V60-512",
)  # fmt: skip


@pytest.mark.parametrize("row_id", MLPERF_V60)
def test_the_mlperf_v60_moe_rows_dispatch_on_hybridep_as_their_configs_state(row_id: str) -> None:
    """The MLPerf Training v6.0 DeepSeek-V3 / GPT-OSS configs set the flex dispatcher's HybridEP
    backend (MOE_FLEX_DISPATCHER_BACKEND=hybridep; the GPT-OSS config's 'HybridEP config'), and
    the 1F1B all-to-all overlap on the DeepSeek-V3 ones (OVERLAP_MOE_EXPERT_PARALLEL_COMM=True)."""
    (case, *_) = row_cases(_package(row_id), FILE, 1)
    options = dict(case.framework_options)
    assert options.get("moe_hybridep") is True and "moe_deepep" not in options, options
    assert options.get("moe_comm_overlap") is (True if "DSV3" in row_id else None)


@pytest.mark.parametrize(
    ("notes", "hybridep"),
    [("--moe-flex-dispatcher-backend hybridep", True),
     ("moe_flex_dispatcher_backend=hybrid_ep", True), ("Hybrid-EP dispatch", True),
     ("hybrid-ep=False", None), ("hybridep: off", None),
     ("DeepEP dispatch", None)],
)  # fmt: skip
def test_a_megatron_row_naming_hybridep_dispatches_on_it(notes: str, hybridep: bool | None) -> None:
    case = inferred_case(
        source="Megatron-Core run", notes=notes, model="Qwen3-30B-A3B", num_gpus="16", ep="8",
        moe="128 experts, top-8",
    )  # fmt: skip
    assert dict(case.framework_options).get("moe_hybridep") is hybridep
