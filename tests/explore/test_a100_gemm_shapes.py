"""The A100 presets' GEMM model (gemm_tiles: 128x256 tiles, waves, ``gemm_k_overhead``,
``gemm_efficiency``) against Azure's sustained cuBLASLt FP16 sweep on an A100-SXM4-80GB
(Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md, random inputs, 10,000 warm-up
iterations; TFLOP/s): the shapes of 4096 and up, one of them with a short reduction dim.
Changed 6 Dec 2026 (s20 gemmk): ``gemm_k_overhead`` 64 -> 160 with the efficiency 0.82 -> 0.825;
with the old pair the short-K shape came out 11 % fast."""

from __future__ import annotations

import pytest

from tests.explore.gemm_helpers import model_tflops

#: (M, N, K) -> measured TFLOP/s (ND A100 v4, FP16).
AZURE_A100 = {
    (4096, 4096, 4096): 228.0,
    (8192, 8192, 8192): 253.7,
    (16384, 16384, 16384): 256.5,
    (6144, 12288, 12288): 250.8,
    (802816, 192, 768): 157.8,
}

A100_SYSTEMS = ("a100-80gb", "a100-40gb", "a800")


def _tflops(system: str, m: int, n: int, k: int) -> float:
    return model_tflops(system, "fp16", 1, m, n, k)


@pytest.mark.parametrize("system", A100_SYSTEMS)
def test_every_azure_shape_within_4_percent(system: str) -> None:
    for (m, n, k), measured in AZURE_A100.items():
        assert _tflops(system, m, n, k) == pytest.approx(measured, rel=0.04), (m, n, k)


def test_the_short_reduction_is_not_fast() -> None:
    """K = 768 at N = 192: the tile's fixed prologue and epilogue decide; 64 K elements of it
    left this shape 11 % fast, 160 leaves it within 1 %."""
    assert _tflops("a100-80gb", 802816, 192, 768) == pytest.approx(157.8, rel=0.01)


def test_the_fit_is_balanced() -> None:
    """The five residuals straddle zero (a joint fit, not a bound): mean within 1 %."""
    errors = [_tflops("a100-80gb", *shape) / tflops - 1 for shape, tflops in AZURE_A100.items()]
    assert abs(sum(errors) / len(errors)) < 0.01
    assert max(abs(e) for e in errors) < 0.04
