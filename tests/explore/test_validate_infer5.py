"""The inferred setup closer to what ran (5 Dec 2026, s14 infer5): NeMo AutoModel's expert
parallelism under DeepEP and its dense models' recompute, and the per-model settings of the
NeMo 1.x DGX Cloud Benchmarking recipes. A row's cells in, the inferred field and its
assumption out; on the package rows, the inferred field is the hand-written setup's."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_dgxc import nemo1_recipe
from stage_explore.validation.infer_torch import deepep_expert_parallel
from stage_explore.validation.setups import Case
from tests.explore.published_rows import assert_inferred_as_hand
from tests.explore.published_rows import inferred_case as _case

HELD_OUT = "published_runs_held_out.csv"
AUTOMODEL = "NeMo AutoModel performance summary (PyTorch backend)"
GSW_2502 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.02, NeMo 24.12)"
GSW_2505 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.05.04, NeMo 25.04)"


def _gpt_oss(**cells: str) -> Case:
    return _case(**{
        "source": AUTOMODEL, "model": "GPT-OSS 120B", "moe": "128 experts, top-4",
        "dp": "64", "num_gpus": "64", "global_batch_seqs": "512", "seq_len": "4096",
        "dp_sharding": "FSDP2 (64; LBS 2, GA 4)", "notes": "kernels: TE + DeepEP + FlexAttn",
        **cells,
    })  # fmt: skip


@pytest.mark.parametrize(
    ("dp", "experts", "ep"),
    [(8, 32, 8), (64, 128, 64), (256, 256, 64), (32, 384, 32), (24, 32, 8), (1, 8, 1),
     (6, 8, 2), (3, 8, 1)],
)  # fmt: skip
def test_deepep_expert_parallel_is_the_data_parallel_size_up_to_64_dividing_the_experts(
    dp: int, experts: int, ep: int
) -> None:
    assert deepep_expert_parallel(dp, experts) == ep


def test_an_automodel_deepep_row_without_ep_runs_experts_over_the_data_parallel_ranks() -> None:
    case = _gpt_oss()
    assert case.parallel.ep == 64 and case.parallel.etp == 1
    said = [a for a in case.assumptions if a.startswith("inferred: expert parallel size 64")]
    assert len(said) == 1 and "apply_ep" in said[0]


def test_a_stated_ep_and_a_run_without_deepep_keep_their_ep() -> None:
    assert _gpt_oss(ep="8").parallel.ep == 8
    assert _gpt_oss(notes="kernels: TE + FlexAttn").parallel.ep == 1


@pytest.mark.parametrize(
    ("model", "recompute", "expected"),
    [("Llama 3 70B", "", "full"), ("Llama 3 70B", "selective", "selective"),
     ("GPT-OSS 120B", "", "none")],
)  # fmt: skip
def test_automodel_dense_llama_recomputes_every_block_when_the_column_is_empty(
    model: str, recompute: str, expected: str
) -> None:
    cells = {"source": AUTOMODEL, "model": model, "dp": "8", "recompute": recompute}
    if model.startswith("GPT-OSS"):
        cells["moe"] = "128 experts, top-4"
    case = _case(**cells)
    assert str(case.parallel.recompute) == expected


@pytest.mark.parametrize(
    ("text", "nemo1"),
    [(GSW_2502, True), (GSW_2505, False),
     ("NVIDIA DGX Cloud Benchmarking performance recipes (GSW 24.11, NeMo dev container)", False),
     ("NVIDIA DGX Cloud Benchmarking performance recipes, Nemotron 4", False),
     ("NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.04, NeMo 25.02.01, NeMo 2.0)",
      False),
     ("NVIDIA Megatron-Bridge performance summary (25.11 container)", False)],
)  # fmt: skip
def test_a_nemo_1_dgx_cloud_recipe_is_named_by_its_container_or_nemo_launcher(
    text: str, nemo1: bool
) -> None:
    assert nemo1_recipe({"source": text}) is nemo1
    assert nemo1_recipe({"source": text, "notes": "NeMo Launcher (Megatron-Core + TE)"}) is (
        "NeMo 2.0" not in text and "Megatron-Bridge" not in text and "25.04" not in text
    )


def _grok(source: str, precision: str = "fp8") -> Case:
    return _case(
        source=source, model="Grok-1 314B proxy (8 layers)", layers="8", hidden="6144",
        ffn="32768", heads="48", kv_heads="8", vocab="128256", seq_len="8192",
        moe="8 experts, top-2", tp="4", cp="2", dp="8", ep="8", num_gpus="64",
        global_batch_seqs="1024", micro_batch="1", precision=precision,
    )  # fmt: skip


def test_the_nemo_1_grok_recipe_runs_flash_attention_bf16_grads_and_capacity_padding() -> None:
    case = _grok(GSW_2502)
    options = dict(case.framework_options)
    assert options["attention_kernel"] == "fa2" and options["pipeline_outputs_kept"] is True
    assert options["fp8_param_gather"] is True and options["moe_fp8_padding"] is False
    assert case.parallel.grad_fp32 is False and case.model.capacity_factor == 1.0
    assert any("grok1/configure.sh" in a for a in case.assumptions)


def test_the_nemo_2_grok_recipe_keeps_the_profile_defaults() -> None:
    case = _grok(GSW_2505, precision="bf16")
    options = dict(case.framework_options)
    assert "pipeline_outputs_kept" not in options and options.get("attention_kernel") != "fa2"
    # s15 infer6: NeMo 2.0's own pretrain_grok1_314b.py pads to capacity 1.0 (not the 1.x rule)
    assert case.model.capacity_factor == 1.0
    assert not any("grok1_314b.yaml" in a for a in case.assumptions)
    assert any("pretrain_grok1_314b.py" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("model", "recompute", "options", "expected"),
    [("Nemotron-4 340B", "", {"attention_kernel": "fa2", "distributed_fused_adam": "bf16",
                              "native_cross_entropy": True}, "selective"),
     ("Nemotron-4 340B", "full", {"attention_kernel": "fa2"}, "full"),
     ("Nemotron-4 15B", "", {"native_cross_entropy": True}, "none")],
)  # fmt: skip
def test_the_nemo_1_nemotron_recipes_by_model_size(
    model: str, recompute: str, options: dict[str, object], expected: str
) -> None:
    dims = {"layers": "32", "hidden": "6144", "ffn": "24576", "heads": "48", "kv_heads": "8",
            "tp": "4", "pp": "1", "dp": "4", "num_gpus": "16"} if "15B" in model else {
            "tp": "8", "pp": "8", "dp": "4", "num_gpus": "256"}  # fmt: skip
    case = _case(source=GSW_2502, model=model, global_batch_seqs="64", recompute=recompute, **dims)
    mine = dict(case.framework_options)
    assert all(mine.get(k) == v for k, v in options.items()), mine
    assert str(case.parallel.recompute) == expected
    assert case.parallel.grad_fp32 is ("340" not in model)
    if "15B" in model:
        assert "attention_kernel" not in mine


#: Package sources whose inferred setups take the hand-written choices these rules read:
#: (source, fields compared).
RULED = (
    ("AUTOMODEL", ("parallel.ep", "parallel.recompute")),
    ("AUTOMODEL-DENSE", ("parallel.recompute",)),
    ("DGXC-GROK1-BF16", ("parallel.grad_fp32", "model.capacity_factor")),
    ("DGXC-GROK1-FP8", ("parallel.grad_fp32", "model.capacity_factor")),
    ("DGXC2502-GROK1-FP8", ("parallel.grad_fp32", "model.capacity_factor")),
    ("DGXC-H100-BF16", ("parallel.grad_fp32", "parallel.recompute")),
)


@pytest.mark.parametrize(("source", "fields"), RULED)
def test_the_inferred_package_rows_take_the_hand_written_choices(
    source: str, fields: tuple[str, ...]
) -> None:
    assert_inferred_as_hand(HELD_OUT, source, fields, ("attention_kernel",))


QWEN3_ROW = {
    "model": "Qwen3_235B_a22B", "moe": "128 experts, top-8", "pp": "8", "ep": "8",
    "num_gpus": "256", "global_batch_seqs": "8192", "precision": "MXFP8", "gpu": "B300",
}  # fmt: skip
BRIDGE_2602 = "NVIDIA Megatron-Bridge performance summary (26.02 container)"


@pytest.mark.parametrize(
    ("vpp", "overlap"), [("4", True), ("1", False), ("", None)]
)  # fmt: skip
def test_bridge_qwen3_moe_overlaps_its_all_to_all_exactly_with_a_virtual_pipeline(
    vpp: str, overlap: bool | None
) -> None:
    case = _case(source=BRIDGE_2602, vpp=vpp, **QWEN3_ROW)
    assert dict(case.framework_options).get("moe_comm_overlap") is overlap
    if overlap is not None:
        assert any("qwen3_workload_base_configs.py" in a for a in case.assumptions)
