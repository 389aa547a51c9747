"""s31 qkvrope: Megatron-Core's ``fused_single_qkv_rope`` (Transformer Engine's fused QKV rotary
kernel instead of the split): which of the split's copies it removes, per attention instruction
against closed forms written out here from the TE / Megatron-Core code, where Megatron-Core does
not take the path, what it changes in an evaluation, and which rows the inferred setup sets it
for."""

from __future__ import annotations

from dataclasses import replace

from stage_core.models.spec import ModelSpec
from stage_explore.analytical.eager_attention import (
    AttentionEager,
    attention_eager_bytes,
    eager_attention,
)
from stage_explore.analytical.eager_qkv_split import single_qkv_rope_split
from stage_explore.validation.infer_qkv_rope import single_qkv_rope
from stage_explore.validation.infer_release import Defaults
from tests.explore.test_eager_qkv_split import (
    COPY,
    GPT3,
    LLAMA3,
    attention_instructions,
    step_time,
)

QWEN3 = LLAMA3.with_overrides(qk_norm=True)  # a query / key norm


def _fused(model: ModelSpec, kernel: str = "cudnn", tp: int = 1) -> AttentionEager:
    return eager_attention(
        model, "megatron-core", kernel, tp=tp, fused_qkv=True, single_qkv_rope=True
    )


def test_the_fused_path_keeps_only_the_value_and_its_gradient_copies() -> None:
    # fused_qkv_rope_forward writes q_out in the attention's shape (no reshape copy) and v_out
    # (the value's read and write); fused_qkv_rope_backward writes dq, dk into the fused
    # gradient from the rotary backward and copies dv into it
    assert _fused(LLAMA3) == AttentionEager(value_grad=COPY, value_once=COPY)
    # the flash-attn package path: v_out is written by the fused kernel before the layout copies
    fa2 = AttentionEager(COPY, COPY, COPY, value_grad=COPY, value_once=COPY)
    assert _fused(LLAMA3, "fa2") == fa2
    split = eager_attention(LLAMA3, "megatron-core", "cudnn", tp=1, fused_qkv=True)
    assert split == AttentionEager(query=COPY, value=COPY, input_grads=COPY)


def test_megatron_core_takes_the_path_only_with_rotary_and_no_qk_norm() -> None:
    assert single_qkv_rope_split(GPT3) is None
    assert single_qkv_rope_split(QWEN3) is None
    assert _fused(QWEN3) == eager_attention(QWEN3, "megatron-core", "cudnn", tp=1, fused_qkv=True)
    # without a fused QKV projection there is no split and nothing to fuse
    alone = eager_attention(LLAMA3, "megatron-core", "cudnn", tp=1, single_qkv_rope=True)
    assert alone == AttentionEager()


def test_the_bytes_per_attention_instruction() -> None:
    fwd, bwd, q, _, v = attention_instructions(LLAMA3)
    assert q == LLAMA3.seq_len * LLAMA3.heads * LLAMA3.head_dim
    assert v == LLAMA3.seq_len * LLAMA3.kv_heads * LLAMA3.head_dim
    per_element = _fused(LLAMA3)
    assert attention_eager_bytes(fwd, per_element) == v * COPY
    # the fused kernel is outside the core attention a selective recompute re-runs
    assert attention_eager_bytes(replace(fwd, phase="recompute"), per_element) == 0
    assert attention_eager_bytes(bwd, per_element) == v * COPY  # dv only, not dq + dk + dv




def test_the_fused_path_in_an_evaluation() -> None:
    base = {"fused_qkv": True}
    assert step_time(LLAMA3, **base, fused_single_qkv_rope=True) < step_time(LLAMA3, **base)
    # with rope_utils' unfused ops (apply_rope_fusion off) the fused kernel replaces them too
    unfused = {"fused_qkv": True, "rope_fusion": False}
    fused_rope = step_time(LLAMA3, **unfused, fused_single_qkv_rope=True)
    assert fused_rope == step_time(LLAMA3, **base, fused_single_qkv_rope=True)
    assert fused_rope < step_time(LLAMA3, **unfused)
    # a learned-position model does not take the path: nothing changes
    assert step_time(GPT3, **base, fused_single_qkv_rope=True) == step_time(GPT3, **base)


def _read(text: str, model: str = "Llama 3.1 8B") -> Defaults:
    out = Defaults()
    single_qkv_rope({"id": "X", "notes": text, "model": model}, "llama3.1-8b", out)
    return out


def test_the_row_text_states_it() -> None:
    assert _read("config_common_8b.sh: USE_TE_OPS, FUSED_QKV_ROPE, CE_FUSION_IMPL=te").options == {
        "fused_single_qkv_rope": True
    }
    assert _read("export FUSED_QKV_ROPE=True").options == {"fused_single_qkv_rope": True}
    assert _read("fused_single_qkv_rope: False").options == {"fused_single_qkv_rope": False}
    both = _read("FUSED_QKV_ROPE=1 ... FUSED_QKV_ROPE=0")
    assert both.options == {} and "not read" in both.notes[0]
    assert _read("apply_rope_fusion True").options == {}


def test_the_mlperf_v60_gptoss_implementation_sets_it() -> None:
    row = {"id": "X", "notes": "MLPerf Training v6.0, NVIDIA closed division", "model": "GPT-OSS"}
    out = Defaults()
    single_qkv_rope(row, "gpt-oss-20b", out)
    assert out.options == {"fused_single_qkv_rope": True}
    assert "config_common.sh FUSED_QKV_ROPE=True" in out.notes[0]
    off = Defaults()  # a stated value wins over the implementation's
    single_qkv_rope({**row, "notes": row["notes"] + "; FUSED_QKV_ROPE=False"}, "gpt-oss-20b", off)
    assert off.options == {"fused_single_qkv_rope": False}
    other = Defaults()  # another round or model: Megatron-Core's default
    single_qkv_rope({**row, "notes": "MLPerf Training v5.1"}, "gpt-oss-20b", other)
    assert other.options == {}
