"""torchao's Float8Linear casts a weight to FP8 at every use (``fp8_weight_cast_per_use``,
:data:`stage_explore.analytical.framework_costs.FP8_DYNAMIC_CAST_BYTES`), against closed forms
computed here."""

from __future__ import annotations

import pytest

from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.memory import fp8_weights
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import (
    FP8_DYNAMIC_CAST_BYTES,
    FP8_SCALED_CAST_BYTES,
    weight_amax_known,
    weight_cast_bytes,
)
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)


def _compute(parallel: ParallelConfig, flag: bool, compiled: bool = False) -> float:
    overrides = {"fp8_weight_cast_per_use": flag, "fused_elementwise": compiled}
    backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
    return backend.evaluate(LLAMA, parallel, load_system("h100-80gb")).breakdown["compute"]


@pytest.mark.parametrize(("recompute", "uses"), [(Recompute.FULL, 3), (Recompute.NONE, 2)])
def test_each_use_casts_the_layer_weights(recompute: Recompute, uses: int) -> None:
    parallel = ParallelConfig(
        dp=4, zero=3, recompute=recompute, global_batch=8, precision=Precision.FP8
    )
    blocks = lower(LLAMA, parallel).blocks
    elements = 0
    for kind, block in blocks.items():
        linear = linear_weights(block)
        if fp8_block(kind):  # the decoder layers; the output layer stays in 16 bits
            count = LLAMA.layers if kind == "layer" else 1
            elements += count * sum(w.elements for w in block.weights if w.name in linear)
    system = load_system("h100-80gb")
    bandwidth = (
        system.accelerator.memory_bandwidth_bytes_per_s * system.accelerator.efficiency.memory
    )
    micro_batches = 8 // 4
    # forward, backward input gradient, and the recomputed forward under full recompute
    expected = micro_batches * uses * elements * FP8_DYNAMIC_CAST_BYTES / bandwidth
    assert _compute(parallel, True) - _compute(parallel, False) == pytest.approx(expected)


def test_bf16_runs_cast_nothing() -> None:
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=8)
    assert _compute(parallel, True) == _compute(parallel, False)


def test_only_the_torchtitan_profile_casts_per_use() -> None:
    assert FP8_DYNAMIC_CAST_BYTES == 2 + 2 + 1  # amax read, cast read, fp8 write
    assert [n for n, p in FRAMEWORKS.items() if p.fp8_weight_cast_per_use] == ["torchtitan"]


def test_torchtitan_op_recompute_recasts_the_recomputed_linears() -> None:
    """TorchTitan's op-level AC recomputes the 2nd, 4th and 6th matmul of a Llama layer (wk,
    wo, w3: docs/analytical.md): their weights are cast a third time, the others twice."""
    op = ParallelConfig(
        dp=4,
        zero=3,
        global_batch=8,
        precision=Precision.FP8,
        recompute=Recompute.SELECTIVE,
        recompute_modules=("op",),
    )
    none = ParallelConfig(
        dp=4, zero=3, global_batch=8, precision=Precision.FP8, recompute=Recompute.NONE
    )
    extra = (_compute(op, True) - _compute(op, False)) - (
        _compute(none, True) - _compute(none, False)
    )
    h, kv, ffn = 4096, 8 * 128, 14336
    recomputed = LLAMA.layers * (h * kv + h * h + h * ffn)
    system = load_system("h100-80gb")
    bandwidth = (
        system.accelerator.memory_bandwidth_bytes_per_s * system.accelerator.efficiency.memory
    )
    micro_batches = 8 // 4
    expected = micro_batches * recomputed * FP8_DYNAMIC_CAST_BYTES / bandwidth
    assert extra == pytest.approx(expected)


def test_per_use_casts_hold_no_fp8_weight_copies() -> None:
    """Transformer Engine keeps each FP8 layer's FP8 weight copies (row- and column-wise,
    sharded like the weights under ZeRO-3) for the step; torchao's casts live only for their
    GEMM, so the peak drops by exactly those copies (stage_core's count of them)."""
    parallel = ParallelConfig(
        dp=4, zero=3, recompute=Recompute.FULL, global_batch=8, precision=Precision.FP8
    )
    system = load_system("h100-80gb")
    tensors = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}

    def peak(flag: bool) -> int:
        backend = AnalyticalBackend(
            framework="torchtitan", overrides={**tensors, "fp8_weight_cast_per_use": flag}
        )
        return backend.evaluate(LLAMA, parallel, system).peak_memory_bytes

    programs = lower(LLAMA, parallel)
    copies = sum(
        (LLAMA.layers if kind == "layer" else 1) * fp8_weights(programs.workload, block)
        for kind, block in programs.blocks.items()
    )
    assert copies > 0
    assert peak(False) - peak(True) == copies


def test_compiled_tensorwise_casts_reuse_a_known_amax() -> None:
    """torchao's roofline (roofline_utils.py 05980129) takes a weight's amax once and casts it
    for the forward and the backward from it; torchtitan's op SAC saves ``aten.max``. Eager, each
    cast reads the weight for its amax again."""
    assert FP8_SCALED_CAST_BYTES == 2 + 1  # cast read, fp8 write
    op = ("op",)
    assert weight_amax_known(True, "tensorwise", "dgrad", "bwd", ())
    assert weight_amax_known(True, "tensorwise", "fprop", "recompute", op)
    assert weight_amax_known(True, "tensorwise", "fprop", "recompute", ("op_recompute_sdpa",))
    assert not weight_amax_known(True, "tensorwise", "fprop", "recompute", ())  # full AC
    assert not weight_amax_known(True, "tensorwise", "fprop", "fwd", op)
    assert not weight_amax_known(False, "tensorwise", "dgrad", "bwd", op)  # eager
    assert not weight_amax_known(True, "rowwise", "dgrad", "bwd", op)
    assert weight_cast_bytes("tensorwise", "dgrad", ("fprop", "dgrad", "wgrad"), True) == 3
    assert weight_cast_bytes("rowwise", "dgrad", ("fprop", "dgrad", "wgrad"), True) == 7


@pytest.mark.parametrize(
    ("recompute", "modules", "per_element"),
    [
        (Recompute.NONE, (), FP8_DYNAMIC_CAST_BYTES + FP8_SCALED_CAST_BYTES),
        (Recompute.FULL, (), 2 * FP8_DYNAMIC_CAST_BYTES + FP8_SCALED_CAST_BYTES),
    ],
)
def test_compiled_input_gradient_cast_reads_the_weight_once(
    recompute: Recompute, modules: tuple[str, ...], per_element: int
) -> None:
    """Compiled: the forward's cast (and full recompute's, max re-run) 5 B, the input gradient's
    3 B per element; eager 5 B each (test_each_use_casts_the_layer_weights)."""
    parallel = ParallelConfig(
        dp=4, zero=3, recompute=recompute, global_batch=8, precision=Precision.FP8,
        recompute_modules=modules, fp8_recipe="tensorwise",
    )  # fmt: skip
    blocks = lower(LLAMA, parallel).blocks
    elements = sum(
        (LLAMA.layers if kind == "layer" else 1)
        * sum(w.elements for w in block.weights if w.name in linear_weights(block))
        for kind, block in blocks.items()
        if fp8_block(kind)
    )
    system = load_system("h100-80gb")
    bandwidth = (
        system.accelerator.memory_bandwidth_bytes_per_s * system.accelerator.efficiency.memory
    )
    expected = (8 // 4) * elements * per_element / bandwidth
    compiled = _compute(parallel, True, True) - _compute(parallel, False, True)
    assert compiled == pytest.approx(expected)


def test_compiled_op_sac_recasts_with_the_saved_amax() -> None:
    """Compiled under torchtitan's op SAC, the recomputed linears (wk, wo, w3) cast their
    weights a third time at 3 B per element: ``aten.max`` is in the save list."""
    op = ParallelConfig(
        dp=4, zero=3, global_batch=8, precision=Precision.FP8,
        recompute=Recompute.SELECTIVE, recompute_modules=("op",), fp8_recipe="tensorwise",
    )  # fmt: skip
    none = ParallelConfig(
        dp=4, zero=3, global_batch=8, precision=Precision.FP8, recompute=Recompute.NONE,
        fp8_recipe="tensorwise",
    )  # fmt: skip
    extra = (_compute(op, True, True) - _compute(op, False, True)) - (
        _compute(none, True, True) - _compute(none, False, True)
    )
    h, kv, ffn = 4096, 8 * 128, 14336
    recomputed = LLAMA.layers * (h * kv + h * h + h * ffn)
    system = load_system("h100-80gb")
    bandwidth = (
        system.accelerator.memory_bandwidth_bytes_per_s * system.accelerator.efficiency.memory
    )
    assert extra == pytest.approx((8 // 4) * recomputed * FP8_SCALED_CAST_BYTES / bandwidth)
