"""Compute slowed by the NCCL collectives it overlaps: :class:`NcclLoad` and
:func:`nccl_load` (what a collective holds), :func:`on_fewer_sms`, :func:`persistent_wait_s`,
:func:`beside_persistent`, :func:`contended_share` and :func:`contended_s`.

An NCCL collective is a kernel of one thread block per channel, and each block holds an SM for
the whole collective: "NCCL CTAs won't share an SM with compute kernels" (NCCL maintainer,
https://github.com/NVIDIA/nccl/issues/689), whether they are moving data or waiting for the
network. A GEMM or attention kernel that runs beside it therefore has ``sm_count − channels``
SMs: for ``min(comm_s, compute_s)`` of overlap it runs at ``1 − channels / sm_count`` of its
rate — or less: a GEMM whose tiles filled its waves exactly needs one wave more (NVIDIA forum
"Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail
Effect": an H100 GEMM of exactly 132 tiles nearly doubles beside FSDP's 24-block all-gather).
A memory-bound kernel needs few SMs but shares HBM with the collective, whose ring writes every
byte it receives and reads every byte it sends (NCCL ``src/device/all_gather.h``:
``directRecvCopyDirectSend``), and in a reduce-scatter also reads its own operand
(``src/device/reduce_scatter.h``: ``recvReduceSend``): at least 2 (all-gather), 3
(reduce-scatter) and 2.5 (all-reduce: a reduce-scatter then an all-gather) HBM bytes per byte
on its link (:data:`RING_HBM_BYTES`; lower bounds read from the algorithm, no measurement
found). So a block's compute is timed again on what the collective leaves
(:func:`on_fewer_sms`: the wave model on ``sm_count − channels`` SMs with each SM's peak
unchanged, and HBM at ``1 − hbm_share`` of its bandwidth), and :func:`contended_share` is the
share of its rate lost.

How many channels: NCCL "uses the minimal number of SMs to achieve the performance of the
platform" (same thread: one NIC of 12-24 GB/s → 2 SMs, a DGX with 8 NICs → 16). A ring that
crosses nodes runs as many channels as its inter-node graph found (one per NIC at up to NCCL's
top per-channel speed), doubled ("execution channels are typically 2x the search channels",
https://github.com/NVIDIA/nccl/issues/1041); a ring inside an NVLink node as many as the
GPU's NVLinks carry. So the count, and the ring's pace, are properties of the network dim a
group's ring is bottlenecked by: its outermost dim (:attr:`~stage_explore.system.model.
NetworkDim.nccl_channels`, each preset citing its NCCL log; its achieved bandwidth
``bandwidth_bytes_per_s · bus_efficiency`` — the backend's achieved network, where it is
applied once — paces the HBM traffic). A dim without a figure is
outside the model: its collectives take nothing.

**Persistent GEMMs** (``KernelModel.persistent_gemm``: Hopper). cuBLAS's sm_90 GEMMs launch
one block per SM, each working through a fixed share of the output tiles ("they launch as many
CUDA blocks as there are SMs on the GPU (i.e., 132) and each of these blocks will process
several tiles in a row", pytorch/pytorch#143988, which profiled H100 matmuls under FSDP taking
"2x as long" beside an NCCL kernel holding ~10 % of the SMs; PR #144974 / #147966: the blocks
"scheduled as two separate waves on the available SMs"; the grid follows the SM count, as
torch's ``test_honor_sm_carveout`` checks on the kernel's grid). A GEMM launched while the
collective's blocks are resident places ``sm_count − channels`` of its blocks; the others start
when the first finish and run their whole share: it lasts its time plus that of the waiting
blocks' share (:func:`persistent_wait_s`), not the wave model's SM ratio. So on such an
accelerator a GEMM beside a collective is timed the longer of the two
(:func:`beside_persistent`). It holds where the collective's kernel is resident before the
GEMMs it overlaps are launched, which is how the frameworks issue them: FSDP's prefetched
all-gathers and post-backward reduce-scatters and data-parallel gradient buckets are enqueued
(on high-priority streams in torch's FSDP2 and process groups) before the compute that follows
them; a collective launched while a GEMM holds every SM waits for that GEMM's blocks to end and
is then resident for the next ones (one GEMM's difference, not modelled). A GEMM whose grid
fits in the SMs left (fewer tiles than ``sm_count − channels``) loses nothing this way, and
neither does a GEMM whose library was told the SMs to leave (torch's
``_set_sm_carveout_experimental`` → ``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET``, torch ≥ 2.7;
Transformer Engine's ``NVTE_EXT_MARGIN_SM``): none of the frameworks the validation covers sets
either by default, and no recipe read sets them.

Not modelled: NVLS / CollNet channel counts and traffic, cuBLAS choosing its split-K for the
full SM count (the re-timing chooses it for the SMs left), cuBLAS heuristics choosing a
non-persistent kernel for some shapes (every GEMM of a persistent accelerator is taken as
persistent).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import NetworkDim, System

#: HBM bytes a GPU moves per byte on its ring link, by collective (module docstring).
RING_HBM_BYTES = {
    CollectiveKind.ALL_GATHER: 2.0,
    CollectiveKind.REDUCE_SCATTER: 3.0,
    CollectiveKind.ALL_REDUCE: (2.0 + 3.0) / 2,  # a reduce-scatter, then an all-gather
}


@dataclass(frozen=True, slots=True, order=True)
class NcclLoad:
    """What an NCCL collective takes from the compute beside it on each GPU: ``channels`` SMs
    and ``hbm_share`` of the HBM bandwidth."""

    channels: int = 0
    hbm_share: float = 0.0

    def __bool__(self) -> bool:
        return self.channels > 0 or self.hbm_share > 0.0

    def max(self, other: NcclLoad) -> NcclLoad:
        """The larger of each (the heavier of two collectives that run one after the other):
        one of the two when it is the larger in both (no new object; a plan asks ~10⁵
        times)."""
        if other.channels <= self.channels and other.hbm_share <= self.hbm_share:
            return self
        if self.channels <= other.channels and self.hbm_share <= other.hbm_share:
            return other
        return NcclLoad(max(self.channels, other.channels), max(self.hbm_share, other.hbm_share))


#: Nothing taken (one object, shared: a load is immutable).
NO_LOAD = NcclLoad()


def nccl_load(system: System, counts: Sequence[int], kind: CollectiveKind) -> NcclLoad:
    """:class:`NcclLoad` of an NCCL ``kind`` collective over a group spanning ``counts`` ranks
    per network dim (dim 0 fastest): :func:`nccl_channels`, and :data:`RING_HBM_BYTES` times
    the outermost spanned dim's bandwidth over the GPU's HBM bandwidth (nothing for an
    all-to-all or a one-rank group). ``system``: the achieved network, each dim's bandwidth
    already at its ``bus_efficiency`` (:meth:`~stage_explore.analytical.backend.
    AnalyticalBackend.achieved_network`, the evaluation's ``point.system``). A dim without
    ``nccl_channels`` is outside the model: nothing taken."""
    dim = _outermost(system, counts)
    channels = None if dim is None else dim.channels_for(math.prod(counts))
    if dim is None or channels is None:
        return NO_LOAD
    hbm = RING_HBM_BYTES.get(kind, 0.0) * dim.bandwidth_bytes_per_s
    share = min(1.0, hbm / system.accelerator.memory_bandwidth_bytes_per_s)
    return NcclLoad(channels, share)


def nccl_channels(system: System, counts: Sequence[int]) -> int:
    """Thread blocks per GPU of an NCCL collective over a group spanning ``counts`` ranks per
    network dim (dim 0 fastest): the channels the outermost dim it spans gives a group of that
    many ranks (:meth:`~stage_explore.system.model.NetworkDim.channels_for`: its
    ``nccl_channels_by_ranks`` entry, else its ``nccl_channels``; 0 when that dim has no figure,
    or the group is one rank)."""
    dim = _outermost(system, counts)
    return 0 if dim is None else dim.channels_for(math.prod(counts)) or 0


def _outermost(system: System, counts: Sequence[int]) -> NetworkDim | None:
    """The outermost network dim a group spanning ``counts`` ranks per dim crosses (its ring's
    bottleneck); None for a one-rank group."""
    for index in range(len(counts) - 1, -1, -1):
        if counts[index] > 1:
            return system.network[index]
    return None


def on_fewer_sms(timer: KernelTimer, load: NcclLoad) -> KernelTimer | None:
    """``timer`` on what ``load`` leaves: ``sm_count − channels`` SMs in the GEMM wave model
    with every peak FLOP/s scaled by ``(sm_count − channels) / sm_count``, and the HBM
    bandwidth scaled by ``1 − hbm_share``; None when nothing is taken, or when no SM or no
    HBM bandwidth would be left (a collective outside the model's range)."""
    sms = timer.kernels.sm_count
    if not load or load.channels >= sms or load.hbm_share >= 1.0:
        return None
    left = sms - load.channels
    kernels = replace(timer.kernels, sm_count=left)
    peaks = {dtype: peak * left / sms for dtype, peak in timer.accelerator.peak_flops_per_s.items()}
    accelerator = replace(
        timer.accelerator, peak_flops_per_s=peaks, kernels=kernels,
        memory_bandwidth_bytes_per_s=timer.accelerator.memory_bandwidth_bytes_per_s
        * (1.0 - load.hbm_share),
    )  # fmt: skip
    return replace(timer, accelerator=accelerator, kernels=kernels)


def persistent_wait_s(
    kernels: KernelModel, shape: tuple[int, int, int, int], gemm_s: float, channels: int
) -> float:
    """Seconds a persistent GEMM of ``shape`` (``gemm_s`` alone) lasts beyond ``gemm_s`` when it
    is launched beside a kernel resident on ``channels`` SMs for its whole length (module
    docstring). Its grid is ``min(tiles, sm_count)`` blocks (``tiles``: the output tiles of
    ``kernels.gemm_tile`` in the orientation of fewer waves, as
    :func:`~stage_explore.analytical.gemm_tiles.gemm_efficiency` chooses, then of fewer tiles),
    block ``b`` working through tiles
    ``b, b + grid, …`` (CUTLASS's persistent tile scheduler, ``include/cutlass/gemm/kernel/
    sm90_tile_scheduler.hpp``: ``advance_to_next_work`` adds the grid's block count), so the
    first ``tiles mod grid`` blocks hold one tile more. The blocks past ``sm_count − channels``
    find no SM; each starts when a resident block ends and takes its share's time (a tile:
    ``gemm_s`` over the largest share). Resident blocks holding one tile fewer (those from
    ``tiles mod grid`` to ``sm_count − channels``) free their SMs a tile early: when there are
    at least as many of them as waiting blocks, every waiting block (all of them holding one
    tile fewer) starts then, and the GEMM lasts two shares of one tile fewer; otherwise the
    last waiting block starts when the largest share ends. 0 when the grid fits in the SMs
    left."""
    sms = kernels.sm_count
    left = sms - channels
    if gemm_s <= 0.0 or channels <= 0 or left <= 0:
        return 0.0
    batch, m, n, _ = shape
    tm, tn = kernels.gemm_tile
    counts = (batch * -(-m // tm) * -(-n // tn), batch * -(-m // tn) * -(-n // tm))
    tiles = min(counts, key=lambda count: (-(-count // sms), count))  # fewer waves, then tiles
    grid = min(tiles, sms)
    if grid <= left:
        return 0.0
    most = -(-tiles // grid)
    remainder = tiles % grid
    if remainder == 0 or remainder > left:  # a waiting block holds the largest share
        return gemm_s
    early = left - remainder  # resident blocks of one tile fewer, ending a tile early
    if early >= grid - left:  # every waiting block starts a tile before the largest share ends
        return gemm_s * (most - 2) / most
    return gemm_s * (most - 1) / most


def beside_persistent(
    timer: KernelTimer, fewer: Callable[[Instr], float], channels: int
) -> Callable[[Instr], float]:
    """``fewer`` (an instruction's seconds on what a collective leaves, :func:`on_fewer_sms`)
    with each GEMM timed at least its time alone plus :func:`persistent_wait_s`: a persistent
    GEMM beside a collective resident on ``channels`` SMs."""

    def seconds(instr: Instr) -> float:
        rest = fewer(instr)
        gemm_s = timer.gemm_kernel_s(instr)
        shape = gemm_shape(instr) if gemm_s > 0.0 else None
        if shape is None:
            return rest
        return max(rest, timer(instr) + persistent_wait_s(timer.kernels, shape, gemm_s, channels))

    return seconds


def contended_share(
    instrs: Iterable[Instr], alone_s: float, fewer: Callable[[Instr], float]
) -> float:
    """The share of its rate the compute of ``instrs`` (compute instructions, ``alone_s``
    seconds on the whole GPU) loses on what a collective leaves: ``1 − alone_s / Σ fewer``
    (0 when nothing is lost)."""
    beside = sum(fewer(instr) for instr in instrs)
    return 1.0 - alone_s / beside if beside > alone_s > 0.0 else 0.0


def contended_s(
    duration_s: float, compute_s: float, comm_s: float, beside: Sequence[tuple[float, float]]
) -> float:
    """Wall seconds of a block of ``duration_s`` (``compute_s`` of it busy compute) beside
    collectives on streams of their own that end after ``comm_s``; ``beside`` lists each
    stream's (seconds, share of the SMs it holds). While they run the compute proceeds at
    ``1 − Σ share`` of its rate, so each leaves ``share · min(seconds, compute_s / (1 − Σ
    share))`` of it for after; the block lasts at least ``comm_s``."""
    shares = sum(share for seconds, share in beside if seconds > 0.0)
    if shares <= 0.0 or compute_s <= 0.0:
        return max(comm_s, duration_s)
    limit = compute_s / (1.0 - shares) if shares < 1.0 else float("inf")
    lost_s = sum(share * min(seconds, limit) for seconds, share in beside if seconds > 0.0)
    return max(comm_s, duration_s + lost_s)
