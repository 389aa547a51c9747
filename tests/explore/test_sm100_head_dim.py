"""The head-dim factor of attention on Blackwell (``attention_head_dim_half`` of the b200 and
gb200-nvl72 presets): FA4's forward on B200 at head dim 64 against 128 at the same sequences
(Dao-AILab/flash-attention#2605), the d/(d + d½) rule recomputed in the test."""

from __future__ import annotations

import pytest

from stage_explore.analytical.kernels import REFERENCE_HEAD_DIM, attention_efficiency
from stage_explore.system import load_system

# FA4 forward, BF16, B200, non-causal, batch x seqlen = 32k: TFLOP/s at 1k, 2k, 4k, 8k, 16k
HDIM64 = (619.0, 755.0, 825.0, 863.0, 879.0)
HDIM128 = (975.0, 1131.0, 1256.0, 1289.0, 1330.0)


def _ratio(half: float) -> float:
    """hd 64 over hd 128 under d / (d + half)."""
    return (64 / (64 + half)) / (REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + half))


@pytest.mark.parametrize("preset", ["b200", "gb200-nvl72"])
def test_hdim64_runs_at_the_measured_fraction_of_hdim128(preset: str) -> None:
    kernels = load_system(preset).accelerator.kernels
    assert kernels is not None
    measured = sum(a / b for a, b in zip(HDIM64, HDIM128, strict=True)) / len(HDIM64)
    assert _ratio(kernels.attention_head_dim_half) == pytest.approx(measured, abs=0.005)
    # every measured point within 4 % of the rule
    for a, b in zip(HDIM64, HDIM128, strict=True):
        assert _ratio(kernels.attention_head_dim_half) == pytest.approx(a / b, rel=0.04)
    # the kernel model applies it: hd 64 over hd 128 at the same keys, forward and backward
    for backward in (False, True):
        e64 = attention_efficiency(kernels, 8192, 64, False, backward, "cudnn")
        e128 = attention_efficiency(kernels, 8192, 128, False, backward, "cudnn")
        assert e64 / e128 == pytest.approx(_ratio(kernels.attention_head_dim_half), rel=1e-12)
