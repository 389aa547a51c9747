"""Megatron-Core's bucket groups under FP8 parameters (fp8_buckets.py): the 16-bit parameters'
buckets join the last FP8 bucket group, so their gradients are reduced after the chunk's last
backward block and their all-gather leads the next forward, exposed; and the next forward's
compute lost beside the overlapped gathers follows the reductions (step.py)."""

from __future__ import annotations

import math

import pytest

from stage_core.lower.compact import run_totals
from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import block_sync, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_buckets import (
    merges_non_fp8,
    non_fp8_sync,
    split_runs,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
FP8 = ParallelConfig(tp=2, dp=4, zero=1, sp=True, precision=Precision.FP8, global_batch=8)


def test_non_fp8_bytes_are_the_weights_no_fp8_linear_reads() -> None:
    programs = lower(LLAMA, FP8)
    workload = programs.workload
    sizes = workload.axis_sizes
    for kind, block in programs.blocks.items():
        reductions, gathers = non_fp8_sync(workload, kind, block)
        fp8 = linear_weights(block) if fp8_block(kind) else frozenset()
        expected: dict[tuple[str, ...], int] = {}
        for weight in block.weights:
            if weight.name in fp8:
                continue
            data = data_axes(sizes, workload.expert_axes, weight.expert)
            shard = weight.elements // math.prod(sizes[a] for a in data)
            expected[data] = expected.get(data, 0) + shard * workload.weight_bytes
        assert gathers == expected
        whole, _, _ = block_sync(workload, block)
        for key, size in reductions.items():
            assert 0 < size <= whole[key]
        if not fp8_block(kind):  # embedding, output layer: all of it
            assert reductions == whole
        elif fp8:  # a layer: its norms only, far less than its linear weights
            assert sum(reductions.values()) * 100 < sum(whole.values())


def test_split_runs_moves_the_bytes_to_one_tail() -> None:
    backward = [({"a": 10, "b": 4}, 2), ({"a": 3}, 1)]
    runs, tail = split_runs(backward, [{"b": 4, "a": 1}, {"a": 3}])
    assert runs == [({"a": 9}, 2), ({}, 1)]
    assert tail == {"a": 2 * 1 + 3, "b": 2 * 4}
    total = sum(c * sum(r.values()) for r, c in backward)
    assert sum(c * sum(r.values()) for r, c in runs) + sum(tail.values()) == total


def test_run_totals_sums_each_run_times_its_blocks() -> None:
    gathers = [{("dp",): 5, ("dp", "cp"): 1}, {}, {("dp",): 2}]
    assert run_totals(gathers, [3, 7, 2]) == {("dp",): 3 * 5 + 2 * 2, ("dp", "cp"): 3}
    assert run_totals([], []) == {}


def test_only_megatron_cores_distributed_optimizer_with_fp8_parameters_merges() -> None:
    workload = lower(LLAMA, FP8).workload
    bf16 = lower(LLAMA, ParallelConfig(tp=2, dp=4, zero=1, sp=True, global_batch=8)).workload
    core = get_framework("megatron-core")
    on = core.with_overrides({"fp8_param_gather": True})
    assert merges_non_fp8(on, workload)
    assert not merges_non_fp8(core, workload)  # 16-bit weights beside FP8 copies: one dtype
    assert not merges_non_fp8(on, bf16)
    apex = on.with_overrides({"distributed_fused_adam": "fp32"})  # Apex's own buckets
    assert not merges_non_fp8(apex, workload)


def _breakdown(vocab: int, fp8_params: bool) -> dict[str, float]:
    backend = AnalyticalBackend(
        framework="megatron-core", overrides={"fp8_param_gather": fp8_params}
    )
    model = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=8192, vocab=vocab)
    # 64-parameter buckets (the MLPerf NeMo implementation's custom.yaml default): one per weight
    parallel = ParallelConfig(
        dp=16, zero=1, precision=Precision.FP8, global_batch=16, grad_bucket_bytes=128
    )
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert result.feasible, result.reason
    return dict(result.breakdown)


def test_the_embedding_and_output_layer_lead_the_gathers_and_trail_the_reductions() -> None:
    # FP8 parameters: the 16-bit embedding and output layer are the first gather (exposed)
    # and the last reduction, so both grow with the vocabulary, though the buckets are one
    # weight each; without FP8 parameters (one 16-bit buffer) the chain's first bucket is one
    # weight (its gather hidden here) and the output layer's gradients are reduced as soon as
    # they are ready, early in the backward
    sync = "exposed_gradient_sync"
    for vocab in (32000, 128000):
        on, off = _breakdown(vocab, True), _breakdown(vocab, False)
        assert on[sync] > off[sync] + 1e-3
        assert on["parameter_gather"] > 1e-3 > off.get("parameter_gather", 0.0)
    small, large = _breakdown(32000, True), _breakdown(128000, True)
    assert large["parameter_gather"] > 3.0 * small["parameter_gather"]


def test_the_next_forwards_lost_seconds_follow_the_reductions() -> None:
    # one rank, two micro-batches of f = 1, b = 2: the pipeline ends at 6; the reductions end
    # at 4 + 2.5 = 6.5. The next forward's 0.3 s lost to the gathers' SMs run after them and
    # the 0.5 s optimizer: 6.5 + 0.5 + 0.3; as lost_s of the backward they would hide
    def step(sync: SyncCost) -> tuple[float, dict[str, float]]:
        cls = StageClass(
            forward_s=(1.0,), backward_s=(2.0,), sync=(sync,), saved_bytes=(100,),
            compute_s=3.0, exposed_s=(), states_bytes=1000, buffers_bytes=0, optimizer_s=0.5,
        )  # fmt: skip
        result = assemble_step(StepPlan((0,), (cls,), 0.0, 7), "1f1b", 2, 1)
        breakdown = dict(result.breakdown)
        assert sum(breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-12)
        return result.step_time_s, breakdown

    after, breakdown = step(SyncCost(2.5, 2.5, 0.0, forward_lost_s=0.3))
    assert after == pytest.approx(6.5 + 0.5 + 0.3)
    assert breakdown["exposed_nccl_contention"] == pytest.approx(0.3)
    assert breakdown["exposed_gradient_sync"] == pytest.approx(0.5)
    beside, _ = step(SyncCost(2.5, 2.5, 0.0, lost_s=0.3))
    assert beside == pytest.approx(6.5 + 0.5)
