"""The pieces the analytical backend's memos are made of, and its small pure helpers.

Holds the bounded LRU :class:`Memo`, the value types of memoised parts (:class:`States`,
:class:`Point`, :class:`Plan`, ``BlockSync``) and helpers: :func:`canonical` and
:func:`canonical_sizes` (the per-rank shapes bound blocks depend on), :func:`compute_dtype`
(also used by the ASTRA-sim backend), :func:`axes_of`, :func:`tied_ends`, :func:`sum_states`,
:func:`infeasible`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.emit import GroupTable
from stage_core.lower.fp8 import NVFP4
from stage_core.lower.program import Workload, embedding_ends
from stage_core.parallel.config import ParallelConfig, Precision
from stage_core.plans import DP_REPLICATE
from stage_explore.analytical.blocktime import ChunkTiming
from stage_explore.analytical.fp8_roles import check_nvfp4
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.overlap import DEEPEP_SMS
from stage_explore.analytical.step import StepPlan, SyncCost
from stage_explore.evaluation import Evaluation
from stage_explore.system.model import System


class Memo:
    """A small LRU memo owned by one backend instance (no module-level state).

    A hit marks its entry recently used only once the memo is half full: before that nothing
    is evicted, and an entry used again later is moved then (an entry used only while the
    memo was less than half full is evicted first, as in a strict LRU); a memo of pure values
    gives the same answers whichever entry it evicts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._recency_from = size // 2  # entries held before hits are ordered

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        items = self.items
        value = items.get(key)
        if value is not None:
            self.hits += 1
            if len(items) > self._recency_from:
                items.move_to_end(key)
            return value
        self.misses += 1
        value = compute()
        items[key] = value
        if len(items) > self.size:
            items.popitem(last=False)
        return value


@dataclass(frozen=True, slots=True)
class States:
    """Model-state bytes, saved activations, parameters updated, the two largest full weights
    (ZeRO-3 buffers), model and hardware FLOPs per micro-batch, bytes in host memory (CPU
    offload) — of a block or a chunk."""

    states_bytes: int
    saved_bytes: int
    params: int
    largest: tuple[int, ...]
    model_flops: int
    hardware_flops: int
    host_bytes: int = 0  # in host memory under CPU offload (offload.py)


#: A block kind's gradient bytes per bucket key, parameter-gather bytes per axes, its states.
BlockSync = tuple[dict[Any, int], dict[tuple[str, ...], int], States]


@dataclass(frozen=True, slots=True)
class KindParts:
    """A block kind on one configuration, before the network: its :data:`BlockSync`, its
    ZeRO-3 parameter gathers and ZeRO-2/3 gradient scatters, the axes of the groups its timing
    needs (``cost_axes``: its collectives and ZeRO's) and of every group it uses
    (``span_axes``: those and its gradient reductions and parameter gathers)."""

    sync: BlockSync
    gathers: tuple[Instr, ...]
    scatters: tuple[Instr, ...]
    cost_axes: tuple[tuple[str, ...], ...]
    span_axes: tuple[tuple[str, ...], ...]
    #: NCCL calls each of :attr:`gathers` is issued as (DeepSpeed ZeRO-3's prefetch batches,
    #: :func:`~stage_explore.analytical.framework_costs.zero3_fetch_calls`); () is one each.
    gather_calls: tuple[int, ...] = ()
    #: One all-gather per parameter that stays whole on every rank, issued once per step after
    #: the optimizer step (:func:`~stage_explore.analytical.framework_costs.zero3_persistent`);
    #: their bytes are not in :attr:`gathers`.
    persistent: tuple[Instr, ...] = ()

    def calls(self, index: int) -> int:
        """The NCCL calls of gather ``index``."""
        return self.gather_calls[index] if self.gather_calls else 1


@dataclass(frozen=True, slots=True)
class ChunkParts:
    """One chunk on one rank: its timing per micro-batch, its gradient synchronisation, its
    model states; under a split backward its B seconds (else None), W-pending bytes and W
    seconds (its own instructions' timing, else None); under DualPipe its forward and backward
    compute seconds."""

    timing: ChunkTiming
    sync: SyncCost
    states: States
    input_grad_s: float | None
    pending_bytes: int
    compute_s: tuple[float, float]
    weight_grad_s: float | None = None


@dataclass(frozen=True, slots=True)
class Point:
    """One evaluation's inputs as the memoised parts need them: ``key`` names the bound
    ``blocks``; ``system`` has the network efficiency applied and ``token`` names it."""

    workload: Workload
    key: Hashable
    blocks: dict[str, BoundBlock]
    system: System
    token: int
    dtype: str
    table: GroupTable
    state_key: Hashable


@dataclass(frozen=True, slots=True)
class Plan:
    """What a configuration costs whatever its schedule and number of micro-batches: the step
    plan and the FLOPs per micro-batch of one rank of every stage."""

    step: StepPlan
    model_flops: int
    hardware_flops: int


def sum_states(parts: Sequence[tuple[States, int]]) -> States:
    """The states of runs of ``count`` identical blocks (exact ints: one loop, not a sum per
    field)."""
    states = saved = params = model = hardware = host = 0
    largest: list[int] = []
    for part, count in parts:
        states += part.states_bytes * count
        host += part.host_bytes * count
        saved += part.saved_bytes * count
        params += part.params * count
        model += part.model_flops * count
        hardware += part.hardware_flops * count
        largest += part.largest * min(count, 2)
    largest.sort(reverse=True)
    return States(states, saved, params, tuple(largest[:2]), model, hardware, host)


def tied_ends(workload: Workload) -> bool:
    """Two copies of the embedding table at the pipeline ends (tied, or multi-token
    prediction): :func:`stage_core.lower.program.embedding_ends`."""
    return embedding_ends(workload)


def canonical_sizes(workload: Workload) -> tuple[dict[str, int], dict[str, int]]:
    """The dim and axis sizes of :func:`canonical`, without building the workload."""
    axes = dict(workload.axis_sizes)
    sizes = dict(workload.sizes)
    dp = axes["dp"] * axes[DP_REPLICATE]
    axes["dp"] = min(axes["dp"], 2)
    axes[DP_REPLICATE] = min(axes[DP_REPLICATE], 2)  # hybrid sharding's replicas, likewise
    axes["pp"] = 1
    canonical_dp = axes["dp"] * axes[DP_REPLICATE]
    sizes["B"] = sizes["B"] // dp * canonical_dp
    sizes["C"] = sizes["C"] // dp * canonical_dp if workload.model.is_moe else sizes["C"]
    return sizes, axes


def canonical(workload: Workload) -> Workload:
    """``workload`` as its bound blocks see it: pp 1 and dp "1 or more" (at most 2), the global
    micro-batch dims scaled with dp."""
    sizes, axes = canonical_sizes(workload)
    return replace(workload, sizes=sizes, axis_sizes=axes)


def compute_dtype(parallel: ParallelConfig, system: System) -> str:
    """The dtype whose peak times compute: the precision; one the accelerator has no peak for
    (e.g. fp8 on an A100) is a :class:`ConfigError` (:meth:`Accelerator.precision_dtype`).
    An FP4 run is timed as the quantized-linear family ``fp8`` names (its linear GEMMs, casts,
    copies and saved inputs by the recipe ``nvfp4``: :mod:`stage_core.lower.fp8`,
    :class:`~stage_explore.analytical.kernels.KernelTimer`), once the system has a grounded
    NVFP4 GEMM rate (:func:`~stage_explore.analytical.fp8_roles.check_nvfp4`)."""
    if parallel.precision is Precision.FP4:
        check_nvfp4(system.name, system.accelerator)
        return system.accelerator.precision_dtype(str(Precision.FP8))
    return system.accelerator.precision_dtype(str(parallel.precision))


def peak_dtype(parallel: ParallelConfig, dtype: str) -> str:
    """The peak an evaluation's MFU and HFU divide by, from its :func:`compute_dtype`
    ``dtype`` (computed once per evaluation: an FP4 run's checks its NVFP4 rate): that
    dtype's, NVFP4's for FP4."""
    return NVFP4 if parallel.precision is Precision.FP4 else dtype


def axes_of(block: BoundBlock) -> list[tuple[str, ...]]:
    return sorted({i.axes for i in (*block.fwd, *block.bwd) if i.axes})


def infeasible(reason: str, gpus: int, system: System) -> Evaluation:
    nan = float("nan")
    return Evaluation(
        step_time_s=nan, mfu=nan, hfu=nan, tokens_per_s_per_gpu=nan, peak_memory_bytes=0,
        feasible=False, reason=reason, memory_capacity_bytes=system.accelerator.memory_bytes,
        num_gpus=gpus,
    )  # fmt: skip


def pair_sm_share(framework: FrameworkProfile, point: Point) -> float:
    """The fraction of the SMs a DualPipe pair's expert all-to-alls hold beside its
    computation: DeepEP's :data:`~stage_explore.analytical.overlap.DEEPEP_SMS` (the
    DeepSeek-V3 report's 20 SMs, Section 3.2.2) or HybridEP's ``moe_hybridep_sms``, over
    the accelerator's SMs; 0 for a dense model, NCCL's dispatcher (whose SMs the profile's
    NCCL rules leave out, as everywhere) or an accelerator without kernel figures."""
    kernels = point.system.accelerator.kernels
    if kernels is None or not point.workload.model.is_moe:
        return 0.0
    if framework.moe_hybridep:
        sms = framework.moe_hybridep_sms
    elif framework.moe_deepep:
        sms = DEEPEP_SMS
    else:
        return 0.0
    return sms / kernels.sm_count if kernels.sm_count > sms else 0.0
