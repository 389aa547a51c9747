"""NCCL's ring all-gather and reduce-scatter as one flat ring: latency steps per dim (s35).

NCCL runs an all-gather or reduce-scatter over a multi-node group as one ring through every
member (``ncclTopoTuneModel``, NVIDIA/nccl src/graph/tuning.cc: ``nsteps = nRanks − 1``, of
which ``nNodes − 1`` cross the network and the rest are intra-node steps), so its latency grows
with the ranks, not with the ranks per node plus the nodes. The bandwidth terms stay
hierarchical; all-reduce and all-to-all keep their levels' own steps.
"""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.system import (
    Accelerator,
    CollectiveAlgorithm,
    CollectiveAlgorithms,
    NetworkDim,
    System,
    Topology,
)
from stage_explore.system.ranks import group_span

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
AR, A2A = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_TO_ALL
INTRA, INTER = 1e-6, 5e-6  # the latencies of the node dim and of the scale-out dim


def cluster(nodes: int = 128, per_node: int = 8) -> System:
    """``nodes`` nodes of ``per_node`` GPUs, two dims; fast links so that a 0-byte call is
    latency alone."""
    return System(
        name="ring-latency",
        accelerator=Accelerator(
            name="acc",
            peak_flops_per_s={"bf16": 1e15},
            memory_bytes=1,
            memory_bandwidth_bytes_per_s=1e12,
        ),
        network=(
            NetworkDim(
                size=per_node, topology=Topology.SWITCH, bandwidth_bytes_per_s=1e11,
                latency_s=INTRA,
            ),
            NetworkDim(
                size=nodes, topology=Topology.SWITCH, bandwidth_bytes_per_s=1e10,
                latency_s=INTER,
            ),
        ),
    )  # fmt: skip


def test_hops_of_a_flat_ring_per_dim() -> None:
    sizes = cluster().dim_sizes
    # 8 ranks per node on 128 nodes: NCCL's 1,023 steps, 896 inside a node, 127 across
    assert group_span(sizes, range(1024)).hops == (896, 127)
    # one rank per node (a strided group): every step crosses the network
    assert group_span(sizes, range(0, 1024, 8)).hops == (0, 127)
    # one node: every step inside it
    assert group_span(sizes, range(8)).hops == (7, 0)
    # 8 + 4 ranks on two nodes: 11 steps, 10 inside a node (7 + 3), 1 across
    assert group_span(sizes, [*range(8), 8, 9, 10, 11]).hops == (10, 1)
    # two ranks on each of 3 nodes, not consecutive: 5 steps, 3 inside (one per node), 2 across
    assert group_span(sizes, [0, 4, 8, 12, 16, 20]).hops == (3, 2)


@pytest.mark.parametrize("ranks", [16, 64, 1024])
@pytest.mark.parametrize("kind", [AG, RS])
def test_all_gather_and_reduce_scatter_pay_the_flat_rings_steps(
    kind: CollectiveKind, ranks: int
) -> None:
    system, nodes = cluster(), ranks // 8
    group = list(range(ranks))
    expected = (ranks - nodes) * INTRA + (nodes - 1) * INTER
    assert alpha_beta_collective_s(system, kind, 0, group) == pytest.approx(expected)
    # every rank of the system: the same count from the dim sizes alone
    whole = cluster(nodes=nodes)
    assert alpha_beta_collective_s(whole, kind, 0, None) == pytest.approx(expected)
    # not an NCCL call: the levels' own steps, as before (7 inside a node, then the nodes)
    levels = 7 * INTRA + (nodes - 1) * INTER
    assert alpha_beta_collective_s(system, kind, 0, group, nccl=False) == pytest.approx(levels)


def test_the_bandwidth_terms_do_not_change() -> None:
    """The extra steps are latency only: the difference between two sizes is the levels'."""
    system, group, size = cluster(), list(range(64)), 2**20
    for kind in (AG, RS):
        nccl = alpha_beta_collective_s(system, kind, size, group)
        other = alpha_beta_collective_s(system, kind, size, group, nccl=False)
        assert nccl - other == pytest.approx((64 - 8 - 7) * INTRA)


def test_all_reduce_all_to_all_and_halving_doubling_keep_their_steps() -> None:
    system, group = cluster(), list(range(1024))
    # all-reduce: reduce-scatter in the node, all-reduce across, all-gather back (NCCL may run
    # its tree there: log-depth across nodes; the model's levels sit between ring and tree)
    expected = 2 * 7 * INTRA + 2 * 127 * INTER
    assert alpha_beta_collective_s(system, AR, 0, group) == pytest.approx(expected)
    assert alpha_beta_collective_s(system, A2A, 0, group) == pytest.approx(7 * INTRA + 127 * INTER)
    log_steps = CollectiveAlgorithms(
        all_gather=CollectiveAlgorithm.HALVING_DOUBLING,
        reduce_scatter=CollectiveAlgorithm.HALVING_DOUBLING,
    )
    node, network = cluster().network
    halving = dataclasses.replace(
        cluster(), network=(dataclasses.replace(node, algorithms=log_steps), network)
    )
    # the node dim's log2(8) = 3 steps, the network dim's ring over 128 nodes
    assert alpha_beta_collective_s(halving, AG, 0, group) == pytest.approx(3 * INTRA + 127 * INTER)
