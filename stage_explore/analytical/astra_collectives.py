"""Collective and point-to-point timing in ASTRA-sim mode (integer nanoseconds).

Holds :func:`astra_collective_ns`, :func:`astra_collective_member_ns`,
:func:`astra_skewed_collective_ns` and :func:`astra_point_to_point_ns`: ASTRA-sim 2.0's
analytical network timing, reproduced to the nanosecond for the trace simulator's
:class:`~stage_explore.analytical.trace_models.AstraTimingModel`. The α–β mode the analytical
backend uses is :mod:`stage_explore.analytical.collectives`.

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
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

import numpy as np

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.astra import AstraAlgorithm, AstraConfig, AstraDim
from stage_explore.system.ranks import coordinates, group_span

AR = CollectiveKind.ALL_REDUCE
AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER
A2A = CollectiveKind.ALL_TO_ALL

#: The hand-over delay of ASTRA-sim's "local" (sub-group ring) transmissions, in ns.
SUB_GROUP_ENDPOINT_DELAY_NS = 10


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
