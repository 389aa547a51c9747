"""Eager PyTorch's element-wise kernels, counted from a framework's model code.

The generator emits each norm, activation, rotary embedding and residual add as one op reading
its inputs and writing its outputs once: what a fused kernel (Transformer Engine, apex,
Megatron's fused bias-GeLU) or a ``torch.compile`` fusion group moves. Eager PyTorch runs the
model code as written instead: every ATen op is a kernel that reads and writes whole tensors,
often after an upcast to fp32, and autograd runs one kernel per backward formula on the tensors
it saved. This module holds those kernels, op by op, as bytes per element of the module's
output (``B`` 16-bit, ``F`` fp32 = 4 bytes; per-row statistics and broadcast weights are
negligible beside a row of thousands of elements and are not counted):

- :data:`TORCHTITAN_RMSNORM` — torchtitan ``models/norms.py`` ``RMSNorm`` (``norm_type =
  "rmsnorm"``, the Llama 3 train configs of 2024): ``output = self._norm(x.float()).type_as(x);
  return output * self.weight`` with ``_norm(x) = x * torch.rsqrt(x.pow(2).mean(-1,
  keepdim=True) + eps)``.
- :data:`TORCHTITAN_ROPE` — torchtitan ``models/llama/model.py`` ``apply_rotary_emb`` (Meta's
  Llama code): ``torch.view_as_complex(xq.float().reshape(..., -1, 2))``, a complex64 product
  with ``freqs_cis``, ``view_as_real(...).flatten(3).type_as(xq)``; per element of q or k.
- :data:`TORCHTITAN_SWIGLU` — ``FeedForward.forward``: ``self.w2(F.silu(self.w1(x)) *
  self.w3(x))``; per element of the FFN width.
- :data:`LLMFOUNDRY_LPLAYERNORM`, :data:`LLMFOUNDRY_RESIDUAL_ADD`,
  :data:`LLMFOUNDRY_FP32_ACCUMULATE` — llm-foundry's MPT of 2023 under Composer's autocast with
  FSDP parameters kept in fp32 (``fsdp_param_fp32``): the token embedding is an fp32 parameter
  and ``F.embedding`` is not an autocast op, so the residual stream ``x`` is fp32 from the
  embedding on (``MPTBlock.forward``: ``x = x + self.resid_attn_dropout(b)`` adds the bf16
  output of an autocast linear to it, fp32 by type promotion; dropout with ``resid_pdrop`` 0
  returns its input, no kernel). ``LPLayerNorm.forward`` (``low_precision_layernorm``, the MPT
  yamls' norm) casts ``x`` to the autocast dtype (``_cast_if_autocast_enabled``, a ``to``
  kernel) and runs ``F.layer_norm`` on it with autocast off (one bf16 kernel). In the backward
  the gradient of ``x`` stays fp32: ``ToCopyBackward0`` casts the norm's input gradient up, the
  add's gradient reaches the bf16 branch output through the engine's cast to that input's dtype
  (``validate_outputs``), and the two gradients of ``x`` (residual path and norm path) are
  summed in fp32 (autograd's ``InputBuffer``). MPT's ``Wqkv`` is one fused linear, so its input
  gradient is one GEMM's output and nothing accumulates there (the generator's separate q, k,
  v einsums add their three input gradients: 0 bytes here).
- :data:`FMS_ROPE`, :data:`FMS_KV_EXPAND` — IBM's foundation-model-stack Llama (``fms``, the
  model fms-fsdp trains; ``fms/models/llama.py`` ``LLaMABlock`` on ``fms/modules``), whose norm
  is ``LayerNormParameterized(..., use_mean=False, use_high_precision_pow=True)``: ``xf =
  x.float(); xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)``, ``type_as(x)``, ``weight
  * x`` — torchtitan's RMSNorm op for op (:data:`TORCHTITAN_RMSNORM`); its ``GatedLinearUnit``
  ``a(wg(x)) * w1(x)`` with ``nn.SiLU`` is torchtitan's SwiGLU. Its ``RotaryEmbedding`` avoids
  complex numbers: ``adjusted_qk`` views ``q.float()`` as pairs and multiplies them by cached
  2×2 rotation matrices, ``freqs[...].mul(q_.unsqueeze(-2)).sum(5).flatten(3).type_as(q)`` — an
  fp32 product at twice the elements, a reduction, a cast; backward the casts, the product's
  gradient at the broadcast shape and its reduction to ``q_``'s (autograd's ``sum_to``; the
  ``sum``'s own backward is an expand, a view). ``MultiHeadAttention`` repeats grouped keys and
  values for SDPA ("Expand kv so black-box attn will work":
  ``keys.unsqueeze(2).expand(-1, -1, expansion, -1, -1).flatten(1, 2)``, a copy of each to
  ``nheads / kvheads`` times its size; backward the expand's sum back), counted per element of
  ``k`` for both.
- :func:`torchtitan_repeat_kv` — ``Attention.forward`` repeats the grouped keys and values to
  the query heads before SDPA (``repeat_kv``: ``x[:, :, :, None, :].expand(bs, slen,
  n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)``, a copy of
  each to ``n_rep`` times its size; backward the expand's sum back), counted per element of
  ``k`` for both, like FMS's expand below.
- :data:`RESIDUAL_ADD` — ``h = x + self.attention(...)``, ``out = h + self.feed_forward(...)``.
  Autograd's ``AddBackward0`` hands the gradient to both inputs unchanged
  (``maybe_multiply(grad, alpha)`` returns it as is for ``alpha == 1``): no backward kernel,
  where the generator counts a copy; the add of two gradients into one tensor is the
  generator's separate ``accumulate`` instruction (autograd's ``InputBuffer``).

Backward formulas are PyTorch's ``tools/autograd/derivatives.yaml`` and
``torch/csrc/autograd/FunctionsManual.cpp`` (``mul``: ``grad * other`` and ``grad * self``
summed to the other's shape for a broadcast operand; ``_to_copy``: the gradient cast back;
``mean``: ``grad.expand(sizes) / numel``; ``pow_backward``: ``grad * (exponent *
self.pow(exponent - 1))``, where ``pow(x, 1)`` is a copy (ATen ``pow_Tensor_Scalar_out``);
``silu_backward(grad, self)``; complex ``mul``: ``grad * other.conj()``, the conjugate a lazy
view). Views (``reshape``, ``view_as_complex``, ``view_as_real``, ``flatten``) move nothing.

:func:`eager_op_bytes` maps the generator's op names of a model to these counts for a
framework's ``eager_modules`` (:mod:`~stage_explore.analytical.frameworks`); the kernel timer
charges ``elements × bytes / achieved HBM bandwidth`` for those instructions instead of their
generator bytes (:class:`~stage_explore.analytical.kernels.KernelTimer`), at the accelerator's
``kernels.eager_memory`` fraction — measured on chains of such kernels, below a single large
kernel's ``efficiency.memory`` — when it states one. Under
``fused_elementwise`` (``torch.compile``, fused kernels) Inductor fuses each module into the
kernels :mod:`~stage_explore.analytical.eager_compiled` counts (RMSNorm's looped row reductions
and its separate weight-gradient reduction; SwiGLU, the residual adds and FMS's RoPE one kernel
each way; torchtitan's final norm outside its compiled blocks, eager), timed at the same eager
rate (s26 compilegain; until then the generator's one kernel per module,
:attr:`EagerModule.compiled_bytes`, at ``efficiency.memory``), with two exceptions in
torchtitan's Llama (:func:`_compiled_op_bytes`):
Inductor does not generate code for complex operators — its lowering warns "Torchinductor does
not support code generation for complex operators. Performance may be worse than eager." and
falls back to the ATen kernel (``torch/_inductor/lowering.py``; torchtitan issue #15 reports the
warning for this very RoPE under ``torch.compile``) — so the complex64 product runs as in eager,
its fp32 input and output written and read by kernels of their own: :data:`TORCHTITAN_ROPE`'s
bytes, compiled as eager; and SDPA, an extern kernel, reads the repeated keys and values, so
``repeat_kv``'s copies are made compiled too (the cast of ``k`` written straight into the copy
would save 4 bytes per element of ``k``: not modelled); FMS's Llama compiled (fms-fsdp's
``use_torch_compile``) keeps only the latter, its real-valued RoPE fused like any module (s25
hidden13). Not modelled: a per-kernel launch floor
(the tensors here are tens of MB per kernel, far above it). The kernels a framework runs around
an attention kernel (layout copies, a fused QKV split's) are
:mod:`~stage_explore.analytical.eager_attention`'s, per element of q, k, v and the output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stage_core.lower.bind import Instr
from stage_core.models.spec import Activation, ModelSpec, Norm, Position

#: The values of a framework profile's ``eager_modules``: ``"generator"``, each generator op
#: one kernel (ATen's native fused ops: ``F.layer_norm``, ``F.gelu``); ``"torchtitan"``, the
#: module code of torchtitan's Llama models counted here; ``"llm-foundry-2023"``, MPT's blocks
#: of llm-foundry 2023 with an fp32 residual stream; ``"fms"``, IBM foundation-model-stack's
#: Llama of 2024 (fms-fsdp; module docstring); ``"automodel"``, NeMo AutoModel's DeepEP experts,
#: whose expert biases are added in eager PyTorch (:mod:`~stage_explore.analytical.eager_automodel`;
#: its other modules are Transformer Engine's, the generator's count); ``"megatron-core"``,
#: Megatron-Core's fused modules but for its grouped experts' down-projection bias, added in
#: eager PyTorch, and without ``rope_fusion`` its rotary embedding
#: (:mod:`~stage_explore.analytical.eager_megatron`; fused or not); ``"hf-llama"``, Hugging
#: Face transformers' Llama under FlashAttention-2 (:mod:`~stage_explore.analytical.eager_hf`).
EAGER_MODULES = (
    "generator", "torchtitan", "llm-foundry-2023", "fms", "automodel", "megatron-core", "hf-llama"
)  # fmt: skip

BF16 = 2  # bytes of a 16-bit element
FP32 = 4  # bytes of an fp32 element (and of either half of a complex64)


@dataclass(frozen=True, slots=True)
class Kernel:
    """One eager kernel: the op as the code writes it and its bytes per element;
    ``per_expert``: launched once per local expert (a Python loop over the experts' token
    splits, :func:`eager_expert_kernels`), its bytes those of all experts together."""

    op: str
    read_bytes: int
    written_bytes: int
    per_expert: bool = False

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.written_bytes


@dataclass(frozen=True, slots=True)
class EagerModule:
    """A module's eager kernels, forward and backward (module docstring), and what one
    fused kernel per direction moves (``compiled_bytes``: forward, backward)."""

    name: str
    source: str
    forward: tuple[Kernel, ...]
    backward: tuple[Kernel, ...]
    compiled_bytes: tuple[int, int]

    def bytes_per_element(self, backward: bool) -> int:
        """HBM bytes per element of the module's output over its eager kernels."""
        return sum(k.bytes for k in (self.backward if backward else self.forward))

    def per_expert_kernels(self, backward: bool) -> int:
        """How many of the module's kernels run once per local expert."""
        return sum(k.per_expert for k in (self.backward if backward else self.forward))


TORCHTITAN_RMSNORM = EagerModule(
    name="rmsnorm",
    source="torchtitan/models/norms.py RMSNorm (norm_type 'rmsnorm')",
    forward=(
        Kernel("x.float()", BF16, FP32),
        Kernel("x.pow(2)", FP32, FP32),
        Kernel(".mean(-1, keepdim=True)", FP32, 0),  # one value per row
        Kernel("x * rsqrt(...)", FP32, FP32),
        Kernel(".type_as(x)", FP32, BF16),
        Kernel("output * self.weight", BF16, BF16),
    ),
    backward=(
        Kernel("MulBackward0 (weight): grad * weight", BF16, BF16),
        Kernel("MulBackward0 (weight): grad * output", 2 * BF16, BF16),
        Kernel("MulBackward0 (weight): .sum_to_size(weight)", BF16, 0),
        Kernel("ToCopyBackward0 (type_as): grad.float()", BF16, FP32),
        Kernel("MulBackward0 (rsqrt): grad * rsqrt", FP32, FP32),
        Kernel("MulBackward0 (rsqrt): grad * x", 2 * FP32, FP32),
        Kernel("MulBackward0 (rsqrt): .sum(-1)", FP32, 0),
        Kernel("MeanBackward1: grad.expand(x) / numel", 0, FP32),
        Kernel("PowBackward0: x.pow(1) (a copy)", FP32, FP32),
        Kernel("PowBackward0: 2 * x", FP32, FP32),
        Kernel("PowBackward0: grad * (2 * x)", 2 * FP32, FP32),
        Kernel("InputBuffer: the two gradients of x.float() added", 2 * FP32, FP32),
        Kernel("ToCopyBackward0 (x.float()): grad.to(bf16)", FP32, BF16),
    ),
    compiled_bytes=(BF16 + BF16, 2 * BF16 + BF16),  # read x, write y; read dy and x, write dx
)

TORCHTITAN_ROPE = EagerModule(
    name="rope",
    source="torchtitan/models/llama/model.py apply_rotary_emb",
    forward=(
        Kernel("xq.float()", BF16, FP32),
        Kernel("xq_ * freqs_cis (complex64)", FP32, FP32),
        Kernel(".type_as(xq)", FP32, BF16),
    ),
    backward=(
        Kernel("ToCopyBackward0 (type_as): grad.float()", BF16, FP32),
        Kernel("MulBackward0 (complex): grad * freqs_cis.conj()", FP32, FP32),
        Kernel("ToCopyBackward0 (xq.float()): grad.to(bf16)", FP32, BF16),
    ),
    compiled_bytes=(BF16 + BF16, BF16 + BF16),
)

TORCHTITAN_SWIGLU = EagerModule(
    name="swiglu",
    source="torchtitan/models/llama/model.py FeedForward: w2(F.silu(w1(x)) * w3(x))",
    forward=(
        Kernel("F.silu(w1(x))", BF16, BF16),
        Kernel("silu * w3(x)", 2 * BF16, BF16),
    ),
    backward=(
        Kernel("MulBackward0: grad * w3(x)", 2 * BF16, BF16),
        Kernel("MulBackward0: grad * silu", 2 * BF16, BF16),
        Kernel("SiluBackward0: silu_backward(grad, w1(x))", 2 * BF16, BF16),
    ),
    compiled_bytes=(2 * BF16 + BF16, 3 * BF16 + 2 * BF16),  # the two inputs, one output
)

RESIDUAL_ADD = EagerModule(
    name="residual",
    source="torchtitan/models/llama/model.py TransformerBlock: h = x + attention(...)",
    forward=(Kernel("x + attention(...)", 2 * BF16, BF16),),
    backward=(),  # AddBackward0 passes the gradient through (module docstring)
    compiled_bytes=(2 * BF16 + BF16, 0),
)

FMS_ROPE = EagerModule(
    name="rope-fms",
    source="fms/modules/positions.py RotaryEmbedding.adjusted_qk (2x2 rotation matrices)",
    forward=(
        Kernel("q.float().view(..., -1, 2)", BF16, FP32),
        Kernel("freqs.mul(q_.unsqueeze(-2)): two fp32 products per element", FP32, 2 * FP32),
        Kernel(".sum(5)", 2 * FP32, FP32),
        Kernel(".flatten(3).type_as(q)", FP32, BF16),
    ),
    backward=(
        Kernel("ToCopyBackward0 (type_as): grad.float()", BF16, FP32),
        Kernel("MulBackward0: grad (expanded by SumBackward1) * freqs", FP32, 2 * FP32),
        Kernel("sum_to: the product's gradient reduced to q_.unsqueeze(-2)", 2 * FP32, FP32),
        Kernel("ToCopyBackward0 (q.float()): grad.to(bf16)", FP32, BF16),
    ),
    compiled_bytes=(BF16 + BF16, BF16 + BF16),
)


def _kv_repeat(name: str, source: str, expansion: int) -> EagerModule:
    """A grouped-query repeat of the keys and the values for SDPA (an ``expand`` then a
    reshape that copies), per element of ``k``: each of the two read once and written
    ``expansion`` times; backward the expand's reduction (read ``expansion`` gradients, write
    one) for each. Nothing when every query head has its own key head (``expansion`` 1)."""
    if expansion <= 1:
        return EagerModule(name, source, (), (), (0, 0))
    return EagerModule(
        name=name,
        source=source,
        forward=(
            Kernel("keys expanded and copied", BF16, expansion * BF16),
            Kernel("values expanded and copied", BF16, expansion * BF16),
        ),
        backward=(
            Kernel("ExpandBackward0 (keys): sum over the repeats", expansion * BF16, BF16),
            Kernel("ExpandBackward0 (values): sum over the repeats", expansion * BF16, BF16),
        ),
        compiled_bytes=(0, 0),
    )


def fms_kv_expand(expansion: int) -> EagerModule:
    """FMS's grouped-query repeat of the keys and the values (module docstring):
    ``keys.unsqueeze(2).expand(...).flatten(1, 2)`` (:func:`_kv_repeat`)."""
    if expansion <= 1:
        return _kv_repeat("kv-expand-fms", "fms/modules/attention.py", expansion)
    return _kv_repeat(
        "kv-expand-fms",
        "fms/modules/attention.py MultiHeadAttention ('Expand kv so black-box attn')",
        expansion,
    )


def torchtitan_repeat_kv(expansion: int) -> EagerModule:
    """torchtitan's ``repeat_kv`` of the keys and the values before SDPA (module docstring):
    ``x[:, :, :, None, :].expand(...).reshape(...)`` (:func:`_kv_repeat`)."""
    return _kv_repeat(
        "repeat-kv", "torchtitan/models/llama/model.py repeat_kv (Attention.forward)", expansion
    )


LLMFOUNDRY_LPLAYERNORM = EagerModule(
    name="lplayernorm",
    source="llmfoundry/models/layers/norm.py LPLayerNorm.forward on an fp32 residual stream",
    forward=(
        Kernel("_cast_if_autocast_enabled(x): x.to(bf16)", FP32, BF16),
        Kernel("F.layer_norm(downcast_x, ...) with autocast off", BF16, BF16),
    ),
    backward=(
        Kernel("NativeLayerNormBackward0: dx from grad and downcast_x", 2 * BF16, BF16),
        Kernel("ToCopyBackward0 (x.to(bf16)): grad.to(fp32)", BF16, FP32),
    ),
    compiled_bytes=(BF16 + BF16, 2 * BF16 + BF16),
)

LLMFOUNDRY_RESIDUAL_ADD = EagerModule(
    name="residual-fp32",
    source="llmfoundry/models/layers/blocks.py MPTBlock.forward: x = x + resid_dropout(b)",
    forward=(Kernel("x + b: fp32 + bf16 -> fp32", FP32 + BF16, FP32),),
    # AddBackward0 passes the fp32 gradient to x; the engine casts b's copy to bf16
    backward=(Kernel("validate_outputs: grad.to(bf16) for the bf16 branch output", FP32, BF16),),
    compiled_bytes=(2 * BF16 + BF16, BF16 + 2 * BF16),
)

#: Autograd's ``InputBuffer`` sum of the residual stream's two fp32 gradients (per element of
#: the gradient): read both, write one.
LLMFOUNDRY_FP32_ACCUMULATE = Kernel(
    "InputBuffer: the two fp32 gradients of x added", 2 * FP32, FP32
)

#: The generator's op names (stage_core/blocks.py) each torchtitan module runs as.
_NORM_OPS = ("ln1", "ln2", "ln_f", "q.norm", "k.norm")
_ROPE_OPS = ("q.rope", "k.rope", "q.pe.rope", "k.pe.rope")
_SWIGLU_OPS = ("mlp.act", "shared.act", "experts.act")
_RESIDUAL_OPS = ("attn.residual", "y")


#: The generator's gradient accumulations (``<op>.accumulate.<gradient>``) on MPT's residual
#: stream (fp32) and at the input of its fused ``Wqkv`` (none: one GEMM writes that gradient).
_LLMFOUNDRY_ACCUMULATES = {
    "attn.residual.accumulate": LLMFOUNDRY_FP32_ACCUMULATE.bytes,
    "inputs.accumulate": LLMFOUNDRY_FP32_ACCUMULATE.bytes,
    "ln1.accumulate": 0,
}


#: The generator's bias adds of a dense block's linears (``stage_core/blocks.py`` ``_linear``):
#: the attention's query, key, value and output projections and the MLP's two.
LINEAR_BIAS_OPS = ("q", "k", "v", "attn.proj", "mlp.fc1", "mlp.fc2")


def bias_epilogue_bytes(model: ModelSpec) -> dict[str, int]:
    """The forward bias adds that run inside their GEMM (framework option
    ``linear_bias_epilogue``: PyTorch ``addmm``'s cuBLASLt bias epilogue), 0 bytes each; their
    ``.backward`` (the bias gradient's reduction) is not named, so it keeps the generator's
    count. Empty for a model without biases."""
    return {name: 0 for name in LINEAR_BIAS_OPS} if model.bias else {}


def module_op_bytes(
    modules: Iterable[tuple[tuple[str, ...], EagerModule]],
) -> dict[str, int]:
    """Each named op's bytes per element, forward (``name``) and backward (``name.backward``),
    from the module whose kernels it runs (later entries win)."""
    table: dict[str, int] = {}
    for names, module in modules:
        for name in names:
            table[name] = module.bytes_per_element(backward=False)
            table[f"{name}.backward"] = module.bytes_per_element(backward=True)
    return table


def eager_op_bytes(
    model: ModelSpec,
    eager_modules: str,
    fused: bool,
    *,
    deepep: bool = False,
    trained_router: bool = True,
    rope_fusion: bool = True,
    op_fuser: bool = False,
) -> dict[str, int]:
    """Bytes per element of each generator op (and of its ``<op>.backward``) that the
    framework's model code runs as several kernels; empty when its modules are the generator's
    own (``"generator"``). Under ``fused`` (``torch.compile``) only what Inductor cannot fuse
    (:func:`_compiled_op_bytes`). ``deepep`` (the experts dispatch on DeepEP) and
    ``trained_router`` (the routing probabilities carry a gradient) matter only to
    ``"automodel"``, ``rope_fusion`` (Megatron-Core's ``apply_rope_fusion``) and ``op_fuser``
    (its experts as Transformer Engine's fused ops, the profile's ``moe_grouped_kernel``) only
    to ``"megatron-core"``."""
    if eager_modules == "generator":
        return {}
    if eager_modules == "megatron-core":  # eager whatever fuses the rest (eager_megatron)
        from stage_explore.analytical.eager_megatron import megatron_op_bytes

        return megatron_op_bytes(model, rope_fusion=rope_fusion, op_fuser=op_fuser)
    if fused:
        return _compiled_op_bytes(model, eager_modules)
    if eager_modules == "automodel":  # imported here: eager_automodel builds on this module
        from stage_explore.analytical.eager_automodel import automodel_op_bytes

        return automodel_op_bytes(model, deepep=deepep, trained_router=trained_router)
    if eager_modules == "llm-foundry-2023":
        return _llmfoundry_op_bytes(model)
    if eager_modules == "hf-llama":  # imported here: eager_hf builds on this module
        from stage_explore.analytical.eager_hf import hf_llama_op_bytes

        return hf_llama_op_bytes(model)
    fms = eager_modules == "fms"
    modules: list[tuple[tuple[str, ...], EagerModule]] = [(_RESIDUAL_OPS, RESIDUAL_ADD)]
    if model.norm is Norm.RMSNORM:  # norm_type "layernorm" is nn.LayerNorm: one ATen kernel
        modules.append((_NORM_OPS, TORCHTITAN_RMSNORM))  # fms: the same ops (docstring)
    if model.position is Position.ROTARY:
        modules.append((_ROPE_OPS, FMS_ROPE if fms else TORCHTITAN_ROPE))
    if model.activation is Activation.SWIGLU:
        modules.append((_SWIGLU_OPS, TORCHTITAN_SWIGLU))
    table = module_op_bytes(modules)
    if "k.rope" in table:  # the repeated keys and values, per element of k
        expansion = model.heads // max(1, model.kv_heads)
        expand = fms_kv_expand(expansion) if fms else torchtitan_repeat_kv(expansion)
        table["k.rope"] += expand.bytes_per_element(backward=False)
        table["k.rope.backward"] += expand.bytes_per_element(backward=True)
    return table


def eager_extra_bytes(
    model: ModelSpec, eager_modules: str, op_fuser: bool = False
) -> dict[str, int]:
    """Bytes per element of eager kernels the framework's model code runs beside a generator op
    on top of that op's own count (the kernel timer adds them at the eager rate): Megatron-Core's
    GLU clamp of GPT-OSS under ``"megatron-core"`` without ``op_fuser``
    (:func:`~stage_explore.analytical.eager_megatron.megatron_extra_bytes`); empty otherwise."""
    if eager_modules != "megatron-core":
        return {}
    from stage_explore.analytical.eager_megatron import megatron_extra_bytes

    return megatron_extra_bytes(model, op_fuser=op_fuser)


def _compiled_op_bytes(model: ModelSpec, eager_modules: str) -> dict[str, int]:
    """:func:`eager_op_bytes` under ``torch.compile`` for ``"torchtitan"`` and ``"fms"``: the
    kernels Inductor generates for their modules, timed at the eager rate
    (:func:`~stage_explore.analytical.eager_compiled.inductor_op_bytes`: RMSNorm's looped
    reductions, SwiGLU, the residual adds, FMS's real-valued RoPE; torchtitan's final norm
    outside its compiled blocks), and what Inductor leaves to ATen: torchtitan's rotary
    embedding's complex64 product, which it does not generate code for, and the repeated keys
    and values SDPA, an extern kernel, reads (module docstring; FMS's expand, s25 hidden13);
    empty for every other table."""
    if eager_modules not in ("torchtitan", "fms"):
        return {}
    from stage_explore.analytical.eager_compiled import inductor_op_bytes

    table = inductor_op_bytes(model, eager_modules)
    if model.position is not Position.ROTARY:
        return table
    expansion = model.heads // max(1, model.kv_heads)
    if eager_modules == "fms":
        expand = fms_kv_expand(expansion)
    else:
        expand = torchtitan_repeat_kv(expansion)
        for name in _ROPE_OPS:
            table[name] = TORCHTITAN_ROPE.bytes_per_element(backward=False)
            table[f"{name}.backward"] = TORCHTITAN_ROPE.bytes_per_element(backward=True)
    table["k.rope"] += expand.bytes_per_element(backward=False)
    table["k.rope.backward"] += expand.bytes_per_element(backward=True)
    return table


def _llmfoundry_op_bytes(model: ModelSpec) -> dict[str, int]:
    """:func:`eager_op_bytes` for ``"llm-foundry-2023"``: LPLayerNorm (LayerNorm models), the
    fp32 residual adds and the residual stream's fp32 gradient sums (module docstring)."""
    modules: list[tuple[tuple[str, ...], EagerModule]] = [(_RESIDUAL_OPS, LLMFOUNDRY_RESIDUAL_ADD)]
    if model.norm is Norm.LAYERNORM:
        modules.append((("ln1", "ln2", "ln_f"), LLMFOUNDRY_LPLAYERNORM))
    return {**dict(_LLMFOUNDRY_ACCUMULATES), **module_op_bytes(modules)}


def eager_expert_kernels(
    model: ModelSpec,
    eager_modules: str,
    local_experts: int,
    *,
    fused: bool = False,
    deepep: bool = False,
    trained_router: bool = True,
    op_fuser: bool = False,
) -> dict[str, int]:
    """Kernels beyond the eager table's one per entry of each generator op (and of its
    ``<op>.backward``) that the framework's expert code launches once per local expert: the
    expert down-projection bias of Megatron-Core's ``TEGroupedMLP._apply_bias`` and of
    AutoModel's ``GroupedExpertsDeepEP._apply_bias`` (a list comprehension over
    ``torch.split(output, tokens_per_expert)``: :mod:`~stage_explore.analytical.eager_megatron`,
    :mod:`~stage_explore.analytical.eager_automodel`), ``(local_experts - 1)`` × its per-expert
    kernels. The table's bytes already cover every expert; each further launch pays the kernel
    model's ``memory_kernel_s`` (an eager table's own kernels have their fixed time in its
    bandwidth fraction, measured on large tensors). Empty with one local expert, and where
    :func:`eager_op_bytes` has no such table (AutoModel under ``fused``, or without DeepEP;
    Megatron-Core under ``op_fuser``, whose grouped linear op adds the biases)."""
    if local_experts < 2 or not (model.bias and model.num_experts):
        return {}
    if eager_modules == "megatron-core" and not op_fuser:
        from stage_explore.analytical.eager_megatron import MEGATRON_EXPERT_DOWN_BIAS as module
    elif eager_modules == "automodel" and deepep and not fused:
        from stage_explore.analytical.eager_automodel import automodel_expert_bias_probs

        module = automodel_expert_bias_probs(trained_router)
    else:
        return {}
    extra = local_experts - 1
    return {
        "experts.fc2": extra * module.per_expert_kernels(backward=False),
        "experts.fc2.backward": extra * module.per_expert_kernels(backward=True),
    }


def eager_instr_bytes(instr: Instr, table: Mapping[str, int]) -> int | None:
    """HBM bytes of ``instr`` under the eager ``table`` (:func:`eager_op_bytes`): its bytes
    per element times the elements of the op's output (forward, recomputed forward) or of
    that output's gradient (backward); None when the table does not name it."""
    if ".accumulate." in instr.name:  # <op>.accumulate.<gradient>: sums into the gradient
        op, gradient = instr.name.split(".accumulate.", 1)
        per_element = table.get(f"{op}.accumulate")
        sizes = [size for name, size in instr.outputs if name == gradient]
        if per_element is None or not sizes:
            return None
        return sizes[0] // BF16 * per_element
    per_element = table.get(instr.name)
    if per_element is None or instr.kind in ("einsum", "attention", "comm"):
        return None
    op = instr.name.removesuffix(".backward")
    if instr.name.endswith(".backward"):
        sizes = [size for name, size in instr.inputs if name == f"d.{op}"]
    else:
        sizes = [size for name, size in instr.outputs if name == op]
    if not sizes:
        return None
    return sizes[0] // BF16 * per_element
