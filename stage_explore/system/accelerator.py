"""The accelerator as data: peak compute, memory and the achieved fraction of both.

Holds:

- :class:`EfficiencyModel`, the achieved fraction of peak compute and memory bandwidth;
- :class:`KernelModel`, per-kernel throughput figures (attention kernels, grouped GEMMs,
  memory-bound kernels) timed by :mod:`stage_explore.analytical.kernels`;
- :class:`Accelerator`, peak FLOP/s per dtype, memory capacity and bandwidth, efficiency.

The efficiency model (documented in :class:`EfficiencyModel`) is a saturating curve in FLOPs::

    matmul_efficiency(F) = matmul_peak · F / (F + matmul_half_saturation_flops)

which is the same as charging every kernel a fixed overhead: the compute time
``F / (peak · matmul_efficiency(F))`` equals ``(F + F_half) / (peak · matmul_peak)``.
Memory-bound work runs at ``memory`` × the HBM bandwidth; a kernel takes the larger of the two
(roofline with efficiencies; Williams et al., CACM 2009).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.system.checks import (
    BYTES_PER_S_FLOOR,
    FLOPS_FLOOR,
    KERNEL_SECONDS_CEILING,
    check_fraction,
    check_positive,
    check_rate,
    check_seconds,
)

#: The attention launch families with a grid model (:mod:`~stage_explore.analytical.
#: attention_grid`): FlashAttention-2 and FlashAttention-3.
ATTENTION_GRID_FAMILIES = frozenset({"fa2", "fa3"})


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
            check_positive(value, f"efficiency `{name}`")
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


def _tile(tile: Any, name: str) -> tuple[int, int]:
    """``tile`` as a (rows, columns) pair of positive integers, else a one-line error naming
    the kernels key ``name``."""
    pair = tuple(tile) if isinstance(tile, list | tuple) else ()
    if len(pair) != 2 or not all(
        isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in pair
    ):
        raise ConfigError(f"kernels `{name}` must be two positive integers, but got {tile!r}")
    return (pair[0], pair[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelModel:
    """Per-kernel throughput of one accelerator (timed by :mod:`stage_explore.analytical.kernels`).

    - ``sm_count``: streaming multiprocessors (the width of one wave of GEMM tiles);
    - ``gemm_tile``: (rows, columns) of the output tile one SM computes at a time;
    - ``gemm_tile_by_dtype``: per dtype, a tile the GEMM library's kernel for that dtype uses
      instead of ``gemm_tile`` (AMD's FP8 MAF kernel on CDNA 3 runs 256 x 192 tiles where its
      16-bit one runs 256 x 256); a dtype not listed: ``gemm_tile``;
    - ``gemm_k_overhead``: the reduction length a tile's prologue and epilogue cost, in elements
      of K of the 16-bit main loop (a GEMM's main loop runs at ``K / (K + gemm_k_overhead)``;
      a dtype with a faster loop, FP8, spends the same time on them, i.e. proportionally more K:
      :func:`~stage_explore.analytical.gemm_tiles.k_overhead_scale`);
    - ``gemm_efficiency``: per dtype, the fraction of peak a large, wave-aligned GEMM sustains;
    - ``fp8_fast_accumulation``: the same for an FP8 GEMM run with fast accumulation (the
      tensor cores' partial sums never promoted to FP32: cuBLASLt's
      ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``, CUTLASS's ``FP8FastAccum`` schedules), where
      ``gemm_efficiency.fp8`` is the promoted (split-accumulator) rate; the forward GEMMs of a
      per-tensor FP8 recipe and inference run it
      (:func:`~stage_explore.analytical.gemm_tiles.fast_accumulation`); 0: the two are one rate;
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
    - ``attention_grids``: per kernel name (``default`` for the best kernel) the launch family
      whose grid it runs (``fa2``, ``fa3``: :mod:`~stage_explore.analytical.attention_grid`),
      whose waves on the SMs scale its fraction against its full-grid benchmark; a kernel not
      listed (cuDNN's, FA4, ROCm's): no grid term;
    - ``grouped_gemm_group_s``: seconds each group of a grouped GEMM (one local expert's GEMM
      of an MoE layer) costs beyond the batched-GEMM wave model, measured from public grouped-GEMM
      benchmarks (0: none stated);
    - ``grouped_kernel_group_s``: the same for a grouped GEMM run as one kernel launch over
      every group with the per-group sizes read on the device (CUTLASS's or cuBLASLt's
      single-launch grouped kernels, Transformer Engine's fused grouped experts: the framework
      profile's ``moe_grouped_kernel``), measured beside the multi-stream loop in the same
      benchmark; 0: none stated (``grouped_gemm_group_s`` is kept);
    - ``eager_memory``: the fraction of the HBM bandwidth eager PyTorch's element-wise kernels
      reach (the op-by-op modules of :mod:`~stage_explore.analytical.eager`: casts, pow, mean,
      products, adds, each a kernel of its own), measured on the same op list; 0: the
      accelerator's ``efficiency.memory`` (none stated);
    - ``ssd_memory``: the fraction of the HBM bandwidth mamba_ssm's Triton SSD kernels reach
      (:mod:`~stage_explore.analytical.ssd_kernels`), measured as their bytes over a timed
      run of those kernels; 0: the accelerator's ``efficiency.memory`` (none stated);
    - ``memory_kernel_s``: seconds a memory-bound kernel costs beyond its bytes at the achieved
      HBM bandwidth when kernels run back to back in one stream (its launch, ramp-up and tail:
      ``t = memory_kernel_s + bytes / bandwidth``, fitted on a streaming kernel timed over
      DRAM-sized volumes); 0: none stated;
    - ``persistent_gemm``: the GEMM library's kernels are persistent with a static tile
      schedule (one block per SM, each working through a fixed share of the output tiles), so
      a GEMM launched on every SM beside a kernel that holds some of them waits for those SMs
      (:func:`~stage_explore.analytical.persistent_gemm.persistent_bulk_s` beside userbuffers'
      bulk kernels and Megatron's asynchronous tp collectives,
      :func:`~stage_explore.analytical.contention.persistent_wait_s` beside the other NCCL
      collectives); False: blocks are placed as SMs free (the wave model).
    """

    sm_count: int
    gemm_tile: tuple[int, int]
    gemm_k_overhead: int
    gemm_tile_by_dtype: dict[str, tuple[int, int]] = field(default_factory=dict, hash=False)
    gemm_efficiency: dict[str, float] = field(hash=False)
    fp8_fast_accumulation: float = 0.0
    attention_forward: float
    attention_backward: float
    attention_half_keys: float
    attention_head_dim_half: float
    attention_kernels: dict[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    attention_noncausal: dict[str, float] = field(default_factory=dict, hash=False)
    attention_grids: dict[str, str] = field(default_factory=dict, hash=False)
    grouped_gemm_group_s: float = 0.0
    grouped_kernel_group_s: float = 0.0
    eager_memory: float = 0.0
    ssd_memory: float = 0.0
    memory_kernel_s: float = 0.0
    persistent_gemm: bool = False

    def attention(self, kernel: str | None) -> tuple[float, float]:
        """(forward, backward) fraction of the BF16 peak of the named kernel; the best kernel
        (``attention_forward``/``attention_backward``) when ``kernel`` is None or not listed."""
        if kernel is not None and kernel in self.attention_kernels:
            forward, backward = self.attention_kernels[kernel][:2]
            return forward, backward
        return self.attention_forward, self.attention_backward

    def tile(self, dtype: str) -> tuple[int, int]:
        """The output tile of ``dtype``'s GEMM kernel: ``gemm_tile_by_dtype[dtype]``, else
        ``gemm_tile``."""
        return self.gemm_tile_by_dtype.get(dtype, self.gemm_tile)

    def half_keys(self, kernel: str | None) -> float:
        """The keys per query row at which the named kernel reaches half its long-sequence
        fraction: its own third value when listed with one, else ``attention_half_keys``."""
        entry = self.attention_kernels.get(kernel, ()) if kernel is not None else ()
        return entry[2] if len(entry) == 3 else self.attention_half_keys

    def noncausal_ratio(self, kernel: str | None) -> float:
        """The named kernel's non-causal over causal rate (``attention_noncausal``); 1 when
        ``kernel`` is None (the best kernel) or not listed."""
        return self.attention_noncausal.get(kernel, 1.0) if kernel is not None else 1.0

    def grid_family(self, kernel: str | None) -> str:
        """The launch family (``fa2``, ``fa3``) whose grid the named kernel runs
        (``attention_grids``; ``default`` for the best kernel, ``kernel`` None); "" when the
        preset names none (no grid term)."""
        return self.attention_grids.get("default" if kernel is None else kernel, "")

    def __post_init__(self) -> None:
        grids = {}
        for kernel, family in dict(self.attention_grids).items():
            if family not in ATTENTION_GRID_FAMILIES:
                known = ", ".join(sorted(ATTENTION_GRID_FAMILIES))
                raise ConfigError(
                    f"kernels `attention_grids.{kernel}` must be one of {known}, "
                    f"but got {family!r}"
                )
            grids[kernel] = family
        object.__setattr__(self, "attention_grids", grids)
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
                check_fraction(value, f"kernels `attention_kernels.{kernel}`")
            if len(values) == 3:
                check_positive(values[2], f"kernels `attention_kernels.{kernel}` half_keys")
            named[kernel] = tuple(float(value) for value in values)
        object.__setattr__(self, "attention_kernels", named)
        for name in ("sm_count", "gemm_k_overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"kernels `{name}` must be an integer >= 0, but got {value!r}")
        if self.sm_count < 1:
            raise ConfigError(f"kernels `sm_count` must be >= 1, but got {self.sm_count}")
        object.__setattr__(self, "gemm_tile", _tile(self.gemm_tile, "gemm_tile"))
        tiles = {
            dtype: _tile(tile, f"gemm_tile_by_dtype.{dtype}")
            for dtype, tile in dict(self.gemm_tile_by_dtype).items()
        }
        object.__setattr__(self, "gemm_tile_by_dtype", tiles)
        if not self.gemm_efficiency:
            raise ConfigError("kernels `gemm_efficiency` needs at least one dtype")
        for dtype, value in self.gemm_efficiency.items():
            check_fraction(value, f"kernels `gemm_efficiency.{dtype}`")
        object.__setattr__(self, "gemm_efficiency", dict(self.gemm_efficiency))
        for name in ("attention_forward", "attention_backward"):
            check_fraction(getattr(self, name), f"kernels `{name}`")
        if not isinstance(self.persistent_gemm, bool):
            raise ConfigError(
                f"kernels `persistent_gemm` must be true or false, but got {self.persistent_gemm!r}"
            )
        if self.fp8_fast_accumulation:
            check_fraction(self.fp8_fast_accumulation, "kernels `fp8_fast_accumulation`")
        if self.eager_memory:
            check_fraction(self.eager_memory, "kernels `eager_memory`")
        if self.ssd_memory:
            check_fraction(self.ssd_memory, "kernels `ssd_memory`")
        for name in ("attention_half_keys", "attention_head_dim_half"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"kernels `{name}` must be >= 0, but got {value!r}")
        for name in ("grouped_gemm_group_s", "grouped_kernel_group_s", "memory_kernel_s"):
            check_seconds(getattr(self, name), f"kernels `{name}`", KERNEL_SECONDS_CEILING)

    def single_launch_groups(self) -> KernelModel:
        """This model with a grouped GEMM's groups at ``grouped_kernel_group_s`` (a grouped GEMM
        run as one kernel launch), where one is stated; else unchanged."""
        if not self.grouped_kernel_group_s:
            return self
        return replace(self, grouped_gemm_group_s=self.grouped_kernel_group_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sm_count": self.sm_count,
            "gemm_tile": list(self.gemm_tile),
            "gemm_k_overhead": self.gemm_k_overhead,
            **(
                {"gemm_tile_by_dtype": {d: list(t) for d, t in self.gemm_tile_by_dtype.items()}}
                if self.gemm_tile_by_dtype
                else {}
            ),
            "gemm_efficiency": dict(self.gemm_efficiency),
            **(
                {"fp8_fast_accumulation": self.fp8_fast_accumulation}
                if self.fp8_fast_accumulation
                else {}
            ),
            "attention_forward": self.attention_forward,
            "attention_backward": self.attention_backward,
            "attention_half_keys": self.attention_half_keys,
            "attention_head_dim_half": self.attention_head_dim_half,
            **(
                {"grouped_gemm_group_s": self.grouped_gemm_group_s}
                if self.grouped_gemm_group_s
                else {}
            ),
            **(
                {"grouped_kernel_group_s": self.grouped_kernel_group_s}
                if self.grouped_kernel_group_s
                else {}
            ),
            **({"eager_memory": self.eager_memory} if self.eager_memory else {}),
            **({"ssd_memory": self.ssd_memory} if self.ssd_memory else {}),
            **({"memory_kernel_s": self.memory_kernel_s} if self.memory_kernel_s else {}),
            **({"persistent_gemm": True} if self.persistent_gemm else {}),
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
            **({"attention_grids": dict(self.attention_grids)} if self.attention_grids else {}),
        }


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
            check_rate(
                peak, f"accelerator {self.name!r} peak FLOP/s for {dtype!r}", FLOPS_FLOOR,
                "FLOP/s", "TFLOP/s", 1e12,
            )  # fmt: skip
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int):
            raise ConfigError(
                f"accelerator {self.name!r} `memory_bytes` must be an integer, "
                f"but got {self.memory_bytes!r}"
            )
        if self.memory_bytes <= 0:
            raise ConfigError(
                f"accelerator {self.name!r} `memory_bytes` must be > 0, but got {self.memory_bytes}"
            )
        check_rate(
            self.memory_bandwidth_bytes_per_s, f"accelerator {self.name!r} memory bandwidth",
            BYTES_PER_S_FLOOR, "bytes/s", "GB/s", 1e9,
        )  # fmt: skip
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
