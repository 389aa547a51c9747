"""Soundness check of a trace set, and per-rank totals.

Holds :func:`check_trace_set` → :class:`CheckReport` (violations as one-line strings, plus
:class:`RankTotals` per rank), :func:`astra_sim_node_problem` (the ``--for astra-sim`` rule of
one node) and :func:`format_group`.

What is checked, per rank: node ids are unique; every dependency names a node of the same rank;
the dependency graph is acyclic; at least one node has no dependency; every collective's group
contains the rank and only ranks that exist (and so does every group of the communicator file,
used or not); no node of a type STAGE does not emit (METADATA and
other foreign nodes). Across ranks: the members of each group issue matching collectives (kind
and size) in the same order, and every send has exactly one matching receive (source,
destination, size, tag) and vice versa.

With ``for_astra_sim`` (``stage check --for astra-sim``), also what makes ASTRA-sim 518bd51's
analytical backends abort, hang or silently mistime a node under ``roofline-enabled``, each
seen with the real binary: a compute node with ``num_ops`` 0 and ``tensor_size`` > 0 (a 0/0
roofline time, cast to 2^63 ns: SIGABRT from the event queue's ``event_time_ns >=
current_time`` assertion, a rank that never finishes, or a finish at 2^63 ns); a compute
node with FLOPs but ``tensor_size`` 0 (skipped: its work takes no time); a compute node with
neither ``num_ops`` nor ``tensor_size`` that another node waits for (skipped without releasing
its dependents: the rank never finishes, no ``finished`` line; alone at the end of a trace it is
harmless; STAGE's traces leave such nodes out, :mod:`stage_core.lower.elide`); a send or receive of
0 bytes (SIGABRT in the chunk-id generator); a collective over a one-rank group (never
completes: no ``finished`` line); an all-gather of fewer bytes than ``preferred-dataset-splits``
(runs forever). METADATA nodes (abort) are flagged in both modes.

Order. A rank's *issue order* is the topological order of its dependency graph that always takes
the ready node with the smallest id — the order in which ASTRA-sim issues ready nodes. The
collectives of one group on a rank, in issue order, form that rank's sequence for the group;
every member's sequence must equal the sequence of the group's lowest-ranked member. Nodes on
a dependency cycle never become ready and are left out of the order (the cycle is reported).
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stage_core.chakra.traceset import ForeignNode, TraceSet
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

_COLLECTIVE_KEYS: tuple[str, ...] = tuple(kind.value for kind in CollectiveKind)


@dataclass(frozen=True, slots=True)
class RankTotals:
    """What one rank computes and communicates: FLOPs and bytes (exact integers)."""

    flops: int
    comm_bytes: dict[str, int]
    send_bytes: int
    recv_bytes: int

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``flops``, ``comm_bytes`` (all four kinds), ``send_bytes``, ``recv_bytes``."""
        return {
            "flops": self.flops,
            "comm_bytes": dict(self.comm_bytes),
            "send_bytes": self.send_bytes,
            "recv_bytes": self.recv_bytes,
        }


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Result of :func:`check_trace_set`: totals per rank and the violations found."""

    ranks: dict[int, RankTotals]
    violations: tuple[str, ...]

    @property
    def sound(self) -> bool:
        """True when there is no violation."""
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``violations`` (list) and ``ranks`` (rank id string → totals)."""
        return {
            "violations": list(self.violations),
            "ranks": {str(rank): totals.to_dict() for rank, totals in self.ranks.items()},
        }


def format_group(group: tuple[int, ...] | None, names: dict[tuple[int, ...], str]) -> str:
    """``group "1" [0, 1]``; long groups abbreviated; ``all ranks`` for ``None``."""
    if group is None:
        return "all ranks"
    shown = (
        ", ".join(map(str, group))
        if len(group) <= 8
        else (f"{group[0]}, {group[1]}, {group[2]}, …, {group[-1]} ({len(group)} ranks)")
    )
    name = names.get(group)
    return f'group "{name}" [{shown}]' if name else f"group [{shown}]"


def _describe(node: TraceNode | ForeignNode) -> str:
    return f"node {node.id} {node.name!r}"


#: ``preferred-dataset-splits`` as STAGE writes it (the ASTRA-sim backend's default).
ASTRA_SIM_SPLITS = 4


def astra_sim_node_problem(
    node: TraceNode, *, preferred_dataset_splits: int = ASTRA_SIM_SPLITS
) -> str | None:
    """Why ASTRA-sim (roofline enabled) cannot run or time ``node`` as written, or None."""
    if node.kind is NodeKind.SEND or node.kind is NodeKind.RECV:
        if node.comm_bytes == 0:
            return (
                f"{_describe(node)} is a {'send' if node.kind is NodeKind.SEND else 'receive'} "
                "of 0 bytes: ASTRA-sim's chunk-id generator asserts and the run ends in SIGABRT"
            )
        return None
    if node.kind is NodeKind.COLL:
        if node.group is not None and len(node.group) == 1:
            return (
                f"{_describe(node)} runs {node.collective} over the one-rank group "
                f"{list(node.group)}: ASTRA-sim never completes it, so no rank prints `finished`"
            )
        if (
            node.collective is CollectiveKind.ALL_GATHER
            and 0 < node.comm_bytes < preferred_dataset_splits
        ):
            return (
                f"{_describe(node)} is an all_gather of {node.comm_bytes} B, fewer than "
                f"preferred-dataset-splits ({preferred_dataset_splits}): ASTRA-sim cannot split "
                "it and runs forever"
            )
        return None
    if node.kind is not NodeKind.COMP:
        return None
    if node.flops == 0 and node.tensor_bytes > 0:
        return (
            f"{_describe(node)} is a compute node with num_ops 0 and tensor_size "
            f"{node.tensor_bytes}: ASTRA-sim's roofline divides 0 by 0 (SIGABRT, a stall or "
            "a 2^63 ns step); "
            "write num_ops >= 1 (STAGE writes 1, which times the node's memory traffic)"
        )
    if node.flops > 0 and node.tensor_bytes == 0:
        return (
            f"{_describe(node)} is a compute node with num_ops {node.flops} and tensor_size 0: "
            "ASTRA-sim skips it, so its work takes no time; write the bytes it moves"
        )
    return None


def _empty_parents(nodes: Sequence[TraceNode]) -> list[str]:
    """Compute nodes with neither ``num_ops`` nor ``tensor_size`` that another node of the rank
    waits for: ASTRA-sim skips such a node without releasing its dependents (seen with the real
    binary: a trace of work, an empty node, work after it never finishes)."""
    waiting: dict[int, int] = {}
    for node in nodes:
        for dep in (*node.data_deps, *node.ctrl_deps):
            waiting.setdefault(dep, node.id)
    return [
        f"{_describe(node)} is a compute node with num_ops 0 and tensor_size 0 that node "
        f"{waiting[node.id]} waits for: ASTRA-sim skips it without releasing its dependents, so "
        "the rank never finishes (no `finished` line); leave it out and pass its dependencies on"
        for node in nodes
        if node.kind is NodeKind.COMP
        and node.flops == 0
        and node.tensor_bytes == 0
        and node.id in waiting
    ]


def _totals(nodes: Sequence[TraceNode]) -> RankTotals:
    flops = send = recv = 0
    comm = dict.fromkeys(_COLLECTIVE_KEYS, 0)
    for node in nodes:
        if node.kind is NodeKind.COMP:
            flops += node.flops
        elif node.kind is NodeKind.COLL and node.collective is not None:
            comm[node.collective.value] += node.comm_bytes
        elif node.kind is NodeKind.SEND:
            send += node.comm_bytes
        elif node.kind is NodeKind.RECV:
            recv += node.comm_bytes
    return RankTotals(flops, comm, send, recv)


def _find_cycle(remaining: set[int], deps: list[list[int]]) -> list[int]:
    """A cycle among ``remaining`` node indices (each has a dependency in ``remaining``)."""
    start = min(remaining)
    path: list[int] = []
    position: dict[int, int] = {}
    current = start
    while current not in position:
        position[current] = len(path)
        path.append(current)
        current = min(dep for dep in deps[current] if dep in remaining)
    cycle = path[position[current] :]
    return cycle + [cycle[0]]


def _rank_graph(
    rank: int, nodes: Sequence[TraceNode | ForeignNode], violations: list[str]
) -> list[int]:
    """Check one rank's ids and dependencies; return node indices in issue order."""
    if not nodes:
        violations.append(f"rank {rank}: the trace holds no nodes")
        return []
    index_of: dict[int, int] = {}
    for index, node in enumerate(nodes):
        if node.id in index_of:
            violations.append(f"rank {rank}: node id {node.id} is used by more than one node")
        else:
            index_of[node.id] = index
    deps: list[list[int]] = []
    backward_only = len(index_of) == len(nodes)  # unique ids, every dependency on a smaller id
    for node in nodes:
        node_deps = []
        for dep in dict.fromkeys(node.data_deps + node.ctrl_deps):
            if dep >= node.id:
                backward_only = False
            if dep in index_of:
                node_deps.append(index_of[dep])
            else:
                violations.append(
                    f"rank {rank}: {_describe(node)} depends on node {dep}, "
                    "which is not in the rank's trace"
                )
        deps.append(node_deps)
    if all(node.data_deps or node.ctrl_deps for node in nodes):
        violations.append(f"rank {rank}: every node has a dependency, so none can start")
    if backward_only:  # ascending ids are a topological order, and the smallest id is ready
        return sorted(range(len(nodes)), key=lambda index: nodes[index].id)
    waiting = [len(node_deps) for node_deps in deps]
    users: list[list[int]] = [[] for _ in nodes]
    for index, node_deps in enumerate(deps):
        for dep in node_deps:
            users[dep].append(index)
    ready = [(nodes[index].id, index) for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (nodes[user].id, user))
    if len(order) < len(nodes):
        remaining = set(range(len(nodes))) - set(order)
        cycle = " -> ".join(str(nodes[index].id) for index in _find_cycle(remaining, deps))
        violations.append(
            f"rank {rank}: dependency cycle {cycle} ({len(remaining)} node(s) can never run)"
        )
    return order


def _compare_group(
    group: tuple[int, ...],
    sequences: dict[int, list[tuple[CollectiveKind, int]]],
    nodes: dict[int, list[TraceNode]],
    label: str,
    violations: list[str],
) -> None:
    """Compare every member's collective sequence with the lowest member's."""
    first = group[0]
    reference = sequences.get(first, [])

    def item(rank: int, position: int) -> str:
        kind, size = sequences[rank][position]
        return f"{kind} of {size} B ({_describe(nodes[rank][position])})"

    for rank in group[1:]:
        sequence = sequences.get(rank, [])
        if sequence == reference:
            continue
        if sorted(sequence) == sorted(reference):
            position = next(
                i for i, (a, b) in enumerate(zip(sequence, reference, strict=True)) if a != b
            )
            violations.append(
                f"{label}: rank {rank} issues the same collectives as rank {first} in another "
                f"order: #{position + 1} is {item(rank, position)} on rank {rank} but "
                f"{item(first, position)} on rank {first}"
            )
            continue
        common = min(len(sequence), len(reference))
        position = next((i for i in range(common) if sequence[i] != reference[i]), common)
        if position < common:
            violations.append(
                f"{label}: collective #{position + 1} is {item(rank, position)} on rank {rank} "
                f"but {item(first, position)} on rank {first}"
            )
        else:
            violations.append(
                f"{label}: rank {rank} issues {len(sequence)} collective(s) but rank {first} "
                f"issues {len(reference)}"
            )


def check_trace_set(
    trace_set: TraceSet,
    *,
    for_astra_sim: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """Check ``trace_set`` (see the module docstring) and total each rank's work.

    ``for_astra_sim`` adds the rules of :func:`astra_sim_node_problem` for every node and
    flags empty compute nodes that other nodes wait for. ``progress`` is called with (ranks
    checked, ranks) after each rank's own checks.
    """
    violations: list[str] = []
    world = trace_set.world_size
    all_ranks = tuple(range(world))
    names = {tuple(ranks): name for name, ranks in trace_set.groups.items()}
    sequences: dict[tuple[int, ...], dict[int, list[tuple[CollectiveKind, int]]]] = defaultdict(
        dict
    )
    sequence_nodes: dict[tuple[int, ...], dict[int, list[TraceNode]]] = defaultdict(dict)
    sends: Counter[tuple[int, int, int, int]] = Counter()
    receives: Counter[tuple[int, int, int, int]] = Counter()
    totals: dict[int, RankTotals] = {}
    bad_groups: set[tuple[int, ...]] = set()
    for done, (rank, own_nodes) in enumerate(sorted(trace_set.ranks.items()), start=1):
        if progress is not None and done > 1:
            progress(done - 1, world)
        foreign = trace_set.foreign.get(rank, ())
        every: list[TraceNode | ForeignNode] = [*own_nodes, *foreign]
        for alien in foreign:
            reason = (
                "on which ASTRA-sim aborts"
                if alien.type_name == "METADATA_NODE"
                else "which STAGE traces never contain"
            )
            violations.append(f"rank {rank}: {_describe(alien)} is a {alien.type_name}, {reason}")
        order = _rank_graph(rank, every, violations)
        totals[rank] = _totals(own_nodes)
        if for_astra_sim:
            for own in own_nodes:
                problem = astra_sim_node_problem(own)
                if problem is not None:
                    violations.append(f"rank {rank}: {problem}")
            violations.extend(f"rank {rank}: {p}" for p in _empty_parents(own_nodes))
        for index in order:
            node = every[index]
            if not isinstance(node, TraceNode):
                continue
            if node.kind is NodeKind.COLL and node.collective is not None:
                group = all_ranks if node.group is None else node.group
                if rank not in group:
                    violations.append(
                        f"rank {rank}: {_describe(node)} is a {node.collective.value} in "
                        f"{format_group(group, names)}, which does not contain rank {rank}"
                    )
                    continue
                if group[-1] >= world and group not in bad_groups:
                    bad_groups.add(group)
                    violations.append(
                        f"{format_group(group, names)} names rank {group[-1]}, but the trace "
                        f"set has ranks 0..{world - 1}"
                    )
                entry = (node.collective, node.comm_bytes)
                sequences[group].setdefault(rank, []).append(entry)
                sequence_nodes[group].setdefault(rank, []).append(node)
            elif node.kind is NodeKind.SEND:
                sends[(rank, node.peer, node.comm_bytes, node.tag)] += 1
            elif node.kind is NodeKind.RECV:
                receives[(node.peer, rank, node.comm_bytes, node.tag)] += 1
    if progress is not None and trace_set.ranks:
        progress(len(trace_set.ranks), world)
    for ranks in trace_set.groups.values():  # the communicator file's groups no node uses
        group = tuple(sorted(ranks))
        if group and group[-1] >= world and group not in bad_groups:
            bad_groups.add(group)
            violations.append(
                f"{format_group(group, names)} names rank {group[-1]}, but the trace set has "
                f"ranks 0..{world - 1}"
            )
    for group in sorted(sequences):
        members = tuple(rank for rank in group if rank < world)
        if len(members) > 1:
            label = format_group(None if group == all_ranks else group, names)
            _compare_group(members, sequences[group], sequence_nodes[group], label, violations)
    for key in sorted(set(sends) | set(receives)):
        source, destination, size, tag = key
        posted, expected = sends[key], receives[key]
        if posted > expected:
            violations.append(
                f"rank {source} sends {posted} message(s) of {size} B with tag {tag} to rank "
                f"{destination}, which posts {expected} matching receive(s)"
            )
        elif expected > posted:
            violations.append(
                f"rank {destination} posts {expected} receive(s) of {size} B with tag {tag} "
                f"from rank {source}, which sends {posted} matching message(s)"
            )
    return CheckReport(ranks=totals, violations=tuple(violations))
