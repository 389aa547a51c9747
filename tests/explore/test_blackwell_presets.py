"""The Blackwell presets (b200, gb200-nvl72) against the public measurements their constants
cite: the device-reported HBM capacity and bandwidth of a B200, the achieved HBM rate, the
sustained FP8 GEMM rate (MAMF on B200, cuBLASLt on GB200) and NCCL's NVLink 5 figure. Each
expected value is computed here from the cited figures, not copied from the model."""

from __future__ import annotations

import pytest

from stage_explore.analytical.gemm_tiles import gemm_time_s
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.blackwell_systems import B200_ONE_PROTOCOL

B200 = load_system("b200")
GB200 = load_system("gb200-nvl72")

#: pytorch/ao#4002: a B200's device query (7680-bit bus, 3996 MHz DDR, 178.35 GiB).
BUS_BITS, MEMORY_CLOCK_HZ, REPORTED_GIB = 7680, 3996e6, 178.35
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


def test_b200_fp8_is_mamf_times_the_sustained_fraction() -> None:
    kernels = B200.accelerator.kernels
    assert kernels is not None
    # MAMF FP8 3432.5 of 4500 TFLOP/s, sustained/boost = BF16 MSMF/MAMF 1455.7/1732.6, x the
    # one-protocol re-reading against the Hopper presets (s28 bwdense: 0.9231)
    expected = 3432.5 / 4500 * (1455.7 / 1732.6) * B200_ONE_PROTOCOL
    assert kernels.gemm_efficiency["fp8"] == pytest.approx(expected, abs=0.005)


def test_gb200_fp8_gemm_reproduces_the_sustained_cublaslt_measurement() -> None:
    accelerator = GB200.accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    n = 16384
    flops = 2 * n**3
    seconds = gemm_time_s(accelerator, kernels, "fp8", (1, n, n, n), flops, 0.0)
    # Azure ND GB200 v6: cuBLASLt FP8, 10,000 warm-ups, 2906.9 TFLOP/s at 16384^3
    assert flops / seconds / 1e12 == pytest.approx(2906.9, rel=0.015)


@pytest.mark.parametrize("system", [B200, GB200], ids=["b200", "gb200-nvl72"])
def test_nvlink5_efficiency_is_nccls_per_link_figure(system: System) -> None:
    # NCCL src/graph/topo.h: SM100_NVLINK_BW 40.1 GB/s per NVLink 5 link of 50 GB/s per direction
    assert system.network[0].bus_efficiency == pytest.approx(40.1 / 50, abs=0.005)
