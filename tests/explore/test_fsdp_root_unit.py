"""FSDP's root unit (``fsdp_root_unit``): the embedding's and the head's parameters gathered
once before the forward and reduce-scattered once after the backward, beside no compute —
against closed forms computed here from the chunk's block costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockCost, BlockTiming, chunk_timing
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)


def _block(duration: float) -> BlockTiming:
    return BlockTiming(duration, duration, {}, 0)


COSTS = {
    "embedding": BlockCost(_block(0.1), _block(0.2), gather_s=0.3, scatter_s=0.6),
    "layer": BlockCost(_block(1.0), _block(2.0), gather_s=0.5, scatter_s=0.4),
    "head": BlockCost(_block(0.8), _block(1.6), gather_s=0.3, scatter_s=0.6),
}
RUNS = (("embedding", 1), ("layer", 4), ("head", 1))


def test_the_root_unit_is_exposed_whole_and_the_layers_keep_their_overlap() -> None:
    beside = chunk_timing(RUNS, COSTS, zero=3)
    root = chunk_timing(RUNS, COSTS, zero=3, root_unit=True)
    # beside its own block: the embedding shows max(0, 0.3 - 0.1) + max(0, 0.9 - 0.2), the
    # head nothing (0.3 < 0.8, 0.9 < 1.6), each layer nothing (0.5 < 1, 0.9 < 2)
    assert dict(beside.exposed_s)["zero_gather"] == pytest.approx(0.2 + 0.7)
    # as one unit: both gathers before the forward, both scatters after the backward
    assert dict(root.exposed_s)["zero_gather"] == pytest.approx(2 * 0.3 + 2 * 0.6)
    assert root.forward_s == pytest.approx(0.1 + 4 * 1.0 + 0.8 + 2 * 0.3)
    assert root.backward_s == pytest.approx(0.2 + 4 * 2.0 + 1.6 + 2 * 0.6)
    assert root.compute_s == beside.compute_s


def test_below_zero3_the_root_unit_changes_nothing() -> None:
    for zero in (0, 1, 2):
        assert chunk_timing(RUNS, COSTS, zero) == chunk_timing(RUNS, COSTS, zero, root_unit=True)


def _steps(parallel: ParallelConfig, persistent: bool = True) -> tuple[float, float]:
    system = load_system("h100-80gb")
    kernels = system.accelerator.kernels
    assert kernels is not None
    if not persistent:  # the wave model beside NCCL (test_nccl_persistent.py)
        kernels = replace(kernels, persistent_gemm=False)
        system = replace(system, accelerator=replace(system.accelerator, kernels=kernels))
    on, off = (
        AnalyticalBackend(framework="torchtitan", overrides={"fsdp_root_unit": value}).evaluate(
            LLAMA, parallel, system
        )
        for value in (True, False)
    )
    return on.step_time_s, off.step_time_s


def test_the_option_moves_a_zero3_step_and_nothing_else() -> None:
    # two configurations differing only in the option give different steps (no stale memo)
    zero3 = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=16)
    on, off = _steps(zero3, persistent=False)
    assert on > off
    # Hopper's persistent GEMMs beside the root unit's large gathers (this two-layer model's
    # embedding and output layer): overlapping them saves about what it costs, either way
    on, off = _steps(zero3)
    assert on != pytest.approx(off, rel=1e-6)
    zero1 = ParallelConfig(dp=8, zero=1, recompute=Recompute.FULL, global_batch=16)
    assert _steps(zero1)[0] == _steps(zero1)[1]


def test_under_pipeline_parallelism_the_stages_keep_their_overlap() -> None:
    # torchtitan under PP does not reshard and reduce-scatters once per step (pp_unsharded_params)
    parallel = ParallelConfig(dp=2, pp=2, zero=3, recompute=Recompute.FULL, global_batch=8)
    on, off = _steps(parallel)
    assert on == off


def test_the_profiles_with_a_root_unit() -> None:
    root = [name for name, p in FRAMEWORKS.items() if p.fsdp_root_unit]
    assert sorted(root) == ["fms-fsdp", "llm-foundry-2023", "torchtitan"]
