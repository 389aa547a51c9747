"""llm-foundry 2023's MPT blocks on an fp32 residual stream (stage_explore/analytical/eager.py,
``eager_modules = "llm-foundry-2023"``): bytes per element checked against closed forms written
out here kernel by kernel from llm-foundry's code, and the time they add."""

from __future__ import annotations

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import (
    LINEAR_BIAS_OPS,
    LLMFOUNDRY_FP32_ACCUMULATE,
    LLMFOUNDRY_LPLAYERNORM,
    LLMFOUNDRY_RESIDUAL_ADD,
    bias_epilogue_bytes,
    eager_instr_bytes,
    eager_op_bytes,
)
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
# MPT-like: LayerNorm, GeLU, no biases, tied embeddings (the MPT source's setup)
MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(
    layers=2, bias=False, dropout=False, core_attention="fused"
)
B, F = 2, 4  # bytes of a bf16 and of an fp32 element

# LPLayerNorm forward: x.to(bf16) (read fp32, write bf16), F.layer_norm in bf16
LPLN_FWD = (F + B) + (B + B)
# backward: layer_norm backward (read grad and the bf16 input, write dx), ToCopyBackward0 up
LPLN_BWD = (2 * B + B) + (B + F)
# x + b with x fp32 and b bf16: read both, write fp32; backward: the cast of b's gradient
RESID_FWD = (F + B) + F
RESID_BWD = F + B
# the two fp32 gradients of the residual stream summed: read both, write one
ACCUMULATE = 2 * F + F


def test_bytes_per_element_are_the_code_counted_kernel_by_kernel() -> None:
    assert LLMFOUNDRY_LPLAYERNORM.bytes_per_element(backward=False) == LPLN_FWD
    assert LLMFOUNDRY_LPLAYERNORM.bytes_per_element(backward=True) == LPLN_BWD
    assert LLMFOUNDRY_RESIDUAL_ADD.bytes_per_element(backward=False) == RESID_FWD
    assert LLMFOUNDRY_RESIDUAL_ADD.bytes_per_element(backward=True) == RESID_BWD
    assert LLMFOUNDRY_FP32_ACCUMULATE.bytes == ACCUMULATE
    # the fp32 stream moves more than the generator's one bf16 kernel per op
    assert LPLN_FWD > LLMFOUNDRY_LPLAYERNORM.compiled_bytes[0]
    assert RESID_FWD > LLMFOUNDRY_RESIDUAL_ADD.compiled_bytes[0]


def test_each_op_is_timed_at_its_bytes_over_the_achieved_bandwidth() -> None:
    layer = bind_all(make_workload(MODEL, ParallelConfig(global_batch=1)))["layer"]
    weights = frozenset(w.name for w in layer.weights)
    table = eager_op_bytes(MODEL, "llm-foundry-2023", fused=False)
    accelerator = H100.accelerator
    assert accelerator.kernels is not None
    timer = KernelTimer(
        accelerator, accelerator.kernels, "bf16", weights, MODEL.seq_len, 128, True,
        eager_bytes=table,
    )  # fmt: skip
    plain = KernelTimer(accelerator, accelerator.kernels, "bf16", weights, MODEL.seq_len, 128, True)
    # eager kernels at their own achieved fraction of the HBM bandwidth (eager_memory)
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.kernels.eager_memory
    by_name = {i.name: i for i in (*layer.fwd, *layer.bwd)}
    elements = dict(by_name["ln2"].outputs)["ln2"] // B  # tokens x hidden
    expected = {
        "ln1": LPLN_FWD, "ln2": LPLN_FWD, "ln1.backward": LPLN_BWD, "ln2.backward": LPLN_BWD,
        "attn.residual": RESID_FWD, "y": RESID_FWD,
        "attn.residual.backward": RESID_BWD, "y.backward": RESID_BWD,
        "attn.residual.accumulate.d.attn.residual": ACCUMULATE,
        "inputs.accumulate.d.x": ACCUMULATE,
    }  # fmt: skip
    for name, per_element in expected.items():
        assert eager_instr_bytes(by_name[name], table) == elements * per_element, name
        assert timer(by_name[name]) == pytest.approx(elements * per_element / bandwidth)
    # MPT's fused Wqkv: its input gradient is one GEMM's output, nothing to sum
    sums = [i for i in layer.bwd if i.name.startswith("ln1.accumulate.")]
    assert sums and all(eager_instr_bytes(i, table) == 0 for i in sums)
    # GEMMs, attention and the activation (nn.GELU, one kernel) as before
    for instr in (*layer.fwd, *layer.bwd):
        if instr.name.startswith(("mlp.", "q", "k", "v", "attn.core", "attn.proj")):
            assert timer(instr) == plain(instr)


def test_the_option_runs_the_table_and_the_step_changes_with_it() -> None:
    parallel = ParallelConfig(dp=8, zero=3, micro_batch=2, global_batch=16)
    mpt = AnalyticalBackend(
        framework="llm-foundry-2023", overrides={"eager_modules": "llm-foundry-2023"}
    )
    generator = AnalyticalBackend(
        framework="llm-foundry-2023", overrides={"eager_modules": "generator"}
    )
    slow = mpt.evaluate(MODEL, parallel, H100).breakdown["compute"]
    fast = generator.evaluate(MODEL, parallel, H100).breakdown["compute"]
    assert slow > fast
    # an RMSNorm model keeps the generator's norms (LPLayerNorm is a LayerNorm)
    rms = eager_op_bytes(get_flavor("llama3-8b"), "llm-foundry-2023", fused=False)
    assert "ln1" not in rms and rms["y"] == RESID_FWD
    assert eager_op_bytes(MODEL, "llm-foundry-2023", fused=True) == {}


def test_linear_biases_added_in_the_gemm_epilogue_move_no_bytes_forward() -> None:
    """``linear_bias_epilogue`` (PyTorch addmm's cuBLASLt bias epilogue): each biased linear's
    forward bias add moves nothing, its backward keeps the bias gradient's reduction (a read of
    the output gradient), and the step is faster than with a bias kernel of its own."""
    biased = MODEL.with_overrides(bias=True)
    assert bias_epilogue_bytes(MODEL) == {}
    table = bias_epilogue_bytes(biased)
    assert table == {name: 0 for name in LINEAR_BIAS_OPS}
    layer = bind_all(make_workload(biased, ParallelConfig(global_batch=1)))["layer"]
    by_name = {i.name: i for i in (*layer.fwd, *layer.bwd)}
    for name in LINEAR_BIAS_OPS:  # each a generator op of the biased block ...
        assert by_name[name].bytes_read + by_name[name].bytes_written > 0
        assert eager_instr_bytes(by_name[name], table) == 0  # ... moving nothing in the GEMM
        backward = by_name[f"{name}.backward"]  # the bias gradient: a read of d.<op>
        assert eager_instr_bytes(backward, table) is None and backward.bytes_read > 0

    def compute(model: ModelSpec, on: bool) -> float:
        overrides = {"linear_bias_epilogue": on}
        backend = AnalyticalBackend(framework="llm-foundry-2023", overrides=overrides)
        parallel = ParallelConfig(dp=8, zero=3, micro_batch=2, global_batch=16)
        return backend.evaluate(model, parallel, H100).breakdown["compute"]

    assert compute(biased, True) < compute(biased, False)
    assert compute(MODEL, True) == compute(MODEL, False)
