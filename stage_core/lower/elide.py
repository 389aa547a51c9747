"""Compute nodes that do no work, left out of a stage's trace with their dependencies passed on.

Holds :func:`is_empty` and :func:`elide_empty`.

A bound instruction can cost nothing: the backward of an add hands the output gradient to
each full-size operand unchanged (PyTorch ``derivatives.yaml``, ``add.Tensor``: ``self:
grad``, ``other: maybe_multiply(grad, alpha)``), so no kernel runs for it. The program keeps
such an instruction (its tensors name the gradients it passes on, and a framework's timing may
charge a kernel there: llm-foundry's bf16 cast of the fp32 gradient,
:data:`stage_explore.analytical.eager.LLMFOUNDRY_RESIDUAL_ADD`), but a Chakra compute node with
neither FLOPs nor bytes is not a kernel, and ASTRA-sim 518bd51 does not survive it: under
``roofline-enabled`` its ranks never finish (no ``finished`` line; seen on
``tests/core/test_mamba_layer.py::test_hybrid_runs_in_the_real_astra_sim``). So the traces
leave it out.

Leaving a node out keeps every ordering it carried. A node that waited for an elided node
waits instead for what the elided node waited for: a data dependency on it becomes data
dependencies on its data parents and control dependencies on its control parents (the data
flows through it; the schedule's order does too); a control dependency on it becomes control
dependencies on all its parents. Chains of elided nodes resolve transitively. The other nodes
keep their order and are renumbered densely (ASTRA-sim issues ready nodes in id order, so the
issue order of what remains is unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from stage_core.lower.program_node import ProgramNode
from stage_core.trace import NodeKind, TraceNode


def is_empty(node: TraceNode) -> bool:
    """A compute node with neither FLOPs nor bytes: no kernel runs for it."""
    return node.kind is NodeKind.COMP and node.flops == 0 and node.tensor_bytes == 0


def _unique(ids: list[int], without: Sequence[int] = ()) -> tuple[int, ...]:
    seen = set(without)
    result = []
    for node_id in ids:
        if node_id not in seen:
            seen.add(node_id)
            result.append(node_id)
    return tuple(result)


def elide_empty(template: Sequence[ProgramNode]) -> list[ProgramNode]:
    """``template`` without its :func:`is_empty` nodes, their dependents rewired onto their
    parents and the rest renumbered 0, 1, … in order (module docstring). Node ids must be the
    template's positions and every dependency must name an earlier node, as
    :func:`stage_core.lower.nodes.stage_nodes` emits them."""
    first = next((i for i, item in enumerate(template) if is_empty(item.node)), len(template))
    if first == len(template):
        return list(template)
    result: list[ProgramNode] = list(template[:first])  # ids and dependencies unchanged
    new_id: dict[int, int] = {i: i for i in range(first)}
    # an elided node's parents, in new ids: (data, control)
    through: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for position in range(first, len(template)):
        item = template[position]
        node = item.node
        assert node.id == position, f"node {node.name!r} has id {node.id} at {position}"
        deps = (*node.data_deps, *node.ctrl_deps)
        assert all(dep < position for dep in deps), f"node {node.name!r} depends on a later node"
        if any(dep in through for dep in deps):
            data: list[int] = []
            ctrl: list[int] = []
            for dep in node.data_deps:
                if dep in through:
                    data.extend(through[dep][0])
                    ctrl.extend(through[dep][1])
                else:
                    data.append(new_id[dep])
            for dep in node.ctrl_deps:
                if dep in through:
                    ctrl.extend(through[dep][0])
                    ctrl.extend(through[dep][1])
                else:
                    ctrl.append(new_id[dep])
            data_deps = _unique(data)
            ctrl_deps = _unique(ctrl, without=data_deps)
        else:  # only renumbered
            data_deps = tuple(new_id[dep] for dep in node.data_deps)
            ctrl_deps = tuple(new_id[dep] for dep in node.ctrl_deps)
        if is_empty(node):
            through[position] = (data_deps, ctrl_deps)
            continue
        new_id[position] = len(result)
        if (len(result), data_deps, ctrl_deps) == (node.id, node.data_deps, node.ctrl_deps):
            result.append(item)
            continue
        moved = replace(node, id=len(result), data_deps=data_deps, ctrl_deps=ctrl_deps)
        result.append(replace(item, node=moved))
    return result
