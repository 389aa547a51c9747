"""PyTorch's asynchronous TP (``micro_pipeline_tp``, stage_explore/analytical/
micro_pipeline_tp.py): Inductor's micro-pipeline pass fuses a reduce-scatter only when one GEMM
writes its operand, so the backward's reduce-scatter of summed input gradients stays on the
path; each fused one sums its ``tp`` partials on the compute stream."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.micro_pipeline_tp import (
    fused_reduce_bytes,
    micro_pipeline_rule,
    unfused_collectives,
)
from stage_explore.analytical.overlap import Bulk, Pipelined, overlap_rule
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from tests.explore.synthetic_block import collective, gemm

RS = CollectiveKind.REDUCE_SCATTER
AG = CollectiveKind.ALL_GATHER


def _rule() -> object:
    policy = TimingPolicy.from_profile(
        dataclasses.replace(get_framework("torchtitan"), tp_comm_overlap=True)
    )
    rule = overlap_rule(policy, tp=8, sp=True)
    assert rule is not None
    return rule


def _forward() -> list[Instr]:
    """A row-parallel projection and its reduce-scatter, in the forward."""
    projection = dataclasses.replace(gemm("proj", 2.0, ("core", "wo"), "proj"), phase="fwd")
    scatter = dataclasses.replace(collective(RS, 1.0, (0,), "proj", "fwd"), name="rs:proj")
    return [projection, scatter]


def _backward() -> list[Instr]:
    """q, k, v input gradients summed, then reduce-scattered (TorchTitan's wq/wk/wv)."""
    return [
        gemm("q.dx", 1.0, ("d.q", "wq"), "d.x"),
        gemm("k.dx", 1.0, ("d.k", "wk"), "d.x"),
        gemm("v.dx", 1.0, ("d.v", "wv"), "d.x"),
        Instr("accumulate", "bwd", "elementwise", deps=(0, 1)),
        Instr("accumulate", "bwd", "elementwise", deps=(3, 2)),
        dataclasses.replace(collective(RS, 1.0, (4,), "d.x"), name="rs:d.x"),
    ]


def test_a_reduce_scatter_of_one_gemms_output_is_fused_a_sum_is_not() -> None:
    rule = _rule()
    forward, backward = _forward(), _backward()
    assert isinstance(rule(forward[1]), Pipelined)  # type: ignore[operator]
    assert isinstance(rule(backward[5]), Bulk)  # type: ignore[operator]
    assert unfused_collectives(forward, rule) == frozenset()  # type: ignore[arg-type]
    assert unfused_collectives(backward, rule) == {("bwd", "rs:d.x")}  # type: ignore[arg-type]
    narrowed = micro_pipeline_rule(rule, backward)  # type: ignore[arg-type]
    assert narrowed(backward[5]) is None  # a plain collective on the path
    # a rewritten copy (renumbered dependencies) gets the same answer; another phase's
    # collective of the same name keeps the policy's
    assert narrowed(dataclasses.replace(backward[5], deps=(9,))) is None
    recomputed = dataclasses.replace(backward[5], phase="recompute")
    assert narrowed(recomputed) == rule(recomputed)  # type: ignore[operator]


def test_a_gemm_output_read_by_another_instruction_is_not_fused() -> None:
    rule = _rule()
    forward = [*_forward(), Instr("reader", "fwd", "elementwise", deps=(0,))]
    assert unfused_collectives(forward, rule) == {("fwd", "rs:proj")}  # type: ignore[arg-type]


def test_all_gathers_keep_the_policys_answer() -> None:
    rule = _rule()
    gather = dataclasses.replace(collective(AG, 1.0, (), "x", "bwd"), name="ag:x")
    weight_gradient = gemm("q.dw", 1.0, ("d.q", "x"), "d.wq")  # the gathered x as rhs only
    block = [gather, dataclasses.replace(weight_gradient, deps=(0,))]
    assert unfused_collectives(block, rule) == frozenset()  # type: ignore[arg-type]
    assert micro_pipeline_rule(rule, block)(gather) == pytest.approx(1 / 8)  # type: ignore[arg-type]


def test_each_fused_reduce_scatter_reads_its_operand_and_writes_its_shard() -> None:
    rule = _rule()
    scatter = dataclasses.replace(
        _forward()[1], inputs=(("proj", 8_000),), outputs=(("proj", 1_000),)
    )
    forward = [_forward()[0], scatter]
    narrowed = micro_pipeline_rule(rule, forward)  # type: ignore[arg-type]
    assert fused_reduce_bytes(forward, narrowed) == 9_000
    backward = _backward()  # not fused: NCCL reduces inside its kernel
    assert fused_reduce_bytes(backward, micro_pipeline_rule(rule, backward)) == 0  # type: ignore[arg-type]


def _step(micro: bool, overlap: bool = True) -> tuple[float, dict[str, float]]:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=8, dp=1, sp=True, global_batch=2, micro_batch=2, zero=3)
    backend = AnalyticalBackend(
        framework="torchtitan",
        overrides={
            "tp_comm_overlap": overlap,
            "micro_pipeline_tp": micro,
            "fused_elementwise": True,
        },
    )
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    return result.step_time_s, dict(result.breakdown)


def test_the_backend_keeps_the_summed_gradients_scatter_on_the_path() -> None:
    on_s, on = _step(True)
    off_s, off = _step(False)
    assert on_s > off_s  # two reduce-scatters a layer back on the path, and the reductions
    assert on["exposed_reduce_scatter"] > off["exposed_reduce_scatter"]
    # without tp_comm_overlap the option changes nothing (vanilla TP: every collective exposed)
    assert _step(True, overlap=False)[0] == _step(False, overlap=False)[0]


def test_only_the_torchtitan_profile_runs_pytorchs_async_tp() -> None:
    assert get_framework("torchtitan").micro_pipeline_tp
    assert not get_framework("megatron-core").micro_pipeline_tp
    with pytest.raises(ConfigError, match="micro_pipeline_tp"):
        get_framework("torchtitan").with_overrides({"micro_pipeline_tp": "yes"})
