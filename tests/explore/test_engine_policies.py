"""One timing engine, policies apart (docs/analytical.md, "The timing engine").

The analytical backend's block timing (:func:`~stage_explore.analytical.blocktime.time_block`:
one rank, in-order compute and communication streams) and the trace simulator
(:func:`~stage_explore.analytical.tracesim.simulate`) are one semantics under different
:class:`~stage_explore.analytical.policy.TimingPolicy` values. Here:

- the policy built from each framework profile: every timing flag of the profile moves its own
  field, and nothing else;
- the trace simulator under a profile's policy (in order, local collective start) and the same
  per-instruction costs is the oracle of ``time_block`` on the generator's own blocks (dense,
  Llama, MoE with shared experts; forward, backward; tensor- and sequence-parallel collectives,
  recompute), rewritten as that policy runs them (:func:`~stage_explore.analytical.overlap.
  apply_overlaps`: userbuffers, the asynchronous tp all-reduce, MoE overlaps);
- small cases show where ASTRA-sim's policy (ready first, rendezvous) differs;
- the ASTRA-sim comparison names the analytical backend's policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.async_tp import async_grad_allreduce_rule, combine_rules
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import fuse_elementwise, time_block
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.analytical.fused_fc1 import fuse_fc1
from stage_explore.analytical.fused_qkv import fuse_qkv
from stage_explore.analytical.overlap import (
    apply_overlaps,
    block_policy,
    overlap_rule,
    runs_outside_nccl,
)
from stage_explore.analytical.parts import Point, axes_of
from stage_explore.analytical.policy import (
    ASTRA_SIM_POLICY,
    CollectiveStart,
    IssuePolicy,
    Overlap,
    PointToPoint,
    TimingPolicy,
)
from stage_explore.analytical.trace_models import (
    AlphaBetaTimingModel,
    BaseTimingModel,
    InstructionTimingModel,
    instruction_trace,
)
from stage_explore.analytical.tracesim import simulate
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

SYSTEM = load_system("h100-80gb")
GROUP = tuple(range(8))  # one NVLink domain: the collectives' cost in both engines


def compute_s(flops: int, tensor_bytes: int) -> float:
    return SYSTEM.accelerator.compute_time_s(flops, tensor_bytes, "bf16")


def comm_s(kind: CollectiveKind, size: int) -> float:
    return alpha_beta_collective_s(SYSTEM, kind, size, GROUP)


class SameCosts(BaseTimingModel[float]):
    """The cost ``time_block`` is given below, per trace node (one rank: the collective is
    over the rank alone, its duration that of the 8-GPU group)."""

    zero = 0.0

    def compute(self, node: TraceNode) -> float:
        return compute_s(node.flops, node.tensor_bytes)

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> Mapping[int, float]:
        return dict.fromkeys(group, comm_s(kind, size_bytes))

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> float:
        raise AssertionError("no point-to-point node in a block")


def as_trace(instrs: Sequence[Instr], group: tuple[int, ...] = (0,)) -> list[TraceNode]:
    """A block's instructions as one rank's trace (rank 0): node id = instruction index."""
    return instruction_trace(instrs, group)


def block_timing(instrs: Sequence[Instr], waits: bool = False) -> tuple[float, float]:
    timing = time_block(
        instrs,
        lambda i: compute_s(i.flops, i.bytes_read + i.bytes_written),
        lambda i: comm_s(i.collective, i.comm_bytes),  # type: ignore[arg-type]
        collectives_wait_for_issued_compute=waits,
    )
    return timing.duration_s, timing.compute_s


#: ASTRA-sim's policy with CUDA streams' issue rule (a one-rank trace: its rendezvous is local).
IN_ORDER_RENDEZVOUS = replace(ASTRA_SIM_POLICY, issue=IssuePolicy.IN_ORDER)

CASES = [
    ("gpt-tp4-sp-selective", "megatron-gpt-1.7b",
     ParallelConfig(tp=4, dp=2, sp=True, recompute=Recompute.SELECTIVE, global_batch=4)),
    ("gpt-tp8-full", "megatron-gpt-1.7b",
     ParallelConfig(tp=8, recompute=Recompute.FULL, global_batch=2)),
    ("llama-tp2-zero", "llama3-8b", ParallelConfig(tp=2, dp=4, zero=1, global_batch=8)),
    ("mixtral-tp2-ep2", "mixtral-8x7b", ParallelConfig(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
]  # fmt: skip


@pytest.mark.parametrize(("flavor", "parallel"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused-elementwise"])
def test_block_timing_is_the_trace_engine_with_in_order_streams(
    flavor: str, parallel: ParallelConfig, fused: bool
) -> None:
    model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
    blocks = bind_all(make_workload(model, parallel))
    checked = 0
    for kind, block in blocks.items():
        for instrs in (block.fwd, block.bwd):
            if not instrs or any(i.kind == "ring" for i in instrs):
                continue
            program = fuse_elementwise(instrs) if fused else tuple(instrs)
            duration, busy = block_timing(program)
            trace = {0: as_trace(program)}
            result = simulate(trace, SameCosts(), policy=IN_ORDER_RENDEZVOUS)
            rank = result.ranks[0]
            assert rank.finish == duration, (kind, rank.finish, duration)
            assert math.isclose(rank.compute, busy, rel_tol=1e-12), (kind, rank.compute, busy)
            checked += 1
    assert checked >= 4  # embedding, layer(s) and head, forward and backward


def test_ready_first_lets_an_independent_kernel_pass_a_waiting_one() -> None:
    # 0: a 1 GiB all-reduce; 1: a kernel that needs it; 2: an independent kernel.
    size = 1 << 30
    wait_s = comm_s(CollectiveKind.ALL_REDUCE, size)
    flops = int(SYSTEM.accelerator.peak("bf16") * wait_s / 10)  # well under the wait
    instrs = [
        Instr("reduce", "bwd", "comm", collective=CollectiveKind.ALL_REDUCE, comm_bytes=size),
        Instr("needs_it", "bwd", "einsum", flops=flops, deps=(0,)),
        Instr("independent", "bwd", "einsum", flops=flops),
    ]
    kernel_s = compute_s(flops, 0)
    in_order = simulate({0: as_trace(instrs)}, SameCosts(), policy=IN_ORDER_RENDEZVOUS)
    ready_first = simulate({0: as_trace(instrs)}, SameCosts())
    duration, _ = block_timing(instrs)
    # CUDA stream order: the independent kernel waits behind the one waiting for the reduce.
    assert in_order.ranks[0].finish == duration == wait_s + kernel_s + kernel_s
    # ASTRA-sim issues any ready node: the independent kernel runs under the reduce.
    assert ready_first.ranks[0].finish == wait_s + kernel_s
    assert ready_first.ranks[0].finish < in_order.ranks[0].finish


#: The profile options that are timing flags, and the policy field each moves.
TIMING_FLAGS = {
    "pipeline_p2p_blocking": "point_to_point",
    "pipeline_p2p_separate": "point_to_point",
    "pipeline_scatter_gather": "p2p_scatter_gather",
    "collectives_wait_for_issued_compute": "collectives_wait_for_issued_compute",
    **{str(overlap): "overlaps" for overlap in Overlap},
}


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_the_policy_of_each_framework_profile(name: str) -> None:
    profile = get_framework(name)
    policy = TimingPolicy.from_profile(profile)
    assert policy.issue is IssuePolicy.IN_ORDER  # CUDA streams
    assert policy.collective_start is CollectiveStart.LOCAL  # one rank stands for its group
    assert policy.p2p_scatter_gather is profile.pipeline_scatter_gather
    on = {overlap for overlap in Overlap if getattr(profile, str(overlap))}
    assert policy.overlaps == on
    if not profile.pipeline_p2p_blocking:
        assert policy.point_to_point is PointToPoint.OVERLAPPED
    elif profile.pipeline_p2p_separate:
        assert policy.point_to_point is PointToPoint.BLOCKING_SEPARATE
    else:
        assert policy.point_to_point is PointToPoint.BLOCKING
    for flag, field in TIMING_FLAGS.items():  # each timing flag moves its field, only it
        base = profile
        if flag == "pipeline_p2p_separate":  # separate matters only for blocking transfers
            base = profile.with_overrides({"pipeline_p2p_blocking": True})
        flipped = base.with_overrides({flag: not getattr(base, flag)})
        before, after = TimingPolicy.from_profile(base), TimingPolicy.from_profile(flipped)
        changed = {k for k, v in before.to_dict().items() if after.to_dict()[k] != v}
        assert changed == {field}, (name, flag, changed)
    # options that change costs and bytes, not the timing rules, leave the policy alone
    for option in ("fused_elementwise", "fsdp2_copies", "ddp_bucket_scales_with_dp"):
        other = profile.with_overrides({option: not getattr(profile, option)})
        assert TimingPolicy.from_profile(other) == policy


def test_the_shipped_profiles_name_their_framework_transfers() -> None:
    semantics = {
        name: TimingPolicy.from_profile(get_framework(name)).point_to_point
        for name in ("megatron-lm-2021", "megatron-core", "deepspeed")
    }
    assert semantics == {
        "megatron-lm-2021": PointToPoint.BLOCKING,  # batch_isend_irecv + synchronise
        "megatron-core": PointToPoint.OVERLAPPED,  # --overlap-p2p-communication
        "deepspeed": PointToPoint.BLOCKING_SEPARATE,  # PipelineEngine Send/Recv instructions
    }


#: Every framework profile, and Megatron-Core with every overlap on (the asynchronous tp
#: all-reduce, the MoE all-to-alls and shared experts, which no shipped profile combines).
PROFILES: list[tuple[str, FrameworkProfile]] = [
    *((name, get_framework(name)) for name in sorted(FRAMEWORKS)),
    (
        "megatron-core+all-overlaps",
        get_framework("megatron-core").with_overrides({str(overlap): True for overlap in Overlap}),
    ),
]
#: Workloads whose blocks the policies rewrite: userbuffers (tp + sp), the asynchronous tp
#: all-reduce (tp without sp), MoE dispatch with shared experts (DeepSeek-V2-Lite, ep).
POLICY_CASES = [
    ("gpt-tp4-sp", "megatron-gpt-1.7b", ParallelConfig(tp=4, dp=2, sp=True, global_batch=4)),
    ("gpt-tp8-selective", "megatron-gpt-1.7b",
     ParallelConfig(tp=8, recompute=Recompute.SELECTIVE, global_batch=2)),
    ("deepseek-tp2-ep2-sp", "deepseek-v2-lite",
     ParallelConfig(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("flavor", "parallel"), [c[1:] for c in POLICY_CASES], ids=[c[0] for c in POLICY_CASES]
)
@pytest.mark.parametrize("profile", [p for _, p in PROFILES], ids=[n for n, _ in PROFILES])
def test_block_timing_is_the_trace_engine_under_each_profile_policy(
    flavor: str, parallel: ParallelConfig, profile: FrameworkProfile
) -> None:
    policy = TimingPolicy.from_profile(profile)
    model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
    workload = make_workload(model, parallel)
    tp, sp = parallel.tp, workload.flags.sp
    rule = combine_rules(  # as the backend builds it (costing._block_timing)
        overlap_rule(policy, tp, sp, workload.axis_sizes["tp"]),
        async_grad_allreduce_rule(policy, tp, sp),
    )
    rewritten = 0
    for kind, block in bind_all(workload).items():
        for instrs in (block.fwd, block.bwd):
            if not instrs or any(i.kind == "ring" for i in instrs):
                continue
            program, _ = apply_overlaps(instrs, policy, rule)
            rewritten += program != tuple(instrs)
            duration, busy = block_timing(program, policy.collectives_wait_for_issued_compute)
            result = simulate({0: as_trace(program, GROUP)}, SameCosts(), policy=policy)
            rank = result.ranks[0]
            assert rank.finish == duration, (kind, rank.finish, duration)
            assert math.isclose(rank.compute, busy, rel_tol=1e-12), (kind, rank.compute, busy)
    if policy.overlaps & {Overlap.TP_COMM, Overlap.MOE_COMM, Overlap.MOE_SHARED_EXPERT}:
        assert rewritten or not sp  # userbuffers and the MoE overlaps rewrite sp blocks
    if Overlap.TP_ASYNC_GRAD_ALLREDUCE in policy.overlaps and not sp:
        assert rewritten


def test_collectives_waiting_for_issued_compute_in_both_engines() -> None:
    # 0: a long kernel; 1: an all-reduce that needs nothing (issued after the kernel)
    size = 1 << 26
    flops = int(SYSTEM.accelerator.peak("bf16") * 2e-3)
    instrs = [
        Instr("kernel", "bwd", "einsum", flops=flops),
        Instr("reduce", "bwd", "comm", collective=CollectiveKind.ALL_REDUCE, comm_bytes=size),
    ]
    kernel_s, reduce_s = compute_s(flops, 0), comm_s(CollectiveKind.ALL_REDUCE, size)
    for waits, finish in ((False, max(kernel_s, reduce_s)), (True, kernel_s + reduce_s)):
        policy = replace(
            TimingPolicy.from_profile(get_framework("megatron-core")),
            collectives_wait_for_issued_compute=waits,
        )
        traced = simulate({0: as_trace(instrs, GROUP)}, SameCosts(), policy=policy)
        assert block_timing(instrs, waits)[0] == traced.ranks[0].finish == finish


def test_a_local_collective_start_does_not_wait_for_the_group() -> None:
    # rank 1 computes first, then both all-reduce: a rendezvous starts both at rank 1's issue
    size = 1 << 24
    kernel = Instr("k", "fwd", "einsum", flops=int(SYSTEM.accelerator.peak("bf16") * 1e-3))
    reduce = Instr("r", "fwd", "comm", collective=CollectiveKind.ALL_REDUCE, comm_bytes=size)
    group = (0, 1)
    traces = {
        0: as_trace([reduce], group),
        1: as_trace([kernel, replace(reduce, deps=(0,))], group),
    }
    kernel_s, reduce_s = compute_s(kernel.flops, 0), comm_s(CollectiveKind.ALL_REDUCE, size)
    met = simulate(traces, SameCosts(), policy=IN_ORDER_RENDEZVOUS)
    local = simulate(traces, SameCosts(), policy=replace(ASTRA_SIM_POLICY,
                     collective_start=CollectiveStart.LOCAL))  # fmt: skip
    assert met.ranks[0].finish == met.ranks[1].finish == kernel_s + reduce_s
    assert local.ranks[0].finish == reduce_s
    assert local.ranks[1].finish == kernel_s + reduce_s


def test_traces_run_point_to_point_messages_on_arrival_only() -> None:
    send = TraceNode(0, "send", NodeKind.SEND, peer=1, tag=7, comm_bytes=1 << 20)
    receive = TraceNode(0, "recv", NodeKind.RECV, peer=0, tag=7, comm_bytes=1 << 20)
    traces = {0: [send], 1: [receive]}
    model = AlphaBetaTimingModel(load_system("a100-80gb"))
    arrival = model.point_to_point(0, 1, 1 << 20)
    assert simulate(traces, model).ranks[1].finish == arrival
    policy = TimingPolicy.from_profile(get_framework("megatron-lm-2021"))  # blocking
    with pytest.raises(ConfigError, match="point_to_point 'arrival'.*'blocking'"):
        simulate(traces, model, policy=policy)


def test_the_astra_sim_comparison_names_the_analytical_policy() -> None:
    from stage_core.lower.program import lower
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.analytical.trace_mode import trace_step
    from stage_explore.astrasim.compare import explain_gap
    from stage_explore.evaluation import Evaluation

    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=2, dp=2, global_batch=4)
    system = load_system("a100-80gb")
    backend = AnalyticalBackend(framework="deepspeed")
    analytical = backend.evaluate(model, parallel, system)
    astra = Evaluation(  # what an ASTRA-sim run reports, as far as the comparison reads it
        step_time_s=2 * analytical.step_time_s, mfu=0.0, hfu=0.0, tokens_per_s_per_gpu=0.0,
        peak_memory_bytes=0, feasible=True, breakdown={"compute": analytical.step_time_s},
        extra={"slowest_rank": 0}, backend="astra-sim",
    )  # fmt: skip
    trace = trace_step(backend, model, parallel, system)
    gap = explain_gap(
        astra, analytical, lower(model, parallel), system, dtype="bf16", policy=backend.policy,
        trace=trace,
    )  # fmt: skip
    assert gap.analytical_policy == backend.policy
    # the slowest rank's kernels as the backend runs them: its trace mode's rank 0 (one stage)
    assert gap.trace_rank == 0
    assert gap.compute_at_calibrated_efficiency_s == trace.result.ranks[0].compute
    assert f"rank 0) take {trace.result.ranks[0].compute:.4f} s" in gap.compute.why
    unavailable = explain_gap(
        astra, analytical, lower(model, parallel), system, dtype="bf16", policy=backend.policy,
        trace=ConfigError("a reason"),
    )  # fmt: skip
    assert unavailable.compute_at_calibrated_efficiency_s is None
    assert unavailable.trace_rank is None
    assert "does not time this step: a reason" in unavailable.compute.why
    assert gap.astra_sim_policy == ASTRA_SIM_POLICY
    assert gap.to_dict()["analytical_policy"]["point_to_point"] == "blocking-separate"
    why = gap.exposed_communication_and_waiting.why
    assert backend.policy.describe() in why and ASTRA_SIM_POLICY.describe() in why


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_tracesim_times_blocks_with_the_analytical_per_kernel_costs(name: str) -> None:
    # the backend's own timers (per-kernel compute, α–β over the group's network dims) as a
    # trace timing model: time_block and tracesim agree under the profile's policy
    backend = AnalyticalBackend(framework=name)
    for _, flavor, parallel in POLICY_CASES:
        model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
        point = bound_point(backend, model, parallel, SYSTEM)
        workload = point.workload
        tp, sp = parallel.tp, workload.flags.sp
        for kind, block in point.blocks.items():
            policy = block_policy(backend.policy, kind)  # no userbuffers for embedding / head
            rule = combine_rules(
                overlap_rule(policy, tp, sp, workload.axis_sizes["tp"]),
                async_grad_allreduce_rule(policy, tp, sp),
            )
            outside_nccl = runs_outside_nccl(policy, tp, sp, rule)  # userbuffers: no NCCL call
            spans = {axes: backend._spans(point, axes)[0] for axes in axes_of(block)}
            compute_s = backend._compute_timer(point, kind)

            def comm_s(
                instr: Instr,
                point: Point = point,
                spans: dict[tuple[str, ...], Any] = spans,
                outside: Callable[[Instr], bool] = outside_nccl,
            ) -> float:
                nccl = not outside(instr)
                return backend._comm_time(point, spans[instr.axes], instr, nccl=nccl)

            for phase, instrs in (("fwd", block.fwd), ("bwd", block.bwd)):
                if not instrs or any(i.kind == "ring" for i in instrs):
                    continue
                if get_framework(name).fused_qkv:  # one q, k, v GEMM, as the backend
                    instrs = fuse_qkv(instrs, frozenset(w.name for w in block.weights))
                instrs = fuse_fc1(  # one gate, up GEMM where it fuses, as the backend
                    instrs, frozenset(w.name for w in block.weights), get_framework(name).fused_fc1
                )
                if profile_fuses(name):
                    instrs = fuse_elementwise(instrs)
                program, _ = apply_overlaps(instrs, policy, rule)
                waits = policy.collectives_wait_for_issued_compute
                timing = time_block(program, compute_s, comm_s, waits)
                model_ = InstructionTimingModel(program, compute_s, comm_s)
                rank = simulate({0: instruction_trace(program, (0,))}, model_, policy=policy)
                assert rank.ranks[0].finish == timing.duration_s, (name, kind, phase)
                assert math.isclose(rank.ranks[0].compute, timing.compute_s, rel_tol=1e-12)
                # the backend's block adds only (SM sharing, accumulation passes) to this
                own = backend._block_timing(point, kind, phase, spans)
                assert own.duration_s >= timing.duration_s * (1 - 1e-12), (name, kind, phase)


def profile_fuses(name: str) -> bool:
    return get_framework(name).fused_elementwise


def test_an_instruction_model_refuses_a_node_that_is_not_its_instruction() -> None:
    instrs = [Instr("a", "fwd", "einsum", flops=10), Instr("b", "fwd", "einsum", flops=20)]
    model = InstructionTimingModel(instrs, lambda i: float(i.flops), lambda i: 0.0)
    trace = instruction_trace(instrs, (0,))
    assert simulate({0: trace}, model).ranks[0].finish == 30.0
    with pytest.raises(ConfigError, match="not an instruction"):
        simulate({0: [replace(trace[0], name="other"), trace[1]]}, model)
    ring = Instr("r", "fwd", "ring", comm_bytes=8, axes=("cp",))
    with pytest.raises(ConfigError, match="ring exchange"):
        instruction_trace([ring], (0,))
