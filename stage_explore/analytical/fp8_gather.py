"""Transformer Engine's all-gathers of FP8 linear-layer inputs, userbuffers' or NCCL's: under an
FP8 recipe with sequence parallelism the layer quantizes its local (sequence-parallel)
shard and gathers the FP8 data, so the all-gather moves 1 byte per element (plus the block scales
under MXFP8) and the row-wise cast runs on the 1/tp local shard, not on the gathered tensor (a
column-wise copy for the weight-gradient GEMM is left as the model had it, on the gathered
tensor: where TE makes it after the gather was not read).

What the code runs (NVIDIA/TransformerEngine ``transformer_engine/pytorch/module/base.py``):

- ``initialize_ub`` allocates ``torch.uint8`` userbuffers, when the run is FP8, for the
  all-gather overlaps ``qkv_fprop``, ``fc1_fprop`` (the normed inputs of the QKV and FC1
  GEMMs), ``proj_dgrad``, ``fc2_dgrad`` (the output gradients gathered for the row-parallel
  layers' dgrad GEMMs) and ``qkv_dgrad``, ``fc1_dgrad`` (the bulk re-gather of the saved normed
  inputs for the weight-gradient GEMMs): ``fp8_buf = [...]`` at 3ec87875 (TE 1.x),
  ``layers_all_gather_overlap`` with ``"fp8_buf": name in layers_all_gather_overlap`` and
  ``buffer_dtype = torch.uint8 if ... FP8 and fp8_buf`` in TE 2.x.
- ``fill_userbuffers_buffer_for_all_gather`` (TE 2.x): a ``Float8Quantizer`` (delayed scaling) or
  ``Float8CurrentScalingQuantizer`` (current scaling) quantizes the *local* tensor row-wise and
  copies its FP8 data into the local chunk of the buffer (one per-tensor scale, not gathered);
  an ``MXFP8Quantizer`` does the same with one of its row- or column-wise buffers and gathers
  the E8M0 scale-inverses beside it (``torch.distributed.all_gather_into_tensor``, counted here
  as bytes of the same collective); any other quantizer (``Float8BlockQuantizer``, the
  ``blockwise`` recipe) raises "Unsupported quantizer for Userbuffers", so that recipe is left as
  it was (16-bit gathers).

torchao's Float8 tensor parallelism does the same (``float8_tp``; 5 Dec 2026, s13 ttasync):
TorchTitan's ``parallelize_llama`` sets ``enable_float8_tensorwise_tp`` for a tensorwise
recipe ("For rowwise recipes, we use regular TP and all-gather happens in high precision") and
plans ``PrepareFloat8ModuleInput`` / ``Float8ColwiseParallel``, which cast the local sequence
shard to FP8 before the forward all-gather, and ``Float8RowwiseParallel``, whose
``_NoopFwToFloat8BwDynamic`` casts the output gradient before the backward's
(``torchao/float8/float8_tensor_parallel.py``); the reduce-scatters stay 16-bit.

Transformer Engine does the same without userbuffers (``te_sp_fp8_gather``; 6 Dec 2026, s25
tegather): TE 1.x ``LayerNormLinear`` writes its norm output as ``torch.uint8`` and gathers it,
``Linear`` casts then gathers, and ``grad_output_preprocess`` casts the output gradient then
gathers it (NVIDIA/TransformerEngine 3ec87875 ``module/layernorm_linear.py``,
``module/linear.py``, ``module/base.py``); TE 2.x ``gather_along_first_dim(..., quantizer=...)``
quantizes the local shard and gathers the FP8 data (per-tensor recipes: ``_data`` only, the
scale assumed identical across ranks; ``mxfp8``: data and E8M0 scales of each usage asked;
negvet/TransformerEngine dbe1dd82 ``distributed.py``), called on the input in the forward, on
the saved FP8 shard for wgrad and on the output gradient (3b3ec9bc ``module/linear.py``). The
output gradient's quantizer there asks for row- and column-wise usage, both gathered under
``mxfp8`` (2 x (1 + 1/32) B per element, no fewer than 16-bit): those gathers stay 16-bit
here (:func:`nccl_fp8_gathered`); a per-tensor recipe gathers the row-wise data and transposes
it after.

Which all-gathers: a tensor-parallel all-gather of a decoder layer whose gathered tensor, in
that phase, is read only by FP8 GEMMs of Transformer Engine linear layers (not the experts',
whose communication is never userbuffers', nor the router's) — the six above when the forward,
dgrad and wgrad GEMMs all run in FP8. Not modelled: MXFP8's separate scale all-gather call
(its bytes ride on the data's collective); the ``blockwise`` recipe's NCCL gathers (TE 2.x
``_all_gather_fp8_blockwise``: FP8 data and FP32 scales in the compact format; they stay
16-bit here, as under userbuffers, which refuse that quantizer); MXFP8's both-usage output
gradient gathers at their 2 x (1 + 1/32) B per element (left at 16-bit's 2 B).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import FP8_BYTES, MX_BLOCK, NON_FP8_WEIGHTS
from stage_core.trace import CollectiveKind
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.gemm_tiles import ELEMENT_BYTES

#: Recipes whose linears torchao's Float8 tensor parallelism gathers in FP8 (TorchTitan's
#: ``enable_float8_tensorwise_tp = enable_float8_linear and not float8_is_rowwise``).
FLOAT8_TP_RECIPES = frozenset({"tensorwise"})
#: Recipes whose quantizer Transformer Engine's userbuffers all-gather accepts (TE 2.x
#: ``fill_userbuffers_buffer_for_all_gather``; TE 1.x had delayed scaling only).
UB_FP8_RECIPES = frozenset({"delayed", "tensorwise", "mxfp8"})


def fp8_gathered(
    instrs: Iterable[Instr], weights: Collection[str], gemms: Collection[str], recipe: str
) -> frozenset[tuple[str, str]]:
    """``(phase, tensor)`` of each tensor-parallel all-gather in ``instrs`` that carries FP8
    data (module docstring): every reader of the gathered tensor in that phase is an FP8 GEMM
    (role in ``gemms``) of a non-expert, non-router linear layer. Empty for a recipe
    userbuffers cannot gather (:data:`UB_FP8_RECIPES`)."""
    if recipe not in UB_FP8_RECIPES:
        return frozenset()
    listed = tuple(instrs)
    gathered: set[tuple[str, str]] = set()
    for instr in listed:
        if instr.collective is not CollectiveKind.ALL_GATHER or instr.axes != ("tp",):
            continue
        name = instr.outputs[0][0] if instr.outputs else ""
        readers = [
            other
            for other in listed
            if other.phase == instr.phase
            and other is not instr
            and any(n == name for n, _ in other.inputs)
        ]
        if readers and all(te_fp8_linear(r, weights, gemms) for r in readers):
            gathered.add((instr.phase, name))
    return frozenset(gathered)


#: Recipes whose output gradients Transformer Engine gathers, outside userbuffers, with both
#: their row- and column-wise copies (``_all_gather_mxfp8`` for each usage the quantizer asks).
BOTH_USAGE_GRAD_GATHERS = frozenset({"mxfp8"})


def nccl_fp8_gathered(
    gathered: Collection[tuple[str, str]], recipe: str
) -> frozenset[tuple[str, str]]:
    """``gathered`` (:func:`fp8_gathered`) as Transformer Engine's NCCL sequence-parallel
    gathers carry them (module docstring): under a recipe of :data:`BOTH_USAGE_GRAD_GATHERS`
    without the output gradients (``d.`` tensors), which move no fewer bytes than 16-bit."""
    if recipe not in BOTH_USAGE_GRAD_GATHERS:
        return frozenset(gathered)
    return frozenset((phase, name) for phase, name in gathered if not name.startswith("d."))


def te_fp8_linear(instr: Instr, weights: Collection[str], gemms: Collection[str]) -> bool:
    """Whether ``instr`` is a GEMM of a Transformer Engine (or torchao Float8) linear layer that
    runs in FP8 and whose inputs the tensor-parallel gathers carry quantized — userbuffers',
    Transformer Engine's NCCL gathers or torchao's (not the experts', not the router's)."""
    role = gemm_role(instr, weights)
    if role is None or role not in gemms:
        return False
    names = [n for n, _ in instr.inputs] + [n[2:] for n, _ in instr.outputs if n.startswith("d.")]
    own = [n for n in names if n in weights]
    return bool(own) and not any(n in NON_FP8_WEIGHTS or n.startswith("experts.") for n in own)


def fp8_gather_bytes(high_bytes: int, recipe: str) -> int:
    """Bytes of an all-gather of ``high_bytes`` 16-bit bytes when it carries FP8 data: one byte
    per element, and under MXFP8 one E8M0 scale byte per :data:`MX_BLOCK` elements."""
    elements = high_bytes // ELEMENT_BYTES
    scales = -(-elements // MX_BLOCK) if recipe == "mxfp8" else 0
    return elements * FP8_BYTES + scales


def with_fp8_gathers(
    instrs: Iterable[Instr], gathered: Collection[tuple[str, str]], recipe: str
) -> tuple[Instr, ...]:
    """``instrs`` with the all-gathers of ``gathered`` moving FP8 bytes
    (:func:`fp8_gather_bytes`); every other instruction unchanged."""
    result = []
    for instr in instrs:
        if (
            instr.collective is CollectiveKind.ALL_GATHER
            and instr.axes == ("tp",)
            and instr.outputs
            and (instr.phase, instr.outputs[0][0]) in gathered
        ):
            instr = replace(instr, comm_bytes=fp8_gather_bytes(instr.comm_bytes, recipe))
        result.append(instr)
    return tuple(result)


def amax_reductions(gathered: Collection[tuple[str, str]]) -> tuple[int, int]:
    """(forward, backward) tensor-parallel amax all-reduces of Transformer Engine's current
    scaling among the FP8-gathered operands ``gathered`` (:func:`fp8_gathered` under the
    ``tensorwise`` recipe): a column-parallel layer's input quantizer and a row-parallel layer's
    output-gradient quantizer reduce their amax over the tensor-parallel group under sequence
    parallelism, i.e. every operand gathered before its FP8 GEMM, forward (and again in a
    recomputed forward, counted with the backward) and the output gradients gathered in the
    backward, not the saved inputs the backward gathers again (quantized in the forward).
    TE 2.x ``Linear`` / ``LayerNormLinear`` ``_customize_quantizers_float8_current_scaling``:
    ``with_amax_reduction = True``, ``amax_reduction_group = self.tp_group`` when
    ``sequence_parallel`` and the layer is column- (input) or row-parallel (``GRAD_OUTPUT1``);
    ``Float8CurrentScalingQuantizer::quantize_impl`` (``pytorch/csrc/quantizer.cpp``) then runs
    ``amax_reduction_group->allreduce(...)->wait()`` between the amax and the cast."""
    forward = sum(1 for phase, _ in gathered if phase == "fwd")
    backward = sum(
        1
        for phase, name in gathered
        if phase == "recompute" or (phase == "bwd" and name.startswith("d."))
    )
    return forward, backward


def cast_shards(gathered: Collection[tuple[str, str]], tp: int) -> Mapping[tuple[str, str], int]:
    """How much smaller than the gathered tensor each row-wise FP8 cast of ``gathered`` is:
    the layer quantizes its local shard before the all-gather (1/tp of the elements)."""
    return {key: tp for key in gathered}
