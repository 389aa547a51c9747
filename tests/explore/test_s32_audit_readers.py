"""s32 audit of the session's reader rules against realistic row texts: a technique named as
negated or as a baseline is not the run's own (Dist-MoE, Megatron, FlashAttention), SageMaker's
model-parallel library under its older names, Hugging Face transformers' eager Llama modules only
for a dense Llama-like model that is neither compiled nor on Liger Kernel, FSDP1 not read from
``FSDP 1 node``, and InfiniBand NIC counts with a port speed (``HDR100``) or of switches."""

from __future__ import annotations

import re

import pytest

from stage_explore.validation.infer_cluster import read_cluster
from stage_explore.validation.infer_named import names_used
from tests.explore.infer_helpers import package_row, synthetic_case

FILE = "published_runs_no_setup.csv"
DIST_MOE_ROW = "TTITAN-DISTMOE-DSV3-GB300-256-PP1"
GLM_ROW = "GLM130B-A100-40G-768"
BBGPT_ROW = "BLOOMBERGGPT-A100-40G-512"
YAFSDP_ROW = "YAFSDP-FSDP-A100-LLAMA2-7B-N64-S2048"
DIMS = ("params_b", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab")


def _options(row_id: str, **cells: str) -> dict[str, bool | int | float | str]:
    case = synthetic_case(package_row(row_id), FILE, **cells)
    assert not case.reason, case.reason
    return dict(case.framework_options)


@pytest.mark.parametrize(("text", "used"), [
    ("torchtitan with the Dist-MoE CuTe DSL routed-expert backend", True),
    ("torchtitan DeepSeek V3 dist_moe backend", True),
    ("torchtitan DeepSeek V3, Dist-MoE disabled (standard EP all-to-all)", False),
    ("torchtitan DeepSeek V3 standard EP baseline (without Dist-MoE)", False),
    ("torchtitan DeepSeek V3, DeepEP; Dist-MoE not used", False),
    ("torchtitan DeepSeek V3 standard EP, 1.4x slower than Dist-MoE", False),
    ("torchtitan DeepSeek V3 standard EP vs. Dist-MoE", False),
])  # fmt: skip
def test_dist_moe_is_read_only_as_the_runs_own_backend(text: str, used: bool) -> None:
    options = _options(DIST_MOE_ROW, source=text, source_table="", notes="")
    assert options.get("moe_fused_expert_comm", False) is used
    assert options.get("moe_ep_one_domain", False) is used


@pytest.mark.parametrize(("text", "unfused"), [
    ("DeepSpeed pipeline with Megatron-style tensor parallelism", True),
    ("Megatron-DeepSpeed, flash attention disabled", True),
    ("Megatron-DeepSpeed Llama 2 (2023) with --use-flash-attn-v2", False),
    ("Megatron-DeepSpeed Llama 2 (2023) with FA2", False),
    ("DeepSpeed ZeRO-3 on a Hugging Face model; 1.3x faster than Megatron-LM", False),
    ("DeepSpeed ZeRO-1, compared against Megatron-LM", False),
    ("DeepSpeed ZeRO-1, a 1.2x speedup over Megatron-LM", False),
])  # fmt: skip
def test_megatron_attention_needs_megatron_as_the_runs_own_and_no_flash(
    text: str, unfused: bool
) -> None:
    case = synthetic_case(package_row(GLM_ROW), FILE, source=text, source_table="", notes="")
    assert case.model is not None, case.reason
    assert (case.model.core_attention == "unfused") is unfused


@pytest.mark.parametrize(("text", "hierarchical"), [
    ("SageMaker distributed model parallel library, sharded data parallelism", True),
    ("smdistributed.modelparallel.torch with sharded_data_parallel_degree 128", True),
    ("the SMP library's sharded data parallelism", True),
    ("trained on Amazon SageMaker with DeepSpeed ZeRO-3", False),
    ("SageMaker distributed data parallel (SMDDP) with DeepSpeed ZeRO-3", False),
    ("Hugging Face Accelerate with DeepSpeed ZeRO-3 on SageMaker", False),
])  # fmt: skip
def test_sagemaker_model_parallelism_by_any_of_its_names(text: str, hierarchical: bool) -> None:
    options = _options(
        BBGPT_ROW, source=text, source_table="", notes="", dp_sharding="ZeRO stage 3"
    )
    assert (options.get("zero3_flat_ring") is False) is hierarchical


@pytest.mark.parametrize(("text", "eager"), [
    ("Hugging Face transformers run_clm.py", True),
    ("Hugging Face's transformers Trainer", True),
    ("Hugging Face Trainer", True),
    ("transformers Trainer", True),
    ("HF transformers with Liger Kernel (use_liger_kernel)", False),
    ("Hugging Face transformers Trainer, torch_compile True", False),
    ("PyTorch FSDP, a custom training loop", False),
])  # fmt: skip
def test_hf_llama_modules_only_for_an_eager_hugging_face_run(text: str, eager: bool) -> None:
    options = _options(YAFSDP_ROW, source=text, source_table="", notes="", uncertain="")
    assert (options.get("eager_modules") == "hf-llama") is eager


@pytest.mark.parametrize(("model", "moe", "eager"), [
    ("Llama 3 8B", "", True),  # GQA: flash-attn reads grouped heads, no repeat_kv copy
    ("Mistral 7B", "", True),
    ("Falcon 7B", "", False),  # a Llama flavor read with LayerNorm and GELU (the row's fields)
    ("Mixtral 8x7B", "", False),
])  # fmt: skip
def test_hf_llama_modules_only_for_a_dense_llama_like_model(
    model: str, moe: str, eager: bool
) -> None:
    cells = {key: "" for key in DIMS}
    options = _options(
        YAFSDP_ROW, model=model, moe=moe, source="Hugging Face transformers run_clm.py",
        source_table="", notes="", uncertain="", **cells,
    )  # fmt: skip
    assert (options.get("eager_modules") == "hf-llama") is eager


@pytest.mark.parametrize(("sharding", "flat"), [
    ("PyTorch FSDP FULL_SHARD (FSDP1)", True),
    ("FSDP (use_orig_params=True)", True),
    ("FullyShardedDataParallel FULL_SHARD", True),
    ("PyTorch FSDP, 1 node of 8 GPUs", False),
    ("FSDP 1 x 8 GPUs", False),
    ("FSDP2 fully_shard", False),
])  # fmt: skip
def test_fsdp1_is_read_from_its_names_not_from_a_count(sharding: str, flat: bool) -> None:
    options = _options(YAFSDP_ROW, source="PyTorch FSDP", source_table="", notes="",
                       dp_sharding=sharding)  # fmt: skip
    assert options.get("fsdp1_flat_grad", False) is flat


@pytest.mark.parametrize(("text", "per_node_gbps"), [
    ("8x HDR100 per node", 800),  # HDR100: an HDR port at 100 Gb/s
    ("inter-node: 8 NDR200", 1600),
    ("8 x ConnectX-7 NDR400 InfiniBand per node", 3200),
    ("4x HDR per node", 800),
])  # fmt: skip
def test_an_infiniband_port_speed_on_the_generation_is_its_rate(
    text: str, per_node_gbps: float
) -> None:
    cluster = read_cluster("", text)
    assert cluster.scale_out is not None and cluster.per_node
    assert cluster.scale_out.value == pytest.approx(per_node_gbps * 1e9 / 8)


@pytest.mark.parametrize("text", [
    "connected by 40 HDR InfiniBand switches for inter-node traffic",
    "inter-node: 16 NDR leaf switches",
])  # fmt: skip
def test_a_count_of_infiniband_switches_is_no_count_of_nics(text: str) -> None:
    assert read_cluster("", text).scale_out is None


def test_names_used_keeps_the_first_mention_that_is_the_runs_own() -> None:
    pattern = re.compile(r"dist[\s_-]?moe", re.IGNORECASE)
    assert names_used(pattern, "compared with Dist-MoE off; this run: Dist-MoE")
    assert not names_used(pattern, "no Dist-MoE")


@pytest.mark.parametrize(("sharding", "fsdp2"), [
    ("PyTorch FSDP2.", True),  # a sentence's full stop after the version
    ("Accelerate FSDP plugin, fsdp_version: 2", True),
    ("fully_shard", True),
    ("PyTorch FSDP, 2 nodes of 8 GPUs", False),  # a count, not the version
    ("FSDP 2 x 8 GPUs", False),
])  # fmt: skip
def test_fsdp2_is_read_from_its_names_not_from_a_count(sharding: str, fsdp2: bool) -> None:
    options = _options(YAFSDP_ROW, source="PyTorch FSDP", source_table="", notes="",
                       dp_sharding=sharding)  # fmt: skip
    assert options.get("fsdp2_copies", False) is fsdp2
    assert options.get("fsdp1_flat_grad", False) is False  # FSDP1 is not named either way
