"""GEMM time by shape and dtype: :func:`gemm_shape` (an einsum's batch, M, N, K recovered from its
exact byte and FLOP counts), :func:`gemm_efficiency` and :func:`gemm_time_s`, used by
:class:`~stage_explore.analytical.kernels.KernelTimer`.

**GEMM.** A GEMM of ``b`` batches of (M×K)·(K×N) runs as ``b·⌈M/tm⌉·⌈N/tn⌉`` output tiles on
``sm_count`` SMs (``tm × tn``: the kernel model's tile for the dtype,
:meth:`~stage_explore.system.accelerator.KernelModel.tile`), in waves (NVIDIA, "Matrix
Multiplication Background User's Guide": tile and wave quantization). The useful fraction of
the work issued is ``b·M·N / (waves · sm_count · tm · tn)``; each tile's main loop runs at
``K / (K + gemm_k_overhead · s)`` (prologue and epilogue: ``gemm_k_overhead`` K elements of the
16-bit main loop, a fixed time, which a dtype whose loop consumes K ``s`` times faster — FP8,
MXFP8 — spends ``s`` times as many K elements on, :func:`k_overhead_scale`); both orientations
of the tile are tried,
and split-K (the reduction dim cut into 2–4 slices whose FP32 partial tiles are summed in a
second pass) when it fills the waves better, as cuBLAS's heuristics would. The result
multiplies ``gemm_efficiency[dtype]``, the sustained efficiency of a large wave-aligned GEMM,
and the kernel takes the larger of that compute time and its bytes at the achieved HBM
bandwidth (roofline). An FP8 GEMM with fast accumulation runs at the kernel model's
``fp8_fast_accumulation`` fraction instead (:func:`fast_accumulation`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_explore.analytical.routing_tiles import expected_row_tiles
from stage_explore.system.accelerator import Accelerator, KernelModel

#: Bytes of one activation element in a mixed-precision run (BF16/FP16): FP8 recipes keep
#: activations and weights in 16 bits between kernels.
ELEMENT_BYTES = 2


def gemm_shape(instr: Instr) -> tuple[int, int, int, int] | None:
    """``(batch, M, N, K)`` of a two-operand einsum, from its operand and result bytes and its
    FLOPs (``a = b·M·K``, ``w = b·K·N``, ``o = b·M·N`` elements and ``F = 2·b·M·N·K``), or None
    when the instruction is not such an einsum."""
    if instr.kind != "einsum" or len(instr.inputs) != 2 or len(instr.outputs) != 1:
        return None
    a, w = (size // ELEMENT_BYTES for _, size in instr.inputs)
    o = instr.outputs[0][1] // ELEMENT_BYTES
    half = instr.flops // 2
    if min(a, w, o, half) <= 0:
        return None
    batch = max(1, round(a * w * o / (half * half)))
    m = math.sqrt(a * o / (w * batch))
    if m <= 0:
        return None
    m_int = max(1, round(m))
    n = max(1, round(o / (batch * m)))
    k = max(1, round(a / (batch * m)))
    return batch, m_int, n, k


def _issued_fraction(
    batch: int, m: int, n: int, tile: tuple[int, int], sms: int, share: float = 0.0
) -> float:
    """The useful fraction of the tiles a GEMM issues over its waves. ``share`` > 0: the ``m``
    rows are the mean of a routed expert's random token count (each of the group's tokens picks
    the expert with probability ``share``), and each expert's row tiles are the expected
    ``ceil`` of that count (:func:`~stage_explore.analytical.routing_tiles.expected_row_tiles`)."""
    tm, tn = tile
    if share <= 0.0:
        tiles = batch * -(-m // tm) * -(-n // tn)
        waves = -(-tiles // sms)
    else:
        expected = batch * expected_row_tiles(m, share, tm) * -(-n // tn)
        waves = math.ceil(expected / sms)
    return batch * m * n / (waves * sms * tm * tn)


#: Split-K factors tried for a GEMM whose tiles under-fill the last wave (cuBLAS and CUTLASS
#: split the reduction dim across CTAs and sum the partial tiles in a second pass). The factors
#: and :data:`MIN_SPLIT_K` are a modelling choice with no public figure behind them (cuBLAS's
#: split-K heuristic is not published; s36 citeaudit, docs/grounding.md).
SPLIT_K = (1, 2, 3, 4)
#: The shortest K slice a split may leave (a modelling choice, as :data:`SPLIT_K`).
MIN_SPLIT_K = 256
#: Bytes per element of a split-K partial result (FP32 accumulators), written and read back.
PARTIAL_BYTES = 4


def sustained_fraction(kernels: KernelModel, dtype: str) -> float:
    """``gemm_efficiency[dtype]``, else the 16-bit (``bf16``) fraction, else the lowest stated."""
    sustained = kernels.gemm_efficiency.get(dtype)
    if sustained is None:
        sustained = kernels.gemm_efficiency.get("bf16", min(kernels.gemm_efficiency.values()))
    return sustained


@functools.lru_cache(maxsize=64)
def fast_accumulation(kernels: KernelModel) -> KernelModel:
    """``kernels`` with its ``fp8`` fraction at ``fp8_fast_accumulation``, the rate of an FP8
    GEMM whose partial sums stay in the tensor cores' accumulators (``kernels`` itself when it
    states none). Hopper's FP8 MMA accumulates at reduced precision; Transformer Engine promotes
    the partial sums to FP32 on the CUDA cores (the split accumulator) in the input- and
    weight-gradient GEMMs only (``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD`` /
    ``_2X_ACC_WGRAD = True``, transformer_engine/pytorch/module/base.py; cublaslt_gemm.cu sets
    ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` to ``!use_split_accumulator``), torchao's float8
    training likewise (``use_fast_accum`` on the output GEMM only), and vLLM's SM90 FP8 GEMMs
    run CUTLASS's ``FP8FastAccum`` schedules. The FP8 K overhead follows the faster rate
    (:func:`k_overhead_scale`)."""
    if not kernels.fp8_fast_accumulation or "fp8" not in kernels.gemm_efficiency:
        return kernels
    fractions = {**kernels.gemm_efficiency, "fp8": kernels.fp8_fast_accumulation}
    return replace(kernels, gemm_efficiency=fractions)


#: The tile whose prologue and epilogue ``gemm_k_overhead`` measures in K elements: the 16-bit
#: main loop (the presets' "one 64-deep K step" of a BF16 / FP16 tile), the first one the
#: accelerator has a peak for.
K_OVERHEAD_DTYPES = ("bf16", "fp16")


def k_overhead_scale(accelerator: Accelerator, kernels: KernelModel, dtype: str) -> float:
    """How many of ``gemm_k_overhead``'s 16-bit K elements a ``dtype`` tile's prologue and
    epilogue take: their time is the same whatever the operands' width — the pipeline fill is
    load latency, and the epilogue stores the same 16-bit (or wider) output tile — while the
    main loop consumes K at the dtype's sustained rate, so the fixed time spans
    ``rate(dtype) / rate(16-bit)`` times as many K elements (FP8 on H100 1.72, on B200 1.93, GB200
    2.07). 1 when the accelerator states no 16-bit peak."""
    peaks = accelerator.peak_flops_per_s
    reference = next((d for d in K_OVERHEAD_DTYPES if d in peaks), None)
    if reference is None or dtype not in peaks or dtype == reference:
        return 1.0
    rate = peaks[dtype] * sustained_fraction(kernels, dtype)
    return rate / (peaks[reference] * sustained_fraction(kernels, reference))


def gemm_efficiency(
    kernels: KernelModel,
    dtype: str,
    shape: tuple[int, int, int, int],
    split: int = 1,
    share: float = 0.0,
    k_scale: float = 1.0,
) -> float:
    """The fraction of ``dtype``'s peak a GEMM of ``shape`` reaches with its reduction dim
    split ``split`` ways (module docstring); ``share`` > 0: its rows are a randomly routed
    expert's tokens (:func:`_issued_fraction`); ``k_scale``: the tile's prologue and epilogue
    in units of ``gemm_k_overhead`` (:func:`k_overhead_scale`)."""
    batch, m, n, k = shape
    tm, tn = kernels.tile(dtype)
    issued = max(
        _issued_fraction(batch * split, m, n, (tm, tn), kernels.sm_count, share),
        _issued_fraction(batch * split, m, n, (tn, tm), kernels.sm_count, share),
    )
    per_split = k / split
    main_loop = per_split / (per_split + kernels.gemm_k_overhead * k_scale)
    return sustained_fraction(kernels, dtype) * issued * main_loop


def gemm_time_s(
    accelerator: Accelerator,
    kernels: KernelModel,
    dtype: str,
    shape: tuple[int, int, int, int],
    flops: int,
    memory_s: float,
    share: float = 0.0,
) -> float:
    """The fastest of the split-K choices (:data:`SPLIT_K`): the roofline of the split GEMM plus,
    for a split, writing and reading back its FP32 partial tiles at the achieved bandwidth.
    ``share``: as :func:`gemm_efficiency`."""
    batch, m, n, k = shape
    peak = accelerator.peak(dtype)
    bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
    k_scale = k_overhead_scale(accelerator, kernels, dtype)
    best = math.inf
    for split in SPLIT_K:
        if split > 1 and k // split < MIN_SPLIT_K:
            break
        efficiency = gemm_efficiency(kernels, dtype, shape, split, share, k_scale)
        seconds = max(memory_s, flops / (peak * efficiency))
        if split > 1:
            seconds += 2 * split * batch * m * n * PARTIAL_BYTES / bandwidth
        best = min(best, seconds)
    return best
