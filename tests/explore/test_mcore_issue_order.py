"""Megatron-Core's tensor-parallel and context-parallel communication under issue order
(``collectives_wait_for_issued_compute`` on in the megatron-core profile), checked against closed
forms of the two-stream timing: Transformer Engine's linear backward without userbuffers (the
input all-gather issued before the input-gradient GEMM, the reduce-scatter of the input gradient
before the weight gradient), the ring-attention exchange issued by the attention's backward
after the projection's whole backward, and userbuffers keeping their own SM margin."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.async_tp import async_grad_allreduce_rule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import UB_FREE_BLOCKS, Bulk, overlap_collectives
from stage_explore.analytical.policy import Overlap, TimingPolicy
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

#: One unit of time per 1,000 FLOPs or bytes in these synthetic blocks.
UNIT = 1000
OPTION = "collectives_wait_for_issued_compute"


def _compute(name: str, seconds: float, deps: tuple[int, ...] = ()) -> Instr:
    return Instr(name, "bwd", "backwardop", flops=int(seconds * UNIT), deps=deps)


def _gemm(name: str, seconds: float, inputs: tuple[str, str], output: str,
          deps: tuple[int, ...] = ()) -> Instr:  # fmt: skip
    size = 4 * UNIT
    return Instr(
        name, "bwd", "einsum", flops=int(seconds * UNIT), deps=deps,
        inputs=((inputs[0], size), (inputs[1], size)), outputs=((output, size),),
    )  # fmt: skip


def _collective(kind: CollectiveKind, seconds: float, deps: tuple[int, ...], operand: str) -> Instr:
    return Instr(
        f"{kind}:{operand}", "bwd", "comm", collective=kind, axes=("tp",),
        comm_bytes=int(seconds * UNIT), deps=deps, inputs=((operand, 1),),
        outputs=((operand, 1),),
    )  # fmt: skip


def _timed(instrs: tuple[Instr, ...] | list[Instr], in_order: bool) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / UNIT, lambda i: i.comm_bytes / UNIT, in_order)


def _policy(**overrides: object) -> TimingPolicy:
    return TimingPolicy.from_profile(get_framework("megatron-core").with_overrides(overrides))


def test_megatron_core_waits_and_userbuffers_keep_the_backward_reduce_scatter() -> None:
    with_ub = _policy()
    assert with_ub.collectives_wait_for_issued_compute
    assert Overlap.TP_COMM in with_ub.overlaps
    # userbuffers run the input-gradient reduce-scatter ("bulk", overlap_rule): no NCCL rule
    assert async_grad_allreduce_rule(with_ub, tp=4, sp=True) is None
    # without tp_comm_overlap TE's _Linear issues it with async_op=True before the wgrad GEMM
    rule = async_grad_allreduce_rule(_policy(tp_comm_overlap=False), tp=4, sp=True)
    assert rule is not None
    assert isinstance(rule(_collective(CollectiveKind.REDUCE_SCATTER, 1.0, (), "d.x")), Bulk)


@pytest.mark.parametrize(
    ("act_s", "ag_s", "dx_s", "rs_s", "dw_s"),
    [(1.0, 3.0, 1.0, 2.0, 4.0), (2.0, 1.0, 3.0, 5.0, 2.0), (0.5, 2.0, 2.0, 1.0, 1.0)],
)
def test_a_te_linear_backward_without_userbuffers_in_issue_order(
    act_s: float, ag_s: float, dx_s: float, rs_s: float, dw_s: float
) -> None:
    # fc1's backward as the generator lowers it: the activation's backward, the all-gather of
    # fc1's sequence-parallel input (for the weight gradient, issued before the input-gradient
    # GEMM), the input gradient, its reduce-scatter, the weight gradient, the norm's backward
    block = [
        _compute("act.backward", act_s),
        _collective(CollectiveKind.ALL_GATHER, ag_s, (), "ln2"),
        _gemm("fc1.dx", dx_s, ("d.h", "w1"), "d.x", deps=(0,)),
        _collective(CollectiveKind.REDUCE_SCATTER, rs_s, (2,), "d.x"),
        _gemm("fc1.dw", dw_s, ("d.h", "ln2"), "d.w1", deps=(0, 1)),
        _compute("norm.backward", 1.0, deps=(3,)),
    ]
    rule = async_grad_allreduce_rule(_policy(tp_comm_overlap=False), tp=4, sp=True)
    assert rule is not None
    assert overlap_collectives(block, rule) == tuple(block)  # already in TE's issue order
    # the gather waits for the activation's backward issued before it, then runs beside dgrad;
    # the scatter waits for dgrad and the gather, the weight gradient for both gathers' inputs
    gather_end = act_s + ag_s
    dgrad_end = act_s + dx_s
    scatter_end = max(gather_end, dgrad_end) + rs_s
    wgrad_end = max(gather_end, dgrad_end) + dw_s
    expected = max(scatter_end, wgrad_end) + 1.0
    assert _timed(block, True).duration_s == pytest.approx(expected)
    # ready-start would have started the gather at 0, beside the activation's backward
    ready_gather_end = ag_s
    ready_scatter_end = max(ready_gather_end, dgrad_end) + rs_s
    ready_wgrad_end = max(ready_gather_end, dgrad_end) + dw_s
    ready = max(ready_scatter_end, ready_wgrad_end) + 1.0
    assert _timed(block, False).duration_s == pytest.approx(ready)


@pytest.mark.parametrize(
    ("dx_s", "dw_s", "ring_s", "attn_s"), [(1.0, 2.0, 1.5, 4.0), (2.0, 0.5, 3.0, 1.0)]
)
def test_the_ring_attention_backward_exchange_waits_for_the_projection_weight_gradient(
    dx_s: float, dw_s: float, ring_s: float, attn_s: float
) -> None:
    # TE's ring attention (cp_comm_type p2p) sends its first K/V block inside the attention's
    # backward, which autograd runs after the output projection's whole backward (dgrad, wgrad)
    block = [
        _gemm("attn.proj.dx", dx_s, ("d.y", "wo"), "d.core"),
        _gemm("attn.proj.dw", dw_s, ("d.y", "core"), "d.wo"),
        Instr("ring:attn.core", "bwd", "ring", comm_bytes=int(ring_s * UNIT), deps=(0,),
              axes=("cp",), ring_steps=1),
        _compute("attn.core.backward", attn_s, deps=(2,)),
    ]  # fmt: skip
    assert _timed(block, True).duration_s == pytest.approx(dx_s + dw_s + ring_s + attn_s)
    assert _timed(block, False).duration_s == pytest.approx(dx_s + max(dw_s, ring_s) + attn_s)


def _step(**overrides: object) -> tuple[float, float]:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=4, dp=1, sp=True, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    return result.step_time_s, result.breakdown["compute"]


def _backward_compute(**overrides: object) -> dict[str, float]:
    """Each block's backward compute seconds (tp 4, sequence parallel, one H100 node)."""
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=4, dp=1, sp=True, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    point = bound_point(backend, model, parallel, load_system("h100-80gb"))
    found = {}
    for kind in point.blocks:
        parts = backend._kind(point, kind)
        spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
        found[kind] = backend._block_timing(point, kind, "bwd", spans).compute_s
    return found


def test_userbuffers_keep_their_sm_margin_under_issue_order() -> None:
    # issue order moves when collectives start, not how long the GEMMs beside userbuffers take:
    # the transformer layers' bulk reduce-scatter is a userbuffers kernel (UB_COMM_SMS), not
    # NCCL's thread blocks. The output layer (Megatron's own ColumnParallelLinear, outside
    # userbuffers) issues its input gradient's NCCL reduce-scatter before its weight gradient.
    on = _backward_compute(**{OPTION: True})
    off = _backward_compute(**{OPTION: False})
    layers = [kind for kind in on if kind not in UB_FREE_BLOCKS]
    assert layers
    for kind in layers:
        assert on[kind] == pytest.approx(off[kind], rel=1e-12), kind
    assert on["head"] > off["head"]  # NCCL's thread blocks slow its weight gradient


def test_without_userbuffers_the_option_changes_the_step() -> None:
    # two configurations differing only in the option differ (no stale memo): without
    # userbuffers the input-gradient reduce-scatter runs beside the weight gradient on NCCL's SMs
    on_s, on_compute = _step(**{OPTION: True, "tp_comm_overlap": False})
    off_s, off_compute = _step(**{OPTION: False, "tp_comm_overlap": False})
    assert on_s != off_s
    assert on_compute > off_compute  # NCCL's thread blocks slow the weight gradients


def test_the_option_is_in_the_policy_and_the_profile_default() -> None:
    profile = get_framework("megatron-core")
    assert getattr(profile, OPTION)
    off = dataclasses.replace(_policy(), collectives_wait_for_issued_compute=False)
    assert async_grad_allreduce_rule(off, tp=4, sp=True) is None
