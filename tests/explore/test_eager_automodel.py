"""NeMo AutoModel's eager expert biases (``eager_modules = "automodel"``, the automodel profile):
``GroupedExpertsDeepEP._apply_bias``'s kernels counted against closed forms written out here op
by op from AutoModel's code, where the table applies, and what it changes in an evaluation."""

from __future__ import annotations

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import eager_instr_bytes, eager_op_bytes
from stage_explore.analytical.eager_automodel import (
    AUTOMODEL_EXPERT_BIAS,
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
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
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
