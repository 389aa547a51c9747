"""Eager per-expert loops (:func:`~stage_explore.analytical.eager.eager_expert_kernels`): the
expert down-projection bias of Megatron-Core's ``TEGroupedMLP._apply_bias`` and of AutoModel's
DeepEP experts launches its per-expert kernels once per local expert; each launch beyond the
eager table's one pays ``memory_kernel_s``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import eager_expert_kernels
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

H100 = load_system("h100-80gb")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # 32 experts, biases
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=1024)  # no biases


def test_per_expert_kernels_by_framework() -> None:
    # Megatron: b * p and t + (b * p) per expert; grad * p, its sum, grad * b, its sum
    assert eager_expert_kernels(GPTOSS, "megatron-core", 16) == {
        "experts.fc2": 15 * 2,
        "experts.fc2.backward": 15 * 4,
    }
    # AutoModel on DeepEP: the same two forward; backward the cast of t's fp32 gradient and the
    # bias gradient's product and sum, and the probabilities' two when the router is trained
    fixed = eager_expert_kernels(GPTOSS, "automodel", 4, deepep=True, trained_router=False)
    assert fixed == {"experts.fc2": 3 * 2, "experts.fc2.backward": 3 * 3}
    trained = eager_expert_kernels(GPTOSS, "automodel", 4, deepep=True)
    assert trained == {"experts.fc2": 3 * 2, "experts.fc2.backward": 3 * 5}


def test_nothing_without_a_per_expert_loop() -> None:
    assert eager_expert_kernels(GPTOSS, "megatron-core", 1) == {}  # one local expert
    assert eager_expert_kernels(MIXTRAL, "megatron-core", 4) == {}  # no expert biases
    assert eager_expert_kernels(GPTOSS, "automodel", 4) == {}  # biases in the compiled act
    assert eager_expert_kernels(GPTOSS, "automodel", 4, fused=True, deepep=True) == {}
    assert eager_expert_kernels(GPTOSS, "generator", 4) == {}
    assert eager_expert_kernels(GPTOSS, "torchtitan", 4) == {}


def test_the_timer_charges_each_launch_the_fixed_time() -> None:
    backend = AnalyticalBackend(framework="megatron-core")
    parallel = ParallelConfig(dp=2, ep=2, zero=1, micro_batch=1, global_batch=2)
    point = bound_point(backend, GPTOSS, parallel, H100)
    timer = backend._compute_timer(point, "moe_layer")
    assert isinstance(timer, KernelTimer) and timer.memory_kernel_s > 0
    assert timer.expert_kernels == {"experts.fc2": 15 * 2, "experts.fc2.backward": 15 * 4}
    plain = replace(timer, expert_kernels={})
    block = point.blocks["moe_layer"]
    seen = set()
    for instr in (*block.fwd, *block.bwd):
        extra = timer(instr) - plain(instr)
        count = timer.expert_kernels.get(instr.name, 0)
        assert extra == pytest.approx(count * timer.memory_kernel_s, rel=1e-9, abs=1e-15)
        if count:
            seen.add(instr.name)
    assert seen == {"experts.fc2", "experts.fc2.backward"}
