"""The Blackwell and Hopper presets and their kernel models, shared by the kernel tests
(test_blackwell_kernels.py, test_cudnn_versions.py), and the sustained FP8 fraction the GB200 /
GB300 attention fractions carry (test_sustained_attention.py, test_blackwell_ultra_presets.py)."""

from __future__ import annotations

from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System

B200 = load_system("b200")
GB200 = load_system("gb200-nvl72")
H100 = load_system("h100-80gb")


def kernels_of(system: object) -> KernelModel:
    """The accelerator's kernel model of a loaded system."""
    kernels = system.accelerator.kernels  # type: ignore[attr-defined]
    assert isinstance(kernels, KernelModel)
    return kernels


#: The B200-family sustained level re-read against the Hopper presets' (s28 bwdense): the H200
#: bf16 MSMF the Hopper presets take (702.9 TFLOP/s, GPU alone) x the B200 / H200 MSMF ratio of
#: one later mamf-finder protocol version, both GPU alone, the same torch 2.14.0+cu130 (1423.8 /
#: 744.8; stas00/ml-engineering compute/accelerator/benchmarks/README.md), over the B200 MSMF of
#: the earlier version the b200 preset took (1455.7): 0.9231. Every sustained fraction of b200 /
#: b300 (GEMM and, by s16 bwclock's rule, attention) carries it.
B200_ONE_PROTOCOL = 702.9 * (1423.8 / 744.8) / 1455.7

#: Azure's cuBLASLt FP8 16384^3 after 10,000 warm-ups, TFLOP/s: ND GB200 v6 and ND GB300 v6
#: (Azure/AI-benchmarking-guide; egmsft/AI-benchmarking-guide 18e80a21).
AZURE_SUSTAINED = {"gb200": 2906.9, "gb300": 3308.5}
#: The tile/K factor of 16384^3 the sustained fractions were read through when the attention
#: fractions took them (s14 bwfp8 / s16 bwclock: ``gemm_k_overhead`` 64, FP8 scale 2).
OLD_TILE_K_FACTOR = 0.984


def sustained_fp8(system: System) -> float:
    """The part's sustained FP8 fraction as its attention fractions carry it: GB200 / GB300
    Azure's 16384^3 level over :data:`OLD_TILE_K_FACTOR`, to two places (0.59 / 0.67); any other
    part its preset's ``gemm_efficiency`` fp8. Since s21 gemmgb the GB presets' fp8 splits the same
    measured level through ``gemm_k_overhead`` 320 (0.62 / 0.71): the GEMM model's split, not
    another clock (gb200-nvl72.toml; test_gb200_gemm_shapes.py checks that the two agree)."""
    part = system.name.split("-")[0]
    if part in AZURE_SUSTAINED:
        peak = system.accelerator.peak("fp8")
        return round(AZURE_SUSTAINED[part] * 1e12 / peak / OLD_TILE_K_FACTOR, 2)
    return kernels_of(system).gemm_efficiency["fp8"]
