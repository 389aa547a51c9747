"""A GEMM tile's prologue and epilogue take the same time whatever its operands' width: an FP8
(or MXFP8) tile, whose main loop consumes K faster than a 16-bit one, spends as many seconds
on them as the BF16 tile does, i.e. more K elements' worth (gemm_tiles.k_overhead_scale)."""

from __future__ import annotations

import pytest

from stage_explore.analytical.gemm_tiles import gemm_time_s, k_overhead_scale
from stage_explore.system.accelerator import Accelerator
from tests.explore.blackwell_systems import B200, GB200, H100, kernels_of


def _fixed_s(accelerator: Accelerator, dtype: str) -> float:
    """The K-independent part of a wave-aligned GEMM's time, from two reduction lengths short
    enough that no split is tried: t(K) = a·K + b."""
    kernels = accelerator.kernels
    assert kernels is not None
    tm, tn = kernels.gemm_tile
    m, n = tm * kernels.sm_count, tn  # one full wave: no wave or tile quantization

    def seconds(k: int) -> float:
        return gemm_time_s(accelerator, kernels, dtype, (1, m, n, k), 2 * m * n * k, 0.0)

    short, long = 256, 448  # below 2 x MIN_SPLIT_K: split-K is not tried
    slope = (seconds(long) - seconds(short)) / (long - short)
    return seconds(short) - slope * short


@pytest.mark.parametrize("system", [H100, B200, GB200], ids=["h100", "b200", "gb200"])
def test_an_fp8_tile_pays_the_16_bit_tiles_fixed_time(system: object) -> None:
    accelerator = system.accelerator  # type: ignore[attr-defined]
    bf16 = _fixed_s(accelerator, "bf16")
    assert bf16 > 0
    assert _fixed_s(accelerator, "fp8") == pytest.approx(bf16, rel=1e-9)
    if "mxfp8" in accelerator.peak_flops_per_s:
        assert _fixed_s(accelerator, "mxfp8") == pytest.approx(bf16, rel=1e-9)


def test_the_scale_is_the_sustained_rate_over_the_16_bit_one() -> None:
    for system, dtype in ((H100, "fp8"), (B200, "fp8"), (B200, "mxfp8"), (GB200, "fp8")):
        accelerator, kernels = system.accelerator, kernels_of(system)
        rate = accelerator.peak(dtype) * kernels.gemm_efficiency[dtype]
        bf16 = accelerator.peak("bf16") * kernels.gemm_efficiency["bf16"]
        assert k_overhead_scale(accelerator, kernels, dtype) == pytest.approx(rate / bf16)
    # H100: 1979 x 0.62 over 989 x 0.72 (s20 gemmh100; 1.747 with 0.71);
    # GB200: 5000 x 0.62 over 2500 x 0.60 (s21 gemmgb; 2.0 with 0.59 / 0.59)
    assert k_overhead_scale(H100.accelerator, kernels_of(H100), "fp8") == pytest.approx(1.723, 1e-3)
    gb200_scale = k_overhead_scale(GB200.accelerator, kernels_of(GB200), "fp8")
    assert gb200_scale == pytest.approx(2.067, 1e-3)
    assert k_overhead_scale(H100.accelerator, kernels_of(H100), "bf16") == 1.0


def test_short_reductions_narrow_the_fp8_speedup() -> None:
    """The FP8/BF16 time ratio of a wave-aligned GEMM falls as K shrinks, toward 1 as the fixed
    time dominates (before: the same ratio at every K)."""
    accelerator, kernels = GB200.accelerator, kernels_of(GB200)
    tm, tn = kernels.gemm_tile
    m, n = tm * kernels.sm_count, tn

    def speedup(k: int) -> float:
        flops = 2 * m * n * k
        bf16 = gemm_time_s(accelerator, kernels, "bf16", (1, m, n, k), flops, 0.0)
        return bf16 / gemm_time_s(accelerator, kernels, "fp8", (1, m, n, k), flops, 0.0)

    assert speedup(16384) > speedup(2048) > speedup(448) > 1.0
    # the sustained rate ratio (5000 x 0.62 over 2500 x 0.60, s21 gemmgb) less the fixed time
    scale, overhead = k_overhead_scale(accelerator, kernels, "fp8"), kernels.gemm_k_overhead
    closed = scale * (16384 + overhead) / (16384 + overhead * scale)
    assert speedup(16384) == pytest.approx(closed, rel=1e-6)
    assert speedup(16384) == pytest.approx(2.0, rel=0.02)
