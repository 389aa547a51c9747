"""Empty compute nodes (no FLOPs, no bytes: an add's backward) are left out of the traces with
their dependencies passed on (stage_core/lower/elide.py): ASTRA-sim skips such a node without
releasing its dependents. Checked on hand-built templates against the rewiring worked out in
the test, and on lowered programs by reachability: whatever waited for what before still does."""

from __future__ import annotations

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.traceset import trace_set_from_programs
from stage_core.lower.elide import elide_empty, is_empty
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import lower
from stage_core.lower.program_node import ProgramNode
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import NodeKind, TraceNode


def _comp(
    node_id: int, work: bool, data: tuple[int, ...] = (), ctrl: tuple[int, ...] = ()
) -> ProgramNode:
    size = 1024 if work else 0
    node = TraceNode(node_id, f"n{node_id}", NodeKind.COMP, data, ctrl, flops=size,
                     tensor_bytes=size)  # fmt: skip
    return ProgramNode(node, source=("layer", "bwd", node_id))


def _deps(template: list[ProgramNode]) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [(i.node.name, i.node.data_deps, i.node.ctrl_deps) for i in template]


def test_a_template_without_empty_nodes_is_unchanged() -> None:
    template = [_comp(0, True), _comp(1, True, (0,)), _comp(2, True, (), (1,))]
    assert elide_empty(template) == template


def test_dependents_wait_for_what_the_elided_node_waited_for() -> None:
    # n0, n1 work; n2 empty, data on n0, control on n1; n3 data on n2; n4 control on n2;
    # n5 empty on n2 (a chain); n6 data on n5 and n0
    template = [
        _comp(0, True), _comp(1, True), _comp(2, False, (0,), (1,)), _comp(3, True, (2,)),
        _comp(4, True, (), (2,)), _comp(5, False, (2,)), _comp(6, True, (5, 0)),
    ]  # fmt: skip
    result = elide_empty(template)
    assert [i.node.id for i in result] == [0, 1, 2, 3, 4]  # renumbered densely, order kept
    assert _deps(result) == [
        ("n0", (), ()),
        ("n1", (), ()),
        ("n3", (0,), (1,)),  # data flows through n2 from n0; n2's control order on n1 stays
        ("n4", (), (0, 1)),  # a control dependency on n2 waits for all its parents
        ("n6", (0,), (1,)),  # through n5 and n2; n0 named once
    ]
    assert [i.source for i in result] == [("layer", "bwd", k) for k in (0, 1, 3, 4, 6)]


def test_an_empty_root_releases_its_dependents() -> None:
    result = elide_empty([_comp(0, False), _comp(1, True, (0,)), _comp(2, True, (1,))])
    assert _deps(result) == [("n1", (), ()), ("n2", (0,), ())]


def _reachable(template: list[ProgramNode]) -> list[set[int]]:
    """For every node (by position), the positions of all nodes it transitively waits for."""
    before: list[set[int]] = []
    for item in template:
        waits: set[int] = set()
        for dep in (*item.node.data_deps, *item.node.ctrl_deps):
            waits |= before[dep] | {dep}
        before.append(waits)
    return before


CONFIGS = [
    ("megatron-gpt-1.7b", dict(tp=2, sp=True, pp=2, global_batch=4, layers=4)),
    ("llama3-8b", dict(dp=2, pp=2, schedule="interleaved", vpp=2, zero=1, global_batch=8,
                       layers=4, recompute="full")),
    ("mixtral-8x7b", dict(ep=2, dp=2, pp=2, zero=3, global_batch=8, layers=2)),
]  # fmt: skip


@pytest.mark.parametrize(("flavor", "settings"), CONFIGS)
def test_lowered_traces_keep_every_ordering_without_empty_nodes(
    flavor: str, settings: dict[str, object]
) -> None:
    layers = settings.pop("layers")
    try:
        model = get_flavor(flavor).with_overrides(layers=layers, seq_len=256)
        programs = lower(model, ParallelConfig(**settings))  # type: ignore[arg-type]
    finally:
        settings["layers"] = layers
    elided_any = False
    for stage in programs.stages:
        full = stage_nodes(programs, stage, keep_empty=True)
        kept = stage_nodes(programs, stage)
        empty = {i for i, item in enumerate(full) if is_empty(item.node)}
        elided_any = elided_any or bool(empty)
        assert not any(is_empty(item.node) for item in kept)
        position = [i for i in range(len(full)) if i not in empty]  # kept id -> full position
        assert [i.node.name for i in kept] == [full[i].node.name for i in position]
        before, after = _reachable(full), _reachable(kept)
        for new_id, old_id in enumerate(position):
            assert {position[k] for k in after[new_id]} == before[old_id] - empty
        rank = programs.ranks(stage.stage)[0]
        nodes = tuple(materialize(kept, rank, programs.workload.mesh))
        report = check_trace_set(trace_set_from_programs({0: nodes}), for_astra_sim=True)
        assert not [v for v in report.violations if "num_ops 0 and tensor_size 0" in v]
    assert elided_any  # the residual adds' backwards were there to elide
