"""The inferred setup against the hand-written one, the remaining gaps (5 Dec 2026, s15 infer6):
the Megatron-LM of Korthikanti et al. 2022's asynchronous tensor-parallel all-reduce, NVIDIA's
MLPerf GPT-3 implementation named by its round, NeMo 2.0's DeepSeek-V3 performance script, and
the recompute modules a ``selective (...)`` cell names. A row's cells in, the inferred field
and its assumption out; on the package rows, the inferred fields are the hand-written setup's."""

from __future__ import annotations

import pytest

from stage_explore.validation.setups import Case
from tests.explore.published_rows import assert_inferred_as_hand
from tests.explore.published_rows import inferred_case as _case

KORTHIKANTI = "Korthikanti et al. 2022 (Reducing Activation Recomputation)"
MLPERF_41 = "MLPerf Training v4.1, NVIDIA closed division, preview category"
GSW_2505 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.05.04, NeMo 25.04.01)"


def _gpt(**cells: str) -> Case:
    return _case(**{
        "model": "GPT-22B", "layers": "48", "hidden": "6144", "heads": "64", "vocab": "51200",
        "seq_len": "2048", "gpu": "A100-SXM4-80GB", "precision": "fp16 mixed", "tp": "8",
        "num_gpus": "8", "global_batch_seqs": "4", "micro_batch": "4", "iter_time_s": "1.4",
        "tokens_per_s_per_gpu": "", **cells,
    })  # fmt: skip


def _mine(case: Case) -> dict[str, bool | int | float | str]:
    return dict(case.framework_options)


@pytest.mark.parametrize(
    ("source", "sp", "tp", "on"),
    [(KORTHIKANTI, "no", "8", True), (KORTHIKANTI, "yes", "8", False),
     (KORTHIKANTI, "no", "1", False), ("Narayanan et al. SC'21 (Megatron-LM PTD-P)", "no", "8",
                                       False)],
)  # fmt: skip
def test_the_megatron_lm_of_korthikanti_2022_all_reduces_input_gradients_asynchronously(
    source: str, sp: str, tp: str, on: bool
) -> None:
    case = _gpt(source=source, sp=sp, tp=tp, num_gpus=tp)
    assert case.framework == "megatron-lm-2021"
    assert _mine(case).get("tp_async_grad_allreduce", False) is on
    said = [a for a in case.assumptions if "ColumnParallelLinearWithAsyncAllreduce" in a]
    assert len(said) == int(on)


def _mlperf(**cells: str) -> Case:
    return _case(**{
        "source": MLPERF_41, "model": "GPT3 175B", "layers": "96", "hidden": "12288",
        "heads": "96", "vocab": "50257", "seq_len": "2048", "global_batch_seqs": "1024",
        "micro_batch": "2", "tp": "4", "pp": "8", "vpp": "6", "dp": "2", "num_gpus": "64",
        "gpu": "B200", "precision": "fp8", **cells,
    })  # fmt: skip


def test_an_mlperf_gpt3_row_naming_its_round_but_no_container_runs_that_implementation() -> None:
    case = _mlperf()
    mine = _mine(case)
    assert mine["distributed_fused_adam"] == "fp32" and mine["fp8_param_gather"] is True
    assert mine["native_cross_entropy"] is True and mine["fp8_amax_reduction"] == "tp_cp"
    assert mine["ub_bulk_sm_margin"] is False and mine["ub_fc2_fprop_method"] == "ring_exchange"
    assert case.parallel is not None and case.parallel.grad_fp32 is False
    assert any("b200tp4mbs2.yaml" in a for a in case.assumptions)
    assert not any("no NeMo / Megatron-Bridge container named" in a for a in case.assumptions)


def test_the_mlperf_round_rule_reads_the_round_and_the_b200_config_of_the_layout() -> None:
    v40 = _mine(_mlperf(source="MLPerf Training v4.0, NVIDIA closed division"))
    assert "native_cross_entropy" not in v40 and "fp8_amax_reduction" not in v40
    assert "ub_fc2_fprop_method" not in _mine(_mlperf(tp="8", pp="4", micro_batch="2"))
    assert "distributed_fused_adam" not in _mine(_mlperf(source="MLPerf Training v5.0"))
    assert "distributed_fused_adam" not in _mine(_mlperf(model="Llama 2 70B", layers="80",
                                                        hidden="8192", heads="64"))  # fmt: skip


def _dsv3(**cells: str) -> Case:
    return _case(**{
        "source": GSW_2505, "model": "DeepSeek-V3 671B", "layers": "61", "hidden": "7168",
        "seq_len": "4096", "moe": "256 routed + 1 shared, top-8", "global_batch_seqs": "4096",
        "tp": "2", "pp": "8", "ep": "64", "dp": "32", "num_gpus": "512", "sp": "yes",
        "recompute": "selective (mla_up_proj)", **cells,
    })  # fmt: skip


def test_nemo2_deepseek_v3_takes_its_performance_script_and_config() -> None:
    case = _dsv3()
    assert case.parallel is not None and case.model is not None
    mine = _mine(case)
    assert mine["rope_fusion"] is False and mine["tp_comm_overlap"] is False
    assert case.parallel.vocab_divisible_by == 1280 and case.model.capacity_factor == 1.0
    assert (case.parallel.pp_first_layers, case.parallel.pp_last_layers) == (7, 6)
    assert case.parallel.recompute_modules == ("mla_up_proj",)


@pytest.mark.parametrize(
    "cells",
    [{"source": "NVIDIA Megatron-Bridge performance summary (25.04 container)"},
     {"source": "NVIDIA DGX Cloud Benchmarking performance recipes (NeMo 25.09)"},
     {"source": "NVIDIA DGX Cloud Benchmarking performance recipes (NeMo 24.12)"}],
)  # fmt: skip
def test_the_deepseek_v3_rule_stops_at_the_containers_read_and_at_megatron_bridge(
    cells: dict[str, str],
) -> None:
    case = _dsv3(**cells)
    assert "rope_fusion" not in _mine(case)
    assert case.parallel is not None and case.parallel.pp_first_layers is None


@pytest.mark.parametrize(
    ("source", "precision", "factor", "padding"),
    [(GSW_2505, "fp8", 1.0, False), (GSW_2505, "bf16", 1.0, None),
     ("NVIDIA Megatron-Bridge performance summary (25.04 container)", "fp8", None, None)],
)  # fmt: skip
def test_nemo2_grok1_pads_its_experts_to_capacity(
    source: str, precision: str, factor: float | None, padding: bool | None
) -> None:
    case = _case(
        source=source, model="Grok-1 314B", layers="64", hidden="6144", ffn="32768", heads="48",
        kv_heads="8", vocab="128256", seq_len="8192", moe="8 experts, top-2", tp="4", pp="8",
        cp="2", ep="8", num_gpus="512", global_batch_seqs="1024", precision=precision,
        gpu="H100 (DGX Cloud)",
    )  # fmt: skip
    assert case.model is not None and case.model.capacity_factor == factor
    assert _mine(case).get("moe_fp8_padding") is padding


@pytest.mark.parametrize(
    ("cell", "modules"),
    [("selective (mla_up_proj)", ("mla_up_proj",)), ("selective (core_attn)", ("core_attn",)),
     ("selective (layernorm, moe_act)", ("layernorm", "moe_act")),
     ("selective (attention core)", ()), ("selective", ()), ("full (core_attn)", ())],
)  # fmt: skip
def test_a_selective_cell_naming_megatron_modules_recomputes_those(
    cell: str, modules: tuple[str, ...]
) -> None:
    case = _case(recompute=cell)
    assert case.parallel is not None and case.parallel.recompute_modules == modules


NEMO_2407 = "NVIDIA NeMo performance summary (NeMo 24.07 container)"


@pytest.mark.parametrize(
    ("uncertain", "recompute", "expected", "grad_fp32"),
    [("dims from launcher_scripts/conf/training/gpt3/20b_fp8_performance.yaml", "", "selective",
      False),
     ("dims from launcher_scripts/conf/training/gpt3/175b_fp8_performance.yaml", "full", "full",
      False),
     ("dims from launcher_scripts/conf/training/gpt3/5b.yaml", "", "none", True)],
)  # fmt: skip
def test_a_named_nemo1_launcher_gpt3_performance_config_sets_its_recompute_and_grad_sync(
    uncertain: str, recompute: str, expected: str, grad_fp32: bool
) -> None:
    case = _case(
        source=NEMO_2407, model="GPT3 20B", layers="44", hidden="6144", heads="48",
        vocab="50257", seq_len="2048", tp="2", num_gpus="64", global_batch_seqs="2048",
        precision="fp8", gpu="H100 (DGX-H100)", uncertain=uncertain, recompute=recompute,
    )  # fmt: skip
    assert case.parallel is not None
    assert str(case.parallel.recompute) == expected and case.parallel.grad_fp32 is grad_fp32


HELD_OUT = "published_runs_held_out.csv"
#: Package sources whose inferred setups now take the hand-written choices: (file, source,
#: fields compared, framework options compared).
RULED = (
    ("published_runs.csv", "KOR22-T5", (), ("tp_async_grad_allreduce",)),
    (HELD_OUT, "MLPERF-GPT3-B200", ("parallel.grad_fp32",),
     ("distributed_fused_adam", "fp8_param_gather", "fp8_amax_reduction", "native_cross_entropy",
      "ub_bulk_sm_margin", "ub_fc2_fprop_method")),
    (HELD_OUT, "NEMO2407-H100", ("parallel.recompute",), ()),
    (HELD_OUT, "DGXC-GPT3-FP8", ("parallel.grad_fp32",), ("distributed_fused_adam",)),
    (HELD_OUT, "DGXC2502-GPT3-BF16", ("parallel.grad_fp32",), ("distributed_fused_adam",)),
    (HELD_OUT, "DGXC2505-GROK1-H100-FP8", ("model.capacity_factor",), ("moe_fp8_padding",)),
    (HELD_OUT, "DGXC2505-GROK1-GB200-FP8", ("model.capacity_factor",), ("moe_fp8_padding",)),
    (HELD_OUT, "DGXC2505-DSV3-H100-BF16",
     ("parallel.recompute_modules", "parallel.vocab_divisible_by", "parallel.pp_first_layers",
      "parallel.pp_last_layers", "model.capacity_factor"), ("rope_fusion", "tp_comm_overlap")),
    (HELD_OUT, "DGXC2505-DSV3-GB200-BF16",
     ("parallel.recompute_modules", "parallel.vocab_divisible_by", "parallel.pp_first_layers",
      "parallel.pp_last_layers", "model.capacity_factor"), ("rope_fusion", "tp_comm_overlap")),
)  # fmt: skip


@pytest.mark.parametrize(("file", "source", "fields", "options"), RULED)
def test_the_inferred_package_rows_take_the_hand_written_choices(
    file: str, source: str, fields: tuple[str, ...], options: tuple[str, ...]
) -> None:
    assert_inferred_as_hand(file, source, fields, options)


NEMO_2502 = "NVIDIA NeMo Framework performance summary, NeMo 25.02 container (NeMo 2.0), DGX-B200"


@pytest.mark.parametrize(
    ("source", "model", "factor", "padding"),
    [(NEMO_2502, "Mixtral 8x7B", 1.0, False), (NEMO_2502, "Mixtral 8x22B", 1.0, False),
     ("NVIDIA Megatron-Bridge performance summary (25.04 container)", "Mixtral 8x7B", None,
      None),
     ("NVIDIA NeMo Framework performance summary, NeMo 24.12 container", "Mixtral 8x7B", None,
      None)],
)  # fmt: skip
def test_nemo2_mixtral_pads_its_experts_to_capacity(
    source: str, model: str, factor: float | None, padding: bool | None
) -> None:
    """s22 nemoaudit: the Mixtral recipes' pretrain_performance_optimizations add
    MegatronTokenDropCallback (capacity factor 1.0, padded), as Grok-1's do."""
    case = _case(
        source=source, model=model, layers="32", hidden="4096", ffn="14336", heads="32",
        kv_heads="8", vocab="32000", seq_len="4096", moe="8 experts, top-2", tp="1", pp="1",
        ep="8", num_gpus="64", global_batch_seqs="256", micro_batch="2", precision="fp8",
        gpu="B200 (DGX-B200)",
    )  # fmt: skip
    assert case.model is not None and case.model.capacity_factor == factor
    assert _mine(case).get("moe_fp8_padding") is padding
