"""One timing engine, policies apart (docs/analytical.md, "The timing engine").

The analytical backend's block timing (:func:`~stage_explore.analytical.blocktime.time_block`:
one rank, in-order compute and communication streams) and the trace simulator
(:func:`~stage_explore.analytical.tracesim.simulate`) are one semantics with a different issue
policy. Here the trace simulator with :attr:`IssuePolicy.IN_ORDER` and the same per-instruction
costs is the oracle of ``time_block`` on the generator's own blocks (dense, Llama, MoE; forward,
backward, with tensor- and sequence-parallel collectives and recompute), and a small case shows
where ASTRA-sim's ready-first policy differs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.blocktime import fuse_elementwise, time_block
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.tracesim import BaseTimingModel, IssuePolicy, simulate
from stage_explore.system import load_system

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


def as_trace(instrs: Sequence[Instr]) -> list[TraceNode]:
    """A block's instructions as one rank's trace: node id = instruction index."""
    nodes = []
    for index, instr in enumerate(instrs):
        if instr.collective is not None:
            node = TraceNode(
                index, instr.name, NodeKind.COLL, data_deps=instr.deps,
                collective=instr.collective, comm_bytes=instr.comm_bytes, group=(0,),
            )  # fmt: skip
        else:
            tensor_bytes = instr.bytes_read + instr.bytes_written
            node = TraceNode(
                index, instr.name, NodeKind.COMP, data_deps=instr.deps,
                flops=instr.flops, tensor_bytes=tensor_bytes,
            )  # fmt: skip
        nodes.append(node)
    return nodes


def block_timing(instrs: Sequence[Instr]) -> tuple[float, float]:
    timing = time_block(
        instrs,
        lambda i: compute_s(i.flops, i.bytes_read + i.bytes_written),
        lambda i: comm_s(i.collective, i.comm_bytes),  # type: ignore[arg-type]
    )
    return timing.duration_s, timing.compute_s


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
            result = simulate(trace, SameCosts(), issue_policy=IssuePolicy.IN_ORDER)
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
    in_order = simulate({0: as_trace(instrs)}, SameCosts(), issue_policy=IssuePolicy.IN_ORDER)
    ready_first = simulate({0: as_trace(instrs)}, SameCosts())
    duration, _ = block_timing(instrs)
    # CUDA stream order: the independent kernel waits behind the one waiting for the reduce.
    assert in_order.ranks[0].finish == duration == wait_s + kernel_s + kernel_s
    # ASTRA-sim issues any ready node: the independent kernel runs under the reduce.
    assert ready_first.ranks[0].finish == wait_s + kernel_s
    assert ready_first.ranks[0].finish < in_order.ranks[0].finish
