"""MoE timing in the analytical backend (issue #11): the expert all-to-all over the links its
Megatron-folded group spans, its overlap as the framework option, and the expert GEMMs as one
grouped (batched) GEMM over the rank's experts."""

from __future__ import annotations

import pytest

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s, group_span
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.analytical.overlap import overlap_rule
from stage_explore.analytical.overlap_reorder import overlap_shared_experts
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system

QWEN = get_flavor("qwen3-235b-a22b").with_overrides(layers=8)
H100 = load_system("h100-80gb")


def _exchange(parallel: ParallelConfig) -> tuple[tuple[int, ...], int]:
    """Rank 0's dispatch all-to-all: its communicator group and bytes."""
    programs = lower(QWEN, parallel)
    (instr, *_) = [
        i for i in programs.blocks["moe_layer"].fwd if i.collective is CollectiveKind.ALL_TO_ALL
    ]
    return programs.workload.mesh.group(0, instr.axes), instr.comm_bytes


def test_a_folded_expert_group_spans_nodes_and_pays_the_scale_out_links() -> None:
    """Megatron-Bridge's Qwen3-235B layout (tp 2, ep 32 folded over tp×dp, etp 1): the
    all-to-all group is 32 ranks on 4 nodes of 8, so 3/4 of the buffer crosses InfiniBand; ep 4
    with etp = tp (stride tp) stays inside a node at the same bytes per rank and costs less."""
    folded, size = _exchange(ParallelConfig(tp=2, dp=16, ep=32, etp=1, sp=True, global_batch=16))
    span = group_span(H100.dim_sizes, folded)
    assert len(folded) == 32 and span.counts == (8, 4)
    inside, size_inside = _exchange(ParallelConfig(tp=2, dp=16, ep=4, sp=True, global_batch=16))
    assert group_span(H100.dim_sizes, inside).counts == (4, 1)
    assert size == size_inside  # the rank's own tokens × top-k × hidden × 2 either way
    slow = alpha_beta_collective_s(H100, CollectiveKind.ALL_TO_ALL, size, folded)
    fast = alpha_beta_collective_s(H100, CollectiveKind.ALL_TO_ALL, size, inside)
    scale_out = H100.network[1]
    assert slow > fast
    # at least the bytes leaving the node at the scale-out dim's achieved bandwidth
    assert slow >= 3 / 4 * size / (scale_out.bandwidth_bytes_per_s * scale_out.bus_efficiency)


@pytest.mark.parametrize("axes", [("ep",), ("ep", "tp"), ("cp",), ("ep", "cp", "tp")])
def test_moe_comm_overlap_takes_every_expert_all_to_all_off_the_path(axes: tuple[str, ...]) -> None:
    """Megatron's --overlap-moe-expert-parallel-comm: whatever mesh axes the folded group uses
    (with the ep axis of size 1 the group is cp alone), the all-to-all is overlapped."""
    from stage_core.lower.bind import Instr

    instr = Instr("all_to_all:moe.tokens", "fwd", "comm", collective=CollectiveKind.ALL_TO_ALL,
                  axes=axes, comm_bytes=1 << 20)  # fmt: skip
    profile = get_framework("megatron-core").with_overrides({"moe_comm_overlap": True})
    on = overlap_rule(TimingPolicy.from_profile(profile), tp=2, sp=True)
    assert on is not None and on(instr) == 0.0
    off = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=2, sp=True)
    assert off is not None and off(instr) is None  # Megatron's default: off


def test_expert_gemms_are_one_grouped_gemm_over_the_ranks_experts() -> None:
    """The experts' up-projection is timed as a batched GEMM: batch = the rank's experts
    (128/ep), M = its slots per expert, N = the expert FFN width / etp, K = hidden."""
    parallel = ParallelConfig(tp=2, dp=8, ep=16, etp=1, sp=True, global_batch=8)
    programs = lower(QWEN, parallel)
    (up,) = [i for i in programs.blocks["moe_layer"].fwd if i.name == "experts.up"]
    batch, m, n, k = gemm_shape(up)  # type: ignore[misc]
    own = QWEN.seq_len // parallel.tp  # the rank's sequence shard
    slots = own * QWEN.top_k // QWEN.num_experts * parallel.ep  # what one expert receives
    assert (batch, m, n, k) == (QWEN.num_experts // 16, slots, QWEN.expert_ffn, QWEN.hidden)


def test_moe_overlap_shortens_the_step_of_an_all_to_all_bound_layout() -> None:
    parallel = ParallelConfig(tp=2, dp=16, ep=32, etp=1, sp=True, pp=2, global_batch=64,
                              micro_batch=1)  # fmt: skip
    plain = AnalyticalBackend(framework="megatron-core").evaluate(QWEN, parallel, H100)
    overlapped = AnalyticalBackend(
        framework="megatron-core", overrides={"moe_comm_overlap": True}
    ).evaluate(QWEN, parallel, H100)
    assert plain.breakdown["exposed_all_to_all"] > 0
    assert overlapped.step_time_s < plain.step_time_s
    assert overlapped.breakdown["exposed_all_to_all"] < plain.breakdown["exposed_all_to_all"]


DEEPSEEK = get_flavor("deepseek-v3").with_overrides(layers=4, first_k_dense=1)
SHARED = ParallelConfig(tp=2, dp=16, ep=32, etp=1, sp=True, global_batch=16)


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_shared_expert_overlap_runs_the_shared_mlp_beside_the_first_all_to_all(
    phase: str,
) -> None:
    """Megatron's --moe-shared-expert-overlap: the shared experts' compute moves right after
    the first all-to-all (their own collectives before it), every dependency still earlier."""
    block = lower(DEEPSEEK, SHARED).blocks["moe_layer"]
    instrs = block.fwd if phase == "fwd" else block.bwd
    moved = overlap_shared_experts(instrs)
    assert sorted(i.name for i in moved) == sorted(i.name for i in instrs)
    assert all(d < index for index, instr in enumerate(moved) for d in instr.deps)
    first = next(i for i, x in enumerate(moved) if x.collective is CollectiveKind.ALL_TO_ALL)
    after = moved[first + 1]
    assert "shared." in after.name and after.collective is None
    routed = next(i for i, x in enumerate(moved) if x.name.startswith("experts."))
    shared = [i for i, x in enumerate(moved) if "shared." in x.name and x.collective is None]
    assert first < min(shared) and max(shared) < routed  # beside the all-to-all, before routed
    assert overlap_shared_experts(lower(QWEN, SHARED).blocks["moe_layer"].fwd) == tuple(
        lower(QWEN, SHARED).blocks["moe_layer"].fwd
    )  # no shared expert: unchanged


def test_shared_expert_overlap_shortens_an_all_to_all_bound_step() -> None:
    """Off by default (Megatron's default); on, the shared MLP hides under the dispatch."""
    assert not get_framework("megatron-core").moe_shared_expert_overlap
    plain = AnalyticalBackend(framework="megatron-core").evaluate(DEEPSEEK, SHARED, H100)
    overlapped = AnalyticalBackend(
        framework="megatron-core", overrides={"moe_shared_expert_overlap": True}
    ).evaluate(DEEPSEEK, SHARED, H100)
    assert overlapped.step_time_s < plain.step_time_s
    assert overlapped.breakdown["compute"] == pytest.approx(plain.breakdown["compute"])
