"""Per-kernel compute time: GEMMs by shape and dtype, fused attention by sequence, head dim,
mask and direction, everything else at the achieved HBM bandwidth (eager PyTorch's op-by-op
element-wise kernels at their own, lower fraction, ``KernelModel.eager_memory``).

Holds :func:`attention_efficiency`, :class:`KernelTimer` (the time of one bound instruction on
an accelerator with a :class:`~stage_explore.system.accelerator.KernelModel`); which einsums a
mixed-precision recipe runs in FP8 is :mod:`~stage_explore.analytical.fp8_roles`, which GEMMs
are an MoE layer's grouped or routed expert GEMMs :mod:`~stage_explore.analytical.expert_gemms`.

**GEMM** (:mod:`~stage_explore.analytical.gemm_tiles`): tiles in waves on the SMs, each tile's
main loop against its fixed prologue and epilogue, split-K when it fills the waves better, times
``gemm_efficiency[dtype]``, the roofline against the bytes at the achieved HBM bandwidth.

**Attention.** A fused kernel (FlashAttention-2/3 style) reaches ``attention_forward`` or
``attention_backward`` of the BF16 peak on long sequences at head dim 128 (or a named older
kernel's figures,
:attr:`~stage_explore.system.accelerator.KernelModel.attention_kernels`), scaled by
``k / (k + attention_half_keys)`` — ``k`` the keys a query row sees on average (half the
sequence under a causal mask; a named kernel may state its own half-saturation keys) — and by
``d / (d + d½)`` normalised to d = 128, and by its grid's waves on the SMs over its full-grid
benchmark's (FA2 / FA3, the preset's ``attention_grids``: :mod:`~stage_explore.analytical.
attention_grid`; cuDNN's: none). A backward runs the kernel's five matmuls where the
generator counts four (:data:`ATTENTION_BACKWARD_MATMULS`). The kernel name ``"unfused"``
(Transformer Engine's ``UnfusedDotProductAttention``) is timed as the BMMs and softmax it runs
instead (:mod:`~stage_explore.analytical.unfused_attention`).

**Mamba-2's SSD scan** (kind ``ssdscan``): in a training step, the kernels mamba_ssm launches
(:mod:`~stage_explore.analytical.ssd_kernels`: 5 forward, 31 backward with the conv recompute),
each the larger of its bytes at the SSD kernels' achieved HBM bandwidth (``ssd_memory``) and its
``tl.dot`` FLOPs at the 16-bit tensor-core peak times the sustained GEMM efficiency, plus
``memory_kernel_s``; the generator's gate op runs inside them. Without that list (serving):
the roofline of the scan instruction's FLOPs and bytes (inputs, output, FP32 intermediates).

**Precision.** Under an FP8 recipe only the decoder layers' linear GEMMs run in FP8 (not the MoE
router's, a ``torch`` linear: :func:`~stage_explore.analytical.fp8_roles.quantized`) —
those of forward (``fprop``), input gradient (``dgrad``) and weight gradient (``wgrad``) that
the run's ``fp8_gemms`` names (Transformer Engine's ``fp8_autocast`` covers its ``Linear``
modules; Megatron-Core's embedding and output layer are not TE modules, attention stays BF16
unless FP8 attention is asked for); every other kernel runs in BF16. An FP8 GEMM first casts its
16-bit activation or gradient operand (:func:`stage_core.lower.fp8.cast_bytes`, memory-bound, at
the achieved HBM bandwidth, each cast kernel with ``memory_kernel_s``): one row-wise copy, plus a
column-wise one for an FP8 weight-gradient GEMM on Hopper (whose FP8 tensor cores take only the
TN layout) or under the block-scaled recipes — which kernels Transformer Engine runs for them (a
norm writing the FP8 input, a transpose of FP8 data) is :mod:`~stage_explore.analytical.fp8_casts`.
Weights are cast once per step (TE keeps the FP8 copies across micro-batches); that
cast is not charged. On Hopper the forward GEMMs of a per-tensor recipe and every FP8 GEMM of
inference run with fast accumulation, the input- and weight-gradient GEMMs with the split
accumulator (:func:`~stage_explore.analytical.gemm_tiles.fast_accumulation`). ``mxfp8`` needs
MXFP8 tensor cores (an ``mxfp8`` peak in the preset:
Blackwell), else a :class:`~stage_core.errors.ConfigError`; its block-scaled GEMMs run at the
preset's ``gemm_efficiency.mxfp8`` when stated (else at the ``fp8`` fraction). Under
``precision='fp4'`` (recipe ``nvfp4``; ``dtype`` is then ``fp8``, the quantized-linear family)
the same GEMMs run at the ``nvfp4`` peak times ``gemm_efficiency.nvfp4``, read a quarter of the
16-bit operand bytes, and cast each RHT operand in three kernels (amax, row-wise cast,
column-wise RHT cast: :func:`~stage_explore.analytical.fp8_casts.quantize_cost`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import NVFP4, ROWWISE
from stage_core.parallel import FP8_GEMMS
from stage_explore.analytical.attention_grid import call_grids
from stage_explore.analytical.context_parallel import cp_merge_bytes
from stage_explore.analytical.eager import eager_instr_bytes
from stage_explore.analytical.eager_attention import AttentionEager, attention_eager_bytes
from stage_explore.analytical.expert_gemms import grouped_gemm_groups, routed_rows_share
from stage_explore.analytical.fp8_casts import (
    FAST_FPROP_RECIPES,
    fp8_cast_elements,
    launches_casts,
    quantize_cost,
)
from stage_explore.analytical.fp8_roles import BLOCK_SCALED, SCALED_APART, gemm_role, quantized
from stage_explore.analytical.gemm_tiles import (
    ELEMENT_BYTES,
    fast_accumulation,
    gemm_shape,
    gemm_time_s,
)
from stage_explore.analytical.loss_kernels import (
    BF16_CROSS_ENTROPY_BYTES,
    CROSS_ENTROPY_BYTES,
    METRIC_CROSS_ENTROPY_BYTES,
    NATIVE_CROSS_ENTROPY_BYTES,
    TE_CROSS_ENTROPY_BYTES,
    XENTROPY_CROSS_ENTROPY_BYTES,
)
from stage_explore.analytical.megatron_dispatch import (
    fp8_padding_bytes,
    sequential_cat_bytes,
    sort_chunks_bytes,
)
from stage_explore.analytical.ssd_kernels import FUSED_CONV, FUSED_GATE, SSDKernel
from stage_explore.analytical.te_context_parallel import te_cp_merge_bytes, te_ring_time_factor
from stage_explore.analytical.unfused_attention import UNFUSED, unfused_kernels
from stage_explore.system.accelerator import Accelerator, KernelModel

#: The head dim at which :attr:`KernelModel.attention_forward` is stated.
REFERENCE_HEAD_DIM = 128


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
    return base * min(1.0, head) * seen / (seen + kernels.half_keys(kernel))


#: A fused attention backward runs five matmuls — it recomputes the scores ``S = Q·Kᵀ`` before
#: ``dV = Pᵀ·dO``, ``dP = dO·Vᵀ``, ``dQ = dS·K`` and ``dK = dSᵀ·Q`` (FlashAttention-2, Dao 2023,
#: arXiv 2307.08691, Algorithm 2; FA3/FA4 and cuDNN's fused SDPA do the same) — where the
#: generator's backward counts four (2× the forward's FLOPs, ``stage_core.ops.Attention``). The
#: kernels' published throughputs divide 2.5× the forward's FLOPs by the backward's time
#: (flash-attention ``benchmarks/benchmark_flash_attention.py`` and cudnn-frontend
#: ``benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py``: ``flops(mode="bwd") = 2.5 *
#: f``), so a backward takes its counted FLOPs × 5/4 over that throughput. Timing only: MFU
#: and HFU count the generator's FLOPs.
ATTENTION_BACKWARD_MATMULS = (5, 4)


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
    #: The run's FP8 recipe and FP8 GEMMs (:class:`~stage_core.parallel.Fp8Recipe`), and whether
    #: this block's linear layers run in FP8 (not the embedding or output layer).
    fp8_recipe: str = "delayed"
    fp8_gemms: tuple[str, ...] = FP8_GEMMS
    fp8_block: bool = True
    #: A training step's FP8 recipe (roles, casts, FP8 operand bytes); False keeps the plain
    #: rule — every linear GEMM at the run's dtype, bytes as given — that serving relies on.
    fp8_training: bool = False
    #: FP8 GEMMs reading each ``(phase, operand)``
    #: (:func:`~stage_explore.analytical.fp8_roles.cast_shares`): one cast serves them all
    #: (Megatron-Core's fused QKV projection casts its input once).
    shares: Mapping[tuple[str, str], int] = field(default_factory=dict, compare=False)
    #: How many times smaller than the GEMM's operand each ``(phase, operand)`` row-wise cast
    #: is: the local shard Transformer Engine quantizes (row-wise only) before a userbuffers
    #: FP8 all-gather (:func:`~stage_explore.analytical.fp8_gather.cast_shards`); absent: the
    #: whole operand.
    cast_shards: Mapping[tuple[str, str], int] = field(default_factory=dict, compare=False)
    #: ``(phase, operand)`` whose row-wise FP8 copy the norm kernel writes (Transformer
    #: Engine's fused norm + linear under delayed scaling,
    #: :func:`~stage_explore.analytical.fp8_casts.fused_norm_casts`): no cast kernel of its own.
    norm_casts: frozenset[tuple[str, str]] = frozenset()
    #: ``tensorwise`` casts run as TE's current-scaling quantizer (``te_current_scaling``:
    #: :func:`~stage_explore.analytical.fp8_casts.quantize_cost`'s ``amax_kernel``).
    te_current_scaling: bool = False
    #: The logits a training loss reads (:data:`CROSS_ENTROPY_BYTES`); empty: the generator's
    #: bytes for the loss (serving has none).
    loss_logits: frozenset[str] = frozenset()
    #: The loss runs Transformer Engine's fused cross-entropy (:data:`TE_CROSS_ENTROPY_BYTES`,
    #: framework option ``te_cross_entropy``) instead of Megatron's unfused fp32 one.
    te_loss: bool = False
    #: The loss runs Megatron-Core's native fused cross-entropy
    #: (:data:`NATIVE_CROSS_ENTROPY_BYTES`, framework option ``native_cross_entropy``).
    native_loss: bool = False
    #: The loss runs flash-attn's fused xentropy kernel on the 16-bit logits
    #: (:data:`XENTROPY_CROSS_ENTROPY_BYTES`, framework option ``xentropy_cross_entropy``).
    xentropy_loss: bool = False
    #: The loss is PyTorch's eager ``F.cross_entropy`` on the 16-bit logits, not upcast
    #: (:data:`BF16_CROSS_ENTROPY_BYTES`, framework option ``loss_16bit_buffers`` > 0); the
    #: fused losses above take precedence.
    bf16_loss: bool = False
    #: Forward-only fp32 cross-entropies the framework's train metrics run on the logits each
    #: micro-batch (:data:`METRIC_CROSS_ENTROPY_BYTES` each, framework option
    #: ``train_metric_losses``), charged with the loss's forward.
    metric_losses: int = 0
    #: The context-parallel degree when attention merges per-chunk results in fp32 kernels of
    #: its own (PyTorch's context_parallel, :func:`~stage_explore.analytical.context_parallel.
    #: cp_merge_bytes`); 0: merged inside the kernel or no context parallelism.
    cp_merge: int = 0
    #: Those merges traced into a compiled graph and fused by Inductor (``cp_traced_ring``,
    #: :func:`~stage_explore.analytical.context_parallel.cp_merge_bytes` ``compiled``).
    cp_compiled: bool = False
    #: Bytes per element of the element-wise kernels the framework runs around the attention
    #: kernel (:mod:`~stage_explore.analytical.eager_attention`: layout copies, the fused QKV
    #: split's copies); zeros: none (a fused kernel reading the split's views).
    attention_eager: AttentionEager = AttentionEager()
    #: The context-parallel degree when attention is Transformer Engine's ring (P2P) context
    #: parallelism, whose per-step output corrections and gradient accumulations are kernels
    #: of their own (:func:`~stage_explore.analytical.te_context_parallel.te_cp_merge_bytes`);
    #: 0: none (or merged inside the kernel). Its steps after the first run the kernel
    #: non-causal (:func:`~stage_explore.analytical.te_context_parallel.te_ring_time_factor`,
    #: the kernel's ``attention_noncausal`` ratio).
    te_cp_merge: int = 0
    #: Bytes per element of the generator ops eager PyTorch runs as several kernels
    #: (:func:`~stage_explore.analytical.eager.eager_op_bytes`); empty: the generator's bytes.
    eager_bytes: Mapping[str, int] = field(default_factory=dict, compare=False)
    #: Bytes per element of eager kernels run beside a generator op, added to its own time at
    #: the eager rate (:func:`~stage_explore.analytical.eager.eager_extra_bytes`: Megatron-Core's
    #: GLU clamp); empty: none.
    eager_extra: Mapping[str, int] = field(default_factory=dict, compare=False)
    #: ``k/E`` when the run routes tokens at random (Megatron-Core's
    #: ``--moe-router-force-load-balancing``): each routed expert's forward and input-gradient
    #: GEMMs see a Binomial token count, not the generator's mean
    #: (:mod:`~stage_explore.analytical.routing_tiles`); 0: every expert gets the mean.
    expert_share: float = 0.0
    #: Megatron-Core's all-to-all dispatcher sorts the received tokens by local expert and back
    #: (:mod:`~stage_explore.analytical.megatron_dispatch`): its dispatch and combine ops move
    #: the permuted tokens once more each way, forward and backward.
    sort_chunks: bool = False
    #: The attention's (query/key, value) head dims (latent attention: 192, 128), read by the
    #: unfused path (:mod:`~stage_explore.analytical.unfused_attention`); (0, 0): both
    #: ``head_dim``.
    head_dims: tuple[int, int] = (0, 0)
    #: Query rows of one attention kernel call (the sequence, or its S/cp chunk) for the grid
    #: model (:mod:`~stage_explore.analytical.attention_grid`); 0: no grid term.
    attention_queries: int = 0
    #: Megatron-Core's ``TEGroupedMLP`` pads each local expert's rows to the FP8 GEMM's
    #: alignment and strips them after (Transformer Engine's ``Fp8Padding`` / ``Fp8Unpadding``,
    #: :func:`~stage_explore.analytical.megatron_dispatch.fp8_padding_bytes`): one more read and
    #: write of the routed tokens beside the dispatch and combine ops, forward and backward.
    fp8_padding: bool = False
    #: The experts' tensor-parallel size whose all-gather precedes the chunk sorts and the FP8
    #: padding (Megatron-Core gathers the received tokens over the experts' tp group before
    #: "Permutation 2"): both move that many times the dispatch / combine ops' tokens
    #: (:mod:`~stage_explore.analytical.megatron_dispatch`); 1: no gather.
    routed_gather: int = 1
    #: The local experts run as Megatron-Core's ``SequentialMLP`` (more than one of them): its
    #: ``torch.cat`` of their outputs and the split's backward concatenation of their input
    #: gradients, one read and write of the gathered routed tokens each, a kernel each
    #: (:func:`~stage_explore.analytical.megatron_dispatch.sequential_cat_bytes`).
    sequential_experts: bool = False
    #: Seconds each memory-bound kernel of its own costs beyond its bytes
    #: (:attr:`~stage_explore.system.accelerator.KernelModel.memory_kernel_s`,
    #: :func:`is_own_kernel`);
    #: 0: none (serving, which does not charge it).
    memory_kernel_s: float = 0.0
    #: Bytes per element of a linear layer's gradient accumulator when its weight-gradient GEMM
    #: accumulates into it (:func:`wgrad_accumulate_bytes`); 0: the GEMM writes a fresh 16-bit
    #: gradient, as the generator counts.
    wgrad_accumulator: int = 0
    cast_splits: Mapping[str, int] = field(default_factory=dict, compare=False)  # split_quantize
    #: Eager ops' launches beyond their table's kernels (:func:`~stage_explore.analytical.eager.
    #: eager_expert_kernels`: per-expert loops), ``memory_kernel_s`` each.
    expert_kernels: Mapping[str, int] = field(default_factory=dict, compare=False)
    #: The kernels mamba_ssm launches for a Mamba-2 scan instruction, by phase (``fwd``,
    #: ``bwd``; :func:`~stage_explore.analytical.ssd_kernels.ssd_kernels`), each timed on its
    #: own, the generator's gate op inside them and its ``B`` / ``C`` convs inside the ``x``
    #: conv's kernel (:data:`~stage_explore.analytical.ssd_kernels.FUSED_CONV`); empty: the
    #: scan's roofline (serving).
    ssd_kernels: Mapping[str, tuple[SSDKernel, ...]] = field(default_factory=dict, compare=False)

    def __call__(self, instr: Instr) -> float:
        accelerator = self.accelerator
        if self.ssd_kernels and (instr.kind == "ssdscan" or instr.name in FUSED_GATE):
            return self._ssd_s(instr)
        hbm = accelerator.achieved_memory_bandwidth_bytes_per_s
        moved = eager_instr_bytes(instr, self.eager_bytes) if self.eager_bytes else None
        if moved is None:
            memory_s = (instr.bytes_read + instr.bytes_written) / hbm
        else:  # eager PyTorch's op-by-op kernels, at their own achieved bandwidth
            eager = self.kernels.eager_memory or accelerator.efficiency.memory
            memory_s = moved / (accelerator.memory_bandwidth_bytes_per_s * eager)
            memory_s += self.expert_kernels.get(instr.name, 0) * self.memory_kernel_s
        if self.eager_extra and (extra := eager_instr_bytes(instr, self.eager_extra)):
            eager = self.kernels.eager_memory or accelerator.efficiency.memory
            memory_s += extra / (accelerator.memory_bandwidth_bytes_per_s * eager)
        if self.sort_chunks:  # a fused copy kernel beside the dispatch or combine
            memory_s += sort_chunks_bytes(instr, self.routed_gather) / hbm
        if self.fp8_padding:  # TE's fused_multi_row_padding / _unpadding beside them
            memory_s += fp8_padding_bytes(instr, self.routed_gather) / hbm
        if self.sequential_experts and (cat := sequential_cat_bytes(instr, self.routed_gather)):
            memory_s += cat / hbm + self.memory_kernel_s  # SequentialMLP's torch.cat
        if self.loss_logits:
            memory_s = max(memory_s, self._loss_s(instr))
        one_conv = bool(self.ssd_kernels) and instr.name in FUSED_CONV  # inside conv.x's kernel
        if moved is None and self.memory_kernel_s and is_own_kernel(instr) and not one_conv:
            memory_s += self.memory_kernel_s  # launch, ramp-up and tail (eager: in its fraction)
        if instr.flops <= 0:
            return memory_s
        if instr.kind == "attention" and self.attention_kernel == UNFUSED:
            return memory_s + self._unfused_s(instr)
        if instr.kind == "attention":
            backward = instr.phase == "bwd"
            efficiency = attention_efficiency(
                self.kernels, self.keys, self.head_dim, self.causal, backward,
                self.attention_kernel,
            )  # fmt: skip
            flops: float = instr.flops
            if backward:  # the kernel's five matmuls over the generator's four
                executed, counted = ATTENTION_BACKWARD_MATMULS
                flops = flops * executed / counted
            # TE's ring or torch's context_parallel (cp_merge_fp32): the steps after the first
            # are non-causal kernels (torch: _is_causal_behavior, NOT_IS_CAUSAL for i > 0)
            ring_cp = max(self.te_cp_merge, self.cp_merge)
            first, later = call_grids(  # the grid in waves against its benchmark's
                self.kernels, self.attention_kernel, instr, self.attention_queries, self.keys,
                self.head_dims[0] or self.head_dim, self.causal, 4 if self.dtype == "fp32" else 2,
                ring_cp,
            )  # fmt: skip
            if ring_cp > 1 and self.causal:
                ratio = self.kernels.noncausal_ratio(self.attention_kernel)
                flops *= te_ring_time_factor(ring_cp, ratio, first, later)
            else:
                flops /= first
            seconds = max(memory_s, flops / (accelerator.peak(self._bf16()) * efficiency))
            if self.cp_merge > 1:  # separate memory-bound kernels after each chunk's SDPA
                seconds += cp_merge_bytes(instr, self.cp_merge, compiled=self.cp_compiled) / hbm
            if self.te_cp_merge > 1:  # TE's per-step corrections and accumulations
                seconds += te_cp_merge_bytes(instr, self.te_cp_merge) / hbm
            outside = attention_eager_bytes(instr, self.attention_eager)  # e.g. layout copies
            if outside:
                seconds += outside / hbm
            return seconds
        if instr.kind == "ssdscan":
            return max(memory_s, instr.flops / self._ssd_rate())
        shape = gemm_shape(instr)
        if shape is None:  # element-wise, reductions, custom ops: CUDA cores, bandwidth-bound
            scalar = "fp32" if "fp32" in accelerator.peak_flops_per_s else self._bf16()
            return max(memory_s, instr.flops / accelerator.peak(scalar))
        groups_s = grouped_gemm_groups(instr, shape) * self.kernels.grouped_gemm_group_s
        role = gemm_role(instr, self.weights)
        if role == "wgrad" and self.wgrad_accumulator:  # C read and D written in the epilogue
            extra = wgrad_accumulate_bytes(instr, self.wgrad_accumulator)
            memory_s += extra / hbm
        else:
            extra = 0
        share = routed_rows_share(instr, self.weights, self.expert_share)
        kernels, flops = self.kernels, instr.flops
        if self.dtype != "fp8" or role is None or not self.fp8_training:
            dtype = self.dtype if role is not None else self._bf16()
            if dtype == "fp8":  # inference: every GEMM a forward one (fast_accumulation)
                kernels = fast_accumulation(kernels)
            seconds = gemm_time_s(accelerator, kernels, dtype, shape, flops, memory_s, share)
            return seconds + groups_s
        if not self.fp8_block or role not in self.fp8_gemms or not quantized(instr, self.weights):
            bf16 = self._bf16()  # a 16-bit GEMM: not named, outside the layers, or the router
            seconds = gemm_time_s(accelerator, kernels, bf16, shape, flops, memory_s, share)
            return seconds + groups_s
        # FP8 operands are half as wide (FP4 a quarter): the GEMM's own traffic, then its casts
        own_s = memory_s - extra / hbm  # the accumulator's bytes do not shrink with FP8
        narrow = 4 if self.fp8_recipe == NVFP4 else 2
        fp8_memory_s = (
            own_s
            * (instr.bytes_read // narrow + instr.bytes_written)
            / max(1, instr.bytes_read + instr.bytes_written)
        ) + extra / hbm
        fp8 = self._fp8_dtype()
        if fp8 == "fp8" and role == "fprop" and self.fp8_recipe in FAST_FPROP_RECIPES:
            kernels = fast_accumulation(kernels)  # the forward GEMM: no split accumulator
        seconds = gemm_time_s(accelerator, kernels, fp8, shape, flops, fp8_memory_s, share)
        return seconds + self._cast_s(instr, role) + self._rescale_s(instr, role) + groups_s

    def gemm_kernel_s(self, instr: Instr) -> float:
        """Seconds of ``instr``'s GEMM kernel itself: :meth:`__call__` less what runs as kernels
        of their own around it (an FP8 GEMM's operand casts, a grouped GEMM's per-group cost);
        0 for anything but a GEMM (attention, scans, element-wise kernels)."""
        if instr.flops <= 0 or instr.kind in ("attention", "ssdscan"):
            return 0.0
        if self.ssd_kernels and instr.name in FUSED_GATE:
            return 0.0
        shape = gemm_shape(instr)
        if shape is None:
            return 0.0
        groups_s = grouped_gemm_groups(instr, shape) * self.kernels.grouped_gemm_group_s
        seconds = self(instr) - groups_s
        role = gemm_role(instr, self.weights)
        fp8 = self.dtype == "fp8" and self.fp8_training and self.fp8_block
        if fp8 and role is not None and role in self.fp8_gemms and quantized(instr, self.weights):
            seconds -= self._cast_s(instr, role) + self._rescale_s(instr, role)
        return max(0.0, seconds)

    def _unfused_s(self, instr: Instr) -> float:
        """Seconds of Transformer Engine's unfused attention kernels for ``instr``
        (:func:`~stage_explore.analytical.unfused_attention.unfused_kernels`): each BMM by the
        GEMM model with its score bytes at the achieved HBM bandwidth, the softmax at that
        bandwidth; the instruction's own operand bytes are added by the caller."""
        head_dims = self.head_dims if self.head_dims[0] else (self.head_dim, self.head_dim)
        kernels = unfused_kernels(instr, head_dims, self.keys, self.causal)
        hbm = self.accelerator.achieved_memory_bandwidth_bytes_per_s
        dtype = self._bf16()
        seconds = kernels.memory_bytes / hbm
        for shape, flops, moved in kernels.gemms:
            seconds += gemm_time_s(self.accelerator, self.kernels, dtype, shape, flops, moved / hbm)
        return seconds

    def _fp8_dtype(self) -> str:
        """The GEMM kind an FP8 linear layer runs: ``mxfp8`` (block-scaled tensor-core MMA, its
        own sustained fraction) when the accelerator states one in ``gemm_efficiency`` and the
        recipe is ``mxfp8`` — or ``blockwise``, whose GEMMs Transformer Engine runs as MXFP8 on
        Blackwell (TE PR #2157: cuBLASLt has no 128-block scaling on sm100, the GEMMs are
        emulated with MXFP8; TE docs/examples/gemm_profiling) — else ``fp8``; ``nvfp4`` under
        the FP4 recipe (the preset's ``nvfp4`` peak and ``gemm_efficiency.nvfp4``, required by
        :func:`~stage_explore.analytical.fp8_roles.check_nvfp4`)."""
        if self.fp8_recipe == NVFP4:  # FP4 (E2M1) MMA: its own peak and measured fraction
            return NVFP4
        recipe_blocks = self.fp8_recipe in BLOCK_SCALED  # mxfp8, blockwise
        if recipe_blocks and "mxfp8" in self.kernels.gemm_efficiency:
            return "mxfp8"
        return "fp8"

    def _loss_s(self, instr: Instr) -> float:
        """The cross-entropy's traffic — the FP32 multi-pass one (:data:`CROSS_ENTROPY_BYTES`),
        under ``te_loss`` Transformer Engine's fused one (:data:`TE_CROSS_ENTROPY_BYTES`), under
        ``native_loss`` Megatron-Core's compiled one (:data:`NATIVE_CROSS_ENTROPY_BYTES`), under
        ``xentropy_loss`` flash-attn's xentropy kernel (:data:`XENTROPY_CROSS_ENTROPY_BYTES`),
        under ``bf16_loss`` PyTorch's eager one on 16-bit logits (:data:`BF16_CROSS_ENTROPY_BYTES`),
        the forward with ``metric_losses`` train-metric passes (:data:`METRIC_CROSS_ENTROPY_BYTES`)
        — or 0 for any other instruction."""
        forward, backward = (
            TE_CROSS_ENTROPY_BYTES
            if self.te_loss
            else NATIVE_CROSS_ENTROPY_BYTES
            if self.native_loss
            else XENTROPY_CROSS_ENTROPY_BYTES
            if self.xentropy_loss
            else BF16_CROSS_ENTROPY_BYTES
            if self.bf16_loss
            else CROSS_ENTROPY_BYTES
        )
        if instr.kind == "crossentropy":
            sizes = [size for name, size in instr.inputs if name in self.loss_logits]
            per_element = forward + self.metric_losses * METRIC_CROSS_ENTROPY_BYTES
        else:
            sizes = [size for name, size in instr.outputs if name[2:] in self.loss_logits]
            sizes = sizes if name_is_gradient(instr) else []
            per_element = backward
        if not sizes:
            return 0.0
        elements = max(sizes) // ELEMENT_BYTES  # the logits, not the integer targets
        accelerator = self.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return elements * per_element / bandwidth

    def _cast_s(self, instr: Instr, role: str) -> float:
        """Seconds of the quantization kernels an FP8 GEMM of ``role`` needs first; ``cast_splits``
        counts a grouped expert GEMM's per-expert kernels (:func:`~stage_explore.analytical.
        fp8_casts.split_quantize_kernels`, framework option ``moe_split_quantize``)."""
        accelerator = self.accelerator
        columnwise = self.fp8_recipe in SCALED_APART or "mxfp8" not in accelerator.peak_flops_per_s
        total = 0.0
        launches = 0.0
        for name, elements, column in fp8_cast_elements(instr, role, self.weights, self.fp8_gemms):
            # wgrad casts only what no FP8 fprop/dgrad cast: one (column-wise) copy
            copies = 1 if role == "wgrad" else 1 + (column if columnwise else 0)
            share = self.shares.get((instr.phase, name), 1)
            # the row-wise copy: on the local shard before a userbuffers FP8 all-gather, or
            # written by the norm; a column-wise copy by the cast or by a transpose of its own
            moved, kernels = quantize_cost(
                elements,
                self.fp8_recipe,
                copies,
                self.cast_shards.get((instr.phase, name), 1),
                (instr.phase, name) in self.norm_casts,
                self.te_current_scaling,
            )
            total += moved / share
            kernels *= self.cast_splits.get(instr.name, 1)  # one per local expert: split_quantize
            launches += kernels / share if launches_casts(instr.name) else 0.0
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return total / bandwidth + launches * self.memory_kernel_s

    def _rescale_s(self, instr: Instr, role: str) -> float:
        """Seconds of scaling a ``rowwise`` input- or weight-gradient GEMM's 16-bit output by its
        row and column scales in a kernel of its own: torchao runs those GEMMs without fast
        accumulation (``Float8GemmConfig()`` for ``gemm_config_grad_input`` /
        ``gemm_config_grad_weight``, torchao/float8/config.py c6c388b5), and
        ``addmm_float8_unwrapped`` (torchao/float8/float8_ops.py, pytorch/ao 3e4098f6) then calls
        the tensor-wise cuBLAS GEMM with unit scales ("The rowwise CUTLASS-based kernel is so slow
        without fast-accum") and multiplies the output in place (``output *=
        post_inverse_scale``): a read and a write of it, as an upper bound — Inductor cannot fuse
        it into the extern GEMM and may fuse it into a consumer, which is not modelled. 0 for
        any other recipe or role."""
        if self.fp8_recipe != ROWWISE or role == "fprop":
            return 0.0
        output = sum(size for _, size in instr.outputs)
        hbm = self.accelerator.achieved_memory_bandwidth_bytes_per_s
        return 2 * output / hbm + self.memory_kernel_s

    def _ssd_s(self, instr: Instr) -> float:
        """Seconds of a Mamba-2 scan instruction as mamba_ssm's kernels (:attr:`ssd_kernels`):
        each the larger of its bytes at the SSD kernels' achieved HBM bandwidth (the preset's
        ``kernels.ssd_memory``, else its ``efficiency.memory``) and its tensor-core FLOPs at
        :meth:`_ssd_rate`, plus ``memory_kernel_s``; the gate op runs inside them (0 s)."""
        if instr.kind != "ssdscan":
            return 0.0
        accelerator = self.accelerator
        hbm = accelerator.achieved_memory_bandwidth_bytes_per_s
        if self.kernels.ssd_memory:  # the SSD kernels' own measured fraction
            hbm = accelerator.memory_bandwidth_bytes_per_s * self.kernels.ssd_memory
        rate = self._ssd_rate()
        seconds = 0.0
        for kernel in self.ssd_kernels["bwd" if instr.phase == "bwd" else "fwd"]:
            moved = kernel.bytes_read + kernel.bytes_written
            seconds += max(moved / hbm, kernel.flops / rate) + self.memory_kernel_s
        return seconds

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


#: Instruction kinds whose time is not bytes at the HBM bandwidth (tensor-core kernels): no
#: per-kernel fixed time is added to them (their efficiencies are measured per kernel).
COMPUTE_KINDS = frozenset({"einsum", "attention", "ssdscan"})


def is_own_kernel(instr: Instr) -> bool:
    """Whether a memory-bound instruction runs as a kernel of its own (and pays
    :attr:`~stage_explore.system.accelerator.KernelModel.memory_kernel_s`): it writes to memory, and
    none of its outputs stays on chip — :func:`~stage_explore.analytical.blocktime.
    fuse_elementwise` leaves a fused producer writing less than its outputs (a dropout's mask,
    or nothing), and that producer runs inside the kernel of the instruction it feeds
    (Megatron's bias + dropout + add is one kernel); only element-wise instructions are fused
    so (a bias gradient's reduction lists the gradient it passes on among its outputs, unwritten,
    and is a kernel). GEMMs, attention and the SSD scan are not memory-bound kernels here."""
    if instr.kind in COMPUTE_KINDS or instr.bytes_written <= 0:
        return False
    if instr.kind != "elementwise":
        return True
    return instr.bytes_written >= sum(size for _, size in instr.outputs)


def wgrad_accumulate_bytes(instr: Instr, accumulator: int) -> int:
    """HBM bytes a weight-gradient GEMM moves beyond the generator's count when it accumulates
    into a gradient buffer of ``accumulator`` bytes per element (Megatron-Core's
    ``--gradient-accumulation-fusion``: Transformer Engine's ``Linear`` and ``GroupedLinear``
    run the wgrad GEMM with ``out=weight.main_grad`` and ``accumulate=True``, i.e. β = 1,
    C = D = ``main_grad``, fp32 or, under ``grad_reduce_in_fp32 = False``, bf16;
    transformer_engine/pytorch/module/linear.py ``_Linear.backward``, NVIDIA/TransformerEngine
    3ec87875). Its epilogue reads and writes the accumulator (``2·accumulator`` per element)
    where the generator counts writing a 16-bit gradient (:data:`ELEMENT_BYTES`). The first
    micro-batch of a step runs β = 0 (TE's ``is_first_microbatch``) and only writes: not
    distinguished. The bytes join the GEMM's traffic under its roofline — on Hopper a TMA
    warp-specialized epilogue has its producer warp load C by TMA into shared-memory stages
    ahead of the math warps and stores D by TMA (CUTLASS include/cutlass/epilogue/collective/
    sm90_epilogue_tma_warpspecialized.hpp, ``load`` / ``store``; cuBLASLt's kernels assumed
    alike) — so they cost time only where the GEMM is memory-bound (few tokens per expert)."""
    elements = sum(size for _, size in instr.outputs) // ELEMENT_BYTES
    return max(0, elements * (2 * accumulator - ELEMENT_BYTES))


def name_is_gradient(instr: Instr) -> bool:
    """A backward instruction writing a gradient (``d.<tensor>``) that is not a GEMM."""
    return instr.kind != "einsum" and any(name.startswith("d.") for name, _ in instr.outputs)
