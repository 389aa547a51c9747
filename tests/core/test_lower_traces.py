"""Whole trace sets are sound for a matrix of small configurations.

For every configuration: one template per pipeline stage (``stage_nodes``), materialised for
every rank of the stage (``materialize``: communicator groups and point-to-point peers bound),
then ``check_trace_set``: unique ids, dependencies inside the rank and acyclic, each group's
members issuing matching collectives in the same order, every send matched by one receive
(peer, size, tag). The matrix covers PP with every schedule, EP, CP in both styles, ZeRO 0–3
(and hybrid sharding),
the three recompute modes, SP on and off, dense and MoE models (world sizes ≤ 32, ≤ 4 layers).
The checker's per-rank totals must also equal the stage programs' exact integers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from stage_core.chakra.check import CheckReport, check_trace_set
from stage_core.chakra.traceset import trace_set_from_programs
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import NodeKind, TraceNode

MODELS: dict[str, ModelSpec] = {
    "llama": get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024),
    "gpt": get_flavor("megatron-gpt-1.7b").with_overrides(layers=4, seq_len=1024),
    "mixtral": get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=1024),
    "deepseek-moe": get_flavor("deepseek-moe-16b").with_overrides(layers=2, seq_len=1024),
}

#: (model, parallel options); global_batch counts sequences (micro-batches = B/(b·dp)).
MATRIX: list[tuple[str, dict[str, Any]]] = [
    ("llama", dict(dp=2, tp=2, pp=2, sp=True, schedule="1f1b", global_batch=8)),
    ("llama", dict(dp=2, tp=2, pp=2, sp=True, schedule="gpipe", zero=1, recompute="selective",
                   global_batch=6)),
    ("llama", dict(dp=2, tp=2, pp=2, sp=True, schedule="interleaved", vpp=2, zero=2,
                   recompute="full", global_batch=8)),
    ("llama", dict(dp=2, tp=2, pp=4, schedule="1f1b", zero=3, global_batch=16)),
    ("llama", dict(dp=4, tp=4, pp=2, sp=True, schedule="interleaved", vpp=2, zero=1,
                   global_batch=16)),
    ("llama", dict(dp=2, tp=2, pp=2, cp=2, sp=True, recompute="selective", global_batch=4)),
    ("llama", dict(dp=2, tp=2, pp=2, cp=2, sp=True, cp_style="ring", zero=1, recompute="full",
                   global_batch=4)),
    ("llama", dict(tp=2, cp=4, sp=True, cp_style="ring", zero=3, global_batch=2)),
    ("llama", dict(dp=2, tp=2, cp=2, pp=2, cp_style="ring", schedule="interleaved", vpp=2,
                   global_batch=4)),
    ("gpt", dict(dp=2, tp=2, pp=2, sp=True, zero=2, global_batch=4)),
    ("gpt", dict(dp=4, tp=4, pp=2, schedule="interleaved", vpp=2, global_batch=16)),
    ("gpt", dict(dp=2, tp=2, cp=2, sp=True, zero=3, recompute="full", global_batch=4)),
    ("gpt", dict(dp=8, pp=4, schedule="gpipe", recompute="selective", global_batch=16)),
    ("mixtral", dict(dp=4, ep=2, tp=2, pp=2, sp=True, zero=1, global_batch=8)),
    ("mixtral", dict(dp=4, ep=4, zero=3, recompute="selective", global_batch=8)),
    ("mixtral", dict(dp=2, ep=2, cp=2, tp=2, sp=True, zero=2, recompute="full", global_batch=4)),
    ("mixtral", dict(dp=4, ep=2, cp=2, sp=True, tp=2, cp_style="ring", global_batch=4)),
    ("deepseek-moe", dict(dp=2, ep=2, tp=2, pp=2, sp=True, schedule="1f1b", global_batch=4)),
    # hybrid sharding (HSDP): ZeRO inside shard groups of dp_shard, replicas all-reduce
    ("llama", dict(dp=4, dp_shard=2, tp=2, pp=2, zero=3, global_batch=8)),
    ("llama", dict(dp=4, dp_shard=2, cp=2, sp=True, tp=2, zero=2, recompute="full",
                   global_batch=8)),
    ("gpt", dict(dp=8, dp_shard=4, pp=2, zero=1, global_batch=16)),
    ("mixtral", dict(dp=8, dp_shard=4, ep=2, zero=3, global_batch=8)),
]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    name, options = case
    return name + "-" + "-".join(f"{k}{v}" for k, v in options.items() if k != "global_batch")


def trace_programs(programs: ProgramSet) -> dict[int, tuple[TraceNode, ...]]:
    """Every rank's concrete nodes."""
    mesh = programs.workload.mesh
    ranks: dict[int, tuple[TraceNode, ...]] = {}
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        for rank in programs.ranks(stage.stage):
            ranks[rank] = tuple(materialize(template, rank, mesh))
    return ranks


def check(programs: ProgramSet) -> tuple[CheckReport, dict[int, tuple[TraceNode, ...]]]:
    ranks = trace_programs(programs)
    return check_trace_set(trace_set_from_programs(ranks)), ranks


def stage_flops(programs: ProgramSet, stage_index: int) -> int:
    """The exact FLOPs of one rank of a stage: its tasks' instructions plus the optimizer."""
    stage = programs.stages[stage_index]
    total = stage.optimizer.flops
    for task in stage.tasks:
        for block in stage.chunks[task.chunk].blocks:
            total += sum(i.flops for i in (block.fwd if task.phase == "F" else block.bwd))
    return total


@pytest.mark.parametrize("case", MATRIX, ids=[_id(c) for c in MATRIX])
def test_trace_set_is_sound(case: tuple[str, dict[str, Any]]) -> None:
    name, options = case
    parallel = ParallelConfig(**options)
    assert parallel.world_size <= 32
    programs = lower(MODELS[name], parallel)
    report, ranks = check(programs)
    assert report.violations == ()
    assert sorted(ranks) == list(range(parallel.world_size))
    send = sum(t.send_bytes for t in report.ranks.values())
    assert send == sum(t.recv_bytes for t in report.ranks.values())
    for rank, totals in report.ranks.items():
        stage = programs.stage_of(rank)
        assert totals.flops == stage_flops(programs, stage)
        expected: Counter[str] = Counter()
        for node in ranks[rank]:
            if node.kind == NodeKind.COLL:
                # a group of every rank is None, as Chakra writes it (no pg_name)
                assert node.group is None or rank in node.group
                expected[str(node.collective)] += node.comm_bytes
        assert {k: v for k, v in totals.comm_bytes.items() if v} == dict(expected)


SMALL = ParallelConfig(dp=2, tp=2, pp=2, cp=2, sp=True, global_batch=4)


def test_ranks_of_a_stage_share_one_template() -> None:
    """Generation cost grows with pp, not with the GPU count: ranks of a stage differ only in
    their groups and peers."""
    programs = lower(MODELS["llama"], SMALL)
    ranks = trace_programs(programs)
    for stage in programs.stages:
        members = programs.ranks(stage.stage)
        shapes = {
            tuple(
                (n.name, n.kind, n.flops, n.comm_bytes, n.data_deps, n.ctrl_deps)
                for n in ranks[r]
            )
            for r in members
        }
        assert len(shapes) == 1 and len(members) == 8


def test_groups_are_the_mesh_axes() -> None:
    """Default rank order pp, dp, ep, cp, tp (tp fastest): tp groups are consecutive ranks, cp
    groups stride tp, dp groups stride cp·tp; pipeline peers stride dp·cp·tp."""
    programs = lower(MODELS["llama"], SMALL)
    ranks = trace_programs(programs)
    groups = {n.group for n in ranks[5] if n.kind == NodeKind.COLL}
    assert (4, 5) in groups  # tp
    assert (5, 7) in groups  # cp
    peers = {n.peer for n in ranks[5] if n.kind in (NodeKind.SEND, NodeKind.RECV)}
    assert peers == {13}  # rank 5 is on stage 0; its stage-1 peer is 5 + 8


def test_a_tampered_trace_is_caught() -> None:
    """The matrix above passes because the traces are sound, not because the checker is blind."""
    programs = lower(MODELS["llama"], ParallelConfig(dp=2, tp=2, pp=2, sp=True, global_batch=4))
    ranks = trace_programs(programs)
    index = next(i for i, n in enumerate(ranks[3]) if n.kind == NodeKind.SEND)
    node = ranks[3][index]
    tampered = TraceNode(**{**_fields(node), "comm_bytes": node.comm_bytes + 2})
    ranks[3] = (*ranks[3][:index], tampered, *ranks[3][index + 1:])
    report = check_trace_set(trace_set_from_programs(ranks))
    assert not report.sound


def _fields(node: TraceNode) -> dict[str, Any]:
    return {name: getattr(node, name) for name in TraceNode.__dataclass_fields__}
