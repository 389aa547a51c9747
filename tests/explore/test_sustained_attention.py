"""Attention under sustained load on the Blackwell parts (s16 bwclock): a burst-clock attention
figure is timed at the part's own sustained clock, which B200's measurements tie to its sustained
GEMM fraction (attention and GEMMs drop alike under a full load on B200: FA4 x0.853,
flashinfer-ai/flashinfer#2899; mamf-finder's BF16 sustained / burst 0.84). So on every SM100
part the burst-measured attention fractions over B200's equal the part's sustained GEMM fraction
over B200's (GB200 0.59 / 0.64, GB300 0.67 / 0.64: Azure's sustained cuBLASLt figures), and
GB300 over GB200 is Azure's same-method sustained ratio. Expected values computed here from the
presets' GEMM fractions and the burst figures cited in them, not copied."""

from __future__ import annotations

import pytest

from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System
from tests.explore.blackwell_systems import AZURE_SUSTAINED, B200_ONE_PROTOCOL, sustained_fp8

B200, GB200, GB300 = (load_system(n) for n in ("b200", "gb200-nvl72", "gb300-nvl72"))
B300 = load_system("b300")

#: B200's burst-to-sustained factor (FA4 1237 / 1450 TFLOP/s back to back,
#: flashinfer-ai/flashinfer#2899) x the one-protocol re-reading against the Hopper presets (s28
#: bwdense), which the b200 preset's attention fractions carry.
B200_SUSTAINED = 0.853 * B200_ONE_PROTOCOL


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


def _sustained_over_b200(system: System) -> float:
    """The part's sustained clock over B200's: its sustained FP8 fraction over B200's (the
    presets' derivation, "against b200.toml's 0.64": Azure's measured FP8 against B200's FP8;
    :func:`sustained_fp8`)."""
    return sustained_fp8(system) / _kernels(B200).gemm_efficiency["fp8"]


@pytest.mark.parametrize("system", [GB200, GB300], ids=["gb200", "gb300"])
def test_b200_measured_attention_fractions_take_the_parts_sustained_clock(system: System) -> None:
    """FA4's fractions (measured on B200) on GB200 / GB300: B200's x the part's sustained factor."""
    scale = _sustained_over_b200(system)
    b200, part = _kernels(B200), _kernels(system)
    assert part.attention_forward == pytest.approx(b200.attention_forward * scale, abs=6e-4)
    assert part.attention_backward == pytest.approx(b200.attention_backward * scale, abs=6e-4)


def test_gb200_cudnn_is_b200s_burst_figure_at_gb200s_sustained_clock() -> None:
    """The same cuDNN generation on the same die: GB200's fractions are B200's x 0.59 / 0.5908
    (0.59 / 0.64 before s28 bwdense re-read B200's sustained level: GB200's fractions unchanged)."""
    scale = _sustained_over_b200(GB200)
    assert scale == pytest.approx(0.59 / (0.64 * B200_ONE_PROTOCOL), rel=1e-3)
    for kernel in ("cudnn", "cudnn-9.17"):
        b200, gb200 = (
            _kernels(B200).attention_kernels[kernel],
            _kernels(GB200).attention_kernels[kernel],
        )
        assert gb200[0] == pytest.approx(b200[0] * scale, abs=6e-4)
        assert gb200[1] == pytest.approx(b200[1] * scale, abs=6e-4)
        assert gb200[2] == b200[2]  # the half-saturation keys are the kernel's, not the clock's


@pytest.mark.parametrize("kernel", ["cudnn", "cudnn-9.17"])
def test_gb300_over_b300_is_the_sustained_gemm_ratio(kernel: str) -> None:
    """B300 (HGX, B200's GEMM fractions) keeps the burst figure x B200's 0.853; GB300 (the same
    die, 1.4 kW) runs it at its own sustained clock."""
    scale = _sustained_over_b200(GB300)
    assert _sustained_over_b200(B300) == 1.0
    b300, gb300 = (
        _kernels(B300).attention_kernels[kernel],
        _kernels(GB300).attention_kernels[kernel],
    )
    for index in (0, 1):
        assert gb300[index] == pytest.approx(b300[index] * scale, abs=6e-4)


def test_gb300_over_gb200_sustained_attention_is_azures_sustained_gemm_ratio() -> None:
    """Per unit of burst rate, GB300 over GB200 is the same-method sustained GEMM ratio (1.14)."""
    azure = AZURE_SUSTAINED["gb300"] / AZURE_SUSTAINED["gb200"]
    ratio = _sustained_over_b200(GB300) / _sustained_over_b200(GB200)
    assert ratio == pytest.approx(azure, rel=0.01)
    gb200, gb300 = _kernels(GB200), _kernels(GB300)
    assert gb300.attention_forward / gb200.attention_forward == pytest.approx(ratio, rel=0.005)
