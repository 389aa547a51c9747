"""A stable, readable text dump of a trace set, for golden files and eyeballing.

Holds :func:`dump_trace_set` and :func:`dump_node`. One line per node, ranks in order, nodes in
file order, every number an exact integer; the format only changes on purpose, and golden files
under ``tests/core/golden/`` pin it. Example::

    trace set: 2 ranks, 1 group
    group "1": [0, 1]
    rank 0: 2 nodes
      1 COMP 'fwd' flops=2048 tensor_bytes=96
      2 COLL 'ar' all_reduce 64 B group "1" data=[1]
"""

from __future__ import annotations

from stage_core.chakra.traceset import ForeignNode, TraceSet
from stage_core.trace import NodeKind, TraceNode


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def _tensors(pairs: tuple[tuple[str, int], ...]) -> str:
    return "[" + ", ".join(f"{name}:{size}" for name, size in pairs) + "]"


def dump_node(node: TraceNode | ForeignNode, names: dict[tuple[int, ...], str]) -> str:
    """One node as one line (without indentation); ``names`` maps groups to their ids."""
    if isinstance(node, ForeignNode):
        text = f"{node.id} FOREIGN {node.type_name} {node.name!r}"
    else:
        text = f"{node.id} {node.kind.name} {node.name!r}"
        if node.kind is NodeKind.COMP:
            text += f" flops={node.flops} tensor_bytes={node.tensor_bytes}"
        elif node.kind is NodeKind.COLL:
            collective = node.collective.value if node.collective is not None else "?"
            if node.group is None:
                where = "all ranks"
            elif node.group in names:
                where = f'group "{names[node.group]}"'
            else:
                where = f"group {_ints(node.group)}"
            text += f" {collective} {node.comm_bytes} B {where}"
        else:
            arrow = "to" if node.kind is NodeKind.SEND else "from"
            text += f" {node.comm_bytes} B {arrow} {node.peer} tag={node.tag}"
        if node.inputs:
            text += f" inputs={_tensors(node.inputs)}"
        if node.outputs:
            text += f" outputs={_tensors(node.outputs)}"
    if node.data_deps:
        text += f" data={_ints(node.data_deps)}"
    if node.ctrl_deps:
        text += f" ctrl={_ints(node.ctrl_deps)}"
    return text


def dump_trace_set(trace_set: TraceSet) -> str:
    """The whole trace set as text (see the module docstring), ending with a newline."""
    count = len(trace_set.groups)
    lines = [
        f"trace set: {trace_set.world_size} rank{'s' if trace_set.world_size != 1 else ''}, "
        f"{count} group{'s' if count != 1 else ''}"
    ]
    ordered = sorted(trace_set.groups.items(), key=lambda item: int(item[0]))
    for name, ranks in ordered:
        lines.append(f'group "{name}": {_ints(tuple(ranks))}')
    names = {tuple(ranks): name for name, ranks in ordered}
    for rank, nodes in sorted(trace_set.ranks.items()):
        foreign = trace_set.foreign.get(rank, ())
        total = len(nodes) + len(foreign)
        lines.append(f"rank {rank}: {total} node{'s' if total != 1 else ''}")
        lines.extend(f"  {dump_node(node, names)}" for node in nodes)
        lines.extend(f"  {dump_node(node, names)}" for node in foreign)
    return "\n".join(lines) + "\n"
