"""The H100 presets' achieved-HBM fraction is the one Megatron-Core's own memory-bound kernels
reach on an H100 80GB HBM3: its unfused vocab-parallel cross-entropy over bf16 logits
[2048, 4, 131072] takes 21.255 ms forward and backward (linkedin/Liger-Kernel
benchmark/data/all_benchmark_data_megatron.csv, provider megatron-unfused), for the bytes per
logit the kernel model counts (loss_kernels.CROSS_ENTROPY_BYTES). The system files of the same
silicon carry the same fraction."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.analytical.loss_kernels import CROSS_ENTROPY_BYTES
from stage_explore.system import load_system

DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data"

#: The benchmark's shape and its measured forward + backward median (ms -> s).
LOGITS = 2048 * 4 * 131072
MEASURED_S = 21.255e-3
#: Forward alone (the benchmark's "forward" row): the backward is the difference.
MEASURED_FORWARD_S = 15.817e-3


def test_the_h100_fraction_is_the_measured_cross_entropy_bandwidth() -> None:
    h100 = load_system("h100-80gb").accelerator
    moved = sum(CROSS_ENTROPY_BYTES) * LOGITS
    achieved = moved / MEASURED_S / h100.memory_bandwidth_bytes_per_s
    assert achieved == pytest.approx(0.784, abs=5e-4)
    assert h100.efficiency.memory == round(achieved, 2)
    # each direction on its own lies on either side of the pair's figure
    forward = CROSS_ENTROPY_BYTES[0] * LOGITS / MEASURED_FORWARD_S
    backward = CROSS_ENTROPY_BYTES[1] * LOGITS / (MEASURED_S - MEASURED_FORWARD_S)
    assert forward / h100.memory_bandwidth_bytes_per_s < achieved
    assert backward / h100.memory_bandwidth_bytes_per_s > achieved


def test_the_same_silicon_carries_the_same_fraction() -> None:
    preset = load_system("h100-80gb").accelerator.efficiency.memory
    assert load_system("h800").accelerator.efficiency.memory == preset
    for name in ("ibm-h100-800g.toml", "grand-teton-h100.toml"):
        assert load_system(DATA / "systems" / name).accelerator.efficiency.memory == preset
