"""The Blackwell Ultra presets (b300, gb300-nvl72) against the vendor figures they cite: per-GPU
dense peaks from the HGX B300 / GB300 NVL72 totals (given with sparsity), HBM capacity and
bandwidth, NVLink 5 and 800 Gb/s ConnectX-8 per GPU; the kernel constants they carry over from
the B200 / GB200 presets (the same tensor cores at the same datasheet rates), which must stay equal
to those presets' while no Blackwell Ultra measurement replaces them; cuDNN's fused attention,
which one does replace: the cited GB300 SDPA measurements (cudnn-frontend
benchmark/sdpa_benchmark_training), whose gain over B200 / GB200 must lie within what the doubled
SFU exponential rate allows; and GB300's sustained GEMM fractions, which Azure's cuBLASLt FP8
benchmark measured on GB300 as on GB200. Each expected value is computed here from the cited
totals and measurements, not copied from the preset."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from stage_explore.analytical.gemm_tiles import gemm_efficiency, k_overhead_scale
from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System
from tests.explore.blackwell_systems import B200_ONE_PROTOCOL, sustained_fp8

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
    # everything but cuDNN's attention and GB300's GEMM fractions (measured on Blackwell Ultra,
    # the tests below) and, on GB300, FA4's fractions at its own sustained clock
    # (test_sustained_attention.py)
    # (and NVFP4's fraction, derived per part from its own NVFP4 / 16-bit pair: B300 from TE's
    # gemm_profiling table, B200 / GB200 from pytorch/ao#2427's B200 run: test_nvfp4.py)
    gemms = dict(carried.gemm_efficiency if ultra is GB300 else kernels.gemm_efficiency)
    gemms.pop("nvfp4", None)
    if "nvfp4" in carried.gemm_efficiency:
        gemms["nvfp4"] = carried.gemm_efficiency["nvfp4"]
    forward, backward = (
        (carried.attention_forward, carried.attention_backward)
        if ultra is GB300
        else (kernels.attention_forward, kernels.attention_backward)
    )
    assert (
        dataclasses.replace(
            kernels,
            attention_kernels=carried.attention_kernels,
            gemm_efficiency=gemms,
            attention_forward=forward,
            attention_backward=backward,
        )
        == carried
    )
    assert set(kernels.attention_kernels) == set(carried.attention_kernels)
    assert kernels.attention_kernels["fa2"] == carried.attention_kernels["fa2"]
    assert ultra.accelerator.efficiency == base.accelerator.efficiency
    # the same achieved HBM rate (~6.0 TB/s of the Blackwell interface)
    achieved = ultra.accelerator.memory_bandwidth_bytes_per_s * ultra.accelerator.efficiency.memory
    assert achieved == pytest.approx(6.0e12, rel=0.01)
    # the NVLink 5 dim as NCCL sees it, and the InfiniBand dim's fabric figures
    assert ultra.network[0].bus_efficiency == base.network[0].bus_efficiency
    assert ultra.network[-1].bus_efficiency == base.network[-1].bus_efficiency


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


#: Burst-clock kernel benchmarks over sustained training (b200.toml: FA4 1237 / 1450 TFLOP/s
#: back to back on a B200, flashinfer-ai/flashinfer#2899), x the B200 family's one-protocol
#: re-reading against the Hopper presets (s28 bwdense, :data:`B200_ONE_PROTOCOL`).
SUSTAINED = 0.853 * B200_ONE_PROTOCOL


def _sustained(system: System) -> float:
    """The part's burst-to-sustained factor: B200's x its sustained GEMM fraction over B200's
    (s16 bwclock, test_sustained_attention.py; FP8, the fraction both derivations measure); B300
    at B200's, GB300 at Azure's 0.67 (:func:`sustained_fp8`)."""
    return SUSTAINED * sustained_fp8(system) / _kernels(B200).gemm_efficiency["fp8"]


#: Causal key lengths of the cudnn-frontend SDPA training benchmark rows cited below.
KEYS = (4096, 8192, 16384, 32768)
#: cuDNN 9.13 (PyTorch 25.09 NGC) on GB300, 128 q / 8 kv heads, hdim 128, causal, BF16, TFLOP/s
#: (artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv): forward, backward.
GB300_CUDNN_913 = (
    (1144.867, 1495.674, 1702.463, 1795.879),
    (892.572, 1130.076, 1267.827, 1319.161),
)
#: The same day on GB300 and GB200, one cuDNN on both (results/gb{300,200}_918_only_cudnn and
#: _919_only_cudnn, llama3.1 top_left, BF16): {version: ((GB300 fwd, bwd), (GB200 fwd, bwd))}.
SAME_DAY = {
    "9.18": (((1679, 1927, 1998, 2031), (1198, 1391, 1494, 1552)),
             ((1297, 1563, 1646, 1686), (1105, 1279, 1371, 1441))),
    "9.19": (((1672, 1887, 1968, 2014), (1195, 1385, 1490, 1549)),
             ((1335, 1598, 1687, 1720), (1132, 1311, 1402, 1473))),
}  # fmt: skip


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_gb300_cudnn_reproduces_its_measured_sdpa_benchmark(backward: bool) -> None:
    """`cudnn` on GB300 (and B300, the same die) times the measured cuDNN 9.13 rows at burst clock
    within the 2.9 % of its k / (k + h) fit."""
    measured = GB300_CUDNN_913[backward]
    b300 = (0.665 * B200_ONE_PROTOCOL, 0.501 * B200_ONE_PROTOCOL, 1340)  # 0.665 / 0.501 before s28
    assert _kernels(B300).attention_kernels["cudnn"] == pytest.approx(b300, abs=1e-4)
    assert _kernels(GB300).attention_kernels["cudnn"] == (0.696, 0.524, 1340)
    for system in (GB300, B300):
        kernels, peak = _kernels(system), system.accelerator.peak("bf16")
        for keys, tflops in zip(KEYS, measured, strict=True):
            efficiency = attention_efficiency(kernels, keys, 128, True, backward, "cudnn")
            burst = efficiency * peak / _sustained(system) * GB300.accelerator.peak("bf16") / peak
            assert burst == pytest.approx(tflops * 1e12, rel=0.03)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_gb300_cudnn_9_17_is_gb200s_times_the_same_day_ratio(backward: bool) -> None:
    ratios = [
        ultra / base
        for gb300, gb200 in SAME_DAY.values()
        for ultra, base in zip(gb300[backward], gb200[backward], strict=True)
    ]
    gb200 = _kernels(GB200).attention_kernels["cudnn-9.17"]
    burst = gb200[backward] / _sustained(GB200)  # GB200's measured burst fraction
    for system in (GB300, B300):
        entry = _kernels(system).attention_kernels["cudnn-9.17"]
        expected = burst * statistics.mean(ratios) * _sustained(system)
        assert entry[backward] == pytest.approx(expected, abs=1e-3)  # 3-decimal presets
        assert entry[2] == gb200[2]  # GB200's half-saturation keys


#: The mechanism (FlashAttention-4, Dao et al. 2025: B200's forward bound by the SFU's
#: exponentials, its backward by shared memory): per attention score a forward runs 4·d MMA
#: FLOPs and a backward 10·d (five matmuls), each one exponential; BF16 tensor cores run
#: 8192 FLOP per clock per SM (2.25 PFLOP/s over 148 SMs at 1.855 GHz), the SFU 16 exponentials
#: per clock per SM on B200 (CUDA programming guide, arithmetic instruction throughput, exp2)
#: and twice that on Blackwell Ultra (NVIDIA, "Inside NVIDIA Blackwell Ultra").
MMA_FLOP_PER_CLOCK, EXP_PER_CLOCK_B200, EXP_PER_CLOCK_ULTRA = 8192, 16, 32


def _sfu_gain_bound(backward: bool, head_dim: int = 128) -> float:
    """The most a doubled exponential rate can speed an attention kernel up per unit of tensor
    peak: its exponentials wholly exposed (not overlapped with the MMAs) before and after."""
    mma = (10 if backward else 4) * head_dim / MMA_FLOP_PER_CLOCK
    return (mma + 1 / EXP_PER_CLOCK_B200) / (mma + 1 / EXP_PER_CLOCK_ULTRA)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize(("kernel", "base"), [("cudnn", B200), ("cudnn-9.17", GB200)])
def test_blackwell_ultra_attention_gain_lies_within_the_sfu_bounds(
    kernel: str, base: System, backward: bool
) -> None:
    """Per unit of peak, Blackwell Ultra's cuDNN attention is faster than B200's / GB200's (the
    exponentials are not wholly hidden) and by no more than the doubled SFU allows (4/3 forward,
    7/6 backward at hdim 128), at 8k keys and at the long-sequence limit."""
    bound = _sfu_gain_bound(backward)
    assert bound == pytest.approx(7 / 6 if backward else 4 / 3)
    for keys in (8192, 10**9):  # at burst clock: each part's sustained factor taken out
        ultra = attention_efficiency(_kernels(GB300), keys, 128, True, backward, kernel)
        before = attention_efficiency(_kernels(base), keys, 128, True, backward, kernel)
        gain = (ultra / _sustained(GB300)) / (before / _sustained(base))
        assert 1.02 < gain <= bound * 1.001


#: Azure's cuBLASLt FP8 GEMM benchmark (random data, 10,000 warm-ups: sustained clocks), TFLOP/s
#: at 16384^3: ND GB200 v6 (Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md) and
#: ND GB300 v6 (egmsft/AI-benchmarking-guide Azure_Results/ND_GB300_v6_results.md).
AZURE_FP8_16384 = {"gb200": 2906.9, "gb300": 3308.5}
#: The same benchmark at 8192^3 and 6144 x 12288 x 12288: (GB200, GB300).
AZURE_FP8_OTHER = ((2876.6, 3286.3), (2895.6, 3279.5))


def test_gb300_gemm_fractions_reproduce_its_sustained_cublaslt_measurement() -> None:
    """GB200 and GB300 time Azure's 16384^3 FP8 GEMM at their measured sustained rates (the model's
    tile and K factors included; within 2.5 %: since s21 gemmgb the fractions are the least-squares
    fit over three of Azure's shapes, +1.4 / +2.0 % here), so GB300 runs it 1.13-1.14x faster at
    the same datasheet peak, as the benchmark does at every large shape; BF16 reaches the FP8
    fraction after the K factor at K 12288 and MXFP8 takes the same ratio to FP8 on both parts."""
    shape = (1, 16384, 16384, 16384)
    for system, tflops in ((GB200, AZURE_FP8_16384["gb200"]), (GB300, AZURE_FP8_16384["gb300"])):
        kernels = _kernels(system)
        scale = k_overhead_scale(system.accelerator, kernels, "fp8")
        efficiency = gemm_efficiency(kernels, "fp8", shape, k_scale=scale)
        modelled_tflops = efficiency * system.accelerator.peak("fp8") / 1e12
        assert modelled_tflops == pytest.approx(tflops, rel=0.025)
    modelled = _kernels(GB300).gemm_efficiency["fp8"] / _kernels(GB200).gemm_efficiency["fp8"]
    for gb200, gb300 in AZURE_FP8_OTHER:  # 0.71 / 0.62: both fitted fractions to two places
        assert modelled == pytest.approx(gb300 / gb200, rel=0.015)
    for system in (GB200, GB300):
        kernels = _kernels(system)
        fractions, overhead = kernels.gemm_efficiency, kernels.gemm_k_overhead
        fp8_overhead = overhead * k_overhead_scale(system.accelerator, kernels, "fp8")
        k = 12288
        same_after_k = fractions["fp8"] * (k / (k + fp8_overhead)) / (k / (k + overhead))
        assert fractions["bf16"] == pytest.approx(same_after_k, abs=0.005)
        assert fractions["mxfp8"] == pytest.approx(fractions["fp8"] * 6.812 / 7.161, abs=0.005)
