"""Eager PyTorch's element-wise kernels (stage_explore/analytical/eager.py): bytes per element
counted from torchtitan's model code, checked against closed forms written out here op by op,
and the framework option that switches them on."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import (
    RESIDUAL_ADD,
    TORCHTITAN_RMSNORM,
    TORCHTITAN_ROPE,
    TORCHTITAN_SWIGLU,
    EagerModule,
    eager_instr_bytes,
    eager_op_bytes,
    torchtitan_repeat_kv,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)
B, F = 2, 4  # bytes of a bf16 and of an fp32 element

# Closed forms, one term (read + write) per kernel of the code:
# RMSNorm forward: x.float(), pow(2), mean (read only), x * rsqrt, type_as, * weight
RMSNORM_FWD = (B + F) + (F + F) + F + (F + F) + (F + B) + (B + B)
# backward: MulBackward0 of `* weight` (grad*w, grad*out, sum), ToCopy, MulBackward0 of
# `x * rsqrt` (grad*r, grad*x, sum), MeanBackward (write), PowBackward0 (pow(x, 1) copy,
# 2*x, grad*that), the InputBuffer add of x.float()'s two gradients, ToCopy back to bf16
RMSNORM_BWD = (
    (B + B) + (2 * B + B) + B
    + (B + F)
    + (F + F) + (2 * F + F) + F
    + F
    + (F + F) + (F + F) + (2 * F + F)
    + (2 * F + F)
    + (F + B)
)  # fmt: skip
# RoPE: float(), complex64 product (4 bytes per real element), type_as; backward the same three
ROPE_FWD = (B + F) + (F + F) + (F + B)
ROPE_BWD = (B + F) + (F + F) + (F + B)
# SwiGLU: silu, product; backward: grad*up, grad*silu, silu_backward(grad, gate)
SWIGLU_FWD = (B + B) + (2 * B + B)
SWIGLU_BWD = (2 * B + B) + (2 * B + B) + (2 * B + B)
# repeat_kv, per element of k: k and v each read once and written n_rep times; backward each
# repeated gradient read and summed into one
N_REP = MODEL.heads // MODEL.kv_heads
REPEAT_FWD = 2 * (B + N_REP * B)
REPEAT_BWD = 2 * (N_REP * B + B)


@pytest.mark.parametrize(
    ("module", "forward", "backward"),
    [
        (TORCHTITAN_RMSNORM, RMSNORM_FWD, RMSNORM_BWD),
        (TORCHTITAN_ROPE, ROPE_FWD, ROPE_BWD),
        (TORCHTITAN_SWIGLU, SWIGLU_FWD, SWIGLU_BWD),
        (RESIDUAL_ADD, 2 * B + B, 0),
    ],
)
def test_eager_bytes_per_element_are_the_code_counted_op_by_op(
    module: EagerModule, forward: int, backward: int
) -> None:
    assert module.bytes_per_element(backward=False) == forward
    assert module.bytes_per_element(backward=True) == backward
    if module is RESIDUAL_ADD:  # one kernel either way; autograd's AddBackward0 runs none
        assert module.compiled_bytes == (forward, 0)
    else:  # eager moves more than one fused kernel per direction
        assert forward > module.compiled_bytes[0] and backward > module.compiled_bytes[1]


def _layer() -> tuple[tuple[Instr, ...], tuple[Instr, ...], frozenset[str]]:
    parallel = ParallelConfig(tp=2, sp=True, global_batch=1)
    layer = bind_all(make_workload(MODEL, parallel))["layer"]
    return layer.fwd, layer.bwd, frozenset(w.name for w in layer.weights)


@pytest.mark.parametrize(
    ("op", "module"),
    [
        ("ln1", TORCHTITAN_RMSNORM),
        ("q.rope", TORCHTITAN_ROPE),
        ("mlp.act", TORCHTITAN_SWIGLU),
        ("y", RESIDUAL_ADD),
    ],
)
def test_the_generator_counts_one_fused_kernel_and_eager_its_kernels(
    op: str, module: EagerModule
) -> None:
    fwd, bwd, weights = _layer()
    (forward,) = [i for i in fwd if i.name == op]
    (backward,) = [i for i in bwd if i.name == f"{op}.backward"]
    elements = dict(forward.outputs)[op] // B
    weight_bytes = sum(size for name, size in forward.inputs if name in weights)
    # the generator's op reads its inputs and writes its output once: a compiled module
    assert forward.bytes_read + forward.bytes_written - weight_bytes == (
        elements * module.compiled_bytes[0]
    )
    table = eager_op_bytes(MODEL, "torchtitan", fused=False)
    assert eager_instr_bytes(forward, table) == elements * module.bytes_per_element(False)
    assert eager_instr_bytes(backward, table) == elements * module.bytes_per_element(True)


def test_k_runs_its_rotary_embedding_and_the_repeat_of_k_and_v() -> None:
    fwd, bwd, _ = _layer()
    (forward,) = [i for i in fwd if i.name == "k.rope"]
    (backward,) = [i for i in bwd if i.name == "k.rope.backward"]
    elements = dict(forward.outputs)["k.rope"] // B
    assert torchtitan_repeat_kv(N_REP).bytes_per_element(False) == REPEAT_FWD
    assert torchtitan_repeat_kv(N_REP).bytes_per_element(True) == REPEAT_BWD
    assert torchtitan_repeat_kv(1).bytes_per_element(False) == 0  # no grouped heads, no copy
    for fused in (False, True):  # SDPA reads the copies compiled or not
        table = eager_op_bytes(MODEL, "torchtitan", fused=fused)
        assert eager_instr_bytes(forward, table) == elements * (ROPE_FWD + REPEAT_FWD)
        assert eager_instr_bytes(backward, table) == elements * (ROPE_BWD + REPEAT_BWD)


def test_the_option_switches_the_time_by_exactly_the_bytes_over_the_bandwidth() -> None:
    fwd, bwd, weights = _layer()
    accelerator = H100.accelerator
    assert accelerator.kernels is not None
    table = eager_op_bytes(MODEL, "torchtitan", fused=False)
    eager = KernelTimer(
        accelerator, accelerator.kernels, "bf16", weights, MODEL.seq_len, 128, True,
        eager_bytes=table,
    )  # fmt: skip
    plain = KernelTimer(accelerator, accelerator.kernels, "bf16", weights, MODEL.seq_len, 128, True)
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    # the eager kernels at their own achieved fraction of the HBM bandwidth (eager_memory)
    eager_rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.kernels.eager_memory
    (norm,) = [i for i in fwd if i.name == "ln2"]
    (norm_grad,) = [i for i in bwd if i.name == "ln2.backward"]
    elements = dict(norm.outputs)["ln2"] // B
    assert eager(norm) == pytest.approx(elements * RMSNORM_FWD / eager_rate, rel=1e-12)
    assert eager(norm_grad) == pytest.approx(elements * RMSNORM_BWD / eager_rate, rel=1e-12)
    assert plain(norm) == pytest.approx((norm.bytes_read + norm.bytes_written) / bandwidth)
    # GEMMs, attention and the ops the table does not name are timed as before
    for instr in (*fwd, *bwd):
        if instr.collective is None and instr.kind != "ring" and instr.name not in table:
            assert eager(instr) == plain(instr)


def test_eager_is_slower_than_compiled_and_compiled_keeps_only_the_complex_rope() -> None:
    parallel = ParallelConfig(dp=2, zero=3, global_batch=2)
    eager = AnalyticalBackend(framework="torchtitan")
    generator = AnalyticalBackend(framework="torchtitan", overrides={"eager_modules": "generator"})
    compiled = AnalyticalBackend(framework="torchtitan", overrides={"fused_elementwise": True})
    fused_generator = AnalyticalBackend(
        framework="torchtitan", overrides={"fused_elementwise": True, "eager_modules": "generator"}
    )
    times = [b.evaluate(MODEL, parallel, H100).breakdown["compute"] for b in (eager, generator)]
    fused, fused_plain = (
        b.evaluate(MODEL, parallel, H100).breakdown["compute"] for b in (compiled, fused_generator)
    )
    assert times[0] > times[1] and times[0] > fused > fused_plain
    # Inductor falls back to ATen for the complex product: the RoPE (and the repeated K/V
    # SDPA reads) as in eager; the final norm outside the compiled blocks eager; every other
    # module as Inductor's kernels (eager_compiled.py; test_eager_compiled.py)
    table = eager_op_bytes(MODEL, "torchtitan", fused=True)
    rope = {op: ROPE_FWD for op in ("q.rope", "q.pe.rope", "k.pe.rope")}
    assert {op: table[op] for op in rope} == rope
    assert table["k.rope"] == ROPE_FWD + REPEAT_FWD
    assert table["k.rope.backward"] == ROPE_BWD + REPEAT_BWD
    assert (table["ln_f"], table["ln_f.backward"]) == (RMSNORM_FWD, RMSNORM_BWD)
    # looped (x read twice: 6 / 14 bytes), timed at the bytes' worth Liger's runs measure
    assert (table["ln1"], table["ln1.backward"]) == (5, 18)
    assert (table["mlp.act"], table["mlp.act.backward"]) == (3 * B, 5 * B)
    assert eager_op_bytes(MODEL, "generator", fused=False) == {}
    assert eager_op_bytes(MODEL, "generator", fused=True) == {}


def test_the_profiles_and_a_layernorm_gelu_model() -> None:
    assert get_framework("torchtitan").eager_modules == "torchtitan"
    assert get_framework("llm-foundry-2023").eager_modules == "llm-foundry-2023"
    for name in ("megatron-lm-2021", "deepspeed", "fsdp"):
        assert get_framework(name).eager_modules == "generator"
    # Megatron-Core: the generator's fused count but for its experts' eager down bias
    # (test_eager_megatron.py), nothing for a dense model
    assert get_framework("megatron-core").eager_modules == "megatron-core"
    assert eager_op_bytes(get_flavor("megatron-gpt-1.7b"), "megatron-core", fused=True) == {}
    gpt = get_flavor("megatron-gpt-1.7b")  # LayerNorm (nn.LayerNorm: one kernel), GeLU
    table = eager_op_bytes(gpt, "torchtitan", fused=False)
    assert "ln1" not in table and "mlp.act" not in table and table["y"] == 3 * B


def test_a_bad_value_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match="`eager_modules` must be one of generator, torchtitan"):
        get_framework("torchtitan").with_overrides({"eager_modules": "inductor"})
