"""GB200's FlashAttention-2 fractions against Azure's one-protocol GB200 / H200 figure (s28 gbattn).

Azure/AI-benchmarking-guide (Benchmarks/NVIDIA/FlashAttention.py 9fe7778c) runs flash-attention's
benchmarks/benchmark_flash_attention.py, causal, head dim 128, batch 2, 8k, hidden 2,048 (16
heads), forward + backward: ND GB200 v6 373.9 TFLOP/s, ND H200 v5 329.3 (Azure_Results/).
"""

from __future__ import annotations

import pytest

from stage_explore.analytical.attention_grid import grid_factor
from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system

SEQUENCE, HEAD_DIM, BATCH, HEADS = 8192, 128, 2, 2048 // 128
AZURE_GB200_OVER_H200 = 373.9 / 329.3


def benchmark_rate(preset: str) -> float:
    """The model's forward + backward FLOP/s of the benchmark row, counted as the script does
    (causal forward ``f`` = 2 B S² H d, backward 2.5 f)."""
    accelerator = load_system(preset).accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    forward_flops = 4 * BATCH * SEQUENCE**2 * HEADS * HEAD_DIM / 2
    seconds = 0.0
    for backward, share in ((False, 1.0), (True, 2.5)):
        efficiency = attention_efficiency(kernels, SEQUENCE, HEAD_DIM, True, backward, "fa2")
        family = kernels.grid_family("fa2")
        grid = grid_factor(
            family, kernels.sm_count, BATCH * HEADS, SEQUENCE, SEQUENCE, HEAD_DIM, True, backward
        )
        seconds += share * forward_flops / (accelerator.peak("bf16") * efficiency * grid)
    return 3.5 * forward_flops / seconds


@pytest.mark.parametrize("preset", ["gb200-nvl72", "gb300-nvl72"])
def test_gb200_over_h200_is_azures_ratio(preset: str) -> None:
    ratio = benchmark_rate(preset) / benchmark_rate("h200")
    assert ratio == pytest.approx(AZURE_GB200_OVER_H200, rel=0.01)


def test_the_benchmark_grid_is_the_fractions_own() -> None:
    # batch 2 x 16 heads at 8k is the benchmark grid the fractions are stated on: no grid term
    kernels = load_system("gb200-nvl72").accelerator.kernels
    assert kernels is not None
    for backward in (False, True):
        factor = grid_factor(
            "fa2", kernels.sm_count, BATCH * HEADS, SEQUENCE, SEQUENCE, HEAD_DIM, True, backward
        )
        assert factor == pytest.approx(1.0)
