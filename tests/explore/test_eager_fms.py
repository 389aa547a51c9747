"""IBM foundation-model-stack's eager Llama (``eager_modules = "fms"``, the ``fms-fsdp``
profile): bytes per element counted from fms's code, checked against closed forms written out
here op by op, and what the profile changes in an evaluation."""

from __future__ import annotations

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import (
    FMS_ROPE,
    TORCHTITAN_RMSNORM,
    TORCHTITAN_SWIGLU,
    eager_instr_bytes,
    eager_op_bytes,
    fms_kv_expand,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
B, F = 2, 4  # bytes of a bf16 and of an fp32 element
# a Llama 2 34B-like layer (64 query heads, 8 key/value heads) cut to two layers
GQA = get_flavor("llama2-7b").with_overrides(
    layers=2, hidden=2048, heads=16, kv_heads=2, ffn=5504, seq_len=2048
)
MHA = get_flavor("llama2-7b").with_overrides(
    layers=2, hidden=2048, heads=16, ffn=5504, seq_len=2048
)

# RotaryEmbedding.adjusted_qk: q.float(), freqs.mul(q_.unsqueeze(-2)) (2 fp32 outputs per
# element), .sum(5) (2 fp32 in, 1 out), .type_as(q)
ROPE_FWD = (B + F) + (F + 2 * F) + (2 * F + F) + (F + B)
# backward: cast up, the product's gradient at the broadcast shape, its reduction, cast down
ROPE_BWD = (B + F) + (F + 2 * F) + (2 * F + F) + (F + B)


def test_the_fms_rotary_embedding_is_its_code_counted_op_by_op() -> None:
    assert FMS_ROPE.bytes_per_element(backward=False) == ROPE_FWD == 36
    assert FMS_ROPE.bytes_per_element(backward=True) == ROPE_BWD == 36


@pytest.mark.parametrize("expansion", [1, 2, 8])
def test_the_grouped_key_value_repeat(expansion: int) -> None:
    module = fms_kv_expand(expansion)
    # keys and values: read once, written `expansion` times; backward the sum back
    copies = 0 if expansion == 1 else 2 * (B + expansion * B)
    assert module.bytes_per_element(backward=False) == copies
    assert module.bytes_per_element(backward=True) == copies


def test_the_table_holds_torchtitans_norm_and_swiglu_and_fms_rope_plus_the_repeat() -> None:
    table = eager_op_bytes(GQA, "fms", fused=False)
    expansion = GQA.heads // GQA.kv_heads
    assert table["ln1"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=False)
    assert table["ln2.backward"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=True)
    assert table["mlp.act"] == TORCHTITAN_SWIGLU.bytes_per_element(backward=False)
    assert table["q.rope"] == ROPE_FWD and table["q.rope.backward"] == ROPE_BWD
    assert table["k.rope"] == ROPE_FWD + 2 * (B + expansion * B)
    assert table["k.rope.backward"] == ROPE_BWD + 2 * (expansion * B + B)
    mha = eager_op_bytes(MHA, "fms", fused=False)  # no repeat without grouped heads
    assert mha["k.rope"] == mha["q.rope"] == ROPE_FWD
    # compiled (fms-fsdp's use_torch_compile, s25 hidden13): the RoPE fused, the repeat still
    # copied for SDPA (an extern kernel), as torchtitan's repeat_kv compiled; the norms as
    # Inductor's looped reductions, the final one compiled too (the whole model is)
    compiled = eager_op_bytes(GQA, "fms", fused=True)
    assert compiled["k.rope"] == 2 * B + 2 * (B + expansion * B)
    assert compiled["k.rope.backward"] == 2 * B + 2 * (expansion * B + B)
    assert compiled["ln_f"] == compiled["ln1"] == 5  # 6 bytes moved, 5 bytes' worth measured
    mha = eager_op_bytes(MHA, "fms", fused=True)
    assert mha["k.rope"] == mha["q.rope"] == 2 * B


def test_the_instruction_bytes_are_elements_times_the_table() -> None:
    layer = bind_all(make_workload(GQA, ParallelConfig(global_batch=1)))["layer"]
    table = eager_op_bytes(GQA, "fms", fused=False)
    (k_rope,) = [i for i in layer.fwd if i.name == "k.rope"]
    elements = dict(k_rope.outputs)["k.rope"] // B
    assert elements == GQA.seq_len * GQA.kv_heads * GQA.head_dim
    assert eager_instr_bytes(k_rope, table) == elements * table["k.rope"]


def test_the_profile_and_its_effect_on_an_evaluation() -> None:
    profile = get_framework("fms-fsdp")
    assert profile.eager_modules == "fms" and profile.fsdp1_flat_grad
    assert profile.attention_kernel == get_framework("fsdp").attention_kernel
    parallel = ParallelConfig(dp=2, zero=3, global_batch=2, recompute=Recompute.FULL)
    plain = AnalyticalBackend(framework="fsdp").evaluate(GQA, parallel, H100)
    fms = AnalyticalBackend(framework="fms-fsdp").evaluate(GQA, parallel, H100)
    titan = AnalyticalBackend(
        framework="fms-fsdp", overrides={"eager_modules": "torchtitan"}
    ).evaluate(GQA, parallel, H100)
    # the only difference between the last two is the table: fms's rope and repeat cost more
    assert fms.breakdown["compute"] > titan.breakdown["compute"] > plain.breakdown["compute"]
    assert fms.step_time_s > titan.step_time_s > plain.step_time_s
