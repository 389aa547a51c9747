"""Hybrid sharding (HSDP, ``ParallelConfig.dp_shard``) against closed forms.

With ``dp`` data-parallel ranks split into ``R = dp/dp_shard`` replicas of ``S = dp_shard``
ranks, ZeRO shards every state over the shard group only, and a weight of ``n`` elements costs,
per micro-batch of its backward under ZeRO-2/3, a reduce-scatter of ``n·g`` bytes over the
shard group and an all-reduce of ``n·g/S`` bytes (the rank's gradient shard) over the replicas
(``g`` bytes per gradient element; PyTorch FSDP ``HYBRID_SHARD``: ``reduce_scatter`` in the
intra-node group, then ``all_reduce`` of the sharded gradient in the inter-node group). Under
ZeRO-3 each forward gathers ``n·w/S`` bytes per rank over the shard group (``w`` bytes per
parameter). The expected values below are computed from the model's weights, not read from the
code under test.
"""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.layout import Layout
from stage_core.lower.memory import memory_report
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.lower.zero_nodes import zero_collectives
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.plans import DP_REPLICATE, split_dp
from stage_core.trace import CollectiveKind, NodeKind

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=1024)


def _programs(**options: object) -> ProgramSet:
    return lower(LLAMA, ParallelConfig(grad_fp32=False, **options))  # type: ignore[arg-type]


# -- the configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(dp=8, dp_shard=3, zero=3), "`dp_shard` must divide `dp`"),
        (dict(dp=8, dp_shard=2, zero=0), "needs ZeRO"),
        (dict(dp=8, dp_shard=0, zero=3), "`dp_shard` must be a positive int"),
    ],
)
def test_bad_hybrid_sharding_is_a_config_error(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(**options)  # type: ignore[arg-type]


def test_shard_group_of_all_dp_is_full_sharding() -> None:
    """``dp_shard = dp`` is the same configuration as no ``dp_shard`` (one spelling)."""
    full = ParallelConfig(dp=8, zero=3)
    same = ParallelConfig(dp=8, dp_shard=8, zero=3)
    assert same == full and hash(same) == hash(full)
    assert "dp_shard" not in full.to_dict()
    hybrid = ParallelConfig(dp=8, dp_shard=2, zero=3)
    assert hybrid.to_dict()["dp_shard"] == 2
    assert (hybrid.shard_dp, hybrid.replicate_dp) == (2, 4)


def test_split_dp_replaces_dp_by_replicas_then_shards() -> None:
    split = split_dp(Layout.parse("x[B/(dp*ep), S/cp, H]"))
    assert split.shards == ((DP_REPLICATE, "dp", "ep"), ("cp",), ())
    gradient = split_dp(Layout.parse("dw[H, F/tp @ 1/dp]"))  # a weight gradient, partial over dp
    assert gradient.shards == ((), ("tp",)) and gradient.partial == (DP_REPLICATE, "dp")


# -- the mesh and the collectives -------------------------------------------------------------


def test_mesh_splits_dp_into_replicas_outside_the_shard_group() -> None:
    programs = _programs(dp=8, dp_shard=2, tp=2, zero=3, global_batch=8)
    mesh = programs.workload.mesh
    assert mesh.names == ("pp", DP_REPLICATE, "dp", "ep", "cp", "tp")
    assert (mesh.size(DP_REPLICATE), mesh.size("dp"), mesh.size("tp")) == (4, 2, 2)
    # every rank still runs one micro-batch of micro_batch sequences: B = micro_batch·dp
    assert programs.workload.sizes["B"] == 8


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_collectives_are_the_shard_groups_plus_a_replica_all_reduce(zero: int) -> None:
    shard, replicas = 4, 2
    programs = _programs(dp=shard * replicas, dp_shard=shard, zero=zero, global_batch=8)
    workload = programs.workload
    for block in {id(b): b for s in programs.stages for c in s.chunks for b in c.blocks}.values():
        elements = sum(w.elements for w in block.weights)
        scatters = zero_collectives(workload, block, gather=False)
        by_kind = {(i.collective, i.axes): i.comm_bytes for i in scatters}
        assert by_kind == {
            (CollectiveKind.REDUCE_SCATTER, ("dp",)): elements * 2,
            (CollectiveKind.ALL_REDUCE, (DP_REPLICATE,)): elements * 2 // shard,
        }
        gathers = zero_collectives(workload, block, gather=True)
        assert [(i.collective, i.axes, i.comm_bytes) for i in gathers] == [
            (CollectiveKind.ALL_GATHER, ("dp",), elements * 2 // shard)
        ]


def test_full_sharding_has_no_replica_all_reduce() -> None:
    programs = _programs(dp=8, zero=3, global_batch=8)
    block = programs.stages[0].chunks[0].blocks[1]
    scatters = zero_collectives(programs.workload, block, gather=False)
    assert [i.collective for i in scatters] == [CollectiveKind.REDUCE_SCATTER]


def test_zero1_reduces_over_the_shard_group_then_all_reduces_the_shard() -> None:
    """ZeRO-1 with replicas (Megatron's ``num_distributed_optimizer_instances``): once per
    step, a reduce-scatter over the shard group and an all-reduce of the shard over the
    replicas; the parameters are all-gathered over the shard group."""
    shard = 2
    programs = _programs(dp=8, dp_shard=shard, zero=1, global_batch=8)
    stage = programs.stages[0]
    elements = sum(w.elements for c in stage.chunks for b in c.blocks for w in b.weights)
    totals: dict[tuple[CollectiveKind, tuple[str, ...]], int] = {}
    for op in stage.sync:
        key = (op.collective, op.axes)
        totals[key] = totals.get(key, 0) + op.comm_bytes
    assert totals == {
        (CollectiveKind.REDUCE_SCATTER, ("dp",)): elements * 2,
        (CollectiveKind.ALL_REDUCE, (DP_REPLICATE,)): elements * 2 // shard,
        (CollectiveKind.ALL_GATHER, ("dp",)): elements * 2 // shard,
    }


def test_groups_are_consecutive_shards_and_strided_replicas() -> None:
    """FSDP's HYBRID_SHARD: a shard group is ``dp_shard`` consecutive data-parallel ranks (a
    node), a replica group takes one rank of each shard group."""
    programs = _programs(dp=8, dp_shard=4, zero=3, global_batch=8)
    (stage,) = programs.stages
    template = stage_nodes(programs, stage)
    for rank in range(8):
        nodes = list(materialize(template, rank, programs.workload.mesh))
        groups = {
            (node.collective, node.group)
            for node in nodes
            if node.kind == NodeKind.COLL and "zero." in node.name
        }
        base = rank // 4 * 4
        assert (CollectiveKind.REDUCE_SCATTER, tuple(range(base, base + 4))) in groups
        assert (CollectiveKind.ALL_REDUCE, (rank % 4, rank % 4 + 4)) in groups
        assert (CollectiveKind.ALL_GATHER, tuple(range(base, base + 4))) in groups


# -- memory: the shard group's -----------------------------------------------------------------


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_model_states_are_those_of_the_shard_group_alone(zero: int) -> None:
    """A rank of ``dp = 8`` sharded in groups of 2 holds what a rank of ``dp = 2`` does."""
    hybrid = memory_report(_programs(dp=8, dp_shard=2, zero=zero, global_batch=8), False)
    alone = memory_report(_programs(dp=2, zero=zero, global_batch=2), False)
    for h, a in zip(hybrid, alone, strict=True):
        assert (h.weights_bytes, h.gradients_bytes, h.optimizer_bytes) == (
            a.weights_bytes,
            a.gradients_bytes,
            a.optimizer_bytes,
        )
        assert h.activations_bytes == a.activations_bytes
    full = memory_report(_programs(dp=8, zero=zero, global_batch=8), False)
    assert full[0].optimizer_bytes * 4 == hybrid[0].optimizer_bytes


# -- experts: the expert-parallel group inside a shard group ----------------------------------


def test_expert_parallel_group_is_carved_out_of_the_shard_group() -> None:
    """dp 8 in shard groups of 4 with ep 2: the mesh is dpr 2 × dp 2 × ep 2; dense weights
    shard over the 4 ranks of a shard group, expert weights over the 2 outside their expert
    group; both all-reduce their shard over the 2 replicas. A rank holds what a rank of dp 4,
    ep 2 without replicas holds."""
    parallel = ParallelConfig(dp=8, dp_shard=4, ep=2, zero=3, global_batch=8, grad_fp32=False)
    programs = lower(MIXTRAL, parallel)
    mesh = programs.workload.mesh
    assert (mesh.size(DP_REPLICATE), mesh.size("dp"), mesh.size("ep")) == (2, 2, 2)
    layer = next(b for b in programs.stages[0].chunks[0].blocks if any(w.expert for w in b.weights))
    dense = sum(w.elements for w in layer.weights if not w.expert)
    expert = sum(w.elements for w in layer.weights if w.expert)
    scatters = zero_collectives(programs.workload, layer, gather=False)
    replica = [i for i in scatters if i.collective is CollectiveKind.ALL_REDUCE]
    assert [(i.axes, i.comm_bytes) for i in replica] == [
        ((DP_REPLICATE,), dense * 2 // 4 + expert * 2 // 2)
    ]
    alone = ParallelConfig(dp=4, ep=2, zero=3, global_batch=4, grad_fp32=False)
    h = memory_report(programs, False)[0]
    a = memory_report(lower(MIXTRAL, alone), False)[0]
    assert (h.weights_bytes, h.gradients_bytes, h.optimizer_bytes, h.activations_bytes) == (
        a.weights_bytes,
        a.gradients_bytes,
        a.optimizer_bytes,
        a.activations_bytes,
    )


def test_an_expert_group_larger_than_the_shard_group_is_a_config_error() -> None:
    parallel = ParallelConfig(dp=8, dp_shard=2, ep=4, zero=3, global_batch=8)
    with pytest.raises(ConfigError, match="its shard group `dp_shard`"):
        lower(MIXTRAL, parallel)
