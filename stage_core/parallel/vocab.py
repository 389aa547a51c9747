"""The vocabularies of a parallel configuration: pipeline schedules, recompute granularities and
modules, context-parallel styles, MoE token dispatchers, precisions and FP8 / FP4 recipes (the
values :class:`stage_core.parallel.config.ParallelConfig` and the CLI accept)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZERO_BUBBLE = "zb"  # ZB-H1 (stage_core.lower.schedule); "zb-h1" is accepted as an alias
    DUALPIPE = "dualpipe"


#: Other accepted spellings of schedule names.
SCHEDULE_ALIASES: Mapping[str, str] = MappingProxyType({"zb-h1": "zb"})


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


#: How ``recompute_num_layers`` N picks the fully recomputed layers (the others keep their
#: activations): 'block', Megatron-Core's ``--recompute-method block`` (the first N layers of
#: each model chunk; NeMo's activation_recomputation.rst: "the layers per pipeline stage", "per
#: virtual pipeline stage" with virtual pipelining); 'every', torchtitan's ``selective`` AC with
#: ``selective_ac_option = N`` (every N-th block a rank builds, by a per-process counter:
#: ``_apply_layer_sac`` checkpoints when ``count % N == 0``); 'uniform', Megatron-Core's
#: ``--recompute-method uniform``: every layer is recomputed, in groups of N consecutive layers of
#: each model chunk checkpointed as one unit (``TransformerBlock._checkpointed_forward`` wraps
#: ``custom(layer_idx, layer_idx + recompute_num_layers)`` in one checkpoint; the last group of a
#: chunk may be shorter), so a group keeps only its first layer's input and its backward re-runs
#: the group's N layers, holding their activations at once; 'spread', fms-fsdp's
#: ``selective_checkpointing`` fraction p = N / L of a rank's L blocks (fms_fsdp/policies/
#: ac_handler.py ``apply_fsdp_checkpointing``: a block checkpointed when ``block_idx · p >=
#: cut_off``, ``cut_off`` from 1/2 up by 1 per checkpointed block, so round(L·p) blocks as evenly
#: spaced as that rule makes them; a run's p gives N = round(L·p)).
RECOMPUTE_METHODS = ("block", "every", "uniform", "spread")


#: Megatron-Core's selective-recompute modules (``TransformerConfig.recompute_modules``):
#: ``core_attn``, ``mlp`` (a dense MLP), ``moe`` (the MoE layer) and ``shared_experts`` are
#: checkpointed (their inputs kept, re-run in the backward); ``layernorm`` (a norm that is its
#: own module: an MoE layer's pre-MLP norm, a latent attention's input norm), ``moe_act`` (the
#: experts' activation) and ``mla_up_proj`` (latent attention's up-projections and RoPE) are
#: output-discarding checkpoints: their outputs are freed once consumed and re-made before the
#: backward needs them. ``op`` is torchtitan's op-level selective checkpointing
#: (:mod:`stage_core.recompute`), not a Megatron module; ``op_recompute_sdpa`` the same policy
#: when its save list lacks the attention kernel that ran, which then re-runs too;
#: ``op_compiled`` / ``op_recompute_sdpa_compiled`` either policy under ``torch.compile``, whose
#: partitioner keeps only the outputs the backward reads.
RECOMPUTE_MODULES = (
    "core_attn",
    "mlp",
    "moe",
    "shared_experts",
    "layernorm",
    "moe_act",
    "mla_up_proj",
    "op",
    "op_recompute_sdpa",
    "op_compiled",
    "op_recompute_sdpa_compiled",
)
#: The modules of torchtitan's op-level policy (each covers the whole layer, used alone).
OP_SAC_MODULES = frozenset({"op", "op_recompute_sdpa", "op_compiled", "op_recompute_sdpa_compiled"})


class CpStyle(StrEnum):
    """Context parallelism: all-gather K and V, or pass K/V chunks around a ring."""

    ALLGATHER = "allgather"
    RING = "ring"


class MoeDispatcher(StrEnum):
    """Megatron-Core's MoE token dispatcher (``--moe-token-dispatcher-type``): all-to-all of
    each rank's routed tokens over the expert group, or all-gather of the tokens over it (and
    tp) with a reduce-scatter back (``MoEAllGatherTokenDispatcher``)."""

    ALLTOALL = "alltoall"
    ALLGATHER = "allgather"


class Precision(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    #: The linear layers' GEMMs in 4-bit floating point (E2M1) under :class:`Fp4Recipe`;
    #: exclusive with FP8, as Megatron-Core's ``--fp4-format`` and ``--fp8-format`` are.
    FP4 = "fp4"


class Fp4Recipe(StrEnum):
    """How an FP4 run scales its tensors (Megatron-Core ``--fp4-recipe``): ``nvfp4``, Transformer
    Engine's ``NVFP4BlockScaling`` — E2M1 data, one E4M3 scale per 16 consecutive elements and
    one FP32 scale per tensor; activations and output gradients take a 16×16 random Hadamard
    transform on their column-wise (weight-gradient) copies, weights 16×16 2-D blocks
    (``transformer_engine/common/recipe/__init__.py``, NVIDIA/TransformerEngine 000b637e).
    Megatron's ``custom`` recipe (a user-supplied quantizer factory) is not modelled."""

    NVFP4 = "nvfp4"


class Fp8Recipe(StrEnum):
    """How an FP8 run scales its tensors (Megatron-Core ``--fp8-recipe``, Transformer Engine's
    recipes): ``delayed``: one scale per tensor from an amax history (DelayedScaling);
    ``tensorwise``: one scale per tensor from the tensor itself, "current scaling"
    (Float8CurrentScaling); ``blockwise``: 1×128 activation and 128×128 weight blocks (DeepSeek-V3,
    arXiv 2412.19437 Section 3.3; Float8BlockScaling); ``mxfp8``: 32-element blocks with E8M0
    scales (OCP Microscaling; MXFP8BlockScaling), Blackwell tensor cores only; ``rowwise``: one
    scale per row of each GEMM operand, dynamic (torchao Float8 ``Float8LinearRecipeName.ROWWISE``:
    input, weight and output gradient scaled axiswise in E4M3, scales rounded down to a power of
    two, ``Float8LinearConfig.from_recipe_name`` in torchao/float8/config.py, pytorch/ao
    c6c388b5; torchtitan's ``quantize.linear.float8.recipe_name``); Transformer Engine has no
    row-wise recipe. torchao's ``rowwise_with_gw_hp`` is ``rowwise`` with ``fp8_gemms``
    ``fprop,dgrad``: its weight-gradient GEMM runs in 16 bits (``ScalingType.DISABLED`` for
    ``cast_config_input_for_grad_weight`` / ``cast_config_grad_output_for_grad_weight``), its
    input-gradient GEMM reads a tensor-wise-scaled weight
    (``cast_config_weight_for_grad_input``)."""

    DELAYED = "delayed"
    TENSORWISE = "tensorwise"
    BLOCKWISE = "blockwise"
    MXFP8 = "mxfp8"
    ROWWISE = "rowwise"


#: The three GEMMs of a linear layer an FP8 (or FP4) recipe can run in FP8 (FP4): forward, input
#: gradient, weight gradient (Transformer Engine's ``override_linear_precision`` order).
FP8_GEMMS: tuple[str, ...] = ("fprop", "dgrad", "wgrad")
