"""Megatron-Core's eager code: ``TEGroupedMLP``'s expert biases and GLU clamp (GPT-OSS) and
unfused RoPE.

Megatron-Core's grouped experts (``megatron/core/transformer/moe/experts.py``, ``TEGroupedMLP``;
the module of ``--moe-grouped-gemm``, which Megatron-Bridge's GPT-OSS provider sets) build both
projections as Transformer Engine ``GroupedLinear`` layers with the model's biases
(``add_bias_linear``), but not alike:

- ``linear_fc1`` with ``skip_bias_add=False``: TE adds each expert's bias inside its GEMM
  (``general_grouped_gemm(..., bias=biases, use_bias=True)``, cuBLASLt's bias epilogue) and
  reduces the bias gradient in the weight-gradient GEMM's epilogue (``grad=True``). Forward,
  the generator's gate and up bias adds (``experts.gate``, ``experts.up``, ``experts.fc1``) fuse
  into the activation that reads the GEMM's output (``fuse_elementwise``: that read is the
  fused activation's, ``weighted_bias_quick_geglu_impl`` / ``weighted_bias_swiglu_impl``), the
  generator's count; backward, their ``.backward`` (the gradient handed to the GEMM, the bias
  gradient reduced from it) are the GEMMs' own: 0 bytes.
- ``linear_fc2`` with ``skip_bias_add=True``: the layer returns its biases, and
  ``TEGroupedMLP.forward`` adds them after the GEMM, scaled by each token's routing
  probability, in eager PyTorch (``_apply_bias``)::

      torch.cat([t + b * p for t, b, p in zip(torch.split(output.view(-1, H), tokens_per_expert),
                                             bias_parallel,
                                             torch.split(permuted_probs, tokens_per_expert))]
               ).view(shape).to(output.dtype)

  — the same code as NeMo AutoModel's DeepEP experts
  (:mod:`~stage_explore.analytical.eager_automodel`), with Megatron's probabilities. Their
  dtype is the router logits' (``TopKRouter.gating`` computes the logits in
  ``moe_router_dtype``, the input's 16-bit dtype when it is None, Megatron-Core's default and
  Megatron-Bridge's GPT-OSS provider's; the fused top-k router of ``moe_router_fusion``
  allocates ``probs`` in ``logits.scalar_type()``, TE ``extensions/router.cpp``), so every
  tensor here is 16-bit (``B``) and ``.to(output.dtype)`` is no kernel. Per element of the
  down projection's output, forward: ``b * p`` (B written; ``b`` and ``p`` are a row and a
  column), ``t + (b * p)`` (B + B in, B out), ``torch.cat`` (B, B). Backward (PyTorch
  ``derivatives.yaml``): ``CatBackward0`` narrows (views) and ``AddBackward0`` passes the
  gradient on; ``SplitWithSizesBackward0`` concatenates the experts' gradients of ``t`` (B, B);
  ``MulBackward0`` for ``b``: ``grad * p`` (B, B) reduced to the bias (B read); for ``p``, which
  carries the router's gradient: ``grad * b`` (B, B) reduced over the hidden dim (B read).

Megatron-Core's rotary embedding without ``apply_rope_fusion`` (``TransformerConfig``'s default,
False: "If True, use fused RoPE kernel"; providers that want the fused kernel set it — the
Llama and Nemotron ones — and Megatron-Bridge's GPT-OSS provider, bridge and performance recipes
do not) is ``rope_utils._apply_rotary_pos_emb_bshd``::

    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype); sin_ = ...   # [s, 1, 1, d]: negligible
    t = (t * cos_) + (_rotate_half(t) * sin_)   # _rotate_half: chunk, torch.cat((-x2, x1))
    return torch.cat((t, t_pass), dim=-1)

per element of ``q`` or ``k`` (all 16-bit): forward ``t * cos_`` (B, B), ``-x2`` (half an
element read and written), ``torch.cat((-x2, x1))`` (B, B), ``* sin_`` (B, B), the add (B + B,
B), the final ``torch.cat`` with the empty ``t_pass`` (B, B). Backward: the cats' backwards
narrow (views) and the add's passes the gradient on; ``grad * cos_`` (B, B), ``grad * sin_``
(B, B), ``NegBackward0`` on half (half read and written), the chunk's backward concatenates
the halves' gradients (B, B), and autograd sums the two gradients of ``t`` (B + B, B). (The
slice ``t[..., :rot_dim]``'s backward, a copy into zeros when ``rot_dim`` is the whole head, is
not counted.)

GPT-OSS's clamped activation (Megatron-Bridge ``GPTOSSProvider``: ``activation_func=quick_gelu``,
``glu_linear_offset=1.0``, ``bias_activation_fusion=True``, ``activation_func_clamp_value=7.0``;
``gpt_oss_provider.py``, NVIDIA-NeMo/Megatron-Bridge 12bc34a8) runs in ``TEGroupedMLP`` as
``weighted_bias_quick_geglu_impl`` (``megatron/core/fusions/fused_bias_geglu.py``,
NVIDIA/Megatron-LM 1fb2a0ca), whose clamp is eager PyTorch before the ``torch.compile``'d kernel
(``jit_fuser``)::

    x_glu, x_linear = input.chunk(2, -1)
    input = torch.cat((x_glu.clamp(min=None, max=clamp_value),
                       x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)
    output = WeightedQuickGeGLUFunction.apply(input, weights, fp8_input_store, linear_offset)

The compiled activation and its backward are the generator's ``experts.act`` (its reads of the
GEMM's output: the fused ``experts.gate`` / ``experts.up`` bias adds). The clamp adds, per
element of the activation's output (one element of each half of the fc1 output), forward: the
two clamps (B, B each) and the ``torch.cat`` (2B, 2B); backward (PyTorch
``torch/csrc/autograd/FunctionsManual.cpp`` ``clamp_backward``): ``CatBackward0`` narrows
(views); the gate half's ``where(self <= max, grad, 0)`` — ``le`` (B read, a 1-byte mask
written), ``where`` (mask and B read, B written); the linear half's
``where((self >= min).logical_and_(self <= max), grad, 0)`` — ``ge``, ``le`` (B, 1 each),
``logical_and_`` (1 + 1, 1), ``where`` (1 + B, B); the chunk's backward concatenates the halves'
gradients (2B, 2B). Megatron-Core's ``moe_act`` recompute checkpoints the whole call
(``CheckpointWithoutOutput`` around the activation), so the recomputed forward clamps again: it is
the generator's recomputed ``experts.act``, which gets the same forward bytes.

Neither the clamp nor ``_apply_bias`` runs under Transformer Engine's operation fuser
(Megatron-Core's ``use_transformer_engine_op_fuser``, the profile's ``moe_grouped_kernel``):
``TEGroupedMLP.forward`` then calls ``_fused_forward``, a ``te.pytorch.ops.Sequential`` of
``GroupedLinear`` (``linear_fc1``'s biases), ``ScaledClampedQGeGLU(glu_interleave_size=...,
limit=clamp)`` for a gated ``quick_gelu`` (GPT-OSS; ``ScaledSwiGLU`` for SiLU) taking the routing
probabilities, and ``GroupedLinear`` with ``linear_fc2``'s biases, and returns no bias to add
(``_make_fused_ops`` in ``megatron/core/transformer/moe/experts.py``, a 2026 Megatron-Core read in
the stored index, its repository not named there; ``_is_fused_impl_supported`` accepts GPT-OSS's
gated ``quick_gelu`` and the constructor asserts it, so the flag does not fall back to the eager
path). The clamp is in TE's activation op (``ScaledClampedQGeGLU``, "Clamped QGeGLU with
post-scaling", NVIDIA/TransformerEngine ``transformer_engine/pytorch/ops``) and the down-projection
bias in TE's grouped linear op, one kernel over all local experts, not ``_apply_bias``'s loop. The
MLPerf v6.0 GPT-OSS 20B implementation runs this path: its ``conf/gpt_oss.yaml`` sets
``use_transformer_engine_op_fuser: ${USE_TE_OPS,True}`` and its ``pretrain.py`` sets
``moe_mlp_glu_interleave_size = 32`` with it (mlcommons/training_results_v6.0 as stored at
Richardyu114/training_results_v6.0 eabf23a0, ``NVIDIA/benchmarks/gpt_oss_20b/implementations/
nemo/``).

The bias kernels inside the comprehension run once per local expert (``per_expert``): their
launches beyond the table's one are :func:`~stage_explore.analytical.eager.eager_expert_kernels`.
The generator counts one fused bias add per projection and one rotary kernel per tensor;
:func:`megatron_op_bytes` replaces those counts (the ``"megatron-core"`` eager table of
:func:`~stage_explore.analytical.eager.eager_op_bytes`), at the accelerator's achieved eager
bandwidth (``kernels.eager_memory``) like every eager table.
"""

from __future__ import annotations

from stage_core.models.spec import Family, ModelSpec, Position
from stage_explore.analytical.eager import BF16, EagerModule, Kernel

MEGATRON_EXPERT_DOWN_BIAS = EagerModule(
    name="expert-down-bias",
    source="megatron/core/transformer/moe/experts.py TEGroupedMLP._apply_bias",
    forward=(
        Kernel("b * p: the bias row times the probability column", 0, BF16, per_expert=True),
        Kernel("t + (b * p)", BF16 + BF16, BF16, per_expert=True),
        Kernel("torch.cat", BF16, BF16),
    ),
    backward=(
        Kernel("SplitWithSizesBackward0: torch.cat of the experts' gradients", BF16, BF16),
        Kernel("MulBackward0 (b): grad * p", BF16, BF16, per_expert=True),
        Kernel("MulBackward0 (b): .sum_to_size(b)", BF16, 0, per_expert=True),
        Kernel("MulBackward0 (p): grad * b", BF16, BF16, per_expert=True),
        Kernel("MulBackward0 (p): .sum_to_size(p) over the hidden dim", BF16, 0, per_expert=True),
    ),
    compiled_bytes=(BF16 + BF16, BF16),
)

MEGATRON_UNFUSED_ROPE = EagerModule(
    name="rope-unfused",
    source="megatron/core/models/common/embeddings/rope_utils.py _apply_rotary_pos_emb_bshd",
    forward=(
        Kernel("t * cos_", BF16, BF16),
        Kernel("-x2 (half of t)", BF16 // 2, BF16 // 2),
        Kernel("torch.cat((-x2, x1))", BF16, BF16),
        Kernel("_rotate_half(t) * sin_", BF16, BF16),
        Kernel("(t * cos_) + (... * sin_)", BF16 + BF16, BF16),
        Kernel("torch.cat((t, t_pass))", BF16, BF16),
    ),
    backward=(
        Kernel("MulBackward0: grad * cos_", BF16, BF16),
        Kernel("MulBackward0: grad * sin_", BF16, BF16),
        Kernel("NegBackward0 (half of t)", BF16 // 2, BF16 // 2),
        Kernel("the chunk's backward: torch.cat of the halves' gradients", BF16, BF16),
        Kernel("InputBuffer: the two gradients of t summed", BF16 + BF16, BF16),
    ),
    compiled_bytes=(BF16 + BF16, BF16 + BF16),
)

MEGATRON_GLU_CLAMP = EagerModule(
    name="glu-clamp",
    source="megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl (clamp_value)",
    forward=(
        Kernel("x_glu.clamp(min=None, max=clamp_value)", BF16, BF16),
        Kernel("x_linear.clamp(min=-clamp_value, max=clamp_value)", BF16, BF16),
        Kernel("torch.cat of the clamped halves", 2 * BF16, 2 * BF16),
    ),
    backward=(
        Kernel("ClampBackward0 (x_glu): self <= max", BF16, 1),
        Kernel("ClampBackward0 (x_glu): where(mask, grad, 0)", 1 + BF16, BF16),
        Kernel("ClampBackward0 (x_linear): self >= min", BF16, 1),
        Kernel("ClampBackward0 (x_linear): self <= max", BF16, 1),
        Kernel("ClampBackward0 (x_linear): logical_and_", 1 + 1, 1),
        Kernel("ClampBackward0 (x_linear): where(mask, grad, 0)", 1 + BF16, BF16),
        Kernel("the chunk's backward: torch.cat of the halves' gradients", 2 * BF16, 2 * BF16),
    ),
    compiled_bytes=(0, 0),  # inside the compiled activation, were it traced with it
)

#: The model families whose Megatron-Bridge provider clamps the gated activation
#: (``activation_func_clamp_value``: ``GPTOSSProvider``'s 7.0).
CLAMPED_GLU_FAMILIES = (Family.GPT_OSS,)


def megatron_extra_bytes(model: ModelSpec, op_fuser: bool = False) -> dict[str, int]:
    """Bytes per element of the activation's output of the eager kernels Megatron-Core runs
    beside the generator's ``experts.act`` (and its ``.backward``), on top of the op's own
    count: GPT-OSS's GLU clamp (:data:`MEGATRON_GLU_CLAMP`, module docstring); empty for every
    other model, and under ``op_fuser`` (the experts as Transformer Engine's fused ops, whose
    activation clamps: module docstring)."""
    if op_fuser or model.family not in CLAMPED_GLU_FAMILIES or not model.num_experts:
        return {}
    return {
        "experts.act": MEGATRON_GLU_CLAMP.bytes_per_element(backward=False),
        "experts.act.backward": MEGATRON_GLU_CLAMP.bytes_per_element(backward=True),
    }


#: The generator's rotary embeddings (``eager._ROPE_OPS``; MLA's too).
_ROPE_OPS = ("q.rope", "k.rope", "q.pe.rope", "k.pe.rope")

#: The generator's expert bias adds whose backward ``linear_fc1``'s GEMMs perform (0 bytes) ...
_EPILOGUE_BIAS_OPS = ("experts.gate", "experts.up", "experts.fc1")
#: ... and the one ``_apply_bias`` adds in eager PyTorch.
_EAGER_BIAS_OPS = ("experts.fc2",)


def megatron_op_bytes(
    model: ModelSpec, rope_fusion: bool = True, op_fuser: bool = False
) -> dict[str, int]:
    """Bytes per element of the generator's expert bias adds (and their ``.backward``) as
    Megatron-Core's ``TEGroupedMLP`` runs them, and without ``rope_fusion`` of its rotary
    embeddings as ``rope_utils`` runs them (module docstring); empty for a model without
    routed-expert biases under fused RoPE (nothing else of Megatron-Core's differs from the
    generator's count). Under ``op_fuser`` (Transformer Engine's fused expert ops) the
    down-projection bias is the grouped linear op's, not ``_apply_bias``'s eager loop: the
    generator's count."""
    table: dict[str, int] = {}
    if not rope_fusion and model.position is Position.ROTARY:
        for name in _ROPE_OPS:
            table[name] = MEGATRON_UNFUSED_ROPE.bytes_per_element(backward=False)
            table[f"{name}.backward"] = MEGATRON_UNFUSED_ROPE.bytes_per_element(backward=True)
    if not (model.bias and model.num_experts):
        return table
    for name in _EPILOGUE_BIAS_OPS:  # forward: the generator's count (module docstring)
        table[f"{name}.backward"] = 0
    for name in () if op_fuser else _EAGER_BIAS_OPS:
        table[name] = MEGATRON_EXPERT_DOWN_BIAS.bytes_per_element(backward=False)
        table[f"{name}.backward"] = MEGATRON_EXPERT_DOWN_BIAS.bytes_per_element(backward=True)
    return table
