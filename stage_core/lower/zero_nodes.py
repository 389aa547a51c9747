"""ZeRO's collectives in a stage template: which a block needs and how they are grouped.

Holds :func:`zero_collectives` (a block's ZeRO-3 parameter all-gathers or ZeRO-2/3 gradient
reduce-scatters, with hybrid sharding's replica all-reduce), :func:`zero_unit` (the ones issued
for a block position of a pass: the block's own, FSDP's root unit's together, DeepSpeed's
re-gather under recomputation) and :func:`emit_held_scatters` (``zero_held``: a chunk's
reduce-scatters one after the other after its last backward). Where in the schedule they go is
decided by :func:`stage_core.lower.nodes.stage_nodes`.
"""

from __future__ import annotations

import math

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.experts import data_axes
from stage_core.lower.node_emit import Emitter
from stage_core.lower.program import Workload
from stage_core.lower.program_node import ZERO_SCATTER
from stage_core.plans import DP_REPLICATE
from stage_core.trace import CollectiveKind


def _data_axes(workload: Workload, expert: bool) -> tuple[str, ...]:
    return data_axes(workload.axis_sizes, workload.expert_axes, expert)


def zero_collectives(workload: Workload, block: BoundBlock, gather: bool) -> list[Instr]:
    """ZeRO-3 parameter all-gathers (``gather``) or ZeRO-2/3 gradient reduce-scatters of a block;
    under hybrid sharding each reduce-scatter over the shard group is followed by an all-reduce
    of the rank's gradient shard over the replicas (``dpr``), as FSDP's ``HYBRID_SHARD`` does
    after every backward (``_reduce_grad``: ``reduce_scatter`` then ``all_reduce`` over the
    inter-node group; FSDP2 HSDP likewise)."""
    by_axes: dict[tuple[str, ...], int] = {}
    replicas = workload.axis_sizes[DP_REPLICATE] > 1 and not gather
    replicated = 0  # gradient-shard bytes all-reduced over the replicas
    data_of = {  # the data axes by weight.expert, and how many ranks share a copy over them
        expert: (axes, math.prod(workload.axis_sizes[a] for a in axes))
        for expert in {weight.expert for weight in block.weights}
        for axes in (_data_axes(workload, expert),)
    }
    for weight in block.weights:
        axes, factor = data_of[weight.expert]
        if not axes:
            continue
        if gather:
            by_axes[axes] = by_axes.get(axes, 0) + weight.elements // factor * workload.weight_bytes
        else:
            by_axes[axes] = by_axes.get(axes, 0) + weight.elements * workload.grad_bytes
            if replicas and DP_REPLICATE in weight.grad_axes:
                replicated += weight.elements // factor * workload.grad_bytes
    kind = CollectiveKind.ALL_GATHER if gather else CollectiveKind.REDUCE_SCATTER
    name = "zero.param_all_gather" if gather else "zero.grad_reduce_scatter"
    result = [
        Instr(name, "step", "comm", collective=kind, axes=a, comm_bytes=s)
        for a, s in by_axes.items()
    ]
    if replicated:
        all_reduce = CollectiveKind.ALL_REDUCE
        axes = (DP_REPLICATE,)
        result.append(
            Instr("zero.grad_replica_all_reduce", "step", "comm", collective=all_reduce,
                  axes=axes, comm_bytes=replicated)
        )  # fmt: skip
    return result


def zero_unit(
    workload: Workload,
    blocks: list[BoundBlock],
    k: int,
    gather: bool,
    backward: bool,
    root: frozenset[str],
    regather: frozenset[str] = frozenset(),
) -> list[tuple[int, int, Instr]]:
    """The ZeRO gathers (``gather``) or reduce-scatters issued for the block at position ``k``
    of a pass (``blocks`` in the pass's order), each as (the position of the block it is for,
    its index in :func:`zero_collectives`, instruction): the block's own, or for a block of
    FSDP's root unit (its kind in ``root``) the whole unit's at the unit's first position
    (a forward's gathers) or last one (a backward's scatters), and no gathers in a
    backward. A backward's gathers of a block whose kind is in ``regather`` are issued twice
    (the recomputed forward's, then the backward's own)."""
    if blocks[k].kind not in root:
        own = list(enumerate(zero_collectives(workload, blocks[k], gather)))
        twice = gather and backward and blocks[k].kind in regather
        return [(k, i, x) for i, x in own] + ([(k, i, x) for i, x in own] if twice else [])
    if gather and backward:
        return []
    members = [j for j, block in enumerate(blocks) if block.kind in root]
    if k != (members[0] if gather else members[-1]):
        return []
    return [
        (j, i, x)
        for j in members
        for i, x in enumerate(zero_collectives(workload, blocks[j], gather))
    ]


def emit_held_scatters(
    em: Emitter,
    workload: Workload,
    blocks: list[BoundBlock],
    prefix: str,
    last: int,
    sync_ids: list[int],
) -> int:
    """Under ``zero_held`` (:func:`~.nodes.stage_nodes`): every block's gradient reduce-scatters
    (``blocks`` in backward order) after the chunk's last backward ``last``, each after the one
    before, a replica all-reduce after its scatter; all of them go to ``sync_ids``. Returns the
    last reduce-scatter (the caller's next node also waits for the replica all-reduces)."""
    previous = last
    for position, block in enumerate(blocks):
        scattered: tuple[int, ...] = ()
        for i, instr in enumerate(zero_collectives(workload, block, gather=False)):
            deps: tuple[int, ...] = (previous,) if previous >= 0 else ()
            if instr.axes == (DP_REPLICATE,):
                deps = scattered  # FSDP's replica all-reduce waits for the scatter
            name = f"{prefix}.b{position}.{block.kind}.{instr.name}"
            node_id = em.instr(instr, name, deps, (), (block.kind, ZERO_SCATTER, i))
            if instr.axes != (DP_REPLICATE,):
                previous = node_id
            scattered = (*scattered, node_id)
        sync_ids.extend(scattered)
    return previous
