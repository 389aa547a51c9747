"""PyTorch context-parallel attention's fp32 merges (``cp_merge_fp32``,
:mod:`stage_explore.analytical.context_parallel`) against closed forms computed here."""

from __future__ import annotations

import pytest

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.context_parallel import cp_merge_bytes
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
H, KV = 4096, 8 * 128


def _parallel(cp: int, recompute: Recompute = Recompute.FULL) -> ParallelConfig:
    return ParallelConfig(dp=2, cp=cp, zero=3, recompute=recompute, global_batch=4)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_merge_bytes_follow_the_merger_s_kernels(cp: int) -> None:
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    attention = [i for i in (*layer.fwd, *layer.bwd) if i.kind == "attention"]
    local = 8192 // cp  # queries of one rank (one sequence per micro-batch)
    out = local * H
    for instr in attention:
        if instr.phase in ("fwd", "recompute"):
            assert cp_merge_bytes(instr, cp) == out * (6 + 38 * (cp - 1) + 6)
        else:  # dq, and one chunk's dk and dv, accumulated in fp32 over cp chunks
            assert cp_merge_bytes(instr, cp) == (out + 2 * local * KV) * (4 + 10 * cp + 6)
    assert {i.phase for i in attention} == {"fwd", "recompute", "bwd"}
    assert all(cp_merge_bytes(i, 1) == 0 for i in attention)
    assert all(cp_merge_bytes(i, cp) == 0 for i in layer.fwd if i.kind != "attention")


def test_the_merges_add_their_memory_time_to_the_compute() -> None:
    system = load_system("h100-80gb")
    parallel = _parallel(4)
    on = AnalyticalBackend(framework="torchtitan").evaluate(LLAMA, parallel, system)
    off = AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": False}).evaluate(
        LLAMA, parallel, system
    )
    accelerator = system.accelerator
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    layer = lower(LLAMA, parallel).blocks["layer"]
    per_layer = sum(cp_merge_bytes(i, 4) for i in (*layer.fwd, *layer.bwd)) / bandwidth
    micro_batches = 4 // 2  # global batch over dp, micro-batch 1
    expected = LLAMA.layers * micro_batches * per_layer
    assert on.breakdown["compute"] - off.breakdown["compute"] == pytest.approx(expected)
    assert on.step_time_s > off.step_time_s


def test_without_context_parallelism_nothing_changes() -> None:
    system = load_system("h100-80gb")
    parallel = _parallel(1, Recompute.SELECTIVE)
    times = [
        AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": flag})
        .evaluate(LLAMA, parallel, system)
        .step_time_s
        for flag in (False, True)
    ]
    assert times[0] == times[1]
