"""s26 mbvergap: the routed experts' grouped GEMMs as one kernel launch (framework option
``moe_grouped_kernel``): each group at the kernel model's ``grouped_kernel_group_s`` (the
single-launch kernel's figure of the same benchmark as ``grouped_gemm_group_s``), the FP8
operands quantized as one grouped tensor (no per-expert ``split_quantize`` kernels)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.gemm_tiles import gemm_time_s
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import System
from tests.explore.analytical_point import bound_point

H100 = load_system("h100-80gb")
B200 = load_system("b200")
GB200 = load_system("gb200-nvl72")
QWEN = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)  # 128 experts
EP8_MX = ParallelConfig(
    dp=8, ep=8, zero=1, micro_batch=2, global_batch=16, precision="fp8", fp8_recipe="mxfp8"
)


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


# NVIDIA/TransformerEngine#3134 (SM100, benchmark_grouped_linear.py, 8 experts x 128 tokens, N
# 2048, K 2048, "pure"): the single-launch CUTLASS grouped kernel 0.069 ms, the multi-stream loop
# 0.267 ms (the preset's grouped_gemm_group_s)
TE_SINGLE_LAUNCH = ((8, 128, 2048, 2048), 0.069e-3)
# tgale96/grouped_gemm#37 (H100, 128 experts x 512 tokens, N 1536, K 2048): CUTLASS SM90 grouped
# kernel at 160.5 TFLOP/s
CUTLASS_SM90 = ((128, 512, 1536, 2048), 2 * 65536 * 1536 * 2048 / 160.5e12)


def _per_group_s(system: System, dtype: str, element_bytes: int, case: tuple) -> float:
    (batch, m, n, k), measured_s = case
    accelerator = system.accelerator
    rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    memory_s = (batch * (m * k + k * n) * element_bytes + 2 * batch * m * n) / rate
    flops = 2 * batch * m * n * k
    model_s = gemm_time_s(accelerator, _kernels(system), dtype, (batch, m, n, k), flops, memory_s)
    return (measured_s - model_s) / batch


def test_the_figures_are_the_benchmarks_single_launch_time_over_the_wave_model() -> None:
    figure = _kernels(B200).grouped_kernel_group_s
    for dtype, element_bytes in (("fp8", 1), ("bf16", 2)):
        assert _per_group_s(B200, dtype, element_bytes, TE_SINGLE_LAUNCH) == pytest.approx(
            figure, abs=0.6e-6
        )
    assert _per_group_s(H100, "bf16", 2, CUTLASS_SM90) == pytest.approx(
        _kernels(H100).grouped_kernel_group_s, abs=0.5e-6
    )
    for preset in ("gb200-nvl72", "b300", "gb300-nvl72"):
        assert _kernels(load_system(preset)).grouped_kernel_group_s == figure
    for preset in ("h200", "h800"):
        assert _kernels(load_system(preset)).grouped_kernel_group_s == 15.2e-6
    # one launch costs less per expert than the per-expert loop on both generations
    for system in (H100, B200):
        kernels = _kernels(system)
        assert 0 < kernels.grouped_kernel_group_s < kernels.grouped_gemm_group_s


def test_the_figure_is_read_from_a_preset_and_checked() -> None:
    data = B200.to_dict()
    assert data["accelerator"]["kernels"]["grouped_kernel_group_s"] == 7.0e-6
    assert system_from_mapping(data) == B200
    data["accelerator"]["kernels"]["grouped_kernel_group_s"] = -1.0
    with pytest.raises(ConfigError, match="grouped_kernel_group_s.*>= 0, but got -1"):
        system_from_mapping(data)


def test_single_launch_groups_swaps_the_figure_where_one_is_stated() -> None:
    kernels = _kernels(GB200)
    assert kernels.single_launch_groups().grouped_gemm_group_s == 7.0e-6
    unstated = replace(kernels, grouped_kernel_group_s=0.0)
    assert unstated.single_launch_groups() == unstated  # no figure: the loop's kept


def _timer(grouped: bool, system: System = GB200) -> tuple[KernelTimer, AnalyticalBackend]:
    backend = AnalyticalBackend(
        framework="megatron-core", overrides={"moe_grouped_kernel": grouped}
    )
    point = bound_point(backend, QWEN, EP8_MX, system)
    timer = backend._compute_timer(point, "moe_layer")
    assert isinstance(timer, KernelTimer)
    return timer, backend


def test_the_option_times_groups_at_the_single_launch_figure_without_split_casts() -> None:
    loop, _ = _timer(False)
    fused, backend = _timer(True)
    assert loop.kernels.grouped_gemm_group_s == 32e-6
    assert fused.kernels.grouped_gemm_group_s == 7.0e-6
    assert loop.cast_splits  # MXFP8 on GroupedLinear: one quantize per local expert
    assert fused.cast_splits == {}  # one grouped tensor: a cast kernel per operand
    assert backend.framework.moe_split_quantize  # the profile keeps it; the option overrides it


def test_the_option_makes_an_mxfp8_moe_step_faster_and_leaves_dense_alone() -> None:
    loop = AnalyticalBackend(framework="megatron-core")
    fused = AnalyticalBackend(framework="megatron-core", overrides={"moe_grouped_kernel": True})
    assert (
        fused.evaluate(QWEN, EP8_MX, GB200).step_time_s
        < loop.evaluate(QWEN, EP8_MX, GB200).step_time_s
    )
    llama = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    dense = ParallelConfig(dp=8, zero=1, micro_batch=1, global_batch=8)
    assert (
        fused.evaluate(llama, dense, GB200).step_time_s
        == loop.evaluate(llama, dense, GB200).step_time_s
    )
