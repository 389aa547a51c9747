"""Collective and point-to-point timing over the network dims a group spans, α–β mode.

Holds:

- :class:`GroupSpan`, :func:`group_span` (from :mod:`stage_explore.system.ranks`) — the dims a
  group spans (dim 0 fastest in the rank id) and how many ranks it has in each;
- float seconds: :func:`alpha_beta_collective_s`, :func:`alpha_beta_point_to_point_s`,
  :func:`latency_bound_all_reduce_s` (NCCL's tree for a few bytes), NCCL's per-call costs
  (:func:`call_overhead_s`, :func:`low_latency_overhead_s`, :func:`low_latency_share`),
  :func:`irregular_all_to_all_factor` and :func:`deepep_scale_out_fraction` (DeepEP's share
  of an expert all-to-all's scale-out bytes).

The ASTRA-sim mode (integer nanoseconds, ASTRA-sim 2.0's analytical network to the nanosecond,
for the trace simulator) is :mod:`stage_explore.analytical.astra_collectives`; a group spanning
several dims runs hierarchically here as there (its rule 2), without chunk pipelining.

**α–β mode** (formulas.md §6; Thakur et al., IJHPCA 2005; Chan et al., CCPE 2007): on one dim
of ``n`` ranks with latency α and bandwidth β, buffer ``S`` (the full gathered size), ring and
direct: all-reduce ``2(n−1)α + 2(n−1)/n·S/β``, all-gather, reduce-scatter and all-to-all
``(n−1)α + (n−1)/n·S/β``; β is the dim's achieved
bandwidth, at ``bus_efficiency_by_ranks[n]`` instead of ``bus_efficiency`` when the dim lists
``n`` (NCCL's bus bandwidth on one NVSwitch node grows with the group), and for every kind
but all-to-all times the dim's ``bus_efficiency_scaling`` factor for ``n`` ranks (NCCL's ring
bus bandwidth falling as the ring spans more nodes; NVIDIA/nccl#1229); halving-doubling replaces
``n−1`` latency steps by ``log2 n``. A group
spanning several dims runs hierarchically (no chunk pipelining). A group that is not
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

**NCCL's ring latency** (7 Dec 2026, s35 ringlat): NCCL runs an all-gather or reduce-scatter
over several nodes as one flat ring through every member (it has no tree for them), so a chunk
travels ``n − 1`` hops, ``nNodes − 1`` of them across the network and the rest between GPUs of
a node (``ncclTopoTuneModel``, NVIDIA/nccl src/graph/tuning.cc at b6475625: ``nsteps = nRanks −
1``, ``nInterSteps = nNodes − 1``, latency ``(nsteps − nInterSteps)·intraLat +
nInterSteps·interLat``; the NCCL maintainers: "the latency of ring increases linearly with the
communicator size", NVIDIA/nccl#1712). An NCCL all-gather or reduce-scatter over several dims
therefore pays, on each ring dim, the flat ring's hops across that dim
(:attr:`GroupSpan.hops`: 896 on NVLink and 127 on InfiniBand for 1,024 ranks on 128 8-GPU
nodes, where the levels alone pay 7 and 127) at the dim's ``latency_s``; its bandwidth terms
stay hierarchical. All-reduce keeps its levels' steps (NCCL's tuner may run its tree, with
``log2(nodes)`` network steps), as do all-to-all, halving-doubling dims and collectives outside
NCCL.

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

import itertools
import math
import operator
from collections.abc import Sequence

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.model import CollectiveAlgorithm, NetworkDim, System
from stage_explore.system.ranks import GroupSpan, group_span

__all__ = [
    "GroupSpan",
    "alpha_beta_collective_s",
    "call_overhead_s",
    "deepep_scale_out_fraction",
    "alpha_beta_point_to_point_s",
    "latency_bound_all_reduce_s",
    "low_latency_overhead_s",
    "low_latency_share",
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


def _level_s(
    kind: CollectiveKind,
    algorithm: CollectiveAlgorithm,
    ranks: int,
    buffer_bytes: float,
    dim: NetworkDim,
    spanned: int = 0,
    share: float = 1.0,
    hops: int = 0,
) -> float:
    """One level of ``ranks`` ranks on ``dim`` (a flat ring over several dims passes the
    ranks of ``dim`` it spans as ``spanned``; 0: ``ranks``); ``buffer_bytes`` is the full
    (gathered) size; without NCCL's per-call cost (:func:`call_overhead_s`). A ring level
    pays ``hops`` latency steps instead of ``ranks − 1`` when ``hops`` is given (NCCL's flat
    ring: the module docstring, "NCCL's ring latency"). The dim's
    bandwidth is the achieved one, times its
    ``bus_efficiency_by_ranks`` factor for a group of ``ranks``
    (:meth:`~stage_explore.system.model.NetworkDim.bandwidth_factor`) and, but for an
    all-to-all, its ``bus_efficiency_scaling`` factor
    (:meth:`~stage_explore.system.model.NetworkDim.scaling_factor`), times ``share`` (NCCL's LL
    protocol: :func:`low_latency_overhead_s`)."""
    if algorithm is CollectiveAlgorithm.HALVING_DOUBLING and kind is not A2A:
        steps = math.ceil(math.log2(ranks))
    elif hops and algorithm is CollectiveAlgorithm.RING:
        steps = hops
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
    level_rates: Sequence[float | None] = (),
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
    ``level_rates`` (with ``level_fractions``, one per level): a level with a rate (bytes/s)
    lasts ``buffer × share / rate`` — a rate that counts a rank's own share and holds the
    call's fixed costs (HybridEP's published tables, :mod:`~stage_explore.analytical.hybridep`)
    — instead of its dim's α–β time; None: the dim's.
    """
    if group is None:  # every rank: every dim, without listing the ranks
        levels = [(index, size) for index, size in enumerate(system.dim_sizes) if size > 1]
        blocks = list(itertools.accumulate([ranks for _, ranks in levels], operator.mul))
        members = math.prod(system.dim_sizes)
        span_hops: list[int] | None = None  # a regular grid: derived below when needed
    else:
        span = group_span(system.dim_sizes, group)
        levels = [(index, span.counts[index]) for index in span.dims]
        blocks = [span.blocks[index] for index in span.dims]
        members = len(span.members)
        span_hops = [span.hops[index] for index in span.dims]
    if not levels:
        return 0.0
    network = system.network
    overhead = call_overhead_s(network, [index for index, _ in levels], nccl)
    # the buffer entering level j: what the smallest block below it holds (1 rank below level 0)
    below = [1, *blocks[:-1]]

    def level(
        phase: CollectiveKind,
        index: int,
        ranks: int,
        buffer_bytes: float,
        share: float = 1.0,
        hops: int = 0,
    ) -> float:
        dim = network[index]
        chosen = dim.algorithms.for_kind(kind) if algorithm is None else algorithm
        return _level_s(phase, chosen, ranks, buffer_bytes, dim, share=share, hops=hops)

    # NCCL's all-gather and reduce-scatter: one flat ring, its latency steps each dim's hops
    flat = [0] * len(levels)
    if nccl and kind in (AG, RS) and len(levels) > 1:
        # a regular grid: a ring in rank order crosses dim j (ranks_j − 1) × the ranks above it
        flat = span_hops or [
            (ranks - 1) * (members // block)
            for (_, ranks), block in zip(levels, blocks, strict=True)
        ]

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
                level(RS, index, ranks, size_bytes / block, share, hops)
                for (index, ranks), block, hops in zip(levels, below, flat, strict=True)
            )
        # all-gather: size_bytes is the per-rank shard, the gathered buffer members times it
        gathered = float(size_bytes) * members
        return fixed + sum(
            level(AG, index, ranks, gathered / block, share, hops)
            for (index, ranks), block, hops in zip(levels, below, flat, strict=True)
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
    rates = list(level_rates) or [None] * len(levels)
    if len(rates) != len(levels):
        raise ConfigError(
            f"`level_rates` needs one rate per level the group spans ({len(levels)}), "
            f"but got {tuple(level_rates)!r}"
        )
    times = [
        level(A2A, index, ranks, buffer * share) if rate is None else buffer * share / rate
        for (index, ranks), share, rate in zip(levels, shares, rates, strict=True)
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
    FP8 amax reduction (:meth:`~stage_explore.analytical.amax_costing.AmaxCosting._fp8_amax_s`);
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
