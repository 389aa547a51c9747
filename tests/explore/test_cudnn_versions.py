"""Blackwell presets name cuDNN's fused attention by software generation: ``cudnn`` (before
cuDNN 9.17) and ``cudnn-9.17`` carry the same burst fractions on B200 and GB200 (the same die;
GB200's at its own sustained clock, 0.59 / 0.64 of B200's: test_sustained_attention.py), and a
framework profile's ``attention_kernel`` picks one; h100-80gb's ``cudnn`` is cuDNN measured
beside FA3 — checked against closed forms computed here from the presets' own values."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import attention_efficiency
from tests.explore.blackwell_systems import B200, GB200, H100, kernels_of, sustained_fp8


@pytest.mark.parametrize("kernel", ["cudnn", "cudnn-9.17"])
def test_b200_and_gb200_list_one_cudnn_generation_at_the_same_fractions(kernel: str) -> None:
    b200, gb200 = kernels_of(B200), kernels_of(GB200)
    clock = sustained_fp8(GB200) / b200.gemm_efficiency["fp8"]  # sustained, over B200's
    assert gb200.attention_kernels[kernel][2] == b200.attention_kernels[kernel][2]
    for keys in (2048, 8192, 32768):
        for backward in (False, True):
            forward_b, backward_b, half = b200.attention_kernels[kernel]
            seen = keys / 2  # causal
            expected = (backward_b if backward else forward_b) * seen / (seen + half)
            for kernels, scale in ((b200, 1.0), (gb200, clock)):
                efficiency = attention_efficiency(kernels, keys, 128, True, backward, kernel)
                assert efficiency == pytest.approx(expected * scale, rel=2e-3)


@pytest.mark.parametrize("system", [B200, GB200])
def test_cudnn_9_17_is_faster_than_the_generation_before_on_short_sequences(
    system: object,
) -> None:
    kernels = kernels_of(system)
    for backward in (False, True):
        older = attention_efficiency(kernels, 4096, 128, True, backward, "cudnn")
        newer = attention_efficiency(kernels, 4096, 128, True, backward, "cudnn-9.17")
        assert newer > 1.3 * older  # 1.50-1.62x measured at 4k, less the part's 1.19x


def _compute_s(system: object, kernel: str | None) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=2, global_batch=4, precision=Precision.BF16)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"attention_kernel": kernel})
    return backend.evaluate(model, parallel, system).breakdown["compute"]  # type: ignore[arg-type]


def test_the_attention_kernel_option_picks_the_generation_and_hopper_falls_back() -> None:
    assert _compute_s(GB200, "cudnn-9.17") < _compute_s(GB200, "cudnn")
    assert _compute_s(B200, "cudnn-9.17") < _compute_s(B200, "cudnn")
    # h100-80gb lists no cudnn-9.17: it falls back to the best kernel (FA3), as None does;
    # its `cudnn` (cuDNN measured beside FA3) is slower at Llama 3 8B's 8k sequence
    assert _compute_s(H100, "cudnn-9.17") == _compute_s(H100, None)
    assert _compute_s(H100, "cudnn") > _compute_s(H100, None)


@pytest.mark.parametrize("backward", [False, True])
def test_hopper_cudnn_against_fa3_by_sequence(backward: bool) -> None:
    """h100-80gb's `cudnn`: its own fractions and half-saturation keys (closed form here);
    below FA3 at long sequences (the paper's 16k: 539/616 forward, 516/561 backward), not
    below it at 1k, where cuDNN saturates earlier (410/423 causal forward, 408/424 backward)."""
    kernels = kernels_of(H100)
    forward_c, backward_c, half = kernels.attention_kernels["cudnn"]
    for keys in (1024, 4096, 16384, 131072):
        seen = keys / 2  # causal
        expected = (backward_c if backward else forward_c) * seen / (seen + half)
        got = attention_efficiency(kernels, keys, 128, True, backward, "cudnn")
        assert got == pytest.approx(expected)
    long_ratio = attention_efficiency(kernels, 16384, 128, True, backward, "cudnn") / (
        attention_efficiency(kernels, 16384, 128, True, backward, None)
    )
    assert 0.85 < long_ratio < 0.96
    short_ratio = attention_efficiency(kernels, 1024, 128, True, backward, "cudnn") / (
        attention_efficiency(kernels, 1024, 128, True, backward, None)
    )
    assert short_ratio > 0.97
