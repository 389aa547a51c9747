"""Megatron-Core's ``SequentialMLP`` (framework option ``moe_sequential_mlp``,
``analytical/megatron_dispatch.py`` ``sequential_cat_bytes``): which ops carry its
concatenations, their bytes, its per-expert FP8 casts, and when a run has them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.parallel import MoeDispatcher, ParallelConfig
from stage_explore.analytical.fp8_casts import split_quantize_kernels
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.megatron_dispatch import (
    SEQUENTIAL_CAT_OPS,
    sequential_cat_bytes,
    sort_chunks_bytes,
)
from tests.explore.moe_helpers import EP8, GPTOSS, H100, gptoss_timer, megatron_step

ON = {"moe_sequential_mlp": True}


def test_the_concatenations_sit_beside_the_combine_and_the_dispatch_backward() -> None:
    """Forward the experts' outputs are joined before the combine, backward their input
    gradients before the dispatch's backward: one read and write of the routed tokens each
    (gathered over the experts' tp group as the chunk sorts are)."""
    layer = bind_all(make_workload(GPTOSS, EP8))["moe_layer"]
    found = {}
    for instr in (*layer.fwd, *layer.bwd):
        moved = sequential_cat_bytes(instr, 2)
        if instr.name in SEQUENTIAL_CAT_OPS:
            found[instr.name] = moved
            assert moved == sort_chunks_bytes(instr, 2) > 0
        else:
            assert moved == 0, instr.name
    assert set(found) == set(SEQUENTIAL_CAT_OPS)


def test_the_timer_adds_a_copy_kernel_each() -> None:
    layer = bind_all(make_workload(GPTOSS, EP8))["moe_layer"]
    kernels = H100.accelerator.kernels
    assert kernels is not None
    plain = gptoss_timer(memory_kernel_s=kernels.memory_kernel_s)
    sequential = replace(plain, sequential_experts=True)
    rate = H100.accelerator.achieved_memory_bandwidth_bytes_per_s
    for instr in (*layer.fwd, *layer.bwd):
        moved = sequential_cat_bytes(instr)
        extra = moved / rate + kernels.memory_kernel_s if moved else 0.0
        assert sequential(instr) == pytest.approx(plain(instr) + extra, rel=1e-12, abs=1e-15)


def test_each_expert_module_casts_its_own_operands() -> None:
    """``SequentialMLP``'s experts are Transformer Engine linear layers of their own: a cast
    kernel per local expert under any recipe, delayed scaling included."""
    assert split_quantize_kernels(4, "delayed", False, True) == 4
    assert split_quantize_kernels(4, "delayed", True, False) == 1
    assert split_quantize_kernels(1, "delayed", False, True) == 1
    assert split_quantize_kernels(0, "tensorwise", True, True) == 1


def test_when_a_run_concatenates() -> None:
    """Off in every profile; on, a run with several local experts on the all-to-all dispatcher
    is slower, and more so in FP8 under delayed scaling (the per-expert casts); one local
    expert, DeepEP or the allgather dispatcher: no change."""
    assert not any(profile.moe_sequential_mlp for profile in FRAMEWORKS.values())
    assert megatron_step(ON, EP8) > megatron_step({}, EP8)
    fp8 = replace(EP8, precision="fp8", fp8_recipe="delayed")
    bf16_added = megatron_step(ON, EP8) - megatron_step({}, EP8)
    assert megatron_step(ON, fp8) - megatron_step({}, fp8) > bf16_added
    one_each = ParallelConfig(dp=32, ep=32, zero=1, micro_batch=1, global_batch=32)
    assert GPTOSS.num_experts // one_each.ep == 1
    assert megatron_step(ON, one_each) == megatron_step({}, one_each)
    deepep = {"moe_deepep": True}
    assert megatron_step({**deepep, **ON}, EP8) == megatron_step(deepep, EP8)
    allgather = replace(EP8, moe_dispatcher=MoeDispatcher.ALLGATHER)
    assert megatron_step(ON, allgather) == megatron_step({}, allgather)
