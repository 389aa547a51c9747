"""Collective timing: ASTRA-sim mode to the nanosecond, and the α–β mode against hand sums."""

from __future__ import annotations

import csv
import dataclasses
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.analytical.astra_collectives import (
    astra_collective_member_ns,
    astra_collective_ns,
    astra_point_to_point_ns,
)
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
    irregular_all_to_all_factor,
)
from stage_explore.system import (
    Accelerator,
    AstraAlgorithm,
    AstraConfig,
    AstraDim,
    AstraTopology,
    CollectiveAlgorithm,
    CollectiveAlgorithms,
    NetworkDim,
    System,
    Topology,
    group_span,
)
from tests.fixtures import COLLECTIVES_CSV

AR, AG, RS, A2A = (
    CollectiveKind.ALL_REDUCE,
    CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL,
)
KINDS = {"AR": AR, "AG": AG, "RS": RS, "A2A": A2A}

# tests/fixtures/astra-sim/collectives.csv: single-collective runs of the real binary.
REFERENCE = COLLECTIVES_CSV
ROWS = """\
unaware,AR,1048576,"Ring,8,50,500",ring,4,1,10,50,117780
unaware,RS,1048576,"Ring,4,50,500",ring,4,1,10,1600,22240
unaware,AG,1048576,"Ring,16,50,500",ring,4,1,10,1600,323560
unaware,A2A,1048576,"FullyConnected,8,100,700",direct,1,1,10,50,1940
unaware,AR,1048576,"FullyConnected,8,100,700",halvingDoubling,1,1,10,50,44945
unaware,AR,4194304,"Ring,4,100,700;Switch,2,25,1500","ring,ring",1,1,10,50,328156
unaware,AR,4194304,"Ring,4,100,700;Switch,2,25,1500","ring,ring",4,2,10,50,146402
unaware,RS,4194304,"Ring,4,100,700;Switch,2,25,1500","ring,ring",1,1,10,50,274180
"""


def config(
    dims: list[tuple[str, int, float, float]],
    algorithms: str | list[str] = "ring",
    *,
    splits: int = 1,
    active: int = 1,
    delay: int = 10,
    local_mem_bw: float = 50,
    optimization: str = "localBWAware",
) -> AstraConfig:
    names = [algorithms] * len(dims) if isinstance(algorithms, str) else algorithms
    per_dim = tuple(AstraAlgorithm(name) for name in names)
    return AstraConfig(
        dims=tuple(
            AstraDim(topology=AstraTopology(t), npus=n, bandwidth_gbps=bw, latency_ns=lat)
            for t, n, bw, lat in dims
        ),
        all_reduce_implementation=per_dim,
        all_gather_implementation=per_dim,
        reduce_scatter_implementation=per_dim,
        all_to_all_implementation=per_dim,
        local_mem_bw_gbps=local_mem_bw,
        roofline_enabled=False,
        endpoint_delay_ns=delay,
        active_chunks_per_dimension=active,
        preferred_dataset_splits=splits,
        collective_optimization=optimization,
    )


def n(size: int, bandwidth_gbps: float, latency_ns: float, hops: int = 1) -> int:
    """ASTRA-sim's message time, written out independently of the code under test."""
    return int(hops * latency_ns + size / (bandwidth_gbps * 2**30 / 1e9))


def r(size: int, local_mem_bw: float = 50) -> int:
    return 3 * int(size / local_mem_bw)


def parse_row(row: list[str]) -> tuple[AstraConfig, CollectiveKind, int, int]:
    _, kind, size, network, algorithms, splits, active, delay, local_mem_bw, finished = row
    dims = []
    for dim in network.split(";"):
        topology, npus, bandwidth, latency = dim.split(",")
        dims.append((topology, int(npus), float(bandwidth), float(latency)))
    built = config(
        dims,
        algorithms.split(","),
        splits=int(splits),
        active=int(active),
        delay=int(delay),
        local_mem_bw=float(local_mem_bw),
    )
    return built, KINDS[kind], int(size), int(finished)


CASES = list(csv.reader(io.StringIO(ROWS)))


def test_embedded_rows_are_the_reference_csv() -> None:
    with REFERENCE.open() as file:
        rows = list(csv.reader(file))[1:]  # the header's unquoted commas make it ragged
    assert rows == CASES


@pytest.mark.parametrize(
    "row", CASES, ids=[f"{row[1]}-{row[3]}-{row[5]}x{row[6]}" for row in CASES]
)
def test_every_reference_row_matches_astra_sim_to_the_nanosecond(row: list[str]) -> None:
    built, kind, size, finished = parse_row(row)
    assert astra_collective_ns(built, kind, size) == finished


def test_sample_run_pieces_match_the_hand_sums() -> None:
    # sample-run: Ring 2 x Switch 2, 450/50 GB/s, 500/2000 ns, splits 4, local-mem-bw 3350
    built = config(
        [("Ring", 2, 450.0, 500.0), ("Switch", 2, 50.0, 2000.0)], splits=4, local_mem_bw=3350
    )
    mib = 2**20
    # sub-group all-reduce: one ring of two over dim 0, 4 chunks of 16 MiB, d = 10
    chunk_ar = 3 * 10 + 2 * n(8 * mib, 450, 500) + r(8 * mib, 3350)
    assert astra_collective_ns(built, AR, 64 * mib, [0, 1]) == 4 * chunk_ar == 173056
    # world all-gather of 8 MiB shards: dim 1 first (2 MiB chunks), then dim 0 (4 MiB)
    outer, inner = 20 + n(2 * mib, 50, 2000, hops=2), 20 + n(4 * mib, 450, 500)
    assert astra_collective_ns(built, AG, 8 * mib) == 4 * outer + inner == 181528
    assert astra_point_to_point_ns(built, 0, 2, 16 * mib) == n(16 * mib, 50, 2000, 2) == 316500
    assert astra_point_to_point_ns(built, 0, 1, 16 * mib) == n(16 * mib, 450, 500)


def test_sub_groups_use_a_ten_ns_hand_off_and_the_world_uses_the_endpoint_delay() -> None:
    dims = [("Ring", 4, 100.0, 700.0), ("Switch", 2, 25.0, 1500.0)]
    base, slow = config(dims), config(dims, delay=110)
    assert astra_collective_ns(slow, AR, 2**20, [0, 1, 2, 3]) == astra_collective_ns(
        base, AR, 2**20, [0, 1, 2, 3]
    )
    # the world all-reduce hands off 4 (RS, dim 0) + 3 (AR, dim 1) + 4 (AG, dim 0) packets
    extra = 100 * (4 + 3 + 4)
    assert astra_collective_ns(slow, AR, 2**22) == astra_collective_ns(base, AR, 2**22) + extra
    # an explicit group of every rank is the world
    assert astra_collective_ns(base, AR, 2**22, range(8)) == astra_collective_ns(base, AR, 2**22)


def test_a_sub_group_ring_with_unequal_links_runs_as_a_dataflow() -> None:
    # members 0, 1, 2 of a ring of 4: links 0->1 and 1->2 take one hop, 2->0 takes two
    built = config([("Ring", 4, 100.0, 700.0), ("Switch", 2, 25.0, 1500.0)])
    message = 2**20
    near, far = n(message, 100, 700, 1), n(message, 100, 700, 2)
    finish = astra_collective_member_ns(built, RS, 3 * message, [0, 1, 2])
    # worked by hand from "send the next packet once the previous one has arrived"
    assert finish == {
        0: 30 + near + far + 2 * r(message),
        1: 30 + near + far + 2 * r(message),
        2: 30 + 2 * near + 2 * r(message),
    }


def test_halving_doubling_reduce_scatter_and_all_gather() -> None:
    built = config([("FullyConnected", 4, 100.0, 700.0)], "halvingDoubling")
    c = 2**20
    # reduce-scatter: c/2 to the peer 1 away, then c/4 to the peer 2 away (reduced first)
    assert astra_collective_ns(built, RS, c) == 3 * 10 + n(c // 2, 100, 700) + n(
        c // 4, 100, 700
    ) + r(c // 4)
    # all-gather of a shard c: c to the peer 2 away, then 2c to the peer 1 away
    assert astra_collective_ns(built, AG, c) == 3 * 10 + n(c, 100, 700) + n(2 * c, 100, 700)
    with pytest.raises(ConfigError, match="power-of-two"):
        astra_collective_ns(config([("FullyConnected", 6, 100.0, 700.0)], "halvingDoubling"), AR, c)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (AR, lambda c, m: 3 * 10 + 2 * m(c // 8) + r(c // 8)),
        (RS, lambda c, m: 2 * 10 + m(c // 8) + r(c // 8)),
        (AG, lambda c, m: 2 * 10 + m(c)),
        (A2A, lambda c, m: 2 * 10 + m(c // 8)),
    ],
)
def test_direct_on_a_ring_is_set_by_the_farthest_peer(
    kind: CollectiveKind, expected: object
) -> None:
    built = config([("Ring", 8, 100.0, 700.0)], "direct")
    c = 2**20
    farthest = lambda size: n(size, 100, 700, hops=4)  # noqa: E731
    assert astra_collective_ns(built, kind, c) == expected(c, farthest)  # type: ignore[operator]


def test_chunks_queue_per_dim_up_to_the_active_limit() -> None:
    dims = [("Ring", 8, 50.0, 500.0)]
    one_chunk = astra_collective_ns(config(dims), AR, 2**20 // 4)
    assert astra_collective_ns(config(dims, splits=4), AR, 2**20) == 4 * one_chunk
    assert astra_collective_ns(config(dims, splits=4, active=2), AR, 2**20) == 2 * one_chunk
    assert astra_collective_ns(config(dims, splits=4, active=8), AR, 2**20) == one_chunk


def test_baseline_all_reduce_runs_a_full_all_reduce_on_every_dim() -> None:
    dims = [("Ring", 4, 100.0, 700.0), ("Switch", 2, 25.0, 1500.0)]
    baseline = config(dims, optimization="baseline")
    c = 2**22
    first = 7 * 10 + 6 * n(c // 4, 100, 700) + 3 * r(c // 4)
    second = 3 * 10 + 2 * n(c // 2, 25, 1500, hops=2) + r(c // 2)
    assert astra_collective_ns(baseline, AR, c) == first + second


def test_chunking_edge_cases() -> None:
    built = config([("Ring", 8, 50.0, 500.0)], splits=4)
    # a tiny (even empty) all-reduce still moves `splits` chunks of world-size bytes
    assert astra_collective_ns(built, AR, 0) == astra_collective_ns(built, AR, 32) > 0
    assert astra_collective_ns(built, AG, 0) == 0
    with pytest.raises(ConfigError, match="smaller than preferred-dataset-splits=4"):
        astra_collective_ns(built, AG, 3)
    assert astra_collective_member_ns(built, AR, 2**20, [5]) == {5: 0}


def test_point_to_point_uses_the_lowest_dim_where_the_ranks_differ() -> None:
    built = config([("Ring", 4, 100.0, 700.0), ("Switch", 2, 25.0, 1500.0)])
    assert astra_point_to_point_ns(built, 1, 3, 1000) == n(1000, 100, 700, hops=2)
    assert astra_point_to_point_ns(built, 1, 5, 1000) == n(1000, 25, 1500, hops=2)
    # 1 = (1, 0) and 6 = (2, 1) differ in both dims: the lowest, dim 0, carries the message
    assert astra_point_to_point_ns(built, 1, 6, 1000) == n(1000, 100, 700, hops=1)
    with pytest.raises(ConfigError, match="needs two ranks"):
        astra_point_to_point_ns(built, 2, 2, 1000)
    with pytest.raises(ConfigError, match="outside the network"):
        astra_point_to_point_ns(built, 0, 8, 1000)


# --- α–β mode ------------------------------------------------------------------------------

ALPHA0, BETA0, ALPHA1, BETA1 = 1e-6, 100e9, 5e-6, 10e9


def system(
    inner: Topology = Topology.RING,
    algorithm: CollectiveAlgorithm = CollectiveAlgorithm.RING,
    scale: float = 1.0,
) -> System:
    algorithms = CollectiveAlgorithms(
        all_reduce=algorithm, all_gather=algorithm, reduce_scatter=algorithm
    )
    return System(
        name="test",
        accelerator=Accelerator(
            name="acc",
            peak_flops_per_s={"bf16": 1e15},
            memory_bytes=1,
            memory_bandwidth_bytes_per_s=1e12,
        ),
        network=(
            NetworkDim(
                size=4,
                topology=inner,
                bandwidth_bytes_per_s=BETA0 * scale,
                latency_s=ALPHA0,
                algorithms=algorithms,
            ),
            NetworkDim(
                size=8,
                topology=Topology.SWITCH,
                bandwidth_bytes_per_s=BETA1 * scale,
                latency_s=ALPHA1,
            ),
        ),
    )


S = 64 * 2**20


@pytest.mark.parametrize("inner", [Topology.RING, Topology.SWITCH])
def test_alpha_beta_one_dim_matches_formulas_md(inner: Topology) -> None:
    sys = system(inner)
    group = [0, 1, 2, 3]
    assert alpha_beta_collective_s(sys, AR, S, group) == pytest.approx(
        2 * 3 * ALPHA0 + 2 * 3 / 4 * S / BETA0
    )
    assert alpha_beta_collective_s(sys, RS, S, group) == pytest.approx(
        3 * ALPHA0 + 3 / 4 * S / BETA0
    )
    # all-gather's size is the per-rank shard: the gathered buffer is 4 S
    assert alpha_beta_collective_s(sys, AG, S, group) == pytest.approx(3 * ALPHA0 + 3 * S / BETA0)
    assert alpha_beta_collective_s(sys, A2A, S, group) == pytest.approx(
        3 * ALPHA0 + 3 / 4 * S / BETA0
    )


def test_alpha_beta_strided_group_uses_the_outer_dim() -> None:
    group = [0, 4, 8, 12, 16, 20, 24, 28]  # every node's rank 0: dim 1 only, 8 ranks
    expected = 2 * 7 * ALPHA1 + 2 * 7 / 8 * S / BETA1
    assert alpha_beta_collective_s(system(), AR, S, group) == pytest.approx(expected)


def test_alpha_beta_two_dims_run_hierarchically() -> None:
    sys = system()
    group = [0, 1, 2, 3, 4, 5, 6, 7]  # 4 ranks on dim 0 x 2 on dim 1
    rs_inner = 3 * ALPHA0 + 3 / 4 * S / BETA0
    ar_outer = 2 * 1 * ALPHA1 + 2 * 1 / 2 * (S / 4) / BETA1
    assert alpha_beta_collective_s(sys, AR, S, group) == pytest.approx(2 * rs_inner + ar_outer)
    rs_outer = 1 * ALPHA1 + 1 / 2 * (S / 4) / BETA1
    # NCCL's reduce-scatter and all-gather are one flat ring over the 8 ranks: its 7 steps
    # cross dim 0 six times (3 per node) and dim 1 once, so dim 0 pays 6 latencies, not 3
    flat_inner = 6 * ALPHA0 + 3 / 4 * S / BETA0
    assert alpha_beta_collective_s(sys, RS, S, group) == pytest.approx(flat_inner + rs_outer)
    # all-gather of shard S: gather 2 S over dim 1 first, then 8 S over dim 0
    ag = (ALPHA1 + 1 / 2 * 2 * S / BETA1) + (6 * ALPHA0 + 3 / 4 * 8 * S / BETA0)
    assert alpha_beta_collective_s(sys, AG, S, group) == pytest.approx(ag)
    a2a = (3 * ALPHA0 + 3 / 4 * S / BETA0) + (ALPHA1 + 1 / 2 * S / BETA1)
    assert alpha_beta_collective_s(sys, A2A, S, group) == pytest.approx(a2a)
    assert alpha_beta_collective_s(sys, AR, S, None) > alpha_beta_collective_s(sys, AR, S, group)


def test_alpha_beta_halving_doubling_takes_log_steps() -> None:
    sys = system(Topology.FULLY_CONNECTED, CollectiveAlgorithm.HALVING_DOUBLING)
    assert alpha_beta_collective_s(sys, AR, S, [0, 1, 2, 3]) == pytest.approx(
        2 * 2 * ALPHA0 + 2 * 3 / 4 * S / BETA0
    )


def test_alpha_beta_irregular_and_trivial_groups() -> None:
    sys = system()
    # 0, 1 and 4 are not a sub-grid (2 ranks on node 0, 1 on node 1): hierarchical, 2 ranks on
    # dim 0, then 2 nodes on dim 1 carrying what the lone rank of node 1 holds, all of S
    rs_inner = ALPHA0 + 1 / 2 * S / BETA0
    assert alpha_beta_collective_s(sys, AR, S, [0, 1, 4]) == pytest.approx(
        2 * rs_inner + 2 * ALPHA1 + S / BETA1
    )
    assert alpha_beta_collective_s(sys, AR, S, [7]) == 0.0


def test_alpha_beta_irregular_group_runs_at_its_smallest_block() -> None:
    """4 + 2 ranks on two 4-rank nodes: each level over the most ranks it has there, and the
    node dim carries the share of the 2-rank node (S/2 each), not S over every hop."""
    sys, group = system(), [0, 1, 2, 3, 4, 5]
    assert group_span(sys.dim_sizes, group).blocks == (2, 6)
    rs_inner = 3 * ALPHA0 + 3 / 4 * S / BETA0
    ar = 2 * rs_inner + 2 * ALPHA1 + 2 * 1 / 2 * (S / 2) / BETA1
    assert alpha_beta_collective_s(sys, AR, S, group) == pytest.approx(ar)
    # NCCL's flat ring over the 6 ranks: 5 steps, 4 of them inside a node (3 + 1), 1 across
    assert group_span(sys.dim_sizes, group).hops == (4, 1)
    rs = (4 * ALPHA0 + 3 / 4 * S / BETA0) + ALPHA1 + 1 / 2 * (S / 2) / BETA1
    assert alpha_beta_collective_s(sys, RS, S, group) == pytest.approx(rs)
    # all-gather of shard S: 6 S gathered, 4 ranks on dim 0, then 2 nodes with 6 S / 2
    ag = (4 * ALPHA0 + 3 / 4 * 6 * S / BETA0) + (ALPHA1 + 1 / 2 * 3 * S / BETA1)
    assert alpha_beta_collective_s(sys, AG, S, group) == pytest.approx(ag)
    # all-to-all: each rank of the 2-rank node sends its 4 peers on the other node 4/6 of its
    # buffer over its own link (not the 1/2 two equal halves would send), and the collective
    # ends when those two have
    a2a = (3 * ALPHA0 + 3 / 4 * S / BETA0) + (ALPHA1 + 4 / 6 * S / BETA1)
    assert alpha_beta_collective_s(sys, A2A, S, group) == pytest.approx(a2a)
    assert irregular_all_to_all_factor(2, 2, 6) == pytest.approx((4 / 6) / (1 / 2))
    assert irregular_all_to_all_factor(2, 4, 8) == 1.0  # two full nodes: a regular group
    assert irregular_all_to_all_factor(1, 1, 6) == 1.0
    # between the full first node alone and the two full nodes (8 ranks), far below one flat
    # ring over the slow dim (what such a group cost until 4 Dec 2026)
    flat = 2 * 5 * ALPHA1 + 2 * 5 / 6 * S / BETA1
    full = alpha_beta_collective_s(sys, AR, S, list(range(8)))
    assert full < alpha_beta_collective_s(sys, AR, S, group) < flat / 2


def test_alpha_beta_groups_differing_only_in_their_smallest_block() -> None:
    """4 + 4 + 2 and 4 + 3 + 3 ranks on three nodes: the same size and ranks per dim, but the
    smallest block (2 vs 3) sets the node dim's share, so the times differ."""
    sys = system()
    a, b = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    span_a, span_b = group_span(sys.dim_sizes, a), group_span(sys.dim_sizes, b)
    assert (len(a), span_a.counts) == (len(b), span_b.counts)
    assert (span_a.blocks[0], span_b.blocks[0]) == (2, 3)
    slow_a = alpha_beta_collective_s(sys, AR, S, a) - 2 * (3 * ALPHA0 + 3 / 4 * S / BETA0)
    slow_b = alpha_beta_collective_s(sys, AR, S, b) - 2 * (3 * ALPHA0 + 3 / 4 * S / BETA0)
    assert slow_a == pytest.approx(4 * ALPHA1 + 2 * 2 / 3 * (S / 2) / BETA1)
    assert slow_b == pytest.approx(4 * ALPHA1 + 2 * 2 / 3 * (S / 3) / BETA1)


def test_alpha_beta_all_to_all_across_two_nvl72_racks() -> None:
    """64 ranks as 8 + 56 on two 72-GPU NVLink domains (a pipeline stage of 64 GPUs starting at
    GPU 64): the 8 ranks of the first rack send 56/64 of their buffer over their own 8 NICs."""
    switch = Topology.SWITCH
    fast = NetworkDim(size=72, topology=switch, bandwidth_bytes_per_s=BETA0, latency_s=ALPHA0)
    slow = NetworkDim(size=16, topology=switch, bandwidth_bytes_per_s=BETA1, latency_s=ALPHA1)
    sys = dataclasses.replace(system(), network=(fast, slow))
    group = list(range(64, 128))
    span = group_span(sys.dim_sizes, group)
    assert (span.counts, span.blocks, span.regular) == ((64, 2), (8, 64), False)
    expected = (63 * ALPHA0 + 63 / 64 * S / BETA0) + (ALPHA1 + 56 / 64 * S / BETA1)
    assert alpha_beta_collective_s(sys, A2A, S, group) == pytest.approx(expected)
    # the same 64 ranks inside one rack: the NVLink level alone
    inside = alpha_beta_collective_s(sys, A2A, S, list(range(64)))
    assert inside == pytest.approx(63 * ALPHA0 + 63 / 64 * S / BETA0)


def test_alpha_beta_point_to_point() -> None:
    sys = system()
    assert alpha_beta_point_to_point_s(sys, 0, 3, S) == pytest.approx(ALPHA0 + S / BETA0)
    assert alpha_beta_point_to_point_s(sys, 0, 4, S) == pytest.approx(ALPHA1 + S / BETA1)
    with pytest.raises(ConfigError, match="needs two ranks"):
        alpha_beta_point_to_point_s(sys, 3, 3, S)


GROUPS = [None, [0, 1, 2, 3], [0, 4, 8, 12], list(range(8)), [1, 5], [0, 1, 4]]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(list(CollectiveKind)),
    size=st.integers(min_value=0, max_value=2**34),
    group=st.sampled_from(GROUPS),
    faster=st.floats(min_value=1.0, max_value=64.0),
)
def test_alpha_beta_more_bandwidth_is_never_slower(
    kind: CollectiveKind, size: int, group: list[int] | None, faster: float
) -> None:
    slow = alpha_beta_collective_s(system(), kind, size, group)
    fast = alpha_beta_collective_s(system(scale=faster), kind, size, group)
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(list(CollectiveKind)),
    size=st.integers(min_value=64, max_value=2**30),
    topology=st.sampled_from(["Ring", "Switch", "FullyConnected"]),
    algorithm=st.sampled_from(["ring", "direct"]),
    splits=st.integers(min_value=1, max_value=8),
    bandwidth=st.floats(min_value=1.0, max_value=1000.0),
    faster=st.floats(min_value=1.0, max_value=16.0),
)
def test_astra_more_bandwidth_is_never_slower(
    kind: CollectiveKind,
    size: int,
    topology: str,
    algorithm: str,
    splits: int,
    bandwidth: float,
    faster: float,
) -> None:
    slow = config([(topology, 8, bandwidth, 500.0)], algorithm, splits=splits)
    fast = dataclasses.replace(
        slow, dims=(dataclasses.replace(slow.dims[0], bandwidth_gbps=bandwidth * faster),)
    )
    assert astra_collective_ns(fast, kind, size) <= astra_collective_ns(slow, kind, size)
