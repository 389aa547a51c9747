"""Megatron's asynchronous tensor-parallel all-reduce of input gradients
(``tp_async_grad_allreduce``, stage_explore/analytical/async_tp.py): without sequence
parallelism the backward all-reduce of a column-parallel linear's input gradient runs beside
that linear's weight-gradient GEMM, checked against closed forms of the two-stream timing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.async_tp import (
    NCCL_ALL_REDUCE_SMS,
    async_grad_allreduce_rule,
    combine_rules,
    nccl_sm_share_s,
)
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.analytical.overlap import Bulk, overlap_collectives, overlap_rule
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from tests.explore.synthetic_block import UNIT, collective, gemm

AR = CollectiveKind.ALL_REDUCE


def _all_reduce(seconds: float, deps: tuple[int, ...], operand: str, phase: str) -> Instr:
    return dataclasses.replace(
        collective(AR, seconds, deps, operand, phase), name=f"all_reduce:{operand}"
    )


def _timed(instrs: tuple[Instr, ...] | list[Instr]) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / UNIT, lambda i: i.comm_bytes / UNIT)


def _deepspeed(on: bool = True) -> FrameworkProfile:
    return dataclasses.replace(get_framework("deepspeed"), tp_async_grad_allreduce=on)


@pytest.mark.parametrize(
    ("dx_s", "dw_s", "ar_s"), [(2.0, 5.0, 3.0), (2.0, 1.0, 5.0), (1.0, 2.0, 4.0)]
)
def test_the_input_gradient_all_reduce_runs_beside_the_weight_gradients(
    dx_s: float, dw_s: float, ar_s: float
) -> None:
    # a qkv-like backward as the generator lowers it: per projection the input gradient and
    # the weight gradient, the input gradients summed, the tp all-reduce of the sum, and the
    # norm's backward that reads the reduced gradient
    block = [
        gemm("q.dx", dx_s, ("d.q", "wq"), "d.x"),
        gemm("q.dw", dw_s, ("d.q", "x"), "d.wq"),
        gemm("k.dx", dx_s, ("d.k", "wk"), "d.x"),
        gemm("k.dw", dw_s, ("d.k", "x"), "d.wk"),
        Instr("accumulate", "bwd", "elementwise", flops=1 * UNIT, deps=(0, 2)),
        _all_reduce(ar_s, (4,), "d.x", "bwd"),
        Instr("norm.backward", "bwd", "backwardop", flops=1 * UNIT, deps=(5,)),
    ]
    serial = 2 * dx_s + 2 * dw_s + 1 + ar_s + 1  # the all-reduce after every GEMM
    assert _timed(block).duration_s == pytest.approx(serial)
    rule = async_grad_allreduce_rule(TimingPolicy.from_profile(_deepspeed()), tp=8, sp=False)
    assert rule is not None
    rewritten = overlap_collectives(block, rule)
    assert [i.name for i in rewritten] == [
        "q.dx", "k.dx", "accumulate", "all_reduce:d.x", "q.dw", "k.dw", "norm.backward"
    ]  # fmt: skip
    # the all-reduce starts after the summed input gradient, beside the two weight gradients;
    # the norm's backward waits for it and for the in-order compute stream
    assert _timed(rewritten).duration_s == pytest.approx(2 * dx_s + 1 + max(ar_s, 2 * dw_s) + 1)


def test_only_backward_tensor_parallel_all_reduces_are_taken_off_the_path() -> None:
    rule = async_grad_allreduce_rule(TimingPolicy.from_profile(_deepspeed()), tp=4, sp=False)
    assert rule is not None
    assert isinstance(rule(_all_reduce(1.0, (), "d.x", "bwd")), Bulk)
    for phase in ("fwd", "recompute"):  # the row-parallel output all-reduces stay on the path
        assert rule(_all_reduce(1.0, (), "y", phase)) is None
    data_parallel = dataclasses.replace(_all_reduce(1.0, (), "g", "bwd"), axes=("dp",))
    assert rule(data_parallel) is None
    gather = dataclasses.replace(
        _all_reduce(1.0, (), "x", "bwd"), collective=CollectiveKind.ALL_GATHER
    )
    assert rule(gather) is None


def test_the_rule_applies_only_without_sequence_parallelism_and_with_tp() -> None:
    on, off = TimingPolicy.from_profile(_deepspeed()), TimingPolicy.from_profile(_deepspeed(False))
    no_issue_order = dataclasses.replace(on, collectives_wait_for_issued_compute=False)
    assert async_grad_allreduce_rule(no_issue_order, tp=8, sp=True) is None  # SP: reduce-scatter
    assert async_grad_allreduce_rule(on, tp=1, sp=False) is None
    assert async_grad_allreduce_rule(off, tp=8, sp=False) is None
    # off in every shipped profile but InternEvo's: Megatron-LM 2021 and the Megatron-DeepSpeed
    # of MT-NLG's time all-reduce synchronously (megatron/mpu/layers.py
    # copy_to_tensor_model_parallel_region); InternEvo's FusedDenseFunc.backward issues
    # all_reduce_raw(grad_input, async_op=True) before the weight-gradient GEMM (s35 internevo)
    asynchronous = [n for n in FRAMEWORKS if get_framework(n).tp_async_grad_allreduce]
    assert asynchronous == ["internevo"]


def test_combined_rules_answer_the_first_then_the_second() -> None:
    forward = _all_reduce(1.0, (), "y", "fwd")
    backward = _all_reduce(1.0, (), "d.x", "bwd")
    second = async_grad_allreduce_rule(TimingPolicy.from_profile(_deepspeed()), tp=8, sp=False)

    def first(instr: Instr) -> float | None:
        return 0.5 if instr.phase == "fwd" else None

    assert combine_rules(None, None) is None
    assert combine_rules(None, second) is second
    assert combine_rules(first, None) is first
    both = combine_rules(first, second)
    assert both is not None
    assert both(forward) == 0.5 and isinstance(both(backward), Bulk)
    assert (
        overlap_rule(TimingPolicy.from_profile(_deepspeed()), 8, False) is None
    )  # userbuffers need SP: no other rule


@pytest.mark.parametrize(("ar_s", "gemm_s"), [(3.0, 5.0), (5.0, 3.0), (0.0, 2.0)])
def test_nccl_blocks_take_their_share_of_the_overlapped_time(ar_s: float, gemm_s: float) -> None:
    sms = 108
    expected = min(ar_s, gemm_s) * NCCL_ALL_REDUCE_SMS / sms
    assert nccl_sm_share_s(ar_s, gemm_s, sms) == pytest.approx(expected)
    assert nccl_sm_share_s(ar_s, gemm_s, NCCL_ALL_REDUCE_SMS) == 0.0


def _step(on: bool, tp: int, sp: bool = False) -> tuple[float, Mapping[str, float]]:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=tp, dp=1, sp=sp, global_batch=2, micro_batch=2)
    backend = AnalyticalBackend(framework="deepspeed", overrides={"tp_async_grad_allreduce": on})
    result = backend.evaluate(model, parallel, load_system("a100-80gb"))
    return result.step_time_s, result.breakdown


def test_the_backend_hides_backward_all_reduces_only_when_the_option_is_on() -> None:
    on_s, on = _step(True, tp=8)
    off_s, off = _step(False, tp=8)
    assert on_s < off_s  # two configurations differing only in the option differ
    assert on["exposed_all_reduce"] < off["exposed_all_reduce"]
    assert on["compute"] > off["compute"]  # NCCL's thread blocks slow the weight gradients
    # tp = 1 (no tp all-reduce) and sequence parallelism (reduce-scatters): nothing changes
    assert _step(True, tp=1)[0] == _step(False, tp=1)[0]
    assert _step(True, tp=8, sp=True)[0] == _step(False, tp=8, sp=True)[0]


def test_a_non_boolean_value_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match="tp_async_grad_allreduce"):
        get_framework("deepspeed").with_overrides({"tp_async_grad_allreduce": "yes"})
