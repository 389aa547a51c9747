"""Megatron-Core's eager code (``eager_modules = "megatron-core"``, the megatron-core profile):
``TEGroupedMLP._apply_bias``'s eager kernels for the down projection, the fc1 biases in the GEMM
epilogue, GPT-OSS's eager GLU clamp, and ``rope_utils``' unfused rotary embedding without
``rope_fusion``, counted against
closed forms written out here op by op from Megatron-Core's code, where they apply, and what
they change in an evaluation."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec, Position
from stage_core.parallel import ParallelConfig
from stage_explore.analytical import eager_megatron
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import eager_extra_bytes, eager_instr_bytes, eager_op_bytes
from stage_explore.analytical.eager_megatron import (
    MEGATRON_EXPERT_DOWN_BIAS,
    MEGATRON_GLU_CLAMP,
    MEGATRON_UNFUSED_ROPE,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

B = 2  # bytes of a bf16 element (the router's probabilities are bf16 too)
H100 = load_system("h100-80gb")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # biased experts
QWEN3 = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)  # no biases

# torch.cat([t + b * p ...]).to(dtype) with 16-bit p: b * p written; t + (b * p) (two reads, one
# write); the concatenation (read, write); .to() of a bf16 tensor to bf16 is no kernel
DOWN_FWD = B + (B + B + B) + (B + B)
# CatBackward0 narrows and AddBackward0 passes the gradient on (no kernel); the split's
# backward concatenates the experts' gradients (read, write); grad * p (read, write) reduced to
# b (read); grad * b (read, write) reduced to p (read), the router being trained
DOWN_BWD = (B + B) + (B + B) + B + (B + B) + B


def test_the_down_bias_kernels_are_megatrons_code_counted_op_by_op() -> None:
    assert MEGATRON_EXPERT_DOWN_BIAS.bytes_per_element(backward=False) == DOWN_FWD == 12
    assert MEGATRON_EXPERT_DOWN_BIAS.bytes_per_element(backward=True) == DOWN_BWD == 16


def test_the_table_holds_a_biased_moe_models_expert_biases_fused_or_not() -> None:
    for fused in (True, False):
        table = eager_op_bytes(GPTOSS, "megatron-core", fused=fused)
        assert table["experts.fc2"] == DOWN_FWD and table["experts.fc2.backward"] == DOWN_BWD
        # linear_fc1's biases: added and reduced by its GEMMs (the forward add stays the
        # generator's, fused into the activation that reads the GEMM's output)
        assert table["experts.gate.backward"] == table["experts.up.backward"] == 0
        assert "experts.gate" not in table and "experts.up" not in table
    # nothing for a model without biases or without experts
    assert eager_op_bytes(QWEN3, "megatron-core", fused=True) == {}
    dense = get_flavor("llama3-8b").with_overrides(layers=2, bias=True)
    assert eager_op_bytes(dense, "megatron-core", fused=True) == {}


def test_the_down_bias_kernel_time_is_its_elements_times_the_table_at_eager_rate() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["layer_swa_moe"]
    (fc2,) = [i for i in layer.fwd if i.name == "experts.fc2"]
    (fc2_bwd,) = [i for i in layer.bwd if i.name == "experts.fc2.backward"]
    elements = dict(fc2.outputs)["experts.fc2"] // B
    assert elements == GPTOSS.seq_len * GPTOSS.top_k * GPTOSS.hidden  # dropless (token, expert)
    table = eager_op_bytes(GPTOSS, "megatron-core", fused=True)
    assert eager_instr_bytes(fc2, table) == elements * DOWN_FWD
    assert eager_instr_bytes(fc2_bwd, table) == elements * DOWN_BWD
    timer, rate = _eager_timer(table)
    assert timer(fc2) == pytest.approx(elements * DOWN_FWD / rate, rel=1e-12)
    assert timer(fc2_bwd) == pytest.approx(elements * DOWN_BWD / rate, rel=1e-12)


def _eager_timer(table: dict[str, int]) -> tuple[KernelTimer, float]:
    """An H100 kernel timer with the eager table ``table``, and the eager HBM rate it charges."""
    kernels = H100.accelerator.kernels
    assert kernels is not None
    timer = KernelTimer(
        H100.accelerator, kernels, "bf16", frozenset(), keys=512, head_dim=64, causal=True,
        eager_bytes=table,
    )  # fmt: skip
    return timer, H100.accelerator.memory_bandwidth_bytes_per_s * kernels.eager_memory


EP8 = ParallelConfig(dp=8, ep=8, zero=1, micro_batch=1, global_batch=8)


def _step(model: ModelSpec, **options: object) -> float:
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, EP8, H100).step_time_s


def test_the_profile_and_its_effect_on_an_evaluation() -> None:
    assert get_framework("megatron-core").eager_modules == "megatron-core"
    # the eager down bias slows a GPT-OSS step; a backend differing only in the option gives a
    # different result (no stale memo); a model without biases is untouched (multi-head with
    # learned positions on cuDNN: none of the fused QKV split's copies either, eager_qkv_split)
    assert _step(GPTOSS) > _step(GPTOSS, eager_modules="generator")
    plain = QWEN3.with_overrides(position=Position.LEARNED, kv_heads=QWEN3.heads, qk_norm=False)
    assert _step(plain) == _step(plain, eager_modules="generator")


# rope_utils._apply_rotary_pos_emb_bshd, per element of q or k: t * cos_ (read, write); -x2 on
# half the elements (half a read and a write); torch.cat((-x2, x1)) (read, write); * sin_ (read,
# write); the add (two reads, a write); torch.cat((t, t_pass)) with t_pass empty (read, write)
ROPE_FWD = (B + B) + (B // 2 + B // 2) + (B + B) + (B + B) + (B + B + B) + (B + B)
# grad * cos_, grad * sin_ (read, write each); NegBackward0 on half; the chunk's backward
# concatenates the halves (read, write); the two gradients of t summed (two reads, a write)
ROPE_BWD = (B + B) + (B + B) + (B // 2 + B // 2) + (B + B) + (B + B + B)


def test_the_unfused_rope_is_rope_utils_counted_op_by_op() -> None:
    assert MEGATRON_UNFUSED_ROPE.bytes_per_element(backward=False) == ROPE_FWD == 24
    assert MEGATRON_UNFUSED_ROPE.bytes_per_element(backward=True) == ROPE_BWD == 20
    dense = get_flavor("llama3-8b").with_overrides(layers=2)
    table = eager_op_bytes(dense, "megatron-core", fused=True, rope_fusion=False)
    assert table["q.rope"] == table["k.rope"] == ROPE_FWD
    assert table["q.rope.backward"] == table["k.rope.backward"] == ROPE_BWD
    # fused RoPE (the default) or no rotary embedding: the generator's count
    assert eager_op_bytes(dense, "megatron-core", fused=True) == {}
    gpt = get_flavor("megatron-gpt-1.7b")  # learned positions
    assert eager_op_bytes(gpt, "megatron-core", fused=True, rope_fusion=False) == {}
    # with the expert biases of a biased MoE model
    both = eager_op_bytes(GPTOSS, "megatron-core", fused=True, rope_fusion=False)
    assert both["q.rope"] == ROPE_FWD and both["experts.fc2"] == DOWN_FWD


def test_the_rope_kernel_time_is_its_elements_times_the_table_at_eager_rate() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["layer_swa_moe"]
    (rope,) = [i for i in layer.fwd if i.name == "q.rope"]
    elements = dict(rope.outputs)["q.rope"] // B
    assert elements == GPTOSS.seq_len * GPTOSS.heads * GPTOSS.head_dim
    table = eager_op_bytes(GPTOSS, "megatron-core", fused=True, rope_fusion=False)
    timer, rate = _eager_timer(table)
    assert timer(rope) == pytest.approx(elements * ROPE_FWD / rate, rel=1e-12)


def test_rope_fusion_is_an_option_of_the_evaluation() -> None:
    assert get_framework("megatron-core").rope_fusion is True
    # a backend differing only in rope_fusion gives a different (slower) step: no stale memo
    assert _step(GPTOSS, rope_fusion=False) > _step(GPTOSS)
    assert _step(QWEN3, rope_fusion=False) > _step(QWEN3)


@pytest.mark.parametrize("framework", ["fsdp", "torchtitan", "megatron-lm-2021", "automodel"])
def test_rope_fusion_off_outside_megatron_core_modules_is_a_one_line_error(framework: str) -> None:
    """Only Megatron-Core's module code (eager_modules 'megatron-core') has the unfused RoPE
    the option times; elsewhere it would change nothing, silently: an error naming both."""
    with pytest.raises(ConfigError, match="rope_fusion.*eager_modules") as raised:
        AnalyticalBackend(framework=framework, overrides={"rope_fusion": False})
    assert "\n" not in str(raised.value)
    assert AnalyticalBackend(framework="megatron-core", overrides={"rope_fusion": False})


# weighted_bias_quick_geglu_impl with clamp_value, per element of the activation's output (one
# element of each half of the fc1 output): x_glu.clamp (read, write), x_linear.clamp (read,
# write), torch.cat of both halves (two reads, two writes)
CLAMP_FWD = (B + B) + (B + B) + (2 * B + 2 * B)
# clamp_backward: the gate half's where(self <= max, grad, 0): le (read, 1-byte mask), where
# (mask and grad read, write); the linear half's ge and le (read, mask each), logical_and_ (two
# masks read, one written), where (mask and grad, write); the chunk's backward concatenates the
# halves' gradients (two reads, two writes); CatBackward0 narrows (views)
CLAMP_BWD = (B + 1) + (1 + B + B) + (B + 1) + (B + 1) + (1 + 1 + 1) + (1 + B + B) + (4 * B)


def test_the_glu_clamp_is_megatrons_code_counted_op_by_op() -> None:
    assert MEGATRON_GLU_CLAMP.bytes_per_element(backward=False) == CLAMP_FWD == 16
    assert MEGATRON_GLU_CLAMP.bytes_per_element(backward=True) == CLAMP_BWD == 30
    extra = {"experts.act": CLAMP_FWD, "experts.act.backward": CLAMP_BWD}
    assert eager_extra_bytes(GPTOSS, "megatron-core") == extra
    # only GPT-OSS's provider clamps; only Megatron-Core's module code runs the clamp eagerly
    # (AutoModel's quick_geglu_deepep clamps inside its torch.compile'd function)
    assert eager_extra_bytes(QWEN3, "megatron-core") == {}
    for modules in ("generator", "automodel", "torchtitan"):
        assert eager_extra_bytes(GPTOSS, modules) == {}


def test_the_clamp_adds_its_bytes_at_eager_rate_to_the_activations_own_time() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["layer_swa_moe"]
    (act,) = [i for i in layer.fwd if i.name == "experts.act"]
    (act_bwd,) = [i for i in layer.bwd if i.name == "experts.act.backward"]
    elements = dict(act.outputs)["experts.act"] // B
    assert elements == GPTOSS.seq_len * GPTOSS.top_k * GPTOSS.expert_ffn  # (token, expert) rows
    plain, rate = _eager_timer({})
    clamped = KernelTimer(
        H100.accelerator, plain.kernels, "bf16", frozenset(), keys=512, head_dim=64,
        causal=True, eager_extra=eager_extra_bytes(GPTOSS, "megatron-core"),
    )  # fmt: skip
    for instr, per_element in ((act, CLAMP_FWD), (act_bwd, CLAMP_BWD)):
        added = clamped(instr) - plain(instr)
        assert added == pytest.approx(elements * per_element / rate, rel=1e-9)


def test_the_recomputed_activation_clamps_again() -> None:
    """Under Megatron-Core's ``moe_act`` recompute the backward reruns the whole
    ``weighted_bias_quick_geglu_impl`` call (``CheckpointWithoutOutput``), clamp included: the
    backward's recomputed ``experts.act`` gets the forward's clamp bytes, beside the
    ``experts.act.backward``'s own."""
    parallel = ParallelConfig(global_batch=1, recompute="selective", recompute_modules=("moe_act",))
    layer = bind_all(make_workload(GPTOSS, parallel))["layer_swa_moe"]
    (recomputed,) = [i for i in layer.bwd if i.name == "experts.act"]
    elements = dict(recomputed.outputs)["experts.act"] // B
    plain, rate = _eager_timer({})
    clamped = dataclasses.replace(plain, eager_extra=eager_extra_bytes(GPTOSS, "megatron-core"))
    added = clamped(recomputed) - plain(recomputed)
    assert added == pytest.approx(elements * CLAMP_FWD / rate, rel=1e-9)


def test_the_clamp_slows_a_gpt_oss_step_on_megatron_core(monkeypatch: pytest.MonkeyPatch) -> None:
    clamped = _step(GPTOSS)
    monkeypatch.setattr(eager_megatron, "CLAMPED_GLU_FAMILIES", ())
    assert _step(GPTOSS) < clamped  # a fresh backend: no memo holds the clamped timing
