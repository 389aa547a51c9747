"""Collectives issued from the compute stream wait for the compute issued before them
(``collectives_wait_for_issued_compute``; PyTorch's ProcessGroupNCCL makes the NCCL stream wait
for the issuing stream), checked against closed forms of the two-stream timing, and the
sequence-parallel reduce-scatter Megatron issues before the weight gradient under that rule."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.async_tp import async_grad_allreduce_rule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import Bulk, overlap_collectives
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from tests.explore.synthetic_block import UNIT, collective, gemm

OPTION = "collectives_wait_for_issued_compute"


def _timed(instrs: tuple[Instr, ...] | list[Instr], in_order: bool) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / UNIT, lambda i: i.comm_bytes / UNIT, in_order)


def _fc1_backward(dx_s: float, dw_s: float, comm_s: float, kind: CollectiveKind) -> list[Instr]:
    # a column-parallel linear's backward as the generator lowers it: the input gradient, the
    # weight gradient, the tp collective of the input gradient, the norm's backward reading it
    return [
        gemm("fc1.dx", dx_s, ("d.h", "w1"), "d.x"),
        gemm("fc1.dw", dw_s, ("d.h", "x"), "d.w1"),
        collective(kind, comm_s, (0,), "d.x"),
        Instr("norm.backward", "bwd", "backwardop", flops=1 * UNIT, deps=(2,)),
    ]


@pytest.mark.parametrize(
    ("dx_s", "dw_s", "ar_s"), [(2.0, 5.0, 3.0), (2.0, 1.0, 5.0), (1.0, 2.0, 2.0)]
)
def test_a_synchronous_all_reduce_waits_for_the_weight_gradient_issued_before_it(
    dx_s: float, dw_s: float, ar_s: float
) -> None:
    block = _fc1_backward(dx_s, dw_s, ar_s, CollectiveKind.ALL_REDUCE)
    # ready-start: the all-reduce runs beside the weight gradient once the input gradient is in
    assert _timed(block, False).duration_s == pytest.approx(dx_s + max(dw_s, ar_s) + 1)
    # issue order: it starts after the weight gradient, every second of it on the path
    timing = _timed(block, True)
    assert timing.duration_s == pytest.approx(dx_s + dw_s + ar_s + 1)
    assert timing.exposed_s["all_reduce"] == pytest.approx(ar_s)


@pytest.mark.parametrize(("first_s", "comm_s", "after_s"), [(3.0, 2.0, 4.0), (1.0, 5.0, 2.0)])
def test_compute_issued_after_a_collective_still_runs_beside_it(
    first_s: float, comm_s: float, after_s: float
) -> None:
    # a collective with a ready input between two independent GEMMs: it waits for the first
    # (issued before it), not for the second (issued after it)
    block = [
        gemm("a", first_s, ("x", "w"), "y"),
        collective(CollectiveKind.ALL_GATHER, comm_s, (), "z"),
        gemm("b", after_s, ("x", "v"), "u"),
    ]
    assert _timed(block, False).duration_s == pytest.approx(max(comm_s, first_s + after_s))
    expected = first_s + max(comm_s, after_s)
    assert _timed(block, True).duration_s == pytest.approx(expected)


@pytest.mark.parametrize(("dx_s", "dw_s", "rs_s"), [(2.0, 5.0, 3.0), (2.0, 1.0, 5.0)])
def test_megatrons_sequence_parallel_reduce_scatter_is_issued_before_the_weight_gradient(
    dx_s: float, dw_s: float, rs_s: float
) -> None:
    profile = get_framework("megatron-lm-2021")
    assert getattr(profile, OPTION)
    rule = async_grad_allreduce_rule(TimingPolicy.from_profile(profile), tp=8, sp=True)
    assert rule is not None
    block = _fc1_backward(dx_s, dw_s, rs_s, CollectiveKind.REDUCE_SCATTER)
    rewritten = overlap_collectives(block, rule)
    assert [i.name for i in rewritten] == [
        "fc1.dx", "reduce_scatter:d.x", "fc1.dw", "norm.backward"
    ]  # fmt: skip
    assert _timed(rewritten, True).duration_s == pytest.approx(dx_s + max(dw_s, rs_s) + 1)


def test_the_reduce_scatter_rule_needs_issue_order_and_picks_backward_tp_reduce_scatters() -> None:
    profile = TimingPolicy.from_profile(get_framework("megatron-lm-2021"))
    assert profile.collectives_wait_for_issued_compute  # mapped from the profile's option
    off = dataclasses.replace(profile, collectives_wait_for_issued_compute=False)
    assert async_grad_allreduce_rule(off, tp=8, sp=True) is None  # ready-start already overlaps
    assert async_grad_allreduce_rule(profile, tp=1, sp=True) is None
    rule = async_grad_allreduce_rule(profile, tp=8, sp=True)
    assert rule is not None
    assert isinstance(rule(collective(CollectiveKind.REDUCE_SCATTER, 1.0, (), "d.x")), Bulk)
    for phase in ("fwd", "recompute"):  # the row-parallel output's reduce-scatter stays
        assert rule(collective(CollectiveKind.REDUCE_SCATTER, 1.0, (), "y", phase)) is None
    assert rule(collective(CollectiveKind.ALL_GATHER, 1.0, (), "x")) is None
    assert rule(collective(CollectiveKind.ALL_REDUCE, 1.0, (), "d.x")) is None
    data_parallel = dataclasses.replace(
        collective(CollectiveKind.REDUCE_SCATTER, 1.0, (), "g"), axes=("dp",)
    )
    assert rule(data_parallel) is None


def test_the_profiles_whose_tp_collectives_are_issued_from_the_compute_stream_wait() -> None:
    # Megatron-LM 2021 / Megatron-DeepSpeed: megatron/mpu/mappings.py on the compute stream;
    # Megatron-Core: TE's torch.distributed calls, or userbuffers' stream waiting for the main
    # one (tests/explore/test_mcore_issue_order.py)
    assert get_framework("megatron-lm-2021").collectives_wait_for_issued_compute
    assert get_framework("deepspeed").collectives_wait_for_issued_compute
    assert get_framework("megatron-core").collectives_wait_for_issued_compute


def _profile_step(framework: str, on: bool, sp: bool) -> tuple[float, float]:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=8, dp=1, sp=sp, global_batch=2, micro_batch=2)
    backend = AnalyticalBackend(framework=framework, overrides={OPTION: on})
    result = backend.evaluate(model, parallel, load_system("a100-80gb"))
    exposed = sum(v for k, v in result.breakdown.items() if k.startswith("exposed_"))
    return result.step_time_s, exposed


def test_two_configurations_differing_only_in_the_option_differ() -> None:
    on_s, on_exposed = _profile_step("megatron-lm-2021", True, sp=False)
    off_s, off_exposed = _profile_step("megatron-lm-2021", False, sp=False)
    assert on_s > off_s  # fc1's input-gradient all-reduce no longer hides behind its dw
    assert on_exposed > off_exposed


def test_a_non_boolean_value_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match=OPTION):
        get_framework("deepspeed").with_overrides({OPTION: "yes"})
