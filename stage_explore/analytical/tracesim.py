"""An event-driven simulator of per-rank traces with ASTRA-sim's execution semantics.

Holds:

- :func:`simulate` — run a set of traces (rank → list of :class:`~stage_core.trace.TraceNode`)
  under a :class:`~stage_explore.analytical.policy.TimingPolicy` (default
  :data:`~stage_explore.analytical.policy.ASTRA_SIM_POLICY`);
- :class:`RankTiming`, :class:`SimulationResult` — what it reports;
- re-exported for convenience: :func:`astra_config_from_files`, :func:`astra_config_from_system`,
  :class:`IssuePolicy`, :class:`TimingPolicy`.

What a node costs is a timing model's (:mod:`~stage_explore.analytical.trace_models`:
:class:`~stage_explore.analytical.trace_models.BaseTimingModel` and its implementations).

Semantics (docs/reference/chakra_et.md, "How ASTRA-sim runs a rank's trace"), the policy's
values named in brackets:

- each rank has one GPU compute slot, one CPU slot and one communication slot;
- a node is ready when all its ``data_deps`` and ``ctrl_deps`` have finished; ready nodes are
  issued in ascending id order whenever their slot is free (``issue`` ready-first);
  under ``issue`` in-order a slot issues its nodes in id order only, as a CUDA
  stream runs its kernels, so a ready node waits behind an earlier one that is not ready —
  the analytical backend's block timing
  (:func:`~stage_explore.analytical.blocktime.time_block`; docs/analytical.md, "The timing
  engine": one semantics, the issue rule is a policy);
- with ``collectives_wait_for_issued_compute`` a communication node also waits until every GPU
  compute node of a lower id has finished (the NCCL stream waiting for the issuing stream, as
  :func:`~stage_explore.analytical.blocktime.time_block` times it);
- collectives and sends hold the communication slot until they finish; receives hold no slot;
  a collective the caller puts on a named stream (``streams``: the program's gradient
  synchronisation and ZeRO collectives under the policy's ``side_streams``) holds that stream's
  slot instead, in order like the others;
- a collective starts when every member of its group has issued it (``collective_start``
  rendezvous: the k-th
  collective of a rank with a given kind, size and group meets the k-th of every other member),
  then each member finishes after its own duration from the timing model; when the members
  issued it at different times and the model times such a skewed collective
  (:meth:`BaseTimingModel.skewed_collective`), each member runs from its own issue instead;
  under ``collective_start`` local each rank runs it from its own issue for its own duration,
  as if its group's members were symmetric (the analytical backend's block timing);
- a send finishes when its message arrives (it does not wait for the receive), or, when the
  model gives the message a flight (:meth:`BaseTimingModel.point_to_point_flight`), that long
  before it arrives; a receive,
  matched by (source, destination, tag, size) and order, finishes at the later of its issue and
  the message's arrival (``point_to_point`` arrival, the only value traces are run with: the
  blocking and overlapped transfers of a framework are timed by the analytical pipeline);
- the policy's ``overlaps`` and ``p2p_scatter_gather`` are rewrites of the program before
  timing: a trace is run as written.
- compute nodes take the model's compute time; a rank's finish time is its last completion,
  its exposed communication is ``finish − GPU compute time`` (ASTRA-sim's report);
- a GPU compute node runs at a rate that may change while it runs: at ``1 − Σ share`` of its
  speed while collectives run on its rank, each taking the share
  :meth:`BaseTimingModel.beside_share` gives the pair (by default none: ASTRA-sim's models),
  at full speed otherwise (the SMs NCCL's kernels hold beside compute,
  :mod:`~stage_explore.analytical.contention`). A collective's start or end re-times the
  running node's remaining work at the new rate (event-driven: its end event is replaced, no
  time stepping); its GPU compute time stays the model's (the work, not the wall seconds).

Completions at the same instant are applied together before any node is issued.

Agreement with the real binary (``tests/explore/test_astrasim_conformance.py``, ASTRA-sim
518bd51, congestion-unaware): on every configuration of the conformance matrix each rank's
``finished`` cycles and exposed communication are equal to the nanosecond. That includes
collectives whose members issue them at different times (the tied-embedding all-reduce between
the first and the last pipeline stage): ASTRA-sim runs their chunks as messages, so a member
that issued early has sent its first packets and finishes earlier than the last member (65,389
ns earlier for GPT-3 125M's 77 MB embedding gradient over NVLink), which
:func:`~stage_explore.analytical.astra_collectives.astra_skewed_collective_ns`
reproduces. Not modelled (a rendezvous at the last issue, an upper bound on the early members'
finish): a skewed collective over every rank of a multi-dimensional network or with a non-ring
algorithm — none in the matrix.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from stage_core.errors import ConfigError
from stage_core.trace import NodeKind, TraceNode
from stage_explore.analytical.policy import (
    ASTRA_SIM_POLICY,
    CollectiveStart,
    IssuePolicy,
    PointToPoint,
    TimingPolicy,
)
from stage_explore.analytical.trace_models import BaseTimingModel
from stage_explore.system.astra import (
    astra_config_from_files,
    astra_config_from_system,
)

T = TypeVar("T", int, float)

__all__ = [
    "IssuePolicy",
    "RankTiming",
    "SimulationResult",
    "TimingPolicy",
    "astra_config_from_files",
    "astra_config_from_system",
    "simulate",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTiming(Generic[T]):
    """One rank's totals: finish time, GPU compute time and exposed communication."""

    finish: T
    compute: T
    exposed_communication: T

    def to_dict(self) -> dict[str, T]:
        return {
            "finish": self.finish,
            "compute": self.compute,
            "exposed_communication": self.exposed_communication,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult(Generic[T]):
    """Per-rank totals, and per-node (start, end) when the simulation recorded them.

    ``issued`` holds, for collectives only (when recorded), the time each member issued the
    node: earlier than its start when the member waited for the others.
    """

    ranks: dict[int, RankTiming[T]]
    node_times: dict[tuple[int, int], tuple[T, T]] = field(default_factory=dict)
    issued: dict[tuple[int, int], T] = field(default_factory=dict)

    @property
    def makespan(self) -> T:
        return max(timing.finish for timing in self.ranks.values())

    def to_dict(self) -> dict[str, object]:
        return {"ranks": {rank: timing.to_dict() for rank, timing in self.ranks.items()}}


#: A rank's slots; named communication streams add ``comm:<name>`` slots.
_SLOTS = ("gpu", "cpu", "comm", "recv")


def _slot(node: TraceNode) -> str:
    if node.kind is NodeKind.COMP:
        return "cpu" if getattr(node, "is_cpu_op", False) else "gpu"
    return "recv" if node.kind is NodeKind.RECV else "comm"


class _Rank(Generic[T]):
    """The mutable state of one rank during a simulation; ``streams`` puts collectives on
    named communication streams (node id → name) beside the ``comm`` slot."""

    def __init__(
        self, rank: int, nodes: Sequence[TraceNode], zero: T, streams: Mapping[int, str]
    ) -> None:
        self.rank = rank
        self.nodes = {node.id: node for node in nodes}
        if len(self.nodes) != len(nodes):
            raise ConfigError(f"rank {rank}: node ids must be unique within a rank")
        self.slot_of = {node.id: _slot(node) for node in nodes}
        for node_id, stream in streams.items():
            node = self.nodes.get(node_id)
            if node is None or node.kind is not NodeKind.COLL or stream in _SLOTS:
                raise ConfigError(
                    f"rank {rank}: stream {stream!r} of node {node_id} must name a stream other "
                    f"than {', '.join(_SLOTS)} for a collective node of the trace"
                )
            self.slot_of[node_id] = "comm:" + stream
        slots = (*_SLOTS, *sorted({"comm:" + s for s in streams.values()}))
        self.missing: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = defaultdict(list)
        self.ready: dict[str, list[int]] = {slot: [] for slot in slots}
        self.busy = dict.fromkeys(slots, False)
        self.finish: T = zero
        self.compute: T = zero
        self.finished: set[int] = set()
        self.counters: dict[tuple[object, ...], int] = defaultdict(int)
        self.order: dict[str, list[int]] = {slot: [] for slot in slots}
        for node_id in sorted(self.nodes):  # each slot's nodes in id (program) order
            self.order[self.slot_of[node_id]].append(node_id)
        self.position = dict.fromkeys(slots, 0)
        self.gpu_cursor = 0  # order["gpu"][:gpu_cursor] have all finished
        self.running: dict[int, TraceNode] = {}  # collectives started and not finished
        self.work: _Work[T] = _Work(zero)  # the GPU compute node running (at most one: one slot)
        for node in nodes:
            deps = set(node.data_deps) | set(node.ctrl_deps)
            for dep in deps:
                if dep not in self.nodes:
                    raise ConfigError(f"rank {rank}: node {node.id} depends on unknown node {dep}")
                self.dependents[dep].append(node.id)
            self.missing[node.id] = len(deps)
            if not deps:
                heapq.heappush(self.ready[self.slot_of[node.id]], node.id)

    def compute_issued_before_done(self, node_id: int) -> bool:
        """Whether every GPU compute node with an id below ``node_id`` has finished."""
        gpu = self.order["gpu"]
        while self.gpu_cursor < len(gpu) and gpu[self.gpu_cursor] in self.finished:
            self.gpu_cursor += 1
        return self.gpu_cursor == len(gpu) or gpu[self.gpu_cursor] > node_id

    def next_index(self, key: tuple[object, ...]) -> int:
        """The occurrence number of ``key`` on this rank (0 for the first)."""
        index = self.counters[key]
        self.counters[key] = index + 1
        return index


class _Work(Generic[T]):
    """The GPU compute node a rank runs (``node`` None when none): its start, its remaining
    work in the model's seconds at full rate as of ``since``, its rate, the order of its end
    event, and the share each running collective takes from it (:meth:`BaseTimingModel.
    beside_share`, asked once per pair)."""

    def __init__(self, zero: T) -> None:
        self.node: TraceNode | None = None
        self.started: T = zero
        self.since: float = 0.0
        self.left: float = 0.0
        self.rate = 1.0
        self.event = -1
        self.shares: dict[int, float] = {}

    def begin(self, node: TraceNode, now: T, duration: T, event: int) -> None:
        self.node, self.started, self.since, self.left = node, now, now, duration
        self.rate, self.event, self.shares = 1.0, event, {}


def simulate(
    traces: Mapping[int, Sequence[TraceNode]],
    model: BaseTimingModel[T],
    *,
    record_nodes: bool = False,
    policy: TimingPolicy = ASTRA_SIM_POLICY,
    streams: Mapping[int, Mapping[int, str]] | None = None,
) -> SimulationResult[T]:
    """Run every rank's trace to completion under ``model`` and ``policy`` (its issue rule,
    collective start and point-to-point semantics); a deadlock is a ConfigError.
    ``streams``: per rank, the collectives (by node id) that run on a named communication
    stream of their own (the policy's ``side_streams``; the program says which nodes)."""
    in_order = policy.issue is IssuePolicy.IN_ORDER
    local = policy.collective_start is CollectiveStart.LOCAL
    waits = policy.collectives_wait_for_issued_compute
    if not traces:
        raise ConfigError("simulate needs at least one rank trace")
    zero = model.zero
    world = tuple(sorted(traces))
    model.prepare(world)
    streams = streams or {}
    ranks = {
        rank: _Rank(rank, nodes, zero, streams.get(rank, {})) for rank, nodes in traces.items()
    }
    events: list[tuple[T, int, int, int]] = []  # (time, order, rank, node id)
    arrivals: dict[tuple[int, ...], T] = {}
    waiting_receives: dict[tuple[int, ...], tuple[int, int, T]] = {}
    rendezvous: dict[tuple[object, ...], dict[int, int]] = defaultdict(dict)
    issue_times: dict[tuple[object, ...], dict[int, T]] = defaultdict(dict)
    node_times: dict[tuple[int, int], tuple[T, T]] = {}
    issued: dict[tuple[int, int], T] = {}
    order = 0
    superseded: set[int] = set()  # end events of compute nodes re-timed since
    rated: set[int] = set()  # ranks whose running collectives or compute node changed

    def finish_at(rank: int, node_id: int, start: T, end: T) -> int:
        nonlocal order
        heapq.heappush(events, (end, order, rank, node_id))
        order += 1
        if record_nodes:
            node_times[(rank, node_id)] = (start, end)
        return order - 1

    def collective_at(rank: int, node_id: int, start: T, end: T) -> None:
        """A collective runs on ``rank`` from ``start`` (beside its compute) to ``end``."""
        finish_at(rank, node_id, start, end)
        state = ranks[rank]
        state.running[node_id] = state.nodes[node_id]
        rated.add(rank)

    def rerate(state: _Rank[T], now: T) -> None:
        """Re-time the running compute node at the rate its rank's collectives leave it."""
        work = state.work
        if work.node is None:
            return
        total = 0.0
        for node_id, node in state.running.items():
            share = work.shares.get(node_id)
            if share is None:
                share = work.shares[node_id] = model.beside_share(work.node, node)
            total += share
        rate = 1.0 - total
        if rate == work.rate:
            return
        work.left = max(0.0, work.left - (now - work.since) * work.rate)
        work.since, work.rate = now, rate
        superseded.add(work.event)
        work.event = -1
        if rate > 0.0:  # else it waits for a collective to end
            end = now + type(now)(work.left / rate)  # a float model's (beside_share)
            work.event = finish_at(state.rank, work.node.id, work.started, end)

    def issue(state: _Rank[T], now: T) -> None:
        for slot, queue in state.ready.items():
            while queue and not state.busy[slot]:
                if in_order and slot != "recv":  # only the slot's next node in id order
                    if queue[0] != state.order[slot][state.position[slot]]:
                        break  # ready nodes all have larger ids: the next one is not ready
                communication = slot == "comm" or slot.startswith("comm:")
                if waits and communication and not state.compute_issued_before_done(queue[0]):
                    break  # the stream waits for the compute issued before (and the rest too)
                if in_order and slot != "recv":
                    state.position[slot] += 1
                node = state.nodes[heapq.heappop(queue)]
                state.busy[slot] = slot != "recv"
                start(state, node, now)

    def start(state: _Rank[T], node: TraceNode, now: T) -> None:
        rank = state.rank
        if node.kind is NodeKind.COMP:
            duration = model.compute(node)
            event = finish_at(rank, node.id, now, now + duration)
            if state.slot_of[node.id] == "gpu":
                state.compute += duration
                state.work.begin(node, now, duration, event)
                if state.running:
                    rated.add(rank)
        elif node.kind is NodeKind.COLL:
            if node.collective is None:
                raise ConfigError(f"rank {rank}: collective node {node.id} has no collective kind")
            group = world if node.group is None else tuple(sorted(node.group))
            if rank not in group:
                raise ConfigError(f"rank {rank}: node {node.id} runs a collective over {group}")
            if record_nodes:
                issued[(rank, node.id)] = now
            if local:  # symmetric members: this rank stands for its group
                duration = model.node_collective(node, group)[rank]
                collective_at(rank, node.id, now, now + duration)
                return
            collective = (node.collective, node.comm_bytes, group)
            meeting = collective + (state.next_index(collective),)
            if meeting not in rendezvous and not all(member in ranks for member in group):
                raise ConfigError(f"rank {rank}: node {node.id} has group members without traces")
            rendezvous[meeting][rank] = node.id
            issue_times[meeting][rank] = now
            if len(rendezvous[meeting]) == len(group):
                nodes_of, issues = rendezvous.pop(meeting), issue_times.pop(meeting)
                skewed = None
                if min(issues.values()) < now:
                    skewed = model.skewed_collective(
                        node.collective, node.comm_bytes, group, issues
                    )
                if skewed is not None:
                    # every member waits for a packet of the last one, so none ends before now
                    assert min(skewed.values()) >= now, (skewed, now)
                    for member, member_node in nodes_of.items():
                        collective_at(member, member_node, issues[member], skewed[member])
                else:
                    durations = model.node_collective(node, group)
                    for member, member_node in nodes_of.items():
                        collective_at(member, member_node, now, now + durations[member])
        elif node.kind in (NodeKind.SEND, NodeKind.RECV):
            if policy.point_to_point is not PointToPoint.ARRIVAL:
                raise ConfigError(
                    f"rank {rank}: node {node.id} is a point-to-point message, which traces "
                    f"run with point_to_point 'arrival', but the policy has "
                    f"{str(policy.point_to_point)!r}"
                )
            sending = node.kind is NodeKind.SEND
            source, destination = (rank, node.peer) if sending else (node.peer, rank)
            if node.peer not in ranks or node.peer == rank:
                raise ConfigError(f"rank {rank}: node {node.id} has an invalid peer {node.peer}")
            route: tuple[int, int, int, int] = (source, destination, node.tag, node.comm_bytes)
            message = (*route, state.next_index((node.kind, *route)))
            if sending:
                sent = now + model.point_to_point(source, destination, node.comm_bytes)
                arrival = sent + model.point_to_point_flight(source, destination, node.comm_bytes)
                finish_at(rank, node.id, now, sent)
                if message in waiting_receives:
                    receiver, receive_node, posted = waiting_receives.pop(message)
                    finish_at(receiver, receive_node, posted, arrival)
                else:
                    arrivals[message] = arrival
            elif message in arrivals:
                finish_at(rank, node.id, now, max(now, arrivals.pop(message)))
            else:
                waiting_receives[message] = (rank, node.id, now)
        else:
            raise ConfigError(f"rank {rank}: node {node.id} has an unsupported kind {node.kind!r}")

    def rerate_all(now: T) -> None:
        for rank in sorted(rated):
            rerate(ranks[rank], now)
        rated.clear()

    for state in ranks.values():
        issue(state, zero)
    rerate_all(zero)
    while events:
        now = events[0][0]
        touched: set[int] = set()
        while events and events[0][0] == now:
            _, event, rank, node_id = heapq.heappop(events)
            if event in superseded:  # a compute node's end before its rate changed
                superseded.discard(event)
                continue
            state = ranks[rank]
            state.busy[state.slot_of[node_id]] = False
            if state.work.node is not None and state.work.node.id == node_id:
                state.work.node = None
            elif state.running.pop(node_id, None) is not None and state.work.node is not None:
                rated.add(rank)
            state.finish = now
            state.finished.add(node_id)
            for dependent in state.dependents.get(node_id, ()):
                state.missing[dependent] -= 1
                if state.missing[dependent] == 0:
                    heapq.heappush(state.ready[state.slot_of[dependent]], dependent)
            touched.add(rank)
        for rank in sorted(touched):
            issue(ranks[rank], now)
        rerate_all(now)
    unfinished = sum(len(s.nodes) - len(s.finished) for s in ranks.values())
    if unfinished:
        first = next(s for s in ranks.values() if len(s.finished) < len(s.nodes))
        blocked = min(set(first.nodes) - first.finished)
        raise ConfigError(
            f"the traces deadlock with {unfinished} unfinished nodes, e.g. rank {first.rank} node "
            f"{blocked} {first.nodes[blocked].name!r} (a collective some member never issues, a "
            "receive without its send, or a dependency cycle)"
        )
    timings = {
        rank: RankTiming(
            finish=s.finish, compute=s.compute, exposed_communication=s.finish - s.compute
        )
        for rank, s in sorted(ranks.items())
    }
    return SimulationResult(ranks=timings, node_times=node_times, issued=issued)
