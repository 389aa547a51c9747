"""What reading open-source training frameworks' tables (s27 hidden22) showed the inferred reader
misread: a LitGPT row ran as the Megatron-Core default, an AxoNN row likewise; a hybrid-sharding
cell's stated group size was replaced by one node of 8 (or, named as shard / replicate degrees
without "hybrid", by full sharding); Megatron's partial distributed optimizer sharded over all of
dp; DeepSpeed MiCS read as ZeRO-1 and ZeRO++ as ZeRO-1 or plain ZeRO-3."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_fields import (
    FRAMEWORK_DEFAULT,
    infer_framework,
    infer_zero,
    unmodelled_framework,
)
from stage_explore.validation.infer_shard import stated_group
from stage_explore.validation.setups import Case, data_dir

#: A dense row of 64 GPUs, all data parallel, whose dp_sharding cell each test sets.
BASE = {
    "id": "HIDDEN22-TEST", "source": "torchtitan benchmark", "model": "Llama 3.1 8B",
    "gpu": "H100", "num_gpus": "64", "tp": "1", "pp": "1", "dp": "64", "seq_len": "8192",
    "global_batch_seqs": "128", "micro_batch": "2", "precision": "bf16",
    "tokens_per_s_per_gpu": "5000",
}  # fmt: skip


def _case(**cells: str) -> Case:
    (case, *_) = row_cases({**BASE, **cells}, "hidden22.csv", 1, data_dir())
    return case


@pytest.mark.parametrize(
    "row",
    [{"source": "LitGPT pretraining benchmark, 8 x A100"},
     {"source": "Lightning-AI/lit-gpt", "notes": "pretrain/redpajama.py"},
     {"url": "https://github.com/Lightning-AI/litgpt/blob/main/tutorials/pretrain.md"},
     {"source": "lit-llama pretraining (Lightning AI), LLaMA 7B"}],
)  # fmt: skip
def test_a_litgpt_row_is_pytorch_fsdp(row: dict[str, str]) -> None:
    framework = infer_framework(row)
    assert framework.value == "fsdp"  # before: the megatron-core default
    assert unmodelled_framework(row, framework) == ""


def test_a_litgpt_row_naming_deepspeed_keeps_it() -> None:
    row = {"source": "lit-gpt", "dp_sharding": "DeepSpeed ZeRO-2"}
    assert infer_framework(row).value == "deepspeed"


def test_an_axonn_row_is_refused_not_megatron() -> None:
    row = {"source": "AxoNN (Singh et al., SC'24), GPT-style model on Perlmutter"}
    framework = infer_framework(row)
    assert framework == FRAMEWORK_DEFAULT
    assert "AxoNN is no framework profile of the model" in unmodelled_framework(row, framework)


@pytest.mark.parametrize(
    ("cell", "shard"),
    [("HSDP (dp_shard 16, dp_replicate 4)", 16),
     ("HYBRID_SHARD, shard group 32", 32),
     ("HYBRID_SHARD (dp_replicate 2)", 32),
     ("FSDP2 (data_parallel_shard_degree 8, data_parallel_replicate_degree 8)", 8),
     ("FSDP2, dp_replicate_size 4", 16),
     ("DeepSpeed MiCS (mics_shard_size 16)", 16)],
)  # fmt: skip
def test_a_stated_shard_group_is_read(cell: str, shard: int) -> None:
    case = _case(dp_sharding=cell)
    assert not case.reason and case.parallel is not None
    assert case.parallel.zero == 3 and case.parallel.dp_shard == shard  # before: 8, None or ZeRO-1


@pytest.mark.parametrize(
    ("cell", "shard"),
    [("HSDP", 8), ("HYBRID_SHARD (HSDP: shard within a node of 8)", 8), ("FULL_SHARD", None),
     ("FSDP2 (torchtitan data_parallel_shard_degree -1: 64; data_parallel_replicate_degree 1)",
      None),
     ("HSDP (dp_shard 64)", None)],
)  # fmt: skip
def test_an_unsized_or_whole_group_reads_as_before(cell: str, shard: int | None) -> None:
    case = _case(dp_sharding=cell)
    assert case.parallel is not None and case.parallel.dp_shard == shard


@pytest.mark.parametrize(
    ("cell", "said"),
    [("HSDP (dp_shard 24)", "not a multiple"),
     ("FSDP2 (dp_shard 16, dp_replicate 2)", "is not dp 64"),
     ("HSDP (dp_shard 8, dp_shard 16)", "2 different shard group sizes"),
     ("ZeRO-3 MiCS", "no partition group size"),
     ("ZeRO++", "ZeRO++"),
     ("ZeRO-3 (zero_quantized_weights, zero_hpz_partition_size 8)", "not modelled")],
)  # fmt: skip
def test_a_sharding_the_model_cannot_express_is_refused(cell: str, said: str) -> None:
    case = _case(source="DeepSpeed", dp_sharding=cell)
    assert case.parallel is None and said in case.reason


def test_zero_pp_was_zero_1_and_is_now_refused() -> None:
    with pytest.raises(Uninferable, match="ZeRO\\+\\+"):
        infer_zero("ZeRO++ (hpZ, qwZ, qgZ)", "deepspeed")


def test_zero_pp_parts_at_their_off_defaults_are_plain_zero_3() -> None:
    cell = "ZeRO-3 (zero_hpz_partition_size 1, zero_quantized_weights: false)"
    assert infer_zero(cell, "deepspeed")[:2] == (3, None)


def test_stated_group_needs_a_group_below_dp() -> None:
    assert stated_group("FSDP2 (data_parallel_shard_degree 64)", 64) is None
    assert stated_group("FSDP2", 64) is None
    group = stated_group("FSDP2 (data_parallel_replicate_degree 4)", 64)
    assert group is not None and group[:2] == (3, 16) and "4 replicas" in group[2]


def test_a_replicate_degree_of_all_of_dp_is_ddp() -> None:
    case = _case(dp_sharding="FSDP2 (data_parallel_replicate_degree 64)")
    assert case.parallel is not None and case.parallel.zero == 0  # before: ZeRO-3 over 64
    assert case.parallel.dp_shard is None


@pytest.mark.parametrize(
    ("cell", "zero", "shard"),
    [("distributed optimizer (--num-distributed-optimizer-instances 2)", 1, 32),
     ("Megatron-FSDP (optim_grads_params), num_distributed_optimizer_instances 4", 3, 16),
     ("distributed optimizer", 1, None)],
)  # fmt: skip
def test_megatron_distributed_optimizer_instances_are_replicas(
    cell: str, zero: int, shard: int | None
) -> None:
    case = _case(source="Megatron-Core", dp_sharding=cell)
    assert case.parallel is not None  # before: the optimizer sharded over all 64 ranks
    assert (case.parallel.zero, case.parallel.dp_shard) == (zero, shard)


#: Qwen3 dense sizes whose hidden / heads is not 128 (torchtitan 0310b491
#: torchtitan/models/qwen3/__init__.py: head_dim 128 at every size).
QWEN3_DIMS = {
    "Qwen3-32B": {"layers": "64", "hidden": "5120", "ffn": "25600", "heads": "64"},
    "Qwen3-4B": {"layers": "36", "hidden": "2560", "ffn": "9728", "heads": "32"},
    "Qwen3 0.6B": {"layers": "28", "hidden": "1024", "ffn": "3072", "heads": "16"},
}


@pytest.mark.parametrize("model", sorted(QWEN3_DIMS))
def test_a_qwen3_dense_row_has_head_dim_128(model: str) -> None:
    cells = {**QWEN3_DIMS[model], "kv_heads": "8", "vocab": "151936"}
    case = _case(model=model, dp="8", num_gpus="8", global_batch_seqs="16", **cells)
    assert case.model is not None and case.model.qk_norm
    assert case.model.head_dim == 128  # before: hidden / heads (80, 80, 64)
    assert "head dim hidden / heads" not in " ".join(case.assumptions)


# Qwen3-Next (here before s31 readers6) is refused by name since: its Gated DeltaNet layers
@pytest.mark.parametrize("model", ["Qwen3.5-27B", "Qwen1.5-32B", "Qwen2.5-32B"])
def test_other_qwen_generations_keep_hidden_over_heads(model: str) -> None:
    cells = {"layers": "64", "hidden": "5120", "ffn": "25600", "heads": "64", "kv_heads": "8",
             "vocab": "151936"}  # fmt: skip
    case = _case(model=model, dp="8", num_gpus="8", global_batch_seqs="16", **cells)
    assert case.model is not None and case.model.head_dim == 80


@pytest.mark.parametrize(
    ("model", "notes", "head_dim"),
    [("Gemma 7B", "head_dim 256 (the Hugging Face config)", 256),
     ("Mistral-Nemo 12B", "Megatron --kv-channels 128", 128),
     ("Qwen3-32B", "head dim = 64", 64)],
)  # fmt: skip
def test_a_head_dim_the_row_states_is_read(model: str, notes: str, head_dim: int) -> None:
    cells = {"layers": "28", "hidden": "3072", "ffn": "24576", "heads": "16", "kv_heads": "16",
             "vocab": "256000"}  # fmt: skip
    case = _case(model=model, notes=notes, dp="8", num_gpus="8", global_batch_seqs="16", **cells)
    assert case.model is not None and case.model.head_dim == head_dim  # before: 3072 / 16 = 192


def test_two_stated_head_dims_are_refused() -> None:
    cells = {"layers": "28", "hidden": "3072", "ffn": "24576", "heads": "16", "vocab": "256000"}
    case = _case(model="Gemma 7B head_dim 256", notes="kv_channels 128", dp="8", num_gpus="8",
                 global_batch_seqs="16", **cells)  # fmt: skip
    assert case.model is None and "head dims 128, 256" in case.reason
