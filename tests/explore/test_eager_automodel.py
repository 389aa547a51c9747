"""NeMo AutoModel's eager code (``eager_modules = "automodel"``, the automodel profile):
``GroupedExpertsDeepEP._apply_bias``'s kernels and the FlexAttention path's copies and sink
rescale, counted against closed forms written out here op by op from AutoModel's code, where
they apply, and what they change in an evaluation."""

from __future__ import annotations

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import eager_instr_bytes, eager_op_bytes
from stage_explore.analytical.eager_attention import (
    AttentionEager,
    attention_eager_bytes,
    eager_attention,
)
from stage_explore.analytical.eager_automodel import (
    AUTOMODEL_EXPERT_BIAS,
    AUTOMODEL_FLEX_SINKS,
    automodel_expert_bias_probs,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

B, F = 2, 4  # bytes of a bf16 and of an fp32 element
H100 = load_system("h100-80gb")
# GPT-OSS-20B's layer (biased projections, 32 experts of 2880, top-4) cut to two layers
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)
QWEN3 = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)  # no biases

# torch.cat([t + b ...]): the per-expert add (read t, write), the concatenation (read, write);
# .to() of a bf16 tensor to bf16 is no kernel
GATE_UP_FWD = (B + B) + (B + B)
# AddBackward0's bias gradient (a reduction reading the gradient); CatBackward0's narrows are
# views; SplitWithSizesBackward0 concatenates the experts' gradients (read, write)
GATE_UP_BWD = B + (B + B)
# t + b * p with fp32 p: b * p written in fp32; bf16 t + fp32 -> fp32; cat in fp32; .to(bf16)
DOWN_FWD = F + (B + F + F) + (F + F) + (F + B)
# grad.to(fp32); t's fp32 gradient cast to bf16 by the engine; the split's concatenation;
# grad * p and its reduction to b
DOWN_BWD = (B + F) + (F + B) + (B + B) + (F + F) + F
ROUTER_BWD = (F + F) + F  # grad * b and its reduction to p, when p carries a gradient


def test_the_bias_kernels_are_automodels_code_counted_op_by_op() -> None:
    assert AUTOMODEL_EXPERT_BIAS.bytes_per_element(backward=False) == GATE_UP_FWD == 8
    assert AUTOMODEL_EXPERT_BIAS.bytes_per_element(backward=True) == GATE_UP_BWD == 6
    fake = automodel_expert_bias_probs(trained_router=False)
    assert fake.bytes_per_element(backward=False) == DOWN_FWD == 28
    assert fake.bytes_per_element(backward=True) == DOWN_BWD == 28
    trained = automodel_expert_bias_probs(trained_router=True)
    assert trained.bytes_per_element(backward=False) == DOWN_FWD
    assert trained.bytes_per_element(backward=True) == DOWN_BWD + ROUTER_BWD == 40


def test_the_table_holds_the_expert_biases_of_a_biased_moe_model_on_deepep_only() -> None:
    table = eager_op_bytes(GPTOSS, "automodel", fused=False, deepep=True, trained_router=False)
    assert table["experts.gate"] == table["experts.up"] == GATE_UP_FWD
    assert table["experts.gate.backward"] == table["experts.up.backward"] == GATE_UP_BWD
    assert table["experts.fc2"] == DOWN_FWD and table["experts.fc2.backward"] == DOWN_BWD
    trained = eager_op_bytes(GPTOSS, "automodel", fused=False, deepep=True)
    assert trained["experts.fc2.backward"] == DOWN_BWD + ROUTER_BWD
    # no table: without DeepEP (GroupedExperts adds the biases in its compiled activation),
    # without biases, under torch.compile, and for the other eager tables' models
    assert eager_op_bytes(GPTOSS, "automodel", fused=False, deepep=False) == {}
    assert eager_op_bytes(QWEN3, "automodel", fused=False, deepep=True) == {}
    assert eager_op_bytes(GPTOSS, "automodel", fused=True, deepep=True) == {}
    assert "experts.fc2" not in eager_op_bytes(GPTOSS, "torchtitan", fused=False, deepep=True)


def test_the_down_bias_kernel_time_is_its_elements_times_the_table_at_hbm_rate() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["layer_swa_moe"]
    (fc2,) = [i for i in layer.fwd if i.name == "experts.fc2"]
    elements = dict(fc2.outputs)["experts.fc2"] // B
    tokens = GPTOSS.seq_len * GPTOSS.top_k  # every (token, expert) pair, dropless
    assert elements == tokens * GPTOSS.hidden
    table = eager_op_bytes(GPTOSS, "automodel", fused=False, deepep=True, trained_router=False)
    assert eager_instr_bytes(fc2, table) == elements * DOWN_FWD
    kernels = H100.accelerator.kernels
    assert kernels is not None
    timer = KernelTimer(
        H100.accelerator,
        kernels,
        "bf16",
        frozenset(),
        keys=512,
        head_dim=64,
        causal=True,
        eager_bytes=table,
    )
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * kernels.eager_memory  # eager kernels
    assert timer(fc2) == pytest.approx(elements * DOWN_FWD / rate, rel=1e-12)


EP8 = ParallelConfig(dp=8, ep=8, zero=3, micro_batch=1, global_batch=8)


def _step(model: ModelSpec, **options: object) -> float:
    backend = AnalyticalBackend(framework="automodel", overrides={"moe_deepep": True, **options})
    return backend.evaluate(model, EP8, H100).step_time_s


def test_the_profile_and_its_effect_on_an_evaluation() -> None:
    assert get_framework("automodel").eager_modules == "automodel"
    # the expert biases' eager kernels slow a GPT-OSS step; a backend differing only in the
    # option gives a different result (no stale memo), and a model without biases is untouched
    assert _step(GPTOSS) > _step(GPTOSS, eager_modules="generator")
    assert _step(GPTOSS, moe_fake_balanced_gate=False) != _step(
        GPTOSS, moe_fake_balanced_gate=False, eager_modules="generator"
    )
    assert _step(QWEN3) == _step(QWEN3, eager_modules="generator")


# FlexAttention path (components/attention/utils.py, flex_attention.py): q, k, v and the output
# transposed and made contiguous (read, write each); with sinks out * sigmoid(lse - w) (bf16 in,
# fp32 out) and .to(q.dtype) (fp32 in, bf16 out)
COPY = B + B
SINKS_FWD = (B + F) + (F + B)
# grad.to(fp32); grad * scale; its cast to the bf16 output; grad * out (fp32 and bf16 in); the
# factor's reduction over the head dim
SINKS_BWD = (B + F) + (F + F) + (F + B) + (F + B + F) + F


def test_the_flex_path_moves_the_layout_copies_and_the_sink_rescale() -> None:
    assert AUTOMODEL_FLEX_SINKS.bytes_per_element(backward=False) == SINKS_FWD == 12
    assert AUTOMODEL_FLEX_SINKS.bytes_per_element(backward=True) == SINKS_BWD == 34
    assert eager_attention(GPTOSS, "automodel", "flex") == AttentionEager(
        COPY, COPY + SINKS_FWD, SINKS_BWD
    )
    no_sinks = GPTOSS.with_overrides(attention_sinks=False)
    assert eager_attention(no_sinks, "automodel", "flex") == AttentionEager(COPY, COPY, 0)
    # Transformer Engine's attention (the other rows) and every other table: nothing outside
    assert eager_attention(GPTOSS, "automodel", "cudnn") == AttentionEager()
    assert eager_attention(GPTOSS, "generator", "flex") == AttentionEager()


def test_the_attention_kernel_time_gains_those_bytes_at_hbm_rate() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["moe_layer"]
    (fwd,) = [i for i in layer.fwd if i.kind == "attention"]
    (bwd,) = [i for i in layer.bwd if i.kind == "attention" and i.name.endswith(".backward")]
    q, k, v = (size // B for _, size in fwd.inputs[:3])
    out = dict(fwd.outputs)["attn.core"] // B
    assert q == out == GPTOSS.seq_len * GPTOSS.heads * GPTOSS.head_dim
    assert k == v == GPTOSS.seq_len * GPTOSS.kv_heads * GPTOSS.head_dim
    per_element = eager_attention(GPTOSS, "automodel", "flex")
    assert attention_eager_bytes(fwd, per_element) == (q + k + v) * COPY + out * (COPY + SINKS_FWD)
    assert attention_eager_bytes(bwd, per_element) == out * SINKS_BWD
    kernels = H100.accelerator.kernels
    assert kernels is not None
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory

    def timer(outside: AttentionEager) -> KernelTimer:
        return KernelTimer(
            H100.accelerator,
            kernels,
            "bf16",
            frozenset(),
            keys=512,
            head_dim=GPTOSS.head_dim,
            causal=True,
            attention_kernel="flex",
            attention_eager=outside,
        )

    plain, eager = timer(AttentionEager()), timer(per_element)
    for instr in (fwd, bwd):
        extra = attention_eager_bytes(instr, per_element) / rate
        assert eager(instr) == pytest.approx(plain(instr) + extra, rel=1e-12)


def test_the_flex_path_in_an_evaluation() -> None:
    flex = {"attention_kernel": "flex"}
    # slower than the same kernel without AutoModel's code around it; a backend differing only
    # in the kernel or the table gives a different result
    assert _step(GPTOSS, **flex) > _step(GPTOSS, eager_modules="generator", **flex)
    assert _step(GPTOSS, **flex) != _step(GPTOSS)
