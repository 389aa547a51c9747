"""Transformer Engine's FP8 quantization kernels around a linear layer's GEMMs, counted as
kernels: which cast is a kernel of its own (and pays the kernel model's ``memory_kernel_s``
beside its bytes), which one a norm kernel writes itself, and when a column-wise (transposed)
copy is a separate transpose of the FP8 data rather than written by the cast.

What the code runs (NVIDIA/TransformerEngine, per linear layer, delayed scaling unless stated):

- **A cast is a kernel.** Every FP8 operand TE quantizes from a 16-bit tensor is one kernel
  (TE 1.x ``cast_to_fp8`` / ``fp8_cast_transpose_fused`` / ``fp8_cast_transpose_bgrad_fused``,
  ``cpp_extensions``; TE 2.x ``quantizer.quantize`` → ``nvte_quantize``); no GEMM reads 16-bit
  data and quantizes it in its prologue. So each cast pays the fixed time of a memory-bound kernel
  (launch, ramp-up, tail: ``memory_kernel_s``, "A memory-bound kernel's fixed time", kcost), as
  every other kernel of the model does; before, casts were bytes only.
- **The norm writes the FP8 input of a fused norm + linear layer.** ``LayerNormLinear`` /
  ``LayerNormMLP`` (Megatron-Core's ``TELayerNormColumnParallelLinear``) run the LayerNorm or
  RMSNorm with an FP8 output when nothing else needs the norm's output: TE 1.x
  ``layernorm_fwd_fp8`` / ``rmsnorm_fwd_fp8`` (``_apply_normalization`` with ``fp8_out``); TE 2.x
  ``layernorm_fwd`` / ``rmsnorm_fwd`` (``pytorch/csrc/extensions/normalization.cpp``, "Choose
  implementation") take ``Impl::FULLY_FUSED`` for a ``Float8Quantizer``, i.e. delayed scaling.
  Current scaling takes ``FUSED_NORM_AMAX_FP8`` (the norm computes the amax, then a quantize
  kernel) and MXFP8 ``UNFUSED`` unless ``NVTE_NORM_FWD_USE_CUDNN``: a cast of their own.
  Modelled: under ``delayed``, the row-wise cast of a norm's output that only FP8 forward GEMMs
  of Transformer Engine linear layers read (not a MoE block's, whose router reads it in 16 bits)
  is no kernel and no bytes (the norm instruction keeps its 16-bit output bytes: 1 byte per
  element over); under ``tensorwise`` with Transformer Engine's quantizers (framework option
  ``te_current_scaling``) that cast reads the norm's output once, the amax being the norm's.
- **Current scaling's amax is a kernel.** TE 2.x ``Float8CurrentScalingQuantizer::quantize_impl``
  (``pytorch/csrc/quantizer.cpp``) runs ``nvte_compute_amax`` before the cast, a kernel of its
  own (its read is the recipe's second read of the tensor, ``stage_core.lower.fp8.cast_bytes``),
  under ``te_current_scaling``; the amax all-reduce it may run between the two is timed by the
  planning (:func:`~stage_explore.analytical.fp8_gather.amax_reductions`).
- **A column-wise copy made from FP8 data is a transpose kernel.** On a GPU whose FP8 GEMMs take
  only the TN layout (Hopper) the weight-gradient GEMM reads a transposed FP8 copy. TE writes it in
  the cast (``fp8_cast_transpose_fused``; TE 2.x a quantizer with both usages) when the cast sees
  the whole operand, but transposes the FP8 row-wise data in a kernel of its own (1 byte read,
  1 written per element) when the row-wise copy came from elsewhere: the norm's FP8 output (TE
  1.x ``ln_out_total_t = tex.fp8_transpose(ln_out_total, ...)`` in ``LayerNormLinear`` /
  ``LayerNormMLP`` backward) and an operand gathered in FP8 by userbuffers
  (:mod:`~stage_explore.analytical.fp8_gather`; TE 1.x ``_Linear.backward``
  ``grad_output_t = tex.fp8_transpose(grad_output_c, ...)`` under ``ub_overlap_ag`` and
  ``inputmat_t_total = tex.fp8_transpose(inputmat_total, ...)``; TE 2.x
  ``update_usage(columnwise_usage=True)`` → ``Float8TensorBase._create_transpose``). For the
  per-tensor recipes (``delayed``, ``tensorwise``) only; MXFP8 and blockwise quantize each
  direction from 16-bit data.

- **A grouped expert GEMM's operand is quantized one local expert at a time.** Megatron-Core's
  ``TEGroupedMLP`` (``--moe-grouped-gemm``) runs Transformer Engine's ``GroupedLinear``, which
  quantizes its FP8 input, its weights and, in the backward, its output gradient per GEMM:
  ``tex.split_quantize(inp_view, m_splits, input_quantizers)`` / the weight loop in
  ``module/grouped_linear.py``; ``split_quantize`` (``pytorch/csrc/extensions/cast.cpp``,
  NVIDIA/TransformerEngine 754d2a00) bulk-allocates the outputs and calls
  ``multi_tensor_quantize_impl``, which has one fused kernel for all splits only under delayed
  scaling (``nvte_multi_cast_transpose``: "Currently only have fused kernel for FP8 delayed
  scaling") and otherwise quantizes "individually", a kernel per split (current scaling, MXFP8,
  blockwise). NVIDIA/TransformerEngine#2360 (Nov 2025) names it from the other side: a device-side
  grouped GEMM "allowing the number of quantization kernels to be reduced to one" for MXFP8;
  grouped MXFP8 / blockwise quantization kernels were still open issues then (#2450, Dec 2025;
  #2525). Modelled (:func:`split_quantize_kernels`): each cast kernel of a grouped expert GEMM
  counts once per local expert (framework option ``moe_split_quantize``), each paying
  ``memory_kernel_s``; a current-scaling quantize's amax kernel (``amax_kernel``) counts per
  expert too, its scale kernel is not timed.

Not modelled (version-specific, TE 1.x only): under sequence parallelism TE 1.x ``_Linear``
casts a row-parallel layer's input row-wise only (``cast_to_fp8``: the fused cast-transpose
needs ``not sequence_parallel``) and transposes it in the backward — one more kernel and 1 byte
per element for the attention projection's and FC2's inputs; TE 2.x quantizes both usages at
once there. The model does not know the TE version of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import FP8_BYTES, HIGH_BYTES, NVFP4, ROWWISE, cast_bytes

#: Recipes with one scale per tensor, whose column-wise FP8 copy TE can transpose from the
#: row-wise FP8 data (the block-scaled recipes scale each direction on its own blocks).
PER_TENSOR_RECIPES = frozenset({"delayed", "tensorwise"})

#: Recipes whose forward (``fprop``) FP8 GEMM runs with fast accumulation: Transformer Engine's
#: per-tensor ones (``_2X_ACC_FPROP = False``) and torchao's (``gemm_config_output =
#: Float8GemmConfig(use_fast_accum=True)``, torchao/float8/config.py c6c388b5). torchao's
#: ``rowwise`` forward GEMM is PyTorch's row-wise CUTLASS kernel on H100 (``_scaled_mm``
#: dispatch, pytorch/pytorch#153555), "within 90-100% of tensor-wise efficiency" for most shapes
#: with fast accumulation, with "a long tail going down to 50%" (pytorch/pytorch#147971, H100,
#: Feb 2025), and torchao's own roofline takes one achievable GEMM fraction for every float8
#: recipe (torchao/testing/training/roofline_utils.py 05980129): timed at the tensor-wise
#: fast-accumulation rate (``fp8_fast_accumulation``); no row-wise rate of its own was found, on
#: MI300X (hipBLASLt) or B200 (CUTLASS, "template is not optimal", #153555) either.
FAST_FPROP_RECIPES = PER_TENSOR_RECIPES | {ROWWISE}


def fp8_cast_elements(
    instr: Instr, role: str, weights: Collection[str], gemms: Collection[str]
) -> tuple[tuple[str, int, int], ...]:
    """``(operand, elements, column-wise needed)`` of each 16-bit operand an FP8 GEMM of
    ``role`` casts: the activation (fprop) or output gradient (dgrad), with a column-wise copy
    when the weight gradient also runs in FP8; for wgrad, what no FP8 fprop/dgrad cast already."""
    operands = [(n, size // HIGH_BYTES) for n, size in instr.inputs if n not in weights]
    if role != "wgrad":
        return tuple((name, elements, int("wgrad" in gemms)) for name, elements in operands)
    cast = []
    for name, elements in operands:
        earlier = "dgrad" if name.startswith("d.") else "fprop"
        if earlier not in gemms:
            cast.append((name, elements, 1))
    return tuple(cast)


def fused_norm_casts(
    instrs: Iterable[Instr],
    recipe: str,
    fp8_fprop: Callable[[Instr], bool],
    current_scaling: bool = False,
) -> frozenset[tuple[str, str]]:
    """``(phase, tensor)`` of each norm output whose FP8 quantization the norm kernel takes part
    in (module docstring): a norm (kind ``reduction``) whose output every compute instruction
    reading it in that phase is an FP8 forward GEMM of a Transformer Engine linear layer
    (``fp8_fprop``), under ``delayed`` scaling (the norm writes the FP8 copy) or, with
    ``current_scaling`` (Transformer Engine's quantizers), ``tensorwise`` (the norm computes the
    amax). Empty for any other recipe."""
    if not (recipe == "delayed" or (recipe == "tensorwise" and current_scaling)):
        return frozenset()
    listed = tuple(instrs)
    readers: dict[tuple[str, str], list[Instr]] = {}  # (phase, tensor) → its compute readers
    for other in listed:
        if not other.is_comm:
            for n in dict.fromkeys(n for n, _ in other.inputs):
                readers.setdefault((other.phase, n), []).append(other)
    fused: set[tuple[str, str]] = set()
    for instr in listed:
        if instr.kind != "reduction" or instr.is_comm or not instr.outputs:
            continue
        key = (instr.phase, instr.outputs[0][0])
        found = [other for other in readers.get(key, ()) if other is not instr]
        if found and all(fp8_fprop(reader) for reader in found):
            fused.add(key)
    return frozenset(fused)


def launches_casts(name: str) -> bool:
    """Whether a GEMM instruction named ``name`` launches its operands' cast kernels: not a
    pipelined chunk after the first (userbuffers cut a GEMM into ``<gemm>.chunk<i>``,
    :func:`~stage_explore.analytical.overlap.pipelined_chunks`, each with its share of the
    operand's bytes; the cast is one kernel before them; ring-exchange chunks
    ``<gemm>.rchunk<i>`` likewise)."""
    last = name.rpartition(".")[2].removeprefix("r")  # ring-exchange chunks: rchunk<i>
    return not (last.startswith("chunk") and last[5:].isdigit() and int(last[5:]) > 0)


def quantize_cost(
    elements: int,
    recipe: str,
    copies: int,
    shard: int,
    norm_fused: bool,
    amax_kernel: bool = False,
) -> tuple[float, int]:
    """``(HBM bytes, kernels)`` of making ``copies`` FP8 copies (row-wise, then column-wise)
    of a 16-bit operand of ``elements`` elements: the row-wise cast on the ``1/shard`` local
    part a userbuffers FP8 all-gather sends (``shard`` 1: the whole operand), none when the
    norm writes it (``norm_fused``, delayed scaling); the column-wise copy written by the same
    cast, or — under a per-tensor recipe when the row-wise copy was gathered or written by the
    norm — by a transpose kernel of its own that reads the FP8 data again.

    ``amax_kernel``: the ``tensorwise`` cast runs as Transformer Engine's
    ``Float8CurrentScalingQuantizer`` (module docstring): its amax read is a kernel of its own,
    or, for a norm's output (``norm_fused``), part of the norm kernel (no read of its own); the
    cast kernel then writes both copies (``nvte_quantize_v2`` with both usages).

    ``nvfp4`` (TE 2.8+ ``NVFP4Quantizer::quantize_impl``): ``nvte_hadamard_transform_amax``
    (or ``nvte_compute_amax`` without a column-wise copy), then ``nvte_quantize_v2`` for the
    row-wise copy and ``nvte_hadamard_transform_cast_fusion_columnwise`` for the RHT'd
    column-wise one: ``1 + copies`` kernels, each reading the 16-bit operand (no norm fusion,
    no userbuffers gather; TE#2555's later fused row + column cast, 2 passes, not modelled).

    ``rowwise`` (torchao): the row-wise cast writes a 16-bit transpose beside its FP8 copy, and
    a second kernel casts that column-wise (:func:`stage_core.lower.fp8.cast_bytes`): one kernel
    per copy."""
    if recipe == NVFP4:  # amax kernel, then one cast kernel per copy (stage_core.lower.fp8)
        return cast_bytes(elements, recipe, copies) / shard, 1 + copies
    if amax_kernel and recipe == "tensorwise" and norm_fused:
        once = cast_bytes(elements, "delayed", 1)  # the cast's read and row-wise write
        rest = float(cast_bytes(elements, "delayed", copies) - once)
        if rest and shard > 1:  # the gathered FP8 data transposed
            return once / shard + rest + elements * FP8_BYTES, 2
        return once / shard + rest, 1
    first = cast_bytes(elements, recipe, 1)
    rest = float(cast_bytes(elements, recipe, copies) - first)
    moved = 0.0 if norm_fused else first / shard
    kernels = 0 if norm_fused else 1
    if amax_kernel and recipe == "tensorwise":  # nvte_compute_amax before the cast
        kernels += 1
    if rest and recipe in PER_TENSOR_RECIPES and (norm_fused or shard > 1):
        rest += elements * FP8_BYTES  # tex.fp8_transpose reads the row-wise FP8 copy
        kernels += 1
    if rest and recipe == ROWWISE:  # the column-wise cast reads the 16-bit transpose itself
        kernels += 1
    return moved + rest, kernels


def split_quantize_kernels(
    groups: int, recipe: str, split_quantize: bool, per_expert_modules: bool = False
) -> int:
    """Cast kernels per FP8 operand cast of a GEMM with ``groups`` local experts (0: not a grouped
    expert GEMM): one per expert when the framework quantizes the grouped operand split by split
    (``split_quantize``, Transformer Engine's ``GroupedLinear``) under a recipe without a fused
    multi-tensor kernel (all but ``delayed``), or when every expert is a module of its own
    (``per_expert_modules``: Megatron-Core's ``SequentialMLP``, each expert's TE linear layers
    casting their own operands under any recipe); else one."""
    if groups < 2:
        return 1
    if per_expert_modules:
        return groups
    if not split_quantize or recipe == "delayed":
        return 1
    return groups
