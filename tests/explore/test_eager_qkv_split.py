"""The copies around Megatron-Core's fused QKV split on Transformer Engine's attention (the
megatron-core profile): which paths make them, the bytes per attention instruction against
closed forms written out here from the Megatron-Core / Transformer Engine code, and what they
change in an evaluation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager_attention import (
    AttentionEager,
    attention_eager_bytes,
    eager_attention,
)
from stage_explore.analytical.eager_qkv_split import megatron_qkv_split
from stage_explore.system import load_system

B = 2  # bytes of a bf16 element
# every copy here (the query's reshape, value.contiguous(), torch.cat of dq, dk, dv) reads and
# writes one bf16 element per element
COPY = B + B
H100 = load_system("h100-80gb")
LLAMA3 = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)  # 32 heads, 8 groups
LLAMA2 = get_flavor("llama2-7b").with_overrides(layers=2, seq_len=1024)  # multi-head, rotary
GPT3 = get_flavor("gpt3-350m").with_overrides(layers=2, seq_len=1024)  # multi-head, learned


def test_the_query_reshape_copies_only_with_several_groups_on_the_rank() -> None:
    # [s, b, ng, np/ng * hn] -> [s, b, np, hn] is a view only when ng = 1 or np/ng = 1
    assert megatron_qkv_split(LLAMA3, "cudnn", 1)[0] == COPY  # 8 groups on the rank
    assert megatron_qkv_split(LLAMA3, "cudnn", 4)[0] == COPY  # 2 groups
    assert megatron_qkv_split(LLAMA3, "cudnn", 8)[0] == 0  # one group: a view
    assert megatron_qkv_split(LLAMA2, "cudnn", 1)[0] == 0  # multi-head: np/ng = 1


def test_the_value_copy_and_the_concatenation_by_path() -> None:
    # rotary keys are a fresh tensor, the value a view: TE makes it contiguous; the rotary
    # backward's fresh dq, dk defeat _SplitAlongDim's no-op, so torch.cat runs
    assert megatron_qkv_split(LLAMA2, "cudnn", 1) == (0, COPY, COPY)
    # the flash-attn package path's layout copies already include the value's
    assert megatron_qkv_split(LLAMA2, "fa2", 1) == (0, 0, COPY)
    # multi-head straight from the split on cuDNN (sbh3d): dQKV is one buffer, no copy at all
    assert megatron_qkv_split(GPT3, "cudnn", 1) == (0, 0, 0)
    assert megatron_qkv_split(GPT3, "cudnn-9.17", 2) == (0, 0, 0)
    # ... but three tensors from flash-attn (or TE's fa_prepare_bwd): concatenated
    assert megatron_qkv_split(GPT3, "fa2", 1) == (0, 0, COPY)
    # a key norm makes the keys fresh as a rotary embedding does
    assert megatron_qkv_split(GPT3.with_overrides(qk_norm=True), "cudnn", 1) == (0, COPY, COPY)
    # latent attention is another module: no fused QKV split
    assert megatron_qkv_split(get_flavor("deepseek-v2-lite"), "cudnn", 1) == (0, 0, 0)
    with pytest.raises(ValueError, match="tensor-parallel size"):
        megatron_qkv_split(LLAMA3, "cudnn", 0)


def test_only_megatron_core_with_a_fused_qkv_projection() -> None:
    split = eager_attention(LLAMA3, "megatron-core", "cudnn", tp=1, fused_qkv=True)
    assert split == AttentionEager(query=COPY, value=COPY, input_grads=COPY)
    fa2 = eager_attention(LLAMA3, "megatron-core", "fa2", tp=1, fused_qkv=True)
    assert fa2 == AttentionEager(COPY, COPY, COPY, query=COPY, input_grads=COPY)
    assert eager_attention(LLAMA3, "megatron-core", "cudnn", tp=1) == AttentionEager()
    assert eager_attention(LLAMA3, "torchtitan", "cudnn", fused_qkv=True) == AttentionEager()


def test_the_bytes_per_attention_instruction() -> None:
    fwd, bwd, q, k, v = attention_instructions(LLAMA3)
    assert q == LLAMA3.seq_len * LLAMA3.heads * LLAMA3.head_dim
    assert k == v == LLAMA3.seq_len * LLAMA3.kv_heads * LLAMA3.head_dim
    per_element = eager_attention(LLAMA3, "megatron-core", "cudnn", tp=1, fused_qkv=True)
    assert attention_eager_bytes(fwd, per_element) == q * COPY + v * COPY
    # a recompute of the attention module copies the value again, not the query (the split
    # is outside the checkpointed core attention)
    recompute = replace(fwd, phase="recompute")
    assert attention_eager_bytes(recompute, per_element) == v * COPY
    assert attention_eager_bytes(bwd, per_element) == (q + k + v) * COPY


def step_time(model: ModelSpec, **options: object) -> float:
    """One Megatron-Core step of ``model`` on H100 with ``options`` set on the profile."""
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, ParallelConfig(global_batch=8), H100).step_time_s


def attention_instructions(model: ModelSpec) -> tuple[Instr, Instr, int, int, int]:
    """A layer's forward attention instruction, its backward, and the q, k, v elements it reads."""
    layer = bind_all(make_workload(model, ParallelConfig(global_batch=1)))["layer"]
    (fwd,) = [i for i in layer.fwd if i.kind == "attention"]
    (bwd,) = [i for i in layer.bwd if i.kind == "attention" and i.name.endswith(".backward")]
    q, k, v = (size // B for _, size in fwd.inputs[:3])
    return fwd, bwd, q, k, v


def test_the_copies_in_an_evaluation() -> None:
    # slower than the same kernels without Megatron-Core's split around them; a multi-head
    # learned-position model on cuDNN has none of these copies
    assert step_time(LLAMA3) > step_time(LLAMA3, eager_modules="generator")
    assert step_time(GPT3) == step_time(GPT3, eager_modules="generator")
