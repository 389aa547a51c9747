"""The trace simulator: the ASTRA-sim sample run to the nanosecond, and its scheduling rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.trace_models import (
    AlphaBetaTimingModel,
    AstraTimingModel,
    BaseTimingModel,
)
from stage_explore.analytical.tracesim import simulate
from stage_explore.system import (
    AstraAlgorithm,
    AstraConfig,
    AstraDim,
    AstraTopology,
    astra_config_from_system,
    load_system,
)

MIB = 2**20
RING = (AstraAlgorithm.RING, AstraAlgorithm.RING)

# tests/fixtures/astra-sim/sample-run: system.json and network.yml (see test_system_astra)
SAMPLE = AstraConfig(
    dims=(
        AstraDim(topology=AstraTopology.RING, npus=2, bandwidth_gbps=450.0, latency_ns=500.0),
        AstraDim(topology=AstraTopology.SWITCH, npus=2, bandwidth_gbps=50.0, latency_ns=2000.0),
    ),
    all_reduce_implementation=RING,
    all_gather_implementation=RING,
    reduce_scatter_implementation=RING,
    all_to_all_implementation=(AstraAlgorithm.DIRECT, AstraAlgorithm.DIRECT),
    local_mem_bw_gbps=3350,
    peak_perf_tflops=989,
    endpoint_delay_ns=10,
    active_chunks_per_dimension=1,
    preferred_dataset_splits=4,
)


def comp(node_id: int, flops: int, tensor_bytes: int, *deps: int) -> TraceNode:
    return TraceNode(
        id=node_id, name=f"comp{node_id}", kind=NodeKind.COMP, data_deps=deps, flops=flops,
        tensor_bytes=tensor_bytes,
    )  # fmt: skip


def coll(
    node_id: int, kind: CollectiveKind, size: int, group: Sequence[int] | None, *deps: int
) -> TraceNode:
    return TraceNode(
        id=node_id, name=f"coll{node_id}", kind=NodeKind.COLL, data_deps=deps, collective=kind,
        comm_bytes=size, group=None if group is None else tuple(group),
    )  # fmt: skip


def p2p(node_id: int, kind: NodeKind, peer: int, size: int, tag: int, *deps: int) -> TraceNode:
    return TraceNode(
        id=node_id, name=f"p2p{node_id}", kind=kind, data_deps=deps, peer=peer, comm_bytes=size,
        tag=tag,
    )  # fmt: skip


def sample_trace(rank: int) -> list[TraceNode]:
    """The sample run's workload.<rank>.et, as its README describes it."""
    transfer = (
        p2p(3, NodeKind.SEND, rank + 2, 16 * MIB, 7, 2)
        if rank < 2
        else p2p(3, NodeKind.RECV, rank - 2, 16 * MIB, 7, 2)
    )
    return [
        comp(1, 2 * 4096**3, 3 * 4096**2 * 2),
        coll(2, CollectiveKind.ALL_REDUCE, 64 * MIB, [0, 1] if rank < 2 else [2, 3], 1),
        transfer,
        coll(4, CollectiveKind.ALL_GATHER, 8 * MIB, None, 3),
        comp(5, 4 * 4096**3, 3 * 4096**2 * 2, 4),
    ]


def test_sample_run_matches_astra_sim_to_the_nanosecond() -> None:
    result = simulate({rank: sample_trace(rank) for rank in range(4)}, AstraTimingModel(SAMPLE))
    for rank in range(4):  # stdout.txt: every rank
        timing = result.ranks[rank]
        assert timing.finish == 1_087_986
        assert timing.compute == 416_902
        assert timing.exposed_communication == 671_084
    assert result.makespan == 1_087_986


def test_sample_run_timeline() -> None:
    result = simulate(
        {rank: sample_trace(rank) for rank in range(4)}, AstraTimingModel(SAMPLE), record_nodes=True
    )
    expected = {1: (0, 138_967), 2: (138_967, 312_023), 3: (312_023, 628_523)}
    expected |= {4: (628_523, 810_051), 5: (810_051, 1_087_986)}
    for rank in range(4):
        assert {i: result.node_times[(rank, i)] for i in range(1, 6)} == expected


def test_roofline_compute_time_is_floored_and_memory_bound_when_intensity_is_low() -> None:
    model = AstraTimingModel(SAMPLE)
    assert model.compute(comp(1, 2 * 4096**3, 3 * 4096**2 * 2)) == 138_967
    # intensity 1 FLOP/byte: 3350 GB/s x 1 = 3.35 TFLOP/s
    assert model.compute(comp(1, 3350 * 10**6, 3350 * 10**6)) == 1_000_000
    assert model.compute(comp(1, 10**9, 0)) == 0  # ASTRA-sim skips a node without tensor size


Traces = Mapping[int, Sequence[TraceNode]]


class Fixed(BaseTimingModel[int]):
    """Compute takes flops ns, collectives take 100 ns (rank 1: 150), messages take 50 ns."""

    zero = 0

    def compute(self, node: TraceNode) -> int:
        return node.flops

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> dict[int, int]:
        return {member: 150 if member == 1 else 100 for member in group}

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> int:
        return 50


def times(traces: Traces) -> dict[tuple[int, int], tuple[int, int]]:
    return simulate(traces, Fixed(), record_nodes=True).node_times


def test_a_collective_starts_when_its_last_member_issues_it() -> None:
    traces = {
        0: [comp(1, 10, 1), coll(2, CollectiveKind.ALL_REDUCE, 8, None, 1)],
        1: [comp(1, 70, 1), coll(2, CollectiveKind.ALL_REDUCE, 8, None, 1)],
    }
    result = times(traces)
    assert result[(0, 2)] == (70, 170)
    assert result[(1, 2)] == (70, 220)  # each member ends after its own duration


def test_collectives_hold_the_comm_slot_while_compute_overlaps() -> None:
    trace = [
        coll(1, CollectiveKind.ALL_REDUCE, 8, None),
        coll(2, CollectiveKind.ALL_GATHER, 8, None),
        comp(3, 120, 1),
    ]
    result = times({0: trace, 2: trace})
    assert result[(0, 1)] == (0, 100)
    assert result[(0, 2)] == (100, 200)  # independent, yet one after the other
    assert result[(0, 3)] == (0, 120)  # compute runs meanwhile


def test_ready_nodes_issue_in_ascending_id_order_per_slot() -> None:
    trace = [comp(5, 10, 1), comp(3, 20, 1), comp(4, 30, 1)]
    result = times({0: trace})
    assert [result[(0, i)] for i in (3, 4, 5)] == [(0, 20), (20, 50), (50, 60)]


def test_control_dependencies_are_honoured() -> None:
    later = TraceNode(
        id=2, name="later", kind=NodeKind.COMP, ctrl_deps=(1,), flops=5, tensor_bytes=1
    )
    result = times({0: [comp(1, 10, 1), later]})
    assert result[(0, 2)] == (10, 15)


def test_sends_finish_on_arrival_and_receives_wait_for_the_message() -> None:
    early_receive = {
        0: [comp(1, 40, 1), p2p(2, NodeKind.SEND, 1, 8, 3, 1)],
        1: [p2p(1, NodeKind.RECV, 0, 8, 3)],
    }
    result = times(early_receive)
    assert result[(0, 2)] == (40, 90)
    assert result[(1, 1)] == (0, 90)
    late_receive = {
        0: [p2p(1, NodeKind.SEND, 1, 8, 3)],
        1: [comp(1, 80, 1), p2p(2, NodeKind.RECV, 0, 8, 3, 1)],
    }
    result = times(late_receive)
    assert result[(0, 1)] == (0, 50)
    assert result[(1, 2)] == (80, 80)


def test_receives_hold_no_slot_and_match_by_tag_and_order() -> None:
    traces = {
        0: [p2p(1, NodeKind.SEND, 1, 8, 1), p2p(2, NodeKind.SEND, 1, 8, 2, 1)],
        1: [
            p2p(1, NodeKind.RECV, 0, 8, 2),
            p2p(2, NodeKind.RECV, 0, 8, 1),
            coll(3, CollectiveKind.ALL_REDUCE, 8, [1]),
        ],
    }
    result = times(traces)
    assert result[(1, 2)] == (0, 50)  # tag 1: the first send
    assert result[(1, 1)] == (0, 100)  # tag 2: the second send, issued at 50
    assert result[(1, 3)] == (0, 150)  # issued at once: the receives did not take the slot


@pytest.mark.parametrize(
    ("traces", "pattern"),
    [
        ({0: [coll(1, CollectiveKind.ALL_REDUCE, 8, [0, 1])], 1: [comp(1, 1, 1)]}, "deadlock"),
        ({0: [p2p(1, NodeKind.RECV, 1, 8, 0)], 1: [comp(1, 1, 1)]}, "rank 0 node 1 'p2p1'"),
        ({0: [comp(1, 1, 1, 2), comp(2, 1, 1, 1)]}, "dependency cycle"),
        ({0: [comp(1, 1, 1, 9)]}, "node 1 depends on unknown node 9"),
        ({0: [comp(1, 1, 1), comp(1, 1, 1)]}, "node ids must be unique"),
        ({0: [p2p(1, NodeKind.SEND, 5, 8, 0)]}, "invalid peer 5"),
        ({0: [coll(1, CollectiveKind.ALL_REDUCE, 8, [1, 2])], 1: []}, "runs a collective over"),
        ({0: [coll(1, CollectiveKind.ALL_REDUCE, 8, [0, 3])]}, "members without traces"),
    ],
)
def test_bad_traces_are_config_errors(traces: Traces, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        simulate(traces, Fixed())


def test_alpha_beta_model_on_a_preset() -> None:
    system = load_system("h100-80gb")
    model = AlphaBetaTimingModel(system)
    matmul = comp(1, 2 * 8192**3, 3 * 8192**2 * 2)
    ranks = range(16)
    traces = {
        rank: [matmul, coll(2, CollectiveKind.ALL_REDUCE, 256 * MIB, ranks, 1)] for rank in ranks
    }
    result = simulate(traces, model)
    compute = system.accelerator.compute_time_s(matmul.flops, matmul.tensor_bytes, "bf16")
    comm = alpha_beta_collective_s(system, CollectiveKind.ALL_REDUCE, 256 * MIB, ranks)
    assert result.ranks[3].compute == pytest.approx(compute)
    assert result.ranks[3].finish == pytest.approx(compute + comm)
    assert result.ranks[3].exposed_communication == pytest.approx(comm)
    # 2·8192³ FLOPs at 75 % of 989 TFLOP/s plus the 6 GFLOP half-saturation overhead
    assert compute == pytest.approx((2 * 8192**3 + 6e9) / (0.75 * 989e12))
    with pytest.raises(ConfigError, match="no peak FLOP/s for dtype 'fp4'"):
        AlphaBetaTimingModel(system, "fp4")


def test_astra_model_from_a_preset_runs_and_compares_with_alpha_beta() -> None:
    system = load_system("a100-80gb")
    config = astra_config_from_system(system, num_gpus=16)
    traces = {rank: [coll(1, CollectiveKind.ALL_REDUCE, 64 * MIB, None)] for rank in range(16)}
    astra = simulate(traces, AstraTimingModel(config)).makespan
    alpha_beta = simulate(traces, AlphaBetaTimingModel(system)).makespan
    assert isinstance(astra, int)
    assert 0.5 < astra * 1e-9 / alpha_beta < 2.0  # same hardware, two models, same ballpark


def test_astra_model_needs_one_trace_per_npu() -> None:
    traces = {rank: sample_trace(rank) for rank in range(3)}
    with pytest.raises(ConfigError, match="network has 4 ranks, but traces were given for 3"):
        simulate(traces, AstraTimingModel(SAMPLE))


def test_astra_model_needs_roofline() -> None:
    with pytest.raises(ConfigError, match="roofline-enabled"):
        AstraTimingModel(dataclasses.replace(SAMPLE, roofline_enabled=False, peak_perf_tflops=0))


# -- collectives issued at different times ------------------------------------------------------


def test_a_skewed_sub_group_collective_lets_early_members_finish_first() -> None:
    """Ranks 0 and 2 (a sub-group of the 4-rank sample network): rank 0 computes first, so it
    issues the all-reduce earlier and finishes it earlier than rank 2, which still ends exactly
    a rendezvous duration after its own issue (it is the last member)."""
    model = AstraTimingModel(SAMPLE)
    size, group = 64 * MIB, (0, 2)
    traces = {
        0: [comp(1, 10**9, 10**6), coll(2, CollectiveKind.ALL_REDUCE, size, group, 1)],
        1: [comp(1, 10**9, 10**6)],
        2: [comp(1, 10**11, 10**6), coll(2, CollectiveKind.ALL_REDUCE, size, group, 1)],
        3: [comp(1, 10**9, 10**6)],
    }
    result = simulate(traces, model, record_nodes=True)
    issue_0, issue_2 = result.issued[(0, 2)], result.issued[(2, 2)]
    assert issue_0 < issue_2
    end_0, end_2 = result.node_times[(0, 2)][1], result.node_times[(2, 2)][1]
    rendezvous = model.collective(CollectiveKind.ALL_REDUCE, size, group)
    assert end_2 == issue_2 + rendezvous[2]
    assert issue_2 < end_0 < end_2
    assert result.node_times[(0, 2)][0] == issue_0  # it ran from its own issue


def test_skewed_collective_with_equal_issues_is_the_rendezvous() -> None:
    model = AstraTimingModel(SAMPLE)
    size, group = 64 * MIB, (0, 2)
    skewed = model.skewed_collective(CollectiveKind.ALL_REDUCE, size, group, {0: 500, 2: 500})
    rendezvous = model.collective(CollectiveKind.ALL_REDUCE, size, group)
    assert skewed == {rank: 500 + duration for rank, duration in rendezvous.items()}


def test_a_skewed_collective_over_a_multi_dim_world_is_a_rendezvous() -> None:
    model = AstraTimingModel(SAMPLE)  # 2 x 2 network: hierarchical phases, not one ring
    issued = {0: 0, 1: 10, 2: 20, 3: 30}
    assert model.skewed_collective(CollectiveKind.ALL_REDUCE, MIB, (0, 1, 2, 3), issued) is None
