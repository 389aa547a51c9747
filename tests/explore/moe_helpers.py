"""Shared pieces of the Megatron-Core MoE dispatch tests (chunk sorts, ``SequentialMLP``): a
two-layer GPT-OSS-20B at 1,024 tokens, an 8-way expert-parallel layout with 4 local experts,
an h100-80gb kernel timer at GPT-OSS's head dim, and the analytical step time under
Megatron-Core's profile with some options overridden."""

from __future__ import annotations

from typing import Any

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # 32 experts, top-4
EP8 = ParallelConfig(dp=8, ep=8, zero=1, micro_batch=1, global_batch=8)  # 4 local experts


def gptoss_timer(precision: str = "bf16", **fields: Any) -> KernelTimer:
    """An h100-80gb kernel timer for GPT-OSS's layers (1,024 causal keys, head dim 64) in
    ``precision``, with the timer fields ``fields`` set."""
    kernels = H100.accelerator.kernels
    assert kernels is not None
    return KernelTimer(
        H100.accelerator, kernels, precision, frozenset(), keys=1024, head_dim=64, causal=True,
        **fields,
    )  # fmt: skip


def megatron_step(overrides: dict[str, object], parallel: ParallelConfig) -> float:
    """GPT-OSS's analytical step time on H100 under Megatron-Core's profile with ``overrides``."""
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    return backend.evaluate(GPTOSS, parallel, H100).step_time_s
