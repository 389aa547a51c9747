"""The hardware description as data: accelerator, network dimensions and the system.

Holds:

- :class:`Topology` and :class:`CollectiveAlgorithm`, the closed vocabularies of a network dim;
- :class:`EfficiencyModel`, the achieved fraction of peak compute and memory bandwidth;
- :class:`Accelerator`, peak FLOP/s per dtype, memory capacity and bandwidth, efficiency;
- :class:`CollectiveAlgorithms` and :class:`NetworkDim`, one level of the network;
- :class:`System`, an accelerator plus its network dims from the scale-up domain outwards.

Ranks map to network coordinates as in ASTRA-sim: dimension 0 varies fastest in the rank id, so
with dims of sizes ``(8, 1024)`` ranks 0–7 share a node and rank 8 starts the next node.

The efficiency model (documented in :class:`EfficiencyModel`) is a saturating curve in FLOPs::

    matmul_efficiency(F) = matmul_peak · F / (F + matmul_half_saturation_flops)

which is the same as charging every kernel a fixed overhead: the compute time
``F / (peak · matmul_efficiency(F))`` equals ``(F + F_half) / (peak · matmul_peak)``.
Memory-bound work runs at ``memory`` × the HBM bandwidth; a kernel takes the larger of the two
(roofline with efficiencies; Williams et al., CACM 2009).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.ranks import coordinates


class Topology(StrEnum):
    """How the ranks of one network dim are connected."""

    RING = "ring"
    SWITCH = "switch"
    FULLY_CONNECTED = "fully_connected"


class CollectiveAlgorithm(StrEnum):
    """The algorithm a collective uses on one network dim."""

    RING = "ring"
    DIRECT = "direct"
    HALVING_DOUBLING = "halving_doubling"


def _positive(value: float, what: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{what} must be a finite number > 0, but got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class EfficiencyModel:
    """Achieved fraction of peak, per kind of work.

    - ``matmul_peak``: the efficiency large matmuls saturate at (0 < x ≤ 1);
    - ``matmul_half_saturation_flops``: the FLOPs of a kernel that reaches half of
      ``matmul_peak`` (≥ 0; 0 means every kernel runs at ``matmul_peak``);
    - ``memory``: the fraction of the HBM bandwidth that memory-bound kernels reach.
    """

    matmul_peak: float = 1.0
    matmul_half_saturation_flops: float = 0.0
    memory: float = 1.0

    def __post_init__(self) -> None:
        for name in ("matmul_peak", "memory"):
            value = getattr(self, name)
            _positive(value, f"efficiency `{name}`")
            if value > 1:
                raise ConfigError(f"efficiency `{name}` must be <= 1, but got {value!r}")
        half = self.matmul_half_saturation_flops
        if not (isinstance(half, int | float) and math.isfinite(half) and half >= 0):
            raise ConfigError(
                f"efficiency `matmul_half_saturation_flops` must be >= 0, but got {half!r}"
            )

    def matmul_efficiency(self, flops: float) -> float:
        """The fraction of peak a kernel of ``flops`` FLOPs achieves."""
        if flops <= 0:
            return 0.0
        return self.matmul_peak * flops / (flops + self.matmul_half_saturation_flops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "matmul_peak": self.matmul_peak,
            "matmul_half_saturation_flops": self.matmul_half_saturation_flops,
            "memory": self.memory,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelModel:
    """Per-kernel throughput of one accelerator (timed by :mod:`stage_explore.analytical.kernels`).

    - ``sm_count``: streaming multiprocessors (the width of one wave of GEMM tiles);
    - ``gemm_tile``: (rows, columns) of the output tile one SM computes at a time;
    - ``gemm_k_overhead``: the reduction length a tile's prologue and epilogue cost, in elements
      of K (a GEMM's main loop runs at ``K / (K + gemm_k_overhead)``);
    - ``gemm_efficiency``: per dtype, the fraction of peak a large, wave-aligned GEMM sustains;
    - ``attention_forward`` / ``attention_backward``: the fraction of the BF16 peak a fused
      (FlashAttention-style) kernel reaches on long sequences, head dim 128;
    - ``attention_half_keys``: the keys per query row at which the kernel reaches half of that
      (causal attention sees half the keys on average);
    - ``attention_head_dim_half``: the head dim at which it reaches half (``d / (d + d½)``,
      normalised to head dim 128);
    - ``attention_kernels``: other named attention kernels (e.g. ``fa2`` on a GPU whose best
      kernel is FA3, ``cudnn`` for Transformer Engine's cuDNN attention) as (forward, backward)
      fractions, optionally with the kernel's own half-saturation keys as a third value (else
      ``attention_half_keys``), for software that uses them (a framework profile's
      ``attention_kernel``);
    - ``attention_noncausal``: per named kernel, its non-causal over its causal long-sequence
      rate, both read off one published figure (forward and backward alike); the steps after
      the first of Transformer Engine's ring context parallelism run that kernel non-causal
      (:func:`~stage_explore.analytical.te_context_parallel.te_ring_time_factor`). A kernel
      not listed: 1 (its causal rate);
    - ``grouped_gemm_group_s``: seconds each group of a grouped GEMM (one local expert's GEMM
      of an MoE layer) costs beyond the batched-GEMM wave model, measured from public grouped-GEMM
      benchmarks (0: none stated);
    - ``eager_memory``: the fraction of the HBM bandwidth eager PyTorch's element-wise kernels
      reach (the op-by-op modules of :mod:`~stage_explore.analytical.eager`: casts, pow, mean,
      products, adds, each a kernel of its own), measured on the same op list; 0: the
      accelerator's ``efficiency.memory`` (none stated);
    - ``memory_kernel_s``: seconds a memory-bound kernel costs beyond its bytes at the achieved
      HBM bandwidth when kernels run back to back in one stream (its launch, ramp-up and tail:
      ``t = memory_kernel_s + bytes / bandwidth``, fitted on a streaming kernel timed over
      DRAM-sized volumes); 0: none stated.
    """

    sm_count: int
    gemm_tile: tuple[int, int]
    gemm_k_overhead: int
    gemm_efficiency: dict[str, float] = field(hash=False)
    attention_forward: float
    attention_backward: float
    attention_half_keys: float
    attention_head_dim_half: float
    attention_kernels: dict[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    attention_noncausal: dict[str, float] = field(default_factory=dict, hash=False)
    grouped_gemm_group_s: float = 0.0
    eager_memory: float = 0.0
    memory_kernel_s: float = 0.0

    def attention(self, kernel: str | None) -> tuple[float, float]:
        """(forward, backward) fraction of the BF16 peak of the named kernel; the best kernel
        (``attention_forward``/``attention_backward``) when ``kernel`` is None or not listed."""
        if kernel is not None and kernel in self.attention_kernels:
            forward, backward = self.attention_kernels[kernel][:2]
            return forward, backward
        return self.attention_forward, self.attention_backward

    def half_keys(self, kernel: str | None) -> float:
        """The keys per query row at which the named kernel reaches half its long-sequence
        fraction: its own third value when listed with one, else ``attention_half_keys``."""
        entry = self.attention_kernels.get(kernel, ()) if kernel is not None else ()
        return entry[2] if len(entry) == 3 else self.attention_half_keys

    def noncausal_ratio(self, kernel: str | None) -> float:
        """The named kernel's non-causal over causal rate (``attention_noncausal``); 1 when
        ``kernel`` is None (the best kernel) or not listed."""
        return self.attention_noncausal.get(kernel, 1.0) if kernel is not None else 1.0

    def __post_init__(self) -> None:
        ratios = {}
        for kernel, ratio in dict(self.attention_noncausal).items():
            if (
                isinstance(ratio, bool)
                or not isinstance(ratio, int | float)
                or not math.isfinite(ratio)
                or ratio <= 0
            ):
                raise ConfigError(
                    f"kernels `attention_noncausal.{kernel}` must be a positive number "
                    f"(non-causal over causal rate), but got {ratio!r}"
                )
            ratios[kernel] = float(ratio)
        object.__setattr__(self, "attention_noncausal", ratios)
        named = {}
        for kernel, pair in dict(self.attention_kernels).items():
            values = tuple(pair)
            if len(values) not in (2, 3):
                raise ConfigError(
                    f"kernels `attention_kernels.{kernel}` must be [forward, backward] or "
                    f"[forward, backward, half_keys], but got {pair!r}"
                )
            for value in values[:2]:
                _fraction(value, f"kernels `attention_kernels.{kernel}`")
            if len(values) == 3:
                _positive(values[2], f"kernels `attention_kernels.{kernel}` half_keys")
            named[kernel] = tuple(float(value) for value in values)
        object.__setattr__(self, "attention_kernels", named)
        for name in ("sm_count", "gemm_k_overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"kernels `{name}` must be an integer >= 0, but got {value!r}")
        if self.sm_count < 1:
            raise ConfigError(f"kernels `sm_count` must be >= 1, but got {self.sm_count}")
        tile = tuple(self.gemm_tile)
        if len(tile) != 2 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in tile
        ):
            raise ConfigError(
                f"kernels `gemm_tile` must be two positive integers, but got {self.gemm_tile!r}"
            )
        object.__setattr__(self, "gemm_tile", tile)
        if not self.gemm_efficiency:
            raise ConfigError("kernels `gemm_efficiency` needs at least one dtype")
        for dtype, value in self.gemm_efficiency.items():
            _fraction(value, f"kernels `gemm_efficiency.{dtype}`")
        object.__setattr__(self, "gemm_efficiency", dict(self.gemm_efficiency))
        for name in ("attention_forward", "attention_backward"):
            _fraction(getattr(self, name), f"kernels `{name}`")
        if self.eager_memory:
            _fraction(self.eager_memory, "kernels `eager_memory`")
        for name in (
            "attention_half_keys",
            "attention_head_dim_half",
            "grouped_gemm_group_s",
            "memory_kernel_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"kernels `{name}` must be >= 0, but got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "sm_count": self.sm_count,
            "gemm_tile": list(self.gemm_tile),
            "gemm_k_overhead": self.gemm_k_overhead,
            "gemm_efficiency": dict(self.gemm_efficiency),
            "attention_forward": self.attention_forward,
            "attention_backward": self.attention_backward,
            "attention_half_keys": self.attention_half_keys,
            "attention_head_dim_half": self.attention_head_dim_half,
            **(
                {"grouped_gemm_group_s": self.grouped_gemm_group_s}
                if self.grouped_gemm_group_s
                else {}
            ),
            **({"eager_memory": self.eager_memory} if self.eager_memory else {}),
            **({"memory_kernel_s": self.memory_kernel_s} if self.memory_kernel_s else {}),
            **(
                {"attention_kernels": {k: list(v) for k, v in self.attention_kernels.items()}}
                if self.attention_kernels
                else {}
            ),
            **(
                {"attention_noncausal": dict(self.attention_noncausal)}
                if self.attention_noncausal
                else {}
            ),
        }


def _fraction(value: Any, what: str) -> None:
    _positive(value, what)
    if value > 1:
        raise ConfigError(f"{what} must be <= 1, but got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    """One accelerator: peak FLOP/s per dtype, memory capacity (bytes) and bandwidth (bytes/s)."""

    name: str
    peak_flops_per_s: dict[str, float] = field(hash=False)
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    efficiency: EfficiencyModel = field(default_factory=EfficiencyModel)
    kernels: KernelModel | None = None

    def __post_init__(self) -> None:
        if not self.peak_flops_per_s:
            raise ConfigError(f"accelerator {self.name!r} needs at least one peak FLOP/s entry")
        for dtype, peak in self.peak_flops_per_s.items():
            _positive(peak, f"accelerator {self.name!r} peak FLOP/s for {dtype!r}")
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int):
            raise ConfigError(
                f"accelerator {self.name!r} `memory_bytes` must be an integer, "
                f"but got {self.memory_bytes!r}"
            )
        if self.memory_bytes <= 0:
            raise ConfigError(
                f"accelerator {self.name!r} `memory_bytes` must be > 0, but got {self.memory_bytes}"
            )
        _positive(self.memory_bandwidth_bytes_per_s, f"accelerator {self.name!r} memory bandwidth")
        object.__setattr__(self, "peak_flops_per_s", dict(self.peak_flops_per_s))

    def peak(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            known = ", ".join(sorted(self.peak_flops_per_s))
            raise ConfigError(
                f"accelerator {self.name!r} has no peak FLOP/s for dtype {dtype!r}; known: {known}"
            ) from None

    def precision_dtype(self, precision: str) -> str:
        """The dtype whose peak times a run at ``precision``: the precision itself. A precision
        the accelerator has no peak for is a one-line :class:`ConfigError`, never a silent
        fallback to another peak (e.g. ``fp8`` on an A100, which has no FP8 tensor cores)."""
        if precision in self.peak_flops_per_s:
            return precision
        known = ", ".join(sorted(self.peak_flops_per_s))
        raise ConfigError(
            f"precision {precision!r} needs a peak FLOP/s for it, but accelerator {self.name!r} "
            f"has none (it has: {known}); choose one of those precisions or a system with a "
            f"{precision} peak"
        )

    @property
    def achieved_memory_bandwidth_bytes_per_s(self) -> float:
        """HBM bandwidth the memory-bound kernels reach: the peak times ``efficiency.memory``."""
        return self.memory_bandwidth_bytes_per_s * self.efficiency.memory

    def compute_time_s(self, flops: int, memory_bytes: int, dtype: str) -> float:
        """Roofline time with efficiencies: the larger of the compute and the memory time."""
        compute_s = 0.0
        if flops > 0:
            compute_s = flops / (self.peak(dtype) * self.efficiency.matmul_efficiency(flops))
        memory_s = memory_bytes / self.achieved_memory_bandwidth_bytes_per_s
        return max(compute_s, memory_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "efficiency": self.efficiency.to_dict(),
            **({} if self.kernels is None else {"kernels": self.kernels.to_dict()}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveAlgorithms:
    """The algorithm each collective kind uses on one network dim."""

    all_reduce: CollectiveAlgorithm = CollectiveAlgorithm.RING
    all_gather: CollectiveAlgorithm = CollectiveAlgorithm.RING
    reduce_scatter: CollectiveAlgorithm = CollectiveAlgorithm.RING
    all_to_all: CollectiveAlgorithm = CollectiveAlgorithm.DIRECT

    def for_kind(self, kind: CollectiveKind) -> CollectiveAlgorithm:
        algorithm: CollectiveAlgorithm = getattr(self, kind.value)
        return algorithm

    def to_dict(self) -> dict[str, str]:
        return {kind.value: self.for_kind(kind).value for kind in CollectiveKind}


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkDim:
    """One level of the network.

    ``bandwidth_bytes_per_s`` is per rank and per direction (for a ring: the link to each
    neighbour). ``latency_s`` is the time of an empty message between two ranks of this dim
    (through the switch for a switch), the α of the α–β model. ``bus_efficiency`` (optional) is
    the fraction of the link bandwidth that NCCL's bus bandwidth reaches on large messages
    (nccl-tests' ``busbw``); ``collective_overhead_s`` a fixed cost per collective on this dim
    (kernel launch and protocol set-up), which makes small messages reach a lower bus bandwidth.
    ``small_message_overhead_s`` (optional): NCCL's fixed cost per call with its low-latency
    (LL) protocol, which its tuner picks for small messages (a lower fixed cost, a quarter to a
    third of the bus bandwidth; an NCCL all-reduce, all-gather or reduce-scatter takes the
    faster protocol: :mod:`stage_explore.analytical.collectives`, "NCCL's protocols"). None:
    no figure, every NCCL call is timed with ``collective_overhead_s`` alone.
    ``bus_efficiency_by_ranks`` (optional, needs ``bus_efficiency``): ``(ranks, fraction)``
    pairs, the bus bandwidth fraction NCCL reaches for a collective over exactly that many
    ranks of this dim, in place of ``bus_efficiency`` (on an A100 NVSwitch node nccl-tests'
    all-reduce bus bandwidth grows with the group: ~191 / 216 / 226 GB/s over 2 / 4 / 8 GPUs).
    ``bus_efficiency_scaling`` (optional): ``(ranks, factor)`` points, the factor on the
    achieved bandwidth of a ring collective (all-reduce, reduce-scatter, all-gather; not
    all-to-all) over ``ranks`` ranks of this dim — the bus bandwidth NCCL reaches falling as a
    ring spans more nodes of a scale-out fabric. Between two points the factor is interpolated
    linearly in ``log2(ranks)``; it is 1 below the first point and held at the last point's
    value beyond it (not extrapolated): :meth:`scaling_factor`.
    The α–β mode reads both; an ASTRA-sim configuration keeps one bandwidth per dim.
    ``nccl_channels`` (optional): the thread blocks (one per channel, each holding an SM) an
    NCCL collective over a group whose outermost dim is this one runs on every GPU of it; the
    analytical backend slows compute that overlaps such a collective by that share of the SMs
    (:mod:`stage_explore.analytical.contention`). None: no figure, no slowdown.
    ``nvls_efficiency`` (optional, needs ``bus_efficiency``): the fraction of the link
    bandwidth, per direction, that NVLink SHARP multicast traffic (``multimem.ld_reduce`` /
    ``multimem.st`` through the switch) reaches on this dim, read off NCCL's NVLS all-reduce
    (its algorithm bandwidth times ``1 + 1/n``: each GPU sends and receives ``S (1 + 1/n)``,
    NVIDIA/nccl#1083). The
    analytical backend times Transformer Engine's userbuffers multicast reduce-scatters and
    all-gathers with it (:mod:`stage_explore.analytical.ub_multicast`). None: the dim has no
    multicast (no NVSwitch with SHARP, or no figure); those kernels are timed as rings.
    """

    name: str = ""
    size: int
    topology: Topology
    bandwidth_bytes_per_s: float
    latency_s: float
    algorithms: CollectiveAlgorithms = field(default_factory=CollectiveAlgorithms)
    bus_efficiency: float | None = None
    collective_overhead_s: float = 0.0
    small_message_overhead_s: float | None = None
    bus_efficiency_by_ranks: tuple[tuple[int, float], ...] = ()
    bus_efficiency_scaling: tuple[tuple[int, float], ...] = ()
    nccl_channels: int | None = None
    nvls_efficiency: float | None = None

    def __post_init__(self) -> None:
        label = f"network dim {self.name!r}" if self.name else "network dim"
        if self.nvls_efficiency is not None:
            _fraction(self.nvls_efficiency, f"{label} `nvls_efficiency`")
            if self.bus_efficiency is None:
                raise ConfigError(f"{label} `nvls_efficiency` needs `bus_efficiency` as well")
        channels = self.nccl_channels
        if channels is not None and (
            isinstance(channels, bool) or not isinstance(channels, int) or channels < 1
        ):
            raise ConfigError(
                f"{label} `nccl_channels` must be an integer >= 1, but got {channels!r}"
            )
        if self.bus_efficiency is not None:
            _fraction(self.bus_efficiency, f"{label} `bus_efficiency`")
        self._check_by_ranks(label)
        self._check_scaling(label)
        overhead = self.collective_overhead_s
        if not (isinstance(overhead, int | float) and math.isfinite(overhead) and overhead >= 0):
            raise ConfigError(f"{label} `collective_overhead_s` must be >= 0, but got {overhead!r}")
        small = self.small_message_overhead_s
        if small is not None and not (
            isinstance(small, int | float) and math.isfinite(small) and small >= 0
        ):
            raise ConfigError(f"{label} `small_message_overhead_s` must be >= 0, but got {small!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ConfigError(f"{label} `size` must be an integer >= 1, but got {self.size!r}")
        try:
            object.__setattr__(self, "topology", Topology(self.topology))
        except ValueError:
            known = ", ".join(t.value for t in Topology)
            raise ConfigError(
                f"{label} `topology` must be one of {known}, but got {self.topology!r}"
            ) from None
        _positive(self.bandwidth_bytes_per_s, f"{label} `bandwidth_bytes_per_s`")
        latency = self.latency_s
        if not (isinstance(latency, int | float) and math.isfinite(latency) and latency >= 0):
            raise ConfigError(f"{label} `latency_s` must be >= 0, but got {latency!r}")
        for kind in CollectiveKind:
            algorithm = self.algorithms.for_kind(kind)
            if algorithm is CollectiveAlgorithm.HALVING_DOUBLING and self.size & (self.size - 1):
                raise ConfigError(
                    f"{label}: halving_doubling for {kind.value} needs a power-of-two size, "
                    f"but got size={self.size}"
                )

    def _check_by_ranks(self, label: str) -> None:
        pairs = self.bus_efficiency_by_ranks
        if pairs and self.bus_efficiency is None:
            raise ConfigError(f"{label} `bus_efficiency_by_ranks` needs `bus_efficiency` as well")
        seen: set[int] = set()
        for ranks, fraction in pairs:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= self.size:
                raise ConfigError(
                    f"{label} `bus_efficiency_by_ranks` keys must be rank counts from 2 to the "
                    f"dim's size {self.size}, but got {ranks!r}"
                )
            if ranks in seen:
                raise ConfigError(f"{label} `bus_efficiency_by_ranks` lists {ranks} ranks twice")
            seen.add(ranks)
            _fraction(fraction, f"{label} `bus_efficiency_by_ranks.{ranks}`")

    def _check_scaling(self, label: str) -> None:
        previous = 1
        for ranks, factor in self.bus_efficiency_scaling:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks <= previous:
                raise ConfigError(
                    f"{label} `bus_efficiency_scaling` keys must be increasing rank counts >= 2, "
                    f"but got {ranks!r} after {previous}"
                )
            previous = ranks
            _fraction(factor, f"{label} `bus_efficiency_scaling.{ranks}`")

    def scaling_factor(self, ranks: int) -> float:
        """The factor on this dim's achieved bandwidth for a ring collective over ``ranks`` of
        its ranks (``bus_efficiency_scaling``): 1 below the first point, the last point's factor
        beyond the last, linear in ``log2(ranks)`` between two points."""
        points = self.bus_efficiency_scaling
        if not points or ranks < points[0][0]:
            return 1.0
        for (low, low_factor), (high, high_factor) in itertools.pairwise(points):
            if ranks <= high:
                share = math.log2(ranks / low) / math.log2(high / low)
                return low_factor + share * (high_factor - low_factor)
        return points[-1][1]

    def multicast_factor(self) -> float | None:
        """The factor on this dim's achieved bandwidth (scaled by ``bus_efficiency``) for NVLink
        SHARP multicast traffic: ``nvls_efficiency / bus_efficiency``; None without
        ``nvls_efficiency`` (no multicast)."""
        if self.nvls_efficiency is None or not self.bus_efficiency:
            return None
        return self.nvls_efficiency / self.bus_efficiency

    def bandwidth_factor(self, ranks: int) -> float:
        """The factor on this dim's achieved bandwidth (scaled by ``bus_efficiency``) for a
        collective over ``ranks`` of its ranks: ``bus_efficiency_by_ranks[ranks] /
        bus_efficiency`` when listed, else 1."""
        for count, fraction in self.bus_efficiency_by_ranks:
            if count == ranks and self.bus_efficiency:
                return fraction / self.bus_efficiency
        return 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            "topology": self.topology.value,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "latency_s": self.latency_s,
            "algorithms": self.algorithms.to_dict(),
            **({} if self.bus_efficiency is None else {"bus_efficiency": self.bus_efficiency}),
            **(
                {"collective_overhead_s": self.collective_overhead_s}
                if self.collective_overhead_s
                else {}
            ),
            **(
                {"small_message_overhead_s": self.small_message_overhead_s}
                if self.small_message_overhead_s is not None
                else {}
            ),
            **(
                {"bus_efficiency_by_ranks": {str(n): f for n, f in self.bus_efficiency_by_ranks}}
                if self.bus_efficiency_by_ranks
                else {}
            ),
            **(
                {"bus_efficiency_scaling": {str(n): f for n, f in self.bus_efficiency_scaling}}
                if self.bus_efficiency_scaling
                else {}
            ),
            **({} if self.nccl_channels is None else {"nccl_channels": self.nccl_channels}),
            **({} if self.nvls_efficiency is None else {"nvls_efficiency": self.nvls_efficiency}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    """An accelerator and its network dims, from the scale-up domain outwards.

    The product of the dim sizes is the largest number of GPUs the system describes; a design
    point may use fewer. Dim 0 varies fastest in the rank id.
    """

    name: str
    accelerator: Accelerator
    network: tuple[NetworkDim, ...]
    description: str = ""
    price_per_gpu_hour: float | None = None
    power_w: float | None = None

    def __post_init__(self) -> None:
        if not self.network:
            raise ConfigError(f"system {self.name!r} needs at least one network dim")
        object.__setattr__(self, "network", tuple(self.network))
        if self.price_per_gpu_hour is not None:
            _positive(self.price_per_gpu_hour, f"system {self.name!r} `price_per_gpu_hour`")
        if self.power_w is not None:
            _positive(self.power_w, f"system {self.name!r} `power_w`")

    @property
    def dim_sizes(self) -> tuple[int, ...]:
        return tuple(dim.size for dim in self.network)

    @property
    def max_gpus(self) -> int:
        return math.prod(self.dim_sizes)

    def coordinates(self, rank: int) -> tuple[int, ...]:
        """The coordinate of ``rank`` in every network dim (dim 0 fastest)."""
        if not 0 <= rank < self.max_gpus:
            raise ConfigError(
                f"rank {rank} is outside system {self.name!r}, which has {self.max_gpus} GPUs"
            )
        return coordinates(rank, self.dim_sizes)

    def rank_of(self, coordinates: tuple[int, ...]) -> int:
        """The rank at ``coordinates`` (dim 0 fastest)."""
        rank = 0
        for coordinate, size in zip(reversed(coordinates), reversed(self.dim_sizes), strict=True):
            rank = rank * size + coordinate
        return rank

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "accelerator": self.accelerator.to_dict(),
            "network": [dim.to_dict() for dim in self.network],
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "power_w": self.power_w,
        }
