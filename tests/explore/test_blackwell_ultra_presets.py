"""The Blackwell Ultra presets (b300, gb300-nvl72) against the vendor figures they cite: per-GPU
dense peaks from the HGX B300 / GB300 NVL72 totals (given with sparsity), HBM capacity and
bandwidth, NVLink 5 and 800 Gb/s ConnectX-8 per GPU; and the kernel constants they carry over
from the B200 / GB200 presets (the same tensor cores at the same datasheet rates), which must stay
equal to those presets' while no Blackwell Ultra measurement replaces them. Each expected value is
computed here from the cited totals, not copied from the preset."""

from __future__ import annotations

import pytest

from stage_explore.system import load_system
from stage_explore.system.model import System

B200, GB200 = load_system("b200"), load_system("gb200-nvl72")
B300, GB300 = load_system("b300"), load_system("gb300-nvl72")

#: HGX B300 (8 GPUs), PFLOP/s with 2:4 sparsity: FP8/FP6, FP16/BF16, TF32.
HGX_B300_SPARSE = {"fp8": 72.0, "bf16": 36.0, "tf32": 18.0}
#: GB300 NVL72 (72 GPUs), PFLOP/s with sparsity; 20.1 TB HBM3e at 576 TB/s; NVLink 130 TB/s.
NVL72_SPARSE = {"fp8": 720.0, "bf16": 360.0, "tf32": 180.0}
NVL72_HBM_BYTES, NVL72_HBM_BW, NVL72_NVLINK = 20.1e12, 576e12, 130e12
#: ConnectX-8: 800 Gb/s per GPU, one port each.
CX8_BYTES_PER_S = 800e9 / 8


@pytest.mark.parametrize("dtype", ["fp8", "bf16", "tf32"])
def test_dense_peaks_are_half_the_sparse_totals_per_gpu(dtype: str) -> None:
    assert B300.accelerator.peak(dtype) == pytest.approx(
        HGX_B300_SPARSE[dtype] * 1e15 / 8 / 2, rel=0.025
    )
    assert GB300.accelerator.peak(dtype) == pytest.approx(
        NVL72_SPARSE[dtype] * 1e15 / 72 / 2, rel=1e-9
    )
    # MXFP8 runs at the dense FP8 rate on Blackwell tensor cores
    for system in (B300, GB300):
        assert system.accelerator.peak("mxfp8") == system.accelerator.peak("fp8")


def test_memory_and_links_are_the_datasheet_figures() -> None:
    assert B300.accelerator.memory_bytes == 288 * 10**9  # 288 GB HBM3e per GPU
    assert GB300.accelerator.memory_bytes == pytest.approx(NVL72_HBM_BYTES / 72, rel=0.005)
    assert GB300.accelerator.memory_bandwidth_bytes_per_s == NVL72_HBM_BW / 72
    # NVLink 5: 1.8 TB/s bidirectional per GPU; the NVL72 domain's 130 TB/s is the same per GPU
    assert GB300.network[0].bandwidth_bytes_per_s == pytest.approx(NVL72_NVLINK / 72 / 2, rel=0.01)
    assert GB300.network[0].size == 72 and B300.network[0].size == 8
    for system in (B300, GB300):
        assert system.network[-1].bandwidth_bytes_per_s == CX8_BYTES_PER_S
        assert (
            system.network[-1].bandwidth_bytes_per_s == 2 * GB200.network[-1].bandwidth_bytes_per_s
        )


@pytest.mark.parametrize(("ultra", "base"), [(B300, B200), (GB300, GB200)], ids=["b300", "gb300"])
def test_kernel_constants_are_carried_over_from_the_same_tensor_cores(
    ultra: System, base: System
) -> None:
    kernels, carried = ultra.accelerator.kernels, base.accelerator.kernels
    assert kernels is not None and carried is not None
    assert kernels == carried
    assert ultra.accelerator.efficiency == base.accelerator.efficiency
    # the same achieved HBM rate (~6.0 TB/s of the Blackwell interface)
    achieved = ultra.accelerator.memory_bandwidth_bytes_per_s * ultra.accelerator.efficiency.memory
    assert achieved == pytest.approx(6.0e12, rel=0.01)
    # the NVLink 5 dim as NCCL sees it, and the InfiniBand dim's fabric figures
    assert ultra.network[0].bus_efficiency == base.network[0].bus_efficiency
    assert ultra.network[-1].bus_efficiency == base.network[-1].bus_efficiency
