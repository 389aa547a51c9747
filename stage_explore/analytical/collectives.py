"""Collective and point-to-point timing over the network dims a communicator group spans.

Holds:

- :class:`GroupSpan`, :func:`group_span` (from :mod:`stage_explore.system.ranks`) — the dims a
  group spans (dim 0 fastest in the rank id) and how many ranks it has in each;
- ASTRA-sim mode, integer nanoseconds: :func:`astra_collective_ns`,
  :func:`astra_collective_member_ns`, :func:`astra_point_to_point_ns`;
- α–β mode, float seconds: :func:`alpha_beta_collective_s`, :func:`alpha_beta_point_to_point_s`,
  and :func:`deepep_scale_out_fraction` (DeepEP's share of an expert all-to-all's scale-out bytes).

**ASTRA-sim mode** reproduces ASTRA-sim 2.0's congestion-unaware analytical timing (``n(m)``
and hops: see :mod:`stage_explore.system.astra`; ``d`` the endpoint delay; reduction
``r(m) = 3·floor(m / local-mem-bw)``):

1. Chunks: ``c = S // splits`` (at least the world size, except for all-gather, whose ``S`` is
   the per-rank shard); ``ceil(S / c)`` chunks of ``c`` bytes.
2. A collective over every rank runs phases over the dims (size-1 dims and dims beyond the
   kind's implementation list are skipped): all-reduce with ``localBWAware`` reduce-scatters up
   dims 0…k−2, all-reduces on the last and all-gathers back down (``baseline``: an all-reduce
   on each dim); reduce-scatter and all-to-all ascend the dims, all-gather descends them.
3. Each dim is a FIFO queue that serves at most ``active-chunks-per-dimension`` chunks at once;
   a chunk enters its next phase's queue when it leaves the previous one; the collective ends
   when its last chunk does.
4. A phase is a sequence of packets: each takes ``d`` to hand over (plus ``r`` when it carries
   a reduction), then its message ``n``. Ring (``p`` ranks, neighbours): all-reduce
   ``(2p−1)d + 2(p−1)n(c/p) + (p−1)r(c/p)``, reduce-scatter ``pd + (p−1)(n(c/p) + r(c/p))``,
   all-gather ``pd + (p−1)n(c)``, all-to-all ``(1+q)d + q·n(c/p)`` with ``q = p(p−1)/2``.
   Direct (messages to every peer at once; the farthest peer sets ``n``): all-reduce
   ``3d + 2n(c/p) + r(c/p)``, reduce-scatter ``2d + n(c/p) + r(c/p)``, all-gather
   ``2d + n(c)``, all-to-all ``2d + n(c/p)``. Halving-doubling (``p = 2^k``): messages of
   c/2, c/4 … c/2^k to peers 1, 2 … 2^(k−1) away, then back for all-reduce (all-gather
   doubles from c); ``d`` per packet, ``r`` on all but the first reduce-scatter step.
5. A sub-group (fewer ranks than the world) ignores the dims: ASTRA-sim builds one ring over
   the sorted members, always with the ring algorithm and ``d`` fixed at 10 ns, and each
   neighbour-to-neighbour message takes ``n`` over the lowest dim where the two differ. A ring
   whose links differ is run as a dataflow (a rank sends its next packet once it has received
   the previous one), so its members may finish at different times; so is a ring whose members
   issued the collective at different times (:func:`astra_skewed_collective_ns`: each member
   starts at its own issue).
6. Point to point: ``n(size)`` over the lowest dim in which the two ranks differ.

**α–β mode** (formulas.md §6; Thakur et al., IJHPCA 2005; Chan et al., CCPE 2007): on one dim
of ``n`` ranks with latency α and bandwidth β, buffer ``S`` (the full gathered size), ring and
direct: all-reduce ``2(n−1)α + 2(n−1)/n·S/β``, all-gather, reduce-scatter and all-to-all
``(n−1)α + (n−1)/n·S/β``; β is the dim's achieved
bandwidth, at ``bus_efficiency_by_ranks[n]`` instead of ``bus_efficiency`` when the dim lists
``n`` (NCCL's bus bandwidth on one NVSwitch node grows with the group), and for every kind
but all-to-all times the dim's ``bus_efficiency_scaling`` factor for ``n`` ranks (NCCL's ring
bus bandwidth falling as the ring spans more nodes; NVIDIA/nccl#1229); halving-doubling replaces
``n−1`` latency steps by ``log2 n``. A group
spanning several dims runs hierarchically as in 2. (no chunk pipelining). A group that is not
a full sub-grid of the dims it spans (12 ranks as 8 + 4 on two 8-GPU nodes; 128 ranks as
72 + 56 on two NVL72 racks) runs hierarchically too, each level over the most ranks it has in
that dim, and the buffer a level carries up is the one its smallest block holds
(:attr:`GroupSpan.blocks`): the node with 4 GPUs has 4 NICs to move its share, as NCCL's rings
(one channel per NIC) use every NIC of a node; a regular group's blocks are the products of
its counts, so nothing changes for it. (Until 4 Dec 2026 such a group was one flat ring on the
slowest dim, as if every hop crossed it: a 12-GPU data-parallel group cost 8x the inter-node
time of a 16-GPU one.) An all-to-all over such a group sends each peer its share directly
(NCCL's grouped send/receive pairs), so the members of the smallest block entering a level send
``1 − block/members`` of their buffer across it over their own links, where two equal halves
send ``1/2`` (:func:`irregular_all_to_all_factor`: 8 + 56 ranks on two NVL72 racks, the 8
send 7/8 over their 8 NICs), and the collective ends when they have (4 Dec 2026, dsv3).

**NCCL's per-call cost** (``collective_overhead_s``, so the bus bandwidth grows with the
message size as nccl-tests measure it): an NCCL collective is one kernel over all its ranks,
whichever dims they span (rings and trees cross the nodes inside it), so a call pays the fixed
cost once: the largest ``collective_overhead_s`` of the dims its group spans, not one per level
(nccl-tests#232's 2-node all-reduce intercept, the InfiniBand dims' figure, is the whole call's).
Until 4 Dec 2026 (a8) each level paid its dim's. A collective that does not run on NCCL
(``nccl=False``: Transformer Engine's userbuffers and PyTorch's symmetric-memory tensor-parallel
exchanges, DeepEP's dispatch and combine) pays none of it.

**NCCL's protocols** (4 Dec 2026, d1): NCCL's tuner times each collective with each protocol
and runs the fastest (``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``, NVIDIA/nccl
``src/graph/tuning.cc``). ``collective_overhead_s`` is the Simple protocol's fixed cost, read
off 4–256 MiB; small messages run on the LL protocol, whose fixed cost is lower (a dim's
``small_message_overhead_s``, read off the smallest sizes of the same nccl-tests tables) and
whose ring bus bandwidth is a quarter of Simple's for an all-reduce (or across nodes) and a
third for a one-node all-gather or reduce-scatter (``LL_BUS_SHARE_*``). An NCCL all-reduce,
all-gather or reduce-scatter over dims one of which lists ``small_message_overhead_s`` takes
the smaller of the two times (:func:`low_latency_overhead_s`); LL's fixed cost is the
largest of the spanned dims' ``small_message_overhead_s`` (a dim without one: its
``collective_overhead_s``). All-to-all (grouped send / receive, not a tuned ring collective)
and collectives outside NCCL are not affected; nor is a system whose dims list none.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from collections import deque
from collections.abc import Sequence

import numpy as np

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.astra import AstraAlgorithm, AstraConfig, AstraDim
from stage_explore.system.model import CollectiveAlgorithm, NetworkDim, System
from stage_explore.system.ranks import GroupSpan, coordinates, group_span

__all__ = [
    "GroupSpan",
    "alpha_beta_collective_s",
    "call_overhead_s",
    "deepep_scale_out_fraction",
    "alpha_beta_point_to_point_s",
    "latency_bound_all_reduce_s",
    "low_latency_overhead_s",
    "low_latency_share",
    "astra_collective_member_ns",
    "astra_collective_ns",
    "astra_point_to_point_ns",
    "astra_skewed_collective_ns",
    "coordinates",
    "group_span",
]

AR = CollectiveKind.ALL_REDUCE
AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER
A2A = CollectiveKind.ALL_TO_ALL

#: NCCL's ring LL bus bandwidth as a share of its ring bus bandwidth (``ncclTopoTuneModel``,
#: NVIDIA/nccl src/graph/tuning.cc at b6475625: ``busBw * ((nNodes > 1 || coll ==
#: ncclFuncAllReduce || coll == ncclFuncReduce) ? 1.0/4.0 : 1.0/3.0)``; LL moves 8 bytes of
#: data with every 8-byte flag): a quarter for an all-reduce or a ring across nodes, ...
LL_BUS_SHARE_ALL_REDUCE = 1.0 / 4.0
#: ... a third for an all-gather or reduce-scatter within one node (one network dim).
LL_BUS_SHARE_ONE_NODE = 1.0 / 3.0

#: The hand-over delay of ASTRA-sim's "local" (sub-group ring) transmissions, in ns.
SUB_GROUP_ENDPOINT_DELAY_NS = 10


# --- ASTRA-sim mode ------------------------------------------------------------------------


def _members(config: AstraConfig, group: Sequence[int] | None) -> tuple[int, ...]:
    sizes = [dim.npus for dim in config.dims]
    if group is None:
        return tuple(range(config.total_npus))
    return group_span(sizes, group).members


def _reduction_ns(config: AstraConfig, size_bytes: int) -> int:
    return 3 * int(size_bytes / config.local_mem_bw_gbps)


def _ring_message(kind: CollectiveKind, ranks: int, data: int) -> int:
    return data if kind is AG else data // ranks


def _final_size(kind: CollectiveKind, ranks: int, data: int) -> int:
    return {AR: data, RS: data // ranks, AG: data * ranks, A2A: data}[kind]


def _ring_reductions(kind: CollectiveKind, ranks: int) -> list[bool]:
    """For each packet of a ring phase (sends + 1), whether it carries a reduction."""
    sends = {AR: 2 * (ranks - 1), RS: ranks - 1, AG: ranks - 1, A2A: ranks * (ranks - 1) // 2}
    flags, toggle = [], False
    for index in range(sends[kind] + 1):
        position = index % ranks  # rounds of `ranks` packets; a round's first never reduces
        toggle = not toggle if position == 0 else toggle
        flags.append(position != 0 and (kind is RS or (kind is AR and toggle)))
    return flags


def _direct_ns(
    kind: CollectiveKind, dim: AstraDim, data: int, delay: int, config: AstraConfig
) -> int:
    message = _ring_message(kind, dim.npus, data)
    hops = max(dim.hops(0, peer) for peer in range(1, dim.npus))
    link = dim.message_ns(message, hops)
    reduction = _reduction_ns(config, message)
    return {
        AR: 3 * delay + 2 * link + reduction,
        RS: 2 * delay + link + reduction,
        AG: 2 * delay + link,
        A2A: 2 * delay + link,
    }[kind]


def _halving_doubling_ns(
    kind: CollectiveKind, dim: AstraDim, data: int, delay: int, config: AstraConfig
) -> int:
    ranks = dim.npus
    if ranks & (ranks - 1) or kind is A2A:
        raise ConfigError(
            f"halvingDoubling needs a power-of-two dim and no all_to_all, but got {kind.value} "
            f"on {ranks} ranks"
        )
    steps = ranks.bit_length() - 1
    sends = 2 * steps if kind is AR else steps
    message, offset, factor = (data, ranks // 2, 0.5) if kind is AG else (data // 2, 1, 2.0)
    total, hand_offs, messages, toggle = 0, 0, 0, False
    for index in range(sends + 1):
        if hand_offs == 0 and messages == 0:
            hand_offs, messages, toggle = 1, steps - 1, not toggle
        if hand_offs:
            hand_offs, reduces = hand_offs - 1, False
        else:
            messages, reduces = messages - 1, kind is RS or (kind is AR and toggle)
        total += delay + (_reduction_ns(config, message) if reduces else 0)
        if index < sends:
            total += dim.message_ns(message, dim.hops(0, offset % ranks))
        offset, message = int(offset * factor), int(message / factor)
        if offset == ranks and kind is AR:  # the turning point: double back
            factor = 0.5
            offset, message = int(offset * factor), int(message / factor)
    return total


def _phase_ns(
    kind: CollectiveKind, algorithm: AstraAlgorithm, dim: AstraDim, data: int, config: AstraConfig
) -> int:
    delay = config.endpoint_delay_ns
    if algorithm is AstraAlgorithm.DIRECT:
        return _direct_ns(kind, dim, data, delay, config)
    if algorithm is AstraAlgorithm.HALVING_DOUBLING:
        return _halving_doubling_ns(kind, dim, data, delay, config)
    message = _ring_message(kind, dim.npus, data)
    flags = _ring_reductions(kind, dim.npus)
    link = dim.message_ns(message, dim.hops(0, 1))
    return (
        len(flags) * delay + sum(flags) * _reduction_ns(config, message) + (len(flags) - 1) * link
    )


def _world_phases(config: AstraConfig, kind: CollectiveKind, chunk: int) -> list[tuple[int, int]]:
    """(dim, duration) of every phase one chunk of a whole-world collective goes through."""
    algorithms = config.implementations(kind)
    dims = [i for i in range(min(len(algorithms), len(config.dims))) if config.dims[i].npus > 1]
    if not dims:
        return []
    plan: list[tuple[int, CollectiveKind]]
    if kind is AR and config.collective_optimization == "localBWAware":
        plan = [(i, RS) for i in dims[:-1]] + [(dims[-1], AR)]
        plan += [(i, AG) for i in reversed(dims[:-1])]
    elif kind is AG:
        plan = [(i, AG) for i in reversed(dims)]
    else:
        plan = [(i, kind) for i in dims]
    phases, size = [], chunk
    for index, phase_kind in plan:
        dim = config.dims[index]
        phases.append((index, _phase_ns(phase_kind, algorithms[index], dim, size, config)))
        size = _final_size(phase_kind, dim.npus, size)
    return phases


def _pipeline_ns(phases: Sequence[tuple[int, int]], chunks: int, capacity: int) -> int:
    """When the last of ``chunks`` identical chunks leaves the per-dim FIFO queues.

    ``phases`` are (dim, duration); a queue holds the indices of the phases waiting on it.
    """
    if not phases:
        return 0
    waiting: dict[int, deque[int]] = {dim: deque() for dim, _ in phases}
    running = dict.fromkeys(waiting, 0)
    events: list[tuple[int, int, int]] = []  # (time, start order, phase index)
    waiting[phases[0][0]].extend([0] * chunks)
    order, now = 0, 0
    while True:
        for dim, queue in waiting.items():
            while queue and running[dim] < capacity:
                phase = queue.popleft()
                running[dim] += 1
                heapq.heappush(events, (now + phases[phase][1], order, phase))
                order += 1
        if not events:
            return now
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, phase = heapq.heappop(events)
            running[phases[phase][0]] -= 1
            if phase + 1 < len(phases):
                waiting[phases[phase + 1][0]].append(phase + 1)


def _chunking(config: AstraConfig, kind: CollectiveKind, size_bytes: int) -> tuple[int, int]:
    """(chunk bytes, number of chunks), as ASTRA-sim splits a collective."""
    chunk = size_bytes // config.preferred_dataset_splits
    if kind is not AG and config.total_npus > chunk:
        chunk = config.total_npus
        size_bytes = config.preferred_dataset_splits * chunk
    if chunk == 0:
        if size_bytes == 0:
            return 0, 0
        raise ConfigError(
            f"an all_gather of {size_bytes} bytes is smaller than preferred-dataset-splits="
            f"{config.preferred_dataset_splits}: ASTRA-sim cannot split it"
        )
    return chunk, -(-size_bytes // chunk)


def _sub_group_ns(
    config: AstraConfig,
    kind: CollectiveKind,
    members: tuple[int, ...],
    chunk: int,
    chunks: int,
    starts: Sequence[int] | None = None,
) -> dict[int, int]:
    """Each member's finish; from a common start 0, or from each member's own ``starts``."""
    ranks, capacity = len(members), config.active_chunks_per_dimension
    message = _ring_message(kind, ranks, chunk)
    # links[i]: the message from members[i-1] to members[i] (the ring runs clockwise)
    links = np.array(
        [
            astra_point_to_point_ns(config, members[i - 1], members[i], message)
            for i in range(ranks)
        ],
        dtype=np.int64,
    )
    reduction = _reduction_ns(config, message)
    hand_offs = [
        SUB_GROUP_ENDPOINT_DELAY_NS + (reduction if f else 0) for f in _ring_reductions(kind, ranks)
    ]
    if starts is None and (links == links[0]).all():
        phase = sum(hand_offs) + (len(hand_offs) - 1) * int(links[0])
        return dict.fromkeys(members, _pipeline_ns([(0, phase)], chunks, capacity))
    # when each member's queue slots free up
    free = np.zeros((ranks, capacity), dtype=np.int64)
    if starts is not None:
        free += np.array(starts, dtype=np.int64)[:, None]
    finish = np.zeros(ranks, dtype=np.int64)
    rows = np.arange(ranks)
    for _ in range(chunks):
        slot = free.argmin(axis=1)
        send = free[rows, slot] + hand_offs[0]
        for hand_off in hand_offs[1:]:
            send = np.maximum(send, np.roll(send, 1) + links) + hand_off
        free[rows, slot] = send
        finish = np.maximum(finish, send)
    return {member: int(time) for member, time in zip(members, finish, strict=True)}


def astra_collective_member_ns(
    config: AstraConfig, kind: CollectiveKind, size_bytes: int, group: Sequence[int] | None
) -> dict[int, int]:
    """For every member, ns from a common start (all members issued it) to its finish.

    ``size_bytes`` follows ASTRA-sim's ``comm_size``: the whole buffer, except the per-rank
    shard for all-gather. ``group`` is the members' global rank ids (``None``: every rank).
    """
    members = _members(config, group)
    chunk, chunks = _chunking(config, kind, size_bytes)
    if len(members) <= 1 or chunks == 0:
        return dict.fromkeys(members, 0)
    if len(members) == config.total_npus:
        phases = _world_phases(config, kind, chunk)
        return dict.fromkeys(
            members, _pipeline_ns(phases, chunks, config.active_chunks_per_dimension)
        )
    return _sub_group_ns(config, kind, members, chunk, chunks)


def astra_skewed_collective_ns(
    config: AstraConfig,
    kind: CollectiveKind,
    size_bytes: int,
    group: Sequence[int] | None,
    issued: dict[int, int],
) -> dict[int, int] | None:
    """Each member's finish (absolute ns) when the members issued the collective at different
    times ``issued``, or None where this is not modelled (the caller then starts every member
    at the last issue).

    Modelled: a collective that ASTRA-sim runs as one ring of messages — a sub-group (rule 5),
    or every rank of a network with one dim whose algorithm for ``kind`` is the ring, with the
    sub-group hand-over delay. A member that issued early has sent its first packets already,
    so it finishes earlier than the last member (rule 5's dataflow from each member's issue).
    """
    members = _members(config, group)
    chunk, chunks = _chunking(config, kind, size_bytes)
    if len(members) <= 1 or chunks == 0:
        return None
    if len(members) == config.total_npus:
        used = [i for i, dim in enumerate(config.dims) if dim.npus > 1]
        algorithms = config.implementations(kind)
        if not (
            len(used) == 1
            and used[0] < len(algorithms)
            and algorithms[used[0]] is AstraAlgorithm.RING
            and config.endpoint_delay_ns == SUB_GROUP_ENDPOINT_DELAY_NS
        ):
            return None
    return _sub_group_ns(
        config, kind, members, chunk, chunks, starts=[issued[member] for member in members]
    )


def astra_collective_ns(
    config: AstraConfig, kind: CollectiveKind, size_bytes: int, group: Sequence[int] | None = None
) -> int:
    """ns from the start of a collective until its last member finishes (ASTRA-sim mode)."""
    return max(astra_collective_member_ns(config, kind, size_bytes, group).values(), default=0)


def astra_point_to_point_ns(
    config: AstraConfig, source: int, destination: int, size_bytes: int
) -> int:
    """ns for a message of ``size_bytes`` from ``source`` to ``destination`` (ASTRA-sim mode)."""
    sizes = [dim.npus for dim in config.dims]
    for rank in (source, destination):
        if not 0 <= rank < config.total_npus:
            raise ConfigError(f"rank {rank} is outside the network of {config.total_npus} ranks")
    if source == destination:
        raise ConfigError(f"a point-to-point message needs two ranks, but got {source} -> {source}")
    a, b = coordinates(source, sizes), coordinates(destination, sizes)
    index = next(i for i in range(len(sizes)) if a[i] != b[i])
    dim = config.dims[index]
    return dim.message_ns(size_bytes, dim.hops(a[index], b[index]))


# --- α–β mode ------------------------------------------------------------------------------


def _level_s(
    kind: CollectiveKind,
    algorithm: CollectiveAlgorithm,
    ranks: int,
    buffer_bytes: float,
    dim: NetworkDim,
    spanned: int = 0,
    share: float = 1.0,
) -> float:
    """One level of ``ranks`` ranks on ``dim`` (a flat ring over several dims passes the
    ranks of ``dim`` it spans as ``spanned``; 0: ``ranks``); ``buffer_bytes`` is the full
    (gathered) size; without NCCL's per-call cost (:func:`call_overhead_s`). The dim's
    bandwidth is the achieved one, times its
    ``bus_efficiency_by_ranks`` factor for a group of ``ranks``
    (:meth:`~stage_explore.system.model.NetworkDim.bandwidth_factor`) and, but for an
    all-to-all, its ``bus_efficiency_scaling`` factor
    (:meth:`~stage_explore.system.model.NetworkDim.scaling_factor`), times ``share`` (NCCL's LL
    protocol: :func:`low_latency_overhead_s`)."""
    if algorithm is CollectiveAlgorithm.HALVING_DOUBLING and kind is not A2A:
        steps = math.ceil(math.log2(ranks))
    else:
        steps = ranks - 1
    bandwidth = dim.bandwidth_bytes_per_s * dim.bandwidth_factor(ranks) * share
    if kind is not A2A:  # a ring's bus bandwidth falls as it spans more nodes of the fabric
        bandwidth *= dim.scaling_factor(spanned or ranks)
    volume_s = (ranks - 1) / ranks * buffer_bytes / bandwidth
    if kind is AR:
        return 2 * steps * dim.latency_s + 2 * volume_s
    return steps * dim.latency_s + volume_s


def call_overhead_s(network: Sequence[NetworkDim], dims: Sequence[int], nccl: bool = True) -> float:
    """NCCL's fixed cost of one collective call over the network dims ``dims`` (module
    docstring): the largest ``collective_overhead_s`` among them, paid once; 0 for a collective
    that does not run on NCCL (``nccl`` False) or spans no dim."""
    if not nccl:
        return 0.0
    return max((network[index].collective_overhead_s for index in dims), default=0.0)


def low_latency_overhead_s(
    network: Sequence[NetworkDim], dims: Sequence[int], nccl: bool = True
) -> float | None:
    """NCCL's fixed cost of one call over the dims ``dims`` with its LL protocol (module
    docstring, "NCCL's protocols"): the largest ``small_message_overhead_s`` among them, a dim
    without one counting its ``collective_overhead_s``; None when none of them lists one or the
    collective does not run on NCCL (no LL regime: the Simple protocol's time alone)."""
    figures = [network[index].small_message_overhead_s for index in dims]
    if not nccl or all(figure is None for figure in figures):
        return None
    return max(
        network[index].collective_overhead_s if figure is None else figure
        for index, figure in zip(dims, figures, strict=True)
    )


def low_latency_share(kind: CollectiveKind, levels: int) -> float:
    """NCCL's ring LL bus bandwidth as a share of its ring bus bandwidth for ``kind`` over a
    group spanning ``levels`` network dims (``LL_BUS_SHARE_*``): a third for an all-gather or
    reduce-scatter within one dim, else a quarter."""
    one_node = levels == 1 and kind is not AR
    return LL_BUS_SHARE_ONE_NODE if one_node else LL_BUS_SHARE_ALL_REDUCE


def deepep_scale_out_fraction(experts: int, top_k: int, nodes: int) -> float:
    """The share of an NCCL expert all-to-all's scale-out bytes DeepEP sends: a token goes once
    to each remote node holding one of its ``top_k`` experts (DeepEP README, normal kernels:
    RDMA to the node, NVLink forwarding inside it) instead of once per (token, expert) pair.
    With balanced routing (``top_k`` distinct experts uniform over ``experts`` placed evenly on
    ``nodes`` nodes) a given remote node is hit with probability ``1 − C(E − E/n, k) / C(E, k)``
    and holds ``k/n`` of the pairs on average: the ratio is ``n·(1 − C(E−E/n, k)/C(E, k)) / k``."""
    if nodes <= 1 or experts % nodes or not 0 < top_k <= experts:
        return 1.0
    miss = math.comb(experts - experts // nodes, top_k) / math.comb(experts, top_k)
    return min(1.0, nodes * (1.0 - miss) / top_k)


def alpha_beta_collective_s(
    system: System,
    kind: CollectiveKind,
    size_bytes: int,
    group: Sequence[int] | None,
    scale_out_fraction: float = 1.0,
    pipelined: bool = False,
    level_fractions: Sequence[float] = (),
    algorithm: CollectiveAlgorithm | None = None,
    nccl: bool = True,
) -> float:
    """Seconds for a collective over ``group`` (``None``: every rank of ``system``), α–β mode.

    ``size_bytes`` follows the trace convention (the per-rank shard for all-gather).
    ``scale_out_fraction``: an all-to-all spanning several dims carries that share of its bytes
    on the outermost one (DeepEP's deduplicated expert dispatch, :func:`deepep_scale_out_fraction`).
    ``pipelined``: the levels of such an all-to-all run at once and it lasts as long as its
    slowest level, not their sum (DeepEP's internode dispatch and combine are one kernel whose
    warps are RDMA senders, RDMA-to-NVLink forwarders and NVLink receivers working on a stream
    of chunks: ``csrc/kernels/internode.cu``, ``WarpRole``); off: one level after the other.
    ``level_fractions`` (one per level the group spans, innermost first): an all-to-all carries
    that share of its bytes on each level instead (DeepEP's per-rank and per-node deduplication,
    :func:`~stage_explore.analytical.deepep.deepep_level_fractions`); empty: as above.
    ``algorithm``: every level runs it instead of its dim's (None: the dims' own).
    ``nccl``: the collective runs on NCCL and pays its per-call cost once
    (:func:`call_overhead_s`); False: it does not (userbuffers, symmetric memory, DeepEP).
    """
    if group is None:  # every rank: every dim, without listing the ranks
        levels = [(index, size) for index, size in enumerate(system.dim_sizes) if size > 1]
        blocks = list(itertools.accumulate([ranks for _, ranks in levels], operator.mul))
        members = math.prod(system.dim_sizes)
    else:
        span = group_span(system.dim_sizes, group)
        levels = [(index, span.counts[index]) for index in span.dims]
        blocks = [span.blocks[index] for index in span.dims]
        members = len(span.members)
    if not levels:
        return 0.0
    network = system.network
    overhead = call_overhead_s(network, [index for index, _ in levels], nccl)
    # the buffer entering level j: what the smallest block below it holds (1 rank below level 0)
    below = [1, *blocks[:-1]]

    def level(
        phase: CollectiveKind, index: int, ranks: int, buffer_bytes: float, share: float = 1.0
    ) -> float:
        dim = network[index]
        chosen = dim.algorithms.for_kind(kind) if algorithm is None else algorithm
        return _level_s(phase, chosen, ranks, buffer_bytes, dim, share=share)

    def ring(fixed: float, share: float) -> float:
        """An all-reduce, reduce-scatter or all-gather: the fixed cost ``fixed`` plus its levels
        at ``share`` of their bandwidth."""
        if kind is AR:  # reduce-scatter up, all-reduce on the last level, all-gather down
            total = sum(
                2 * level(RS, index, ranks, size_bytes / block, share)
                for (index, ranks), block in zip(levels[:-1], below, strict=False)
            )
            last_index, last_ranks = levels[-1]
            return fixed + total + level(AR, last_index, last_ranks, size_bytes / below[-1], share)
        if kind is RS:
            return fixed + sum(
                level(RS, index, ranks, size_bytes / block, share)
                for (index, ranks), block in zip(levels, below, strict=True)
            )
        # all-gather: size_bytes is the per-rank shard, the gathered buffer members times it
        gathered = float(size_bytes) * members
        return fixed + sum(
            level(AG, index, ranks, gathered / block, share)
            for (index, ranks), block in zip(levels, below, strict=True)
        )

    if kind is not A2A:
        simple = ring(overhead, 1.0)
        low = low_latency_overhead_s(network, [index for index, _ in levels], nccl)
        if low is None:
            return simple
        return min(simple, ring(low, low_latency_share(kind, len(levels))))
    buffer = float(size_bytes)
    outer = levels[-1][0] if len(levels) > 1 else -1
    shares = [scale_out_fraction if index == outer else 1.0 for index, _ in levels]
    if level_fractions:
        if len(level_fractions) != len(levels):
            raise ConfigError(
                f"`level_fractions` needs one share per level the group spans ({len(levels)}), "
                f"but got {tuple(level_fractions)!r}"
            )
        shares = list(level_fractions)
    if group is not None and not span.regular:  # its smallest block's members are slowest
        shares = [
            share * irregular_all_to_all_factor(ranks, block, members)
            for (_, ranks), block, share in zip(levels, below, shares, strict=True)
        ]
    times = [
        level(A2A, index, ranks, buffer * share)
        for (index, ranks), share in zip(levels, shares, strict=True)
    ]
    return overhead + (max(times) if pipelined else sum(times))


def irregular_all_to_all_factor(ranks: int, block: int, members: int) -> float:
    """How much more of its buffer a member of a group that is not a full sub-grid sends over a
    level of ``ranks`` ranks than the level's ``(ranks − 1)/ranks``: an all-to-all sends every
    peer its share directly (NCCL's send/receive pairs), so a member of the smallest block
    entering the level (``block`` of the ``members``: 8 GPUs of one NVL72 rack whose 56 peers
    are in the next) sends ``1 − block/members`` of its buffer across it (7/8 over those 8
    GPUs' NICs, where two equal halves would send 1/2), and the collective ends when that block
    has. A regular group's blocks give exactly ``(ranks − 1)/ranks``: 1. The innermost level
    (``block`` 1, a rank's exchange inside its own domain) keeps its ``(ranks − 1)/ranks``."""
    if ranks < 2 or block < 2:
        return 1.0
    return max(1.0, (1.0 - block / members) / ((ranks - 1) / ranks))


def latency_bound_all_reduce_s(system: System, size_bytes: int, group: Sequence[int]) -> float:
    """Seconds for an all-reduce of a few bytes over ``group`` as NCCL runs it, α–β mode.

    NCCL's tuner times every algorithm for the message size and takes the fastest
    (``ncclTopoTuneModel``, src/graph/tuning.cc): a ring all-reduce pays ``2(n−1)`` latency
    steps, its tree ``2·((ranks per node − 1)·intra + log2(nodes)·inter)``, so a message of a
    few hundred bytes over many nodes runs on the tree. The model's counterpart of that
    log-depth algorithm is halving-doubling (``2⌈log2 n⌉`` steps per level): the time is the
    smaller of the dims' own algorithm and halving-doubling on every level (``⌈log2 n⌉``
    steps for any ``n``, as NCCL's tree takes any rank count: an NVL72 rack too). Used for the
    FP8 amax reduction (:meth:`~stage_explore.analytical.planning.StagePlanning._fp8_amax_s`);
    the other all-reduces keep their dims' algorithm (large messages, where the ring wins)."""
    own = alpha_beta_collective_s(system, AR, size_bytes, group)
    tree = alpha_beta_collective_s(
        system, AR, size_bytes, group, algorithm=CollectiveAlgorithm.HALVING_DOUBLING
    )
    return min(own, tree)


def alpha_beta_point_to_point_s(
    system: System, source: int, destination: int, size_bytes: int
) -> float:
    """Seconds for a message over the lowest dim in which the two ranks differ, α–β mode."""
    a, b = system.coordinates(source), system.coordinates(destination)
    if a == b:
        raise ConfigError(f"a point-to-point message needs two ranks, but got {source} -> {source}")
    dim = system.network[next(i for i in range(len(a)) if a[i] != b[i])]
    return dim.latency_s + size_bytes / dim.bandwidth_bytes_per_s
