"""What an FP8 (or FP4) recipe adds beside the GEMMs it speeds up: FP8 copies of the weights and
their scales (memory), and the quantization kernels that cast 16-bit tensors to FP8 (traffic).

Contents: :func:`fp8_block`, :func:`linear_weights`, :func:`weight_copies`,
:func:`data_bytes` / :func:`copy_bytes` (one quantized copy), :func:`weight_copy_bytes` (per
weight, one rank), :func:`cast_bytes` (HBM bytes of one cast),
:func:`saved_activation_bytes` and :func:`with_fp8_saved` (the activations a block keeps for its
backward, as an FP8 recipe stores them).

Conventions (NVIDIA Transformer Engine, which Megatron-Core's ``--fp8-format``/``--fp8-recipe``
drive):

- **Which GEMMs.** Only the linear layers of the decoder layers run in FP8 (TE's ``Linear``
  modules under ``fp8_autocast``); the embedding and the output layer are not TE modules in
  Megatron-Core and stay BF16, as do attention, softmax and norms. ``fp8_gemms`` chooses among a
  linear layer's forward (``fprop``), input-gradient (``dgrad``) and weight-gradient (``wgrad``)
  GEMMs (TE's ``override_linear_precision``).
- **Weight copies.** The 16-bit weight stays (the optimizer updates it); FP8 GEMMs read a
  quantized copy, kept across the micro-batches of a step: a row-wise copy for ``fprop`` and a
  column-wise (transposed) one for ``dgrad`` — Hopper's FP8 tensor cores take only the "TN"
  layout, and the block-scaled recipes scale rows and columns differently on any GPU.
- **Scales.** Per-tensor recipes keep a scale, its inverse and an amax history per tensor
  (Megatron-Core's ``--fp8-amax-history-len`` default 1): bytes, not per element. ``blockwise``
  (DeepSeek-V3, arXiv 2412.19437 Section 3.3) keeps one FP32 scale per 128×128 weight block and
  per 1×128 activation block; ``mxfp8`` (OCP Microscaling spec v1.0) one E8M0 byte per 32
  elements; ``nvfp4`` (precision ``fp4``, Transformer Engine's ``NVFP4BlockScaling``) one E4M3
  byte per 16 elements and one FP32 amax per copy (``FP4_TENSOR_SCALE_BYTES``), on weights too
  (their 16×16 2-D blocks store one scale per 16-element row segment all the same).
- **FP4.** Under ``precision='fp4'`` the same linear layers, GEMMs (``fp8_gemms``), copies and
  saved tensors as FP8, each element half a byte (E2M1, two per byte): a copy is
  ``ceil(n/2) + ceil(n/16) + 4`` bytes (0.5625 B per element). Its casts read the 16-bit tensor
  once per copy plus once more for the amax (TE ``NVFP4Quantizer::quantize_impl``, TE 2.8+:
  ``nvte_hadamard_transform_amax`` reads the tensor for the row-wise amax and that of its
  random-Hadamard-transformed transpose, then ``nvte_quantize_v2`` writes the row-wise copy and
  ``nvte_hadamard_transform_cast_fusion_columnwise`` reads it again for the RHT'd column-wise
  copy): 3 × 2 B read and 2 × 0.5625 B written per element for an activation or output gradient
  with both copies (s17 nvfp4 design, docs/analytical.md).
- **Casts.** A cast reads the 16-bit tensor (2 bytes per element) and writes each FP8 copy
  (1 byte per element) and its scales; current (``tensorwise``) scaling reads the tensor once
  more for its amax before casting (TE computes the amax, then casts). Casts that TE fuses into
  a preceding LayerNorm or activation kernel are charged as separate kernels here: an upper
  bound (the analytical backend's ``stage_explore.analytical.fp8_casts`` times TE's kernels:
  under delayed scaling a fused norm + linear layer's norm writes the FP8 input itself).
- **Saved activations.** A TE linear layer keeps for its weight-gradient GEMM the FP8 copy of its
  input it quantized in the forward (TE ``Linear``/``LayerNormLinear``/``GroupedLinear`` save
  ``inputmat``/``ln_out`` quantized, column-wise usage only, when ``wgrad`` runs in FP8), not the
  16-bit tensor: 1 byte per element plus the recipe's activation scales. A 16-bit tensor stays
  only when another consumer keeps it (a norm's or attention's backward, the router, a
  recomputed region): then both are held. The MoE router is a plain 16/32-bit GEMM in
  Megatron-Core (``TopKRouter``, not a TE module), so its input stays 16-bit. One FP8 copy is
  counted per tensor (the generator's q/k/v and gate/up einsums are one fused TE module each in
  Megatron-Core).
- **Row-wise scaling** (``rowwise``, torchao Float8 only: ``Float8LinearRecipeName.ROWWISE``).
  Every operand is scaled per row along the GEMM's reduction dim, so the weight-gradient GEMM's
  operands are scaled along the other axis than the forward's and input gradient's and are cast
  again from the 16-bit tensor in the backward (torchao ``matmul_with_hp_or_float8_args``,
  torchao/float8/float8_linear.py, pytorch/ao 7ca1bfbe: ``axiswise_dim`` -1, then 0). Saved for
  the backward: the 16-bit input and weight (``ctx.save_for_backward(input_hp, weight_hp_t)``),
  no FP8 copy; so :func:`with_fp8_saved` leaves the saved bytes as they are. Casts: torchao's
  own roofline (``get_tensor_memory_traffic_ovhd_s``, torchao/testing/training/roofline_utils.py,
  pytorch/ao 05980129) counts, for an activation or output gradient with both copies, one kernel
  reading the tensor (2 B) and writing the row-wise FP8 copy (1 B) and a 16-bit transposed copy
  (2 B), then one reading that (2 B) and writing the column-wise FP8 copy (1 B): 8 B per
  element; with the row-wise copy alone (``rowwise_with_gw_hp``: no FP8 weight gradient) 3 B.
  The row's amax is taken in the casting kernel (a row along the contiguous dim), not in a pass
  of its own. One FP32 scale per row (4 B per row of thousands of elements) is not counted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from stage_core.blocks import mtp_layer_of_block
from stage_core.graph import Block
from stage_core.lower.bind import BoundBlock, SymbolicBlock
from stage_core.models.layers import is_kept_block, is_layer_block
from stage_core.ops import Einsum, local_elements
from stage_core.parallel.config import ParallelConfig
from stage_core.parallel.vocab import Fp4Recipe, Fp8Recipe
from stage_core.sharding import OpStep

#: Blocks that hold no FP8 linear layer (Megatron-Core's embedding and output layer are not
#: Transformer Engine modules; nor is the output layer a multi-token-prediction loss shares).
NON_FP8_BLOCKS = frozenset({"embedding", "head", "mtp_head"})
#: Bytes of per-tensor scaling state: scale, inverse scale and a one-entry amax history (FP32).
PER_TENSOR_STATE_BYTES = 12
#: Elements per scale: 128×128 weight blocks and 1×128 activation blocks (DeepSeek-V3).
BLOCKWISE_WEIGHT_BLOCK = 128 * 128
BLOCKWISE_ACTIVATION_BLOCK = 128
#: MXFP8: one E8M0 scale byte per 32 elements (OCP Microscaling Formats v1.0).
MX_BLOCK = 32
#: NVFP4: one E4M3 scale byte per 16 elements and one FP32 per-tensor amax per copy
#: (``NVFP4BlockScaling``: "E4M3 scale per 16 consecutive elements", FP32 second-level scale).
NVFP4_BLOCK = 16
FP4_TENSOR_SCALE_BYTES = 4
#: The recipe of ``precision='fp4'`` (:class:`stage_core.parallel.Fp4Recipe`), as a string.
NVFP4: str = Fp4Recipe.NVFP4.value
#: torchao's row-wise FP8 recipe (:class:`stage_core.parallel.Fp8Recipe`), as a string.
ROWWISE: str = Fp8Recipe.ROWWISE.value
#: Weights of GEMMs outside Transformer Engine's FP8 linear modules inside an FP8 block: the MoE
#: router (Megatron-Core ``TopKRouter.gating``: ``torch`` linear in 16 or 32 bit).
NON_FP8_WEIGHTS = frozenset({"router"})
#: Bytes of an element before and after the cast.
HIGH_BYTES = 2
FP8_BYTES = 1


def fp8_block(kind: str) -> bool:
    """Whether a block of ``kind`` runs its linear layers in FP8 under an FP8 recipe."""
    return kind not in NON_FP8_BLOCKS


def linear_weights(block: BoundBlock) -> frozenset[str]:
    """The weights of ``block`` that are a matmul operand (linear layers, not norms or biases)."""
    names = {weight.name for weight in block.weights}
    return frozenset(
        name
        for instr in block.fwd
        if instr.kind == "einsum"
        for name, _ in instr.inputs
        if name in names
    )


def weight_copies(gemms: Collection[str]) -> int:
    """FP8 copies of a weight: row-wise for ``fprop``, column-wise for ``dgrad``."""
    return ("fprop" in gemms) + ("dgrad" in gemms)


def data_bytes(elements: int, recipe: str) -> int:
    """Bytes of the quantized data of ``elements`` elements: two E2M1 values per byte under
    ``nvfp4``, one FP8 byte each under the FP8 recipes."""
    if recipe == NVFP4:
        return -(-elements // 2)
    return elements * FP8_BYTES


def copy_bytes(elements: int, recipe: str, weight: bool) -> int:
    """Bytes of one quantized copy (data and scales) of a tensor of ``elements`` elements."""
    return data_bytes(elements, recipe) + _scale_bytes(elements, recipe, weight)


def _scale_bytes(elements: int, recipe: str, weight: bool) -> int:
    if recipe == NVFP4:
        return -(-elements // NVFP4_BLOCK) + FP4_TENSOR_SCALE_BYTES
    if recipe == "blockwise":
        block = BLOCKWISE_WEIGHT_BLOCK if weight else BLOCKWISE_ACTIVATION_BLOCK
        return -(-elements // block) * 4
    if recipe == "mxfp8":
        return -(-elements // MX_BLOCK)
    return PER_TENSOR_STATE_BYTES if weight else 0


def weight_copy_bytes(elements: int, recipe: str, gemms: Collection[str]) -> int:
    """Bytes of the FP8 copies (and their scales) of a weight of ``elements`` elements."""
    return weight_copies(gemms) * copy_bytes(elements, recipe, weight=True)


def cast_bytes(elements: int, recipe: str, copies: int) -> int:
    """HBM bytes of casting a 16-bit activation or gradient of ``elements`` elements to
    ``copies`` FP8 copies (row-wise, and column-wise for a weight-gradient GEMM); under
    ``nvfp4`` one read for the amax and one per copy (module docstring, *FP4*); under
    ``rowwise`` one read per copy and a 16-bit transposed copy between them (module docstring,
    *Row-wise scaling*)."""
    if recipe == ROWWISE:  # read 2 + write 1 per copy, the 16-bit transpose written once more
        transposed = max(0, copies - 1) * elements * HIGH_BYTES
        return copies * elements * HIGH_BYTES + transposed + copies * data_bytes(elements, recipe)
    reads = 2 if recipe == "tensorwise" else 1 + copies if recipe == NVFP4 else 1
    writes = copies * copy_bytes(elements, recipe, weight=False)
    return reads * elements * HIGH_BYTES + writes


def _fp8_linear(op: object, block: Block) -> bool:
    """Whether ``op`` is a linear layer's GEMM that an FP8 recipe runs in FP8."""
    if not isinstance(op, Einsum):
        return False
    weights = [n for n in op.inputs if block.tensors[n].role == "weight"]
    return bool(weights) and not any(n in NON_FP8_WEIGHTS for n in weights)


def saved_activation_bytes(
    symbolic: SymbolicBlock,
    sizes: Mapping[str, int],
    axis_sizes: Mapping[str, int],
    recipe: str,
    region: Collection[str] = (),
) -> int:
    """Bytes one rank keeps per micro-batch for the backward of an FP8 block whose linear layers'
    weight-gradient GEMMs run in FP8 (module docstring, *Saved activations*): a saved tensor that
    only FP8 linear GEMMs keep counts its FP8 copy (1 byte per element and the recipe's
    activation scales); one that another op keeps too counts both; the rest as they are.
    ``region``: the ops a selective recompute re-runs (their inputs stay 16-bit)."""
    forward = symbolic.forward
    high: set[str] = set()
    low: set[str] = set()
    for step in forward.steps:
        if not isinstance(step, OpStep):
            continue
        op = step.op
        if op.name in region:
            high.update(op.inputs)
        elif _fp8_linear(op, forward.block):
            low.update(op.saved)
        else:
            high.update(op.saved)
    total = 0
    for item in symbolic.backward.saved:
        elements = int(local_elements(item.layout, sizes, axis_sizes))
        kept = item.name in high or item.name not in low  # masks and inputs are never FP8
        copy = item.name in low
        total += kept * elements * item.bytes_per_element + copy * copy_bytes(
            elements, recipe, weight=False
        )
    return total


def with_fp8_saved(
    bound: BoundBlock,
    symbolic: SymbolicBlock,
    sizes: Mapping[str, int],
    axis_sizes: Mapping[str, int],
    parallel: ParallelConfig,
    recompute: str | None = None,
) -> BoundBlock:
    """``bound`` with its saved bytes as the FP8 recipe keeps them (unchanged unless the run is
    FP8 with FP8 weight-gradient GEMMs and the block has FP8 linear layers, or when the block is
    fully recomputed: full recompute keeps the block's 16-bit inputs only). ``recompute``: the
    mode ``symbolic`` was derived with, when not the run's. The ops a selective recompute
    re-runs are read from ``symbolic``'s backward (its ``recompute`` steps)."""
    mode = str(parallel.recompute) if recompute is None else recompute
    kind = str(bound.kind)
    if not (is_layer_block(kind) or mtp_layer_of_block(kind)) or is_kept_block(kind):
        mode = "none"  # recompute applies to the decoder layers only (bind.symbolic_block)
    if not parallel.quantized or "wgrad" not in parallel.fp8_gemms:
        return bound
    if mode == "full" or not fp8_block(kind) or parallel.linear_recipe == ROWWISE:
        return bound  # rowwise: the 16-bit input is kept (module docstring, *Row-wise scaling*)
    region = frozenset(
        step.op.name
        for step in symbolic.backward.steps
        if isinstance(step, OpStep) and step.phase == "recompute"
    )
    recipe = parallel.linear_recipe
    saved = saved_activation_bytes(symbolic, sizes, axis_sizes, recipe, region)
    return replace(bound, saved_bytes=saved)
