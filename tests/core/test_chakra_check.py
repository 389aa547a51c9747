"""The trace-set checker: sound sets pass with exact totals, each kind of breakage is caught."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.examples import sample_run_programs
from stage_core.chakra.reader import read_trace_set
from stage_core.chakra.traceset import ForeignNode, TraceSet, trace_set_from_programs
from stage_core.chakra.writer import write_trace_set
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

MIB = 1 << 20
Programs = dict[int, tuple[TraceNode, ...]]


def _edit(programs: Programs, rank: int, node_id: int, **changes: object) -> None:
    programs[rank] = tuple(
        replace(node, **changes) if node.id == node_id else node  # type: ignore[arg-type]
        for node in programs[rank]
    )


def _add(programs: Programs, rank: int, *nodes: TraceNode) -> None:
    programs[rank] = programs[rank] + nodes


def _tp_gather(node_id: int, deps: tuple[int, ...], rank: int) -> TraceNode:
    group = (0, 1) if rank < 2 else (2, 3)
    return TraceNode(node_id, "tp_all_gather", NodeKind.COLL, data_deps=deps,
                     collective=CollectiveKind.ALL_GATHER, comm_bytes=MIB, group=group)


def test_sample_run_is_sound_with_exact_totals() -> None:
    report = check_trace_set(trace_set_from_programs(sample_run_programs()))
    assert report.sound and report.violations == ()
    flops = 6 * 4096**3
    collectives = {"all_reduce": 64 * MIB, "all_gather": 8 * MIB, "reduce_scatter": 0,
                   "all_to_all": 0}
    for rank in range(4):
        totals = report.ranks[rank]
        assert totals.flops == flops and totals.comm_bytes == collectives
        assert (totals.send_bytes, totals.recv_bytes) == ((16 * MIB, 0) if rank < 2
                                                          else (0, 16 * MIB))
    assert report.to_dict()["ranks"]["2"] == {  # type: ignore[index]
        "flops": flops, "comm_bytes": collectives, "send_bytes": 0, "recv_bytes": 16 * MIB}


def _missing_dep(p: Programs) -> None:
    _edit(p, 1, 3, data_deps=(9,))


def _cycle(p: Programs) -> None:
    _edit(p, 0, 1, data_deps=(5,))


def _self_dependency(p: Programs) -> None:
    _edit(p, 3, 1, ctrl_deps=(1,))


def _duplicate_id(p: Programs) -> None:
    _edit(p, 0, 5, id=4)


def _empty_rank(p: Programs) -> None:
    p[3] = ()


def _group_without_rank(p: Programs) -> None:
    _edit(p, 2, 2, group=(0, 1))


def _group_beyond_world(p: Programs) -> None:
    for rank in (0, 1):
        _edit(p, rank, 2, group=(0, 1, 9))


def _size_mismatch(p: Programs) -> None:
    _edit(p, 1, 2, comm_bytes=32 * MIB)


def _kind_mismatch(p: Programs) -> None:
    _edit(p, 3, 4, collective=CollectiveKind.ALL_REDUCE)


def _order_mismatch(p: Programs) -> None:
    for rank in range(4):
        _add(p, rank, _tp_gather(6, (5,), rank))
    _edit(p, 1, 2, collective=CollectiveKind.ALL_GATHER, comm_bytes=MIB)
    _edit(p, 1, 6, collective=CollectiveKind.ALL_REDUCE, comm_bytes=64 * MIB)


def _independent_collectives_out_of_id_order(p: Programs) -> None:
    for rank in range(4):  # node 0 has no dependency: it is issued before node 2 by id
        _add(p, rank, _tp_gather(0 if rank == 3 else 6, (), rank))


def _unmatched_send(p: Programs) -> None:
    _edit(p, 0, 3, tag=8)


def _duplicate_recv(p: Programs) -> None:
    _add(p, 2, TraceNode(6, "pp_recv_again", NodeKind.RECV, data_deps=(5,),
                         comm_bytes=16 * MIB, peer=0, tag=7))


def _send_size_mismatch(p: Programs) -> None:
    _edit(p, 1, 3, comm_bytes=8 * MIB)


BREAKAGES: list[tuple[Callable[[Programs], None], list[str]]] = [
    (_missing_dep, [
        "rank 1: node 3 'pp_send_act' depends on node 9, which is not in the rank's trace"]),
    (_cycle, ["rank 0: every node has a dependency, so none can start",
              "rank 0: dependency cycle 1 -> 5 -> 4 -> 3 -> 2 -> 1 (5 node(s) can never run)"]),
    (_self_dependency, ["rank 3: every node has a dependency, so none can start",
                        "rank 3: dependency cycle 1 -> 1 (5 node(s) can never run)"]),
    (_duplicate_id, ["rank 0: node id 4 is used by more than one node"]),
    (_empty_rank, ["rank 3: the trace holds no nodes"]),
    (_group_without_rank, [
        "rank 2: node 2 'tp_all_reduce' is a all_reduce in group \"1\" [0, 1], which does not "
        "contain rank 2"]),
    (_group_beyond_world, [
        'group "1" [0, 1, 9] names rank 9, but the trace set has ranks 0..3']),
    (_size_mismatch, [
        "group \"1\" [0, 1]: collective #1 is all_reduce of 33554432 B (node 2 'tp_all_reduce') "
        "on rank 1 but all_reduce of 67108864 B (node 2 'tp_all_reduce') on rank 0"]),
    (_kind_mismatch, [
        "all ranks: collective #1 is all_reduce of 8388608 B (node 4 'dp_all_gather') on rank 3 "
        "but all_gather of 8388608 B (node 4 'dp_all_gather') on rank 0"]),
    (_order_mismatch, [
        "group \"1\" [0, 1]: rank 1 issues the same collectives as rank 0 in another order: #1 "
        "is all_gather of 1048576 B (node 2 'tp_all_reduce') on rank 1 but all_reduce of "
        "67108864 B (node 2 'tp_all_reduce') on rank 0"]),
    (_independent_collectives_out_of_id_order, [
        "group \"2\" [2, 3]: rank 3 issues the same collectives as rank 2 in another order: #1 "
        "is all_gather of 1048576 B (node 0 'tp_all_gather') on rank 3 but all_reduce of "
        "67108864 B (node 2 'tp_all_reduce') on rank 2"]),
    (_unmatched_send, [
        "rank 0 sends 1 message(s) of 16777216 B with tag 8 to rank 2, which posts 0 matching "
        "receive(s)",
        "rank 2 posts 1 receive(s) of 16777216 B with tag 7 from rank 0, which sends 0 matching "
        "message(s)"]),
    (_duplicate_recv, [
        "rank 2 posts 2 receive(s) of 16777216 B with tag 7 from rank 0, which sends 1 matching "
        "message(s)"]),
    (_send_size_mismatch, [
        "rank 1 sends 1 message(s) of 8388608 B with tag 7 to rank 3, which posts 0 matching "
        "receive(s)",
        "rank 3 posts 1 receive(s) of 16777216 B with tag 7 from rank 1, which sends 0 matching "
        "message(s)"]),
]


@pytest.mark.parametrize(
    ("breakage", "expected"), BREAKAGES, ids=[breakage.__name__ for breakage, _ in BREAKAGES]
)
def test_each_breakage_is_caught(
    breakage: Callable[[Programs], None], expected: list[str]
) -> None:
    programs = sample_run_programs()
    breakage(programs)
    report = check_trace_set(trace_set_from_programs(programs))
    assert not report.sound
    for violation in expected:
        assert violation in report.violations, report.violations


def test_an_unused_group_beyond_the_ranks_is_caught() -> None:
    # s22: a comm_group.json group no node used passed unseen when it named a rank not traced
    base = trace_set_from_programs(sample_run_programs())
    extra = replace(base, groups={**base.groups, "9": (2, 3, 7)})
    report = check_trace_set(extra)
    expected = 'group "9" [2, 3, 7] names rank 7, but the trace set has ranks 0..3'
    assert report.violations == (expected,)
    assert check_trace_set(replace(base, groups={**base.groups, "9": (2, 3)})).sound


def test_issue_order_follows_dependencies_not_ids() -> None:
    programs = sample_run_programs()
    for rank in range(4):
        _add(programs, rank, _tp_gather(6, (5,), rank))
    # Rank 1 numbers its nodes backwards; the dependency chain keeps the order the same.
    renumber = {old: 7 - old for old in range(1, 7)}
    programs[1] = tuple(
        replace(node, id=renumber[node.id], data_deps=tuple(renumber[d] for d in node.data_deps))
        for node in programs[1]
    )
    assert check_trace_set(trace_set_from_programs(programs)).violations == ()


def test_foreign_nodes_are_violations_and_count_in_the_graph() -> None:
    programs = sample_run_programs()
    _edit(programs, 0, 1, data_deps=(99,))
    trace_set = TraceSet(
        ranks=programs,
        foreign={0: (ForeignNode(99, "meta", "METADATA_NODE"),
                     ForeignNode(98, "load", "MEM_LOAD_NODE", data_deps=(5,)))},
    )
    report = check_trace_set(trace_set)
    assert report.violations == (
        "rank 0: node 99 'meta' is a METADATA_NODE, on which ASTRA-sim aborts",
        "rank 0: node 98 'load' is a MEM_LOAD_NODE, which STAGE traces never contain",
    )


# -- --for astra-sim ----------------------------------------------------------------------------


def _comp(node_id: int, flops: int, tensor_bytes: int) -> TraceNode:
    return TraceNode(node_id, "op", NodeKind.COMP, flops=flops, tensor_bytes=tensor_bytes)


@pytest.mark.parametrize(
    ("flops", "tensor_bytes", "message"),
    [
        (0, 4096, r"rank 0: node 0 'op' is a compute node with num_ops 0 and tensor_size 4096: "
                  r"ASTRA-sim's roofline divides 0 by 0 \(SIGABRT, a stall or a 2\^63 ns step\)"),
        (10**9, 0, r"rank 0: node 0 'op' is a compute node with num_ops 1000000000 and "
                   r"tensor_size 0: ASTRA-sim skips it"),
    ],
)  # fmt: skip
def test_astra_sim_rules_fire(flops: int, tensor_bytes: int, message: str) -> None:
    trace_set = trace_set_from_programs({0: (_comp(0, flops, tensor_bytes),)})
    assert check_trace_set(trace_set).violations == ()  # not a soundness problem
    violations = check_trace_set(trace_set, for_astra_sim=True).violations
    assert len(violations) == 1
    assert re.match(message, violations[0]), violations[0]


@pytest.mark.parametrize(("flops", "tensor_bytes"), [(1, 4096), (10**9, 4096), (0, 0)])
def test_astra_sim_rules_accept_what_astra_sim_times(flops: int, tensor_bytes: int) -> None:
    trace_set = trace_set_from_programs({0: (_comp(0, flops, tensor_bytes),)})
    assert check_trace_set(trace_set, for_astra_sim=True).violations == ()


@pytest.mark.parametrize("ctrl", [False, True])
def test_an_empty_node_that_others_wait_for_is_flagged(ctrl: bool) -> None:
    """ASTRA-sim skips a compute node without num_ops and tensor_size without releasing its
    dependents (work, empty, work: no rank finishes); alone at the end it is harmless."""
    work = _comp(2, 10**9, 4096)
    after = replace(work, ctrl_deps=(1,)) if ctrl else replace(work, data_deps=(1,))
    nodes = (_comp(0, 10**9, 4096), replace(_comp(1, 0, 0), data_deps=(0,)), after)
    violations = check_trace_set(trace_set_from_programs({0: nodes}), for_astra_sim=True).violations
    assert violations == (
        "rank 0: node 1 'op' is a compute node with num_ops 0 and tensor_size 0 that node 2 "
        "waits for: ASTRA-sim skips it without releasing its dependents, so the rank never "
        "finishes (no `finished` line); leave it out and pass its dependencies on",
    )
    leaf = trace_set_from_programs({0: nodes[:2]})
    assert check_trace_set(leaf, for_astra_sim=True).violations == ()


def _coll(node_id: int, kind: CollectiveKind, size: int, group: tuple[int, ...]) -> TraceNode:
    return TraceNode(node_id, "c", NodeKind.COLL, collective=kind, comm_bytes=size, group=group)


def _p2p(node_id: int, kind: NodeKind, peer: int, size: int) -> TraceNode:
    return TraceNode(node_id, "p", kind, peer=peer, comm_bytes=size, tag=1)


@pytest.mark.parametrize(
    ("programs", "message"),
    [
        ({0: (_p2p(0, NodeKind.SEND, 1, 0),), 1: (_p2p(0, NodeKind.RECV, 0, 0),)},
         r"rank 0: node 0 'p' is a send of 0 bytes: ASTRA-sim's chunk-id generator asserts"),
        ({0: (_coll(0, CollectiveKind.ALL_REDUCE, 1024, (0,)),),
          1: (_coll(0, CollectiveKind.ALL_REDUCE, 1024, (1,)),)},
         r"rank 0: node 0 'c' runs all_reduce over the one-rank group \[0\]: ASTRA-sim never"),
        ({0: (_coll(0, CollectiveKind.ALL_GATHER, 3, (0, 1)),),
          1: (_coll(0, CollectiveKind.ALL_GATHER, 3, (0, 1)),)},
         r"rank 0: node 0 'c' is an all_gather of 3 B, fewer than preferred-dataset-splits \(4\)"),
    ],
)  # fmt: skip
def test_astra_sim_communication_rules_fire(programs: Programs, message: str) -> None:
    trace_set = trace_set_from_programs(programs)
    violations = check_trace_set(trace_set, for_astra_sim=True).violations
    assert violations and re.match(message, violations[0]), violations
    assert all(v.startswith(("rank 0:", "rank 1:")) for v in violations)
    assert check_trace_set(trace_set).violations == ()


def test_astra_sim_communication_rules_accept_what_astra_sim_runs() -> None:
    programs = {
        rank: (_coll(0, CollectiveKind.ALL_GATHER, 4, (0, 1)),
               _coll(1, CollectiveKind.ALL_REDUCE, 0, (0, 1)))
        for rank in (0, 1)
    }  # fmt: skip
    assert check_trace_set(trace_set_from_programs(programs), for_astra_sim=True).sound


def test_written_zero_flop_nodes_pass_the_astra_sim_rules(tmp_path: Path) -> None:
    """The writer emits num_ops 1 for a node that moves bytes without arithmetic."""
    write_trace_set(tmp_path, {0: (_comp(0, 0, 4096), _comp(1, 0, 0))})
    trace_set = read_trace_set(tmp_path)
    assert [node.flops for node in trace_set.ranks[0]] == [1, 0]
    assert check_trace_set(trace_set, for_astra_sim=True).violations == ()
