"""The CDNA 3 presets' default attention: aiter's v3 (assembly) kernels measured on MI300X
(7 Dec 2026, s35 amdattn).

``mi300x`` and ``mi325x`` time Transformer Engine's CK fused attention with the v3 kernels (what
Megatron-LM / Primus on ROCm run) at the rates of ROCm/aiter ``op_tests/cpp/mha/README.md`` (at
0403bcdf), MI300X FWD and BWD-a32 columns, BF16, head dim 128, causal: the six full-grid series
(batch 4 / 8 x 32 / 64 query heads), 1,024 to 10,240 tokens. Each check below recomputes the
table's points from the preset's fractions and compares them with the published figures."""

from __future__ import annotations

import pytest

from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system

#: Tokens of each point of the series below.
SEQS = (1024, 2048, 4096, 8192, 10240)
#: aiter's MI300X table, causal rows, TFLOP/s: (batch, query heads, KV heads) -> forward, backward
#: (atomic fp32 dQ, TE's default NVTE_CK_IS_V3_ATOMIC_FP32=1) at ``SEQS``.
CAUSAL = {
    (4, 32, 8): ((334.005, 419.435, 486.73, 547.09, 527.705),
                 (226.39, 330.23, 416.54, 422.835, 432.545)),
    (8, 32, 8): ((311.385, 412.99, 513.1, 537.36, 556.045),
                 (258.26, 326.355, 409.05, 441.4, 443.78)),
    (4, 64, 8): ((326.51, 425.735, 513.79, 540.515, 557.475),
                 (266.9, 326.805, 391.235, 434.645, 442.51)),
    (8, 64, 8): ((321.865, 452.03, 509.255, 550.67, 547.05),
                 (265.08, 347.89, 402.18, 432.715, 439.785)),
    (4, 64, 4): ((314.82, 426.77, 524.585, 540.935, 560.63),
                 (264.795, 331.95, 405.02, 430.95, 441.345)),
    (8, 64, 4): ((348.76, 461.89, 513.795, 552.78, 548.65),
                 (267.48, 352.7, 402.68, 434.51, 435.745)),
}  # fmt: skip
#: The presets' sustained / burst factor on every attention figure (the h100-80gb ratio).
SUSTAINED = 0.849
HEAD_DIM = 128


def _burst_rate(name: str, seq: int, backward: bool) -> float:
    """The preset's default-kernel rate at ``seq`` tokens, causal, head dim 128, back at the
    benchmark's burst clocks (TFLOP/s)."""
    accelerator = load_system(name).accelerator
    assert accelerator.kernels is not None
    fraction = attention_efficiency(accelerator.kernels, seq, HEAD_DIM, True, backward)
    return fraction * accelerator.peak("bf16") / SUSTAINED / 1e12


@pytest.mark.parametrize("name", ["mi300x", "mi325x"])
@pytest.mark.parametrize("backward", [False, True])
def test_default_attention_reproduces_aiters_mi300x_table(name: str, backward: bool) -> None:
    errors = []
    for series in CAUSAL.values():
        for seq, measured in zip(SEQS, series[backward], strict=True):
            errors.append(_burst_rate(name, seq, backward) / measured - 1)
    assert max(abs(e) for e in errors) < 0.15  # one point 14 %, the rest within 8 %
    rms = (sum(e * e for e in errors) / len(errors)) ** 0.5
    assert rms < 0.04
    assert abs(sum(errors) / len(errors)) < 0.01  # centred on the table


@pytest.mark.parametrize("backward", [False, True])
def test_the_long_sequence_rate_is_the_tables_8k_to_10k_level(backward: bool) -> None:
    longest = [series[backward][i] for series in CAUSAL.values() for i in (3, 4)]
    mean = sum(longest) / len(longest)
    assert _burst_rate("mi300x", 9216, backward) == pytest.approx(mean, rel=0.03)


def test_backward_over_forward_is_the_measured_v3_ratio() -> None:
    kernels = load_system("mi300x").accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention(None)
    longest = [(s[1][3] + s[1][4]) / (s[0][3] + s[0][4]) for s in CAUSAL.values()]
    assert backward / forward == pytest.approx(sum(longest) / len(longest), rel=0.03)


def test_fa2_keeps_the_half_saturation_keys_it_was_derived_with() -> None:
    kernels = load_system("mi300x").accelerator.kernels
    assert kernels is not None
    assert kernels.half_keys("fa2") == 240
    assert kernels.half_keys(None) == 437
