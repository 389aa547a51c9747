"""The Blackwell presets (b200, gb200-nvl72) against the public measurements their constants
cite: the device-reported HBM capacity and bandwidth of a B200, the achieved HBM rate, and the
FP8/BF16 GEMM throughput ratio measured at a Llama-3.1-8B training shape. Each expected value
is computed here from the cited figures, not copied from the model."""

from __future__ import annotations

import pytest

from stage_explore.analytical.kernels import gemm_efficiency, gemm_time_s
from stage_explore.system import load_system
from stage_explore.system.model import System

B200 = load_system("b200")
GB200 = load_system("gb200-nvl72")

#: pytorch/ao#4002: a B200's device query (7680-bit bus, 3996 MHz DDR, 178.35 GiB).
BUS_BITS, MEMORY_CLOCK_HZ, REPORTED_GIB = 7680, 3996e6, 178.35
#: vllm-project/vllm#19566 on B200, Llama-3.1-8B QKV GEMM (M x N x K = 16384 x 6144 x 4096):
#: BF16 (torch/cuBLAS) and FP8 per-tensor scaled without quantization, TFLOP/s.
QKV_SHAPE = (1, 16384, 6144, 4096)
BF16_TFLOPS, FP8_TFLOPS = 1512.8, 2544.7
#: Achieved HBM rate on B200 (a tuned MXFP8 quantizer "6+ TB/s"; CUDA samples' device-to-device
#: copy "over 6,000 GB/s").
ACHIEVED_HBM = 6.0e12


def test_b200_memory_is_what_the_device_reports() -> None:
    accelerator = B200.accelerator
    assert accelerator.memory_bandwidth_bytes_per_s == pytest.approx(
        BUS_BITS / 8 * MEMORY_CLOCK_HZ * 2, rel=1e-3
    )
    assert accelerator.memory_bytes / 2**30 == pytest.approx(REPORTED_GIB, abs=0.01)
    # the datasheet's 180 GB is less than the device reports: a 405B rank's 176-177 GiB fits
    assert accelerator.memory_bytes > 180 * 10**9


@pytest.mark.parametrize("system", [B200, GB200], ids=["b200", "gb200-nvl72"])
def test_achieved_hbm_rate_is_the_measured_six_terabytes(system: System) -> None:
    accelerator = system.accelerator
    achieved = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    assert achieved == pytest.approx(ACHIEVED_HBM, rel=0.01)


@pytest.mark.parametrize("system", [B200, GB200], ids=["b200", "gb200-nvl72"])
def test_fp8_over_bf16_at_the_llama_qkv_shape_matches_the_measured_ratio(system: System) -> None:
    accelerator = system.accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    flops = 2 * 16384 * 6144 * 4096
    bf16_s = gemm_time_s(accelerator, kernels, "bf16", QKV_SHAPE, flops, 0.0)
    fp8_s = gemm_time_s(accelerator, kernels, "fp8", QKV_SHAPE, flops, 0.0)
    assert bf16_s / fp8_s == pytest.approx(FP8_TFLOPS / BF16_TFLOPS, rel=0.01)
    # the shape's tile and K factors are common to both dtypes: the ratio is the sustained one
    ratio = gemm_efficiency(kernels, "fp8", QKV_SHAPE) / gemm_efficiency(kernels, "bf16", QKV_SHAPE)
    assert ratio == pytest.approx(kernels.gemm_efficiency["fp8"] / kernels.gemm_efficiency["bf16"])


@pytest.mark.parametrize("system", [B200, GB200], ids=["b200", "gb200-nvl72"])
def test_nvlink5_efficiency_is_nccls_per_link_figure(system: System) -> None:
    # NCCL src/graph/topo.h: SM100_NVLINK_BW 40.1 GB/s per NVLink 5 link of 50 GB/s per direction
    assert system.network[0].bus_efficiency == pytest.approx(40.1 / 50, abs=0.005)
