"""FlashAttention-2-class attention on the CDNA 3 presets (6 Dec 2026, s28 torchao).

``mi300x`` (and ``mi325x``, the same CUs) list an ``fa2`` attention kernel from ROCm's CK
FlashAttention-2 measured on MI300X (ROCm/flash-attention#142, head dim 128, 16,384 keys,
non-causal, batch 1 / 2 / 4 / 8), for software that runs FA2-class kernels (a framework profile's
``attention_kernel`` ``"fa2"``: PyTorch SDPA's flash backend, AOTriton on ROCm); Transformer
Engine's CK fused attention (the megatron-core profile's ``cudnn``, not listed) keeps the presets'
default fractions (aiter's v3 kernels since s35 amdattn: ``test_amd_v3_attention.py``). Each
expected value is computed here from the cited figures."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system
from stage_explore.system.model import System

#: CK FlashAttention-2 on MI300X, TFLOP/s at batch 1 / 2 / 4 / 8 (ROCm/flash-attention#142).
FORWARD = (353.22, 355.51, 339.62, 309.60)
BACKWARD = (194.43, 202.12, 205.43, 206.66)
#: The benchmark's keys per query row (non-causal) and head dim.
KEYS, HEAD_DIM = 16384, 128
#: The sustained / burst factor the mi300x preset applies to every attention figure.
SUSTAINED = 0.849

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
FSDP = ParallelConfig(
    dp=8, zero=3, micro_batch=1, global_batch=8,
    recompute=Recompute.SELECTIVE, recompute_modules=("op",),
)  # fmt: skip


def _without_fa2(system: System) -> System:
    """``system`` with no named attention kernels (every software on the default fractions)."""
    kernels = system.accelerator.kernels
    assert kernels is not None
    accelerator = replace(system.accelerator, kernels=replace(kernels, attention_kernels={}))
    return replace(system, accelerator=accelerator)


@pytest.mark.parametrize("name", ["mi300x", "mi325x"])
@pytest.mark.parametrize(("backward", "rates"), [(False, FORWARD), (True, BACKWARD)])
def test_fa2_gives_the_measured_ck_rate_at_the_benchmark_shape(
    name: str, backward: bool, rates: tuple[float, ...]
) -> None:
    accelerator = load_system(name).accelerator
    assert accelerator.kernels is not None
    fraction = attention_efficiency(accelerator.kernels, KEYS, HEAD_DIM, False, backward, "fa2")
    expected = statistics.mean(rates) * 1e12 * SUSTAINED
    assert fraction * accelerator.peak("bf16") == pytest.approx(expected, rel=0.005)


def test_fa2s_backward_over_forward_is_the_measured_ratio_not_the_h100_analogue() -> None:
    kernels = load_system("mi300x").accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention("fa2")
    measured = statistics.mean(BACKWARD) / statistics.mean(FORWARD)
    assert backward / forward == pytest.approx(measured, rel=0.01)
    default_forward, default_backward = kernels.attention(None)
    # the default is aiter's v3 kernels, measured too: backward / forward 0.79 (s35 amdattn)
    assert default_backward / default_forward > measured + 0.15


def test_mi355x_lists_no_fa2_figure() -> None:
    kernels = load_system("mi355x").accelerator.kernels
    assert kernels is not None
    assert "fa2" not in kernels.attention_kernels
    assert kernels.attention("fa2") == kernels.attention(None)


def test_only_software_running_fa2_class_attention_is_timed_at_it() -> None:
    system = load_system("mi300x")
    bare = _without_fa2(system)
    torchtitan = AnalyticalBackend(framework="torchtitan")
    megatron = AnalyticalBackend(framework="megatron-core")
    listed = torchtitan.evaluate(LLAMA, FSDP, system)
    default = torchtitan.evaluate(LLAMA, FSDP, bare)
    assert listed.step_time_s > default.step_time_s  # the slower measured FA2 backward
    assert listed.peak_memory_bytes == default.peak_memory_bytes
    mcore = ParallelConfig(dp=8, zero=1, micro_batch=1, global_batch=8)
    assert (
        megatron.evaluate(LLAMA, mcore, system).step_time_s
        == megatron.evaluate(LLAMA, mcore, bare).step_time_s
    )
