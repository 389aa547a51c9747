"""FSDP2's all-gather copy-out and reduce-scatter copy-in on the compute stream
(``fsdp2_copies``, :func:`stage_explore.analytical.framework_costs.fsdp2_copy_bytes`) against closed
forms computed here."""

from __future__ import annotations

import pytest

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import fsdp2_copy_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)


@pytest.mark.parametrize(
    ("gathers", "scatters", "weight", "grad", "expected"),
    [(1, 0, 2, 4, 4), (1, 1, 2, 4, 4 + 6), (0, 1, 2, 2, 4), (2, 1, 2, 4, 8 + 6), (0, 0, 2, 4, 0)],
)
def test_copy_bytes(gathers: int, scatters: int, weight: int, grad: int, expected: int) -> None:
    assert fsdp2_copy_bytes(gathers, scatters, weight, grad) == expected


def _pair(parallel: ParallelConfig, **overrides: bool) -> tuple[float, float, float, float]:
    system = load_system("h100-80gb")
    on = AnalyticalBackend(framework="torchtitan", overrides=overrides).evaluate(
        LLAMA, parallel, system
    )
    off = AnalyticalBackend(
        framework="torchtitan", overrides={**overrides, "fsdp2_copies": False}
    ).evaluate(LLAMA, parallel, system)
    return on.breakdown["compute"], off.breakdown["compute"], on.step_time_s, off.step_time_s


def test_each_micro_batch_copies_out_twice_and_copies_in_once() -> None:
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=8)
    on, off, on_step, off_step = _pair(parallel)
    system = load_system("h100-80gb")
    bandwidth = (
        system.accelerator.memory_bandwidth_bytes_per_s * system.accelerator.efficiency.memory
    )
    blocks = lower(LLAMA, parallel).blocks
    elements = sum(
        (LLAMA.layers if kind == "layer" else 1) * sum(w.elements for w in block.weights)
        for kind, block in blocks.items()
    )
    micro_batches = 8 // 4
    per_element = 2 * 2 * 2 + (2 + 4)  # forward and backward copy-out, bf16 -> fp32 copy-in
    assert on - off == pytest.approx(micro_batches * elements * per_element / bandwidth)
    assert on_step > off_step


def test_without_zero3_nothing_is_copied() -> None:
    parallel = ParallelConfig(dp=4, zero=1, recompute=Recompute.FULL, global_batch=8)
    on, off, on_step, off_step = _pair(parallel)
    assert on == off and on_step == off_step


def test_under_pipeline_parallelism_the_stage_copies_once_per_step() -> None:
    parallel = ParallelConfig(dp=2, pp=2, zero=3, recompute=Recompute.FULL, global_batch=8)
    held_on, held_off, _, _ = _pair(parallel)
    per_micro_batch_on, per_micro_batch_off, _, _ = _pair(parallel, pp_unsharded_params=False)
    assert 0 < held_on - held_off < per_micro_batch_on - per_micro_batch_off


def test_only_the_torchtitan_profile_copies() -> None:
    assert [name for name, p in FRAMEWORKS.items() if p.fsdp2_copies] == ["torchtitan"]
