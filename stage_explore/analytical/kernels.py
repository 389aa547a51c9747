"""Per-kernel compute time: GEMMs by shape and dtype, fused attention by sequence, head dim,
mask and direction, everything else at the achieved HBM bandwidth.

Holds :func:`gemm_shape` (an einsum's batch, M, N, K recovered from its exact byte and FLOP
counts), :func:`gemm_efficiency`, :func:`attention_efficiency`, :class:`KernelTimer` (the time
of one bound instruction on an accelerator with a :class:`~stage_explore.system.model.KernelModel`)
and :func:`is_linear` (which einsums a mixed-precision recipe runs in FP8).

**GEMM.** A GEMM of ``b`` batches of (M×K)·(K×N) runs as ``b·⌈M/tm⌉·⌈N/tn⌉`` output tiles on
``sm_count`` SMs, in waves (NVIDIA, "Matrix Multiplication Background User's Guide": tile and
wave quantization). The useful fraction of the work issued is
``b·M·N / (waves · sm_count · tm · tn)``; each tile's main loop runs at
``K / (K + gemm_k_overhead)`` (prologue and epilogue); both orientations of the tile are tried,
and split-K (the reduction dim cut into 2–4 slices whose FP32 partial tiles are summed in a
second pass) when it fills the waves better, as cuBLAS's heuristics would. The result
multiplies ``gemm_efficiency[dtype]``, the sustained efficiency of a large wave-aligned GEMM,
and the kernel takes the larger of that compute time and its bytes at the achieved HBM
bandwidth (roofline).

**Attention.** A fused kernel (FlashAttention-2/3 style) reaches ``attention_forward`` or
``attention_backward`` of the BF16 peak on long sequences at head dim 128 (or a named older
kernel's figures, :attr:`~stage_explore.system.model.KernelModel.attention_kernels`), scaled by
``k / (k + attention_half_keys)`` — ``k`` the keys a query row sees on average (half the
sequence under a causal mask) — and by ``d / (d + d½)`` normalised to d = 128.

**Mamba-2's SSD scan** (kind ``ssdscan``): the roofline of its FLOPs at the 16-bit tensor-core
peak times the sustained GEMM efficiency and of its bytes — inputs, output and the FP32
intermediates of the five SSD kernels — at the achieved HBM bandwidth (memory-bound in practice).

**Precision.** Under an FP8 recipe only the linear layers' GEMMs (forward, input gradient and
weight gradient of a weight) run in FP8 (Transformer Engine's ``fp8_autocast`` covers its
``Linear`` modules; attention stays BF16 unless FP8 attention is asked for); every other kernel
runs in BF16.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from stage_core.lower.bind import Instr
from stage_explore.system.model import Accelerator, KernelModel

#: Bytes of one activation element in a mixed-precision run (BF16/FP16): FP8 recipes keep
#: activations and weights in 16 bits between kernels.
ELEMENT_BYTES = 2
#: The head dim at which :attr:`KernelModel.attention_forward` is stated.
REFERENCE_HEAD_DIM = 128


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


def _issued_fraction(batch: int, m: int, n: int, tile: tuple[int, int], sms: int) -> float:
    tm, tn = tile
    tiles = batch * -(-m // tm) * -(-n // tn)
    waves = -(-tiles // sms)
    return batch * m * n / (waves * sms * tm * tn)


#: Split-K factors tried for a GEMM whose tiles under-fill the last wave (cuBLAS and CUTLASS
#: split the reduction dim across CTAs and sum the partial tiles in a second pass).
SPLIT_K = (1, 2, 3, 4)
#: The shortest K slice a split may leave.
MIN_SPLIT_K = 256
#: Bytes per element of a split-K partial result (FP32 accumulators), written and read back.
PARTIAL_BYTES = 4


def gemm_efficiency(
    kernels: KernelModel, dtype: str, shape: tuple[int, int, int, int], split: int = 1
) -> float:
    """The fraction of ``dtype``'s peak a GEMM of ``shape`` reaches with its reduction dim
    split ``split`` ways (module docstring)."""
    batch, m, n, k = shape
    tm, tn = kernels.gemm_tile
    issued = max(
        _issued_fraction(batch * split, m, n, (tm, tn), kernels.sm_count),
        _issued_fraction(batch * split, m, n, (tn, tm), kernels.sm_count),
    )
    per_split = k / split
    main_loop = per_split / (per_split + kernels.gemm_k_overhead)
    sustained = kernels.gemm_efficiency.get(dtype)
    if sustained is None:
        sustained = kernels.gemm_efficiency.get("bf16", min(kernels.gemm_efficiency.values()))
    return sustained * issued * main_loop


def gemm_time_s(
    accelerator: Accelerator,
    kernels: KernelModel,
    dtype: str,
    shape: tuple[int, int, int, int],
    flops: int,
    memory_s: float,
) -> float:
    """The fastest of the split-K choices (:data:`SPLIT_K`): the roofline of the split GEMM plus,
    for a split, writing and reading back its FP32 partial tiles at the achieved bandwidth."""
    batch, m, n, k = shape
    peak = accelerator.peak(dtype)
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    best = math.inf
    for split in SPLIT_K:
        if split > 1 and k // split < MIN_SPLIT_K:
            break
        seconds = max(memory_s, flops / (peak * gemm_efficiency(kernels, dtype, shape, split)))
        if split > 1:
            seconds += 2 * split * batch * m * n * PARTIAL_BYTES / bandwidth
        best = min(best, seconds)
    return best


def attention_efficiency(
    kernels: KernelModel,
    keys: float,
    head_dim: int,
    causal: bool,
    backward: bool,
    kernel: str | None = None,
) -> float:
    """The fraction of the BF16 peak a fused attention kernel (``kernel``: a named one of the
    accelerator's, else its best) reaches (module docstring)."""
    seen = keys / 2 if causal else keys
    forward_fraction, backward_fraction = kernels.attention(kernel)
    base = backward_fraction if backward else forward_fraction
    half_d = kernels.attention_head_dim_half
    head = (head_dim / (head_dim + half_d)) / (REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + half_d))
    return base * min(1.0, head) * seen / (seen + kernels.attention_half_keys)


def is_linear(instr: Instr, weights: Collection[str]) -> bool:
    """An einsum with a weight operand (forward, input gradient) or a weight-gradient result."""
    if instr.kind != "einsum":
        return False
    if any(name in weights for name, _ in instr.inputs):
        return True
    return any(name.startswith("d.") and name[2:] in weights for name, _ in instr.outputs)


@dataclass(frozen=True, slots=True)
class KernelTimer:
    """Times the compute instructions of one block kind on ``accelerator``.

    ``dtype`` is the run's compute precision; ``weights`` the block's weight names (which
    einsums are linear layers); ``keys`` the keys a query row attends to (the sequence, or its
    gathered length under context parallelism), ``head_dim`` and ``causal`` the attention's.
    """

    accelerator: Accelerator
    kernels: KernelModel
    dtype: str
    weights: frozenset[str]
    keys: int
    head_dim: int
    causal: bool
    attention_kernel: str | None = None

    def __call__(self, instr: Instr) -> float:
        accelerator = self.accelerator
        memory_s = (instr.bytes_read + instr.bytes_written) / (
            accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
        )
        if instr.flops <= 0:
            return memory_s
        if instr.kind == "attention":
            backward = instr.phase == "bwd"
            efficiency = attention_efficiency(
                self.kernels, self.keys, self.head_dim, self.causal, backward,
                self.attention_kernel,
            )  # fmt: skip
            return max(memory_s, instr.flops / (accelerator.peak(self._bf16()) * efficiency))
        if instr.kind == "ssdscan":
            return max(memory_s, instr.flops / self._ssd_rate())
        shape = gemm_shape(instr)
        if shape is None:  # element-wise, reductions, custom ops: CUDA cores, bandwidth-bound
            scalar = "fp32" if "fp32" in accelerator.peak_flops_per_s else self._bf16()
            return max(memory_s, instr.flops / accelerator.peak(scalar))
        dtype = self.dtype if is_linear(instr, self.weights) else self._bf16()
        return gemm_time_s(accelerator, self.kernels, dtype, shape, instr.flops, memory_s)

    def _ssd_rate(self) -> float:
        """FLOP/s of Mamba-2's SSD scan: its chunked matmuls run on the tensor cores (Triton
        ``tl.dot``) at the sustained 16-bit GEMM efficiency; its bytes include the five
        kernels' FP32 intermediates (:func:`stage_core.ops_ssm.ssd_intermediate_bytes`), which
        bound it at the HBM bandwidth ("mostly bottlenecked by memory bandwidth", PyTorch
        blog "Accelerating Mamba2 with Kernel Fusion", 2025)."""
        dtype = self._bf16()
        sustained = self.kernels.gemm_efficiency.get(dtype)
        if sustained is None:
            sustained = min(self.kernels.gemm_efficiency.values())
        return self.accelerator.peak(dtype) * sustained

    def _bf16(self) -> str:
        """Non-linear kernels of an FP8 run use BF16 (or the 16-bit type the run uses)."""
        if self.dtype != "fp8":
            return self.dtype
        return "bf16" if "bf16" in self.accelerator.peak_flops_per_s else "fp16"
