"""Hugging Face transformers' Llama modules as eager kernels (``eager_modules = "hf-llama"``).

The modelling code is ``transformers/models/llama/modeling_llama.py`` of the 4.38-4.40
releases (the PyPI wheels ``transformers-4.39.3`` and ``4.40.0``, read for s26 hfsdpa), run
eager (no ``torch.compile``) under ``attn_implementation="flash_attention_2"``:

- ``LlamaRMSNorm.forward``: ``hidden_states.to(torch.float32)``, ``.pow(2).mean(-1,
  keepdim=True)``, ``hidden_states * torch.rsqrt(variance + eps)``, ``.to(input_dtype)``,
  ``self.weight * ...`` — the op list of torchtitan's ``RMSNorm`` (``_norm(x.float()).type_as(x)
  * self.weight``), so :data:`~stage_explore.analytical.eager.TORCHTITAN_RMSNORM`'s kernels;
- ``LlamaMLP.forward`` (``pretraining_tp`` 1): ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``
  with ``act_fn`` ``nn.SiLU``: torchtitan's ``w2(F.silu(w1(x)) * w3(x))``,
  :data:`~stage_explore.analytical.eager.TORCHTITAN_SWIGLU`;
- ``LlamaDecoderLayer.forward``: ``hidden_states = residual + hidden_states`` twice,
  :data:`~stage_explore.analytical.eager.RESIDUAL_ADD`;
- ``apply_rotary_pos_emb``: ``q_embed = (q * cos) + (rotate_half(q) * sin)`` (and ``k``), with
  ``rotate_half(x) = torch.cat((-x2, x1), dim=-1)`` over the two halves of the head dim — real
  16-bit arithmetic, not torchtitan's complex64 product: :data:`HF_ROPE`;
- ``LlamaFlashAttention2`` hands flash-attn's ``flash_attn_func`` the keys and values as they
  are (FlashAttention-2 reads grouped-query heads natively); ``repeat_kv`` runs only on the
  eager and SDPA paths. No key / value copy.

Per element of the query (or key) in bf16, forward: ``q * cos`` (read 2, write 2; ``cos`` is
``(b, 1, S, d)``, one head's worth, not counted, as torchtitan's ``freqs_cis``), ``-x2`` (half
the elements: 1 and 1), ``torch.cat`` (2 and 2), ``rotate_half(q) * sin`` (2 and 2), the sum
(4 and 2): 20 bytes. Backward (PyTorch ``tools/autograd/derivatives.yaml``): ``AddBackward0``
passes the gradient on; each ``MulBackward0`` multiplies it by the constant ``cos`` / ``sin``
(2 and 2 each); ``CatBackward0`` narrows (views); ``NegBackward0`` negates a half (1 and 1);
each of the two ``SliceBackward0`` is ATen's ``slice_backward`` — ``at::zeros(input_sizes)``
then the half copied in (``aten/src/ATen/native/TensorShape.cpp``: write 2, then read 1 and
write 1); autograd's ``InputBuffer`` sums the three gradients of ``q`` (two adds, 4 and 2
each): 30 bytes. Not counted: the per-layer ``LlamaRotaryEmbedding`` that makes ``cos`` and
``sin`` (one head's size, in fp32) and the copy a reshape of a transposed gradient may make
(neither is counted for torchtitan either).
"""

from __future__ import annotations

from stage_core.models.spec import Activation, ModelSpec, Norm, Position
from stage_explore.analytical.eager import (
    _NORM_OPS,
    _RESIDUAL_OPS,
    _ROPE_OPS,
    _SWIGLU_OPS,
    BF16,
    RESIDUAL_ADD,
    TORCHTITAN_RMSNORM,
    TORCHTITAN_SWIGLU,
    EagerModule,
    Kernel,
    module_op_bytes,
)

HALF = BF16 // 2  # bytes per element of a kernel over half the head dim (``x1`` or ``x2``)

HF_ROPE = EagerModule(
    name="rope-hf",
    source="transformers/models/llama/modeling_llama.py apply_rotary_pos_emb, rotate_half",
    forward=(
        Kernel("q * cos", BF16, BF16),
        Kernel("-x2 (rotate_half, half the elements)", HALF, HALF),
        Kernel("torch.cat((-x2, x1), dim=-1)", BF16, BF16),
        Kernel("rotate_half(q) * sin", BF16, BF16),
        Kernel("(q * cos) + (rotate_half(q) * sin)", 2 * BF16, BF16),
    ),
    backward=(
        Kernel("MulBackward0 (rotate_half(q) * sin): grad * sin", BF16, BF16),
        Kernel("NegBackward0: -grad of x2 (half)", HALF, HALF),
        Kernel("SliceBackward0 (x2): zeros(q), the half copied in", HALF, BF16 + HALF),
        Kernel("SliceBackward0 (x1): zeros(q), the half copied in", HALF, BF16 + HALF),
        Kernel("MulBackward0 (q * cos): grad * cos", BF16, BF16),
        Kernel("InputBuffer: the slices' gradients added", 2 * BF16, BF16),
        Kernel("InputBuffer: q * cos's gradient added", 2 * BF16, BF16),
    ),
    compiled_bytes=(BF16 + BF16, BF16 + BF16),
)


def hf_llama_op_bytes(model: ModelSpec) -> dict[str, int]:
    """Bytes per element of each generator op (and ``<op>.backward``) that Hugging Face's
    Llama code runs as several eager kernels (module docstring): the residual adds always,
    RMSNorm, the rotary embedding and SwiGLU where ``model`` has them."""
    modules: list[tuple[tuple[str, ...], EagerModule]] = [(_RESIDUAL_OPS, RESIDUAL_ADD)]
    if model.norm is Norm.RMSNORM:
        modules.append((_NORM_OPS, TORCHTITAN_RMSNORM))
    if model.position is Position.ROTARY:
        modules.append((_ROPE_OPS, HF_ROPE))
    if model.activation is Activation.SWIGLU:
        modules.append((_SWIGLU_OPS, TORCHTITAN_SWIGLU))
    return module_op_bytes(modules)
