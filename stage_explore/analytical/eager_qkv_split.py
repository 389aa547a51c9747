"""The copies around Megatron-Core's fused QKV split on Transformer Engine's attention.

Megatron-Core's ``SelfAttention.get_query_key_value_tensors`` (``megatron/core/transformer/
attention.py``, NVIDIA/Megatron-LM, the same code from the 2024 releases to a 2026 one) views the
fused ``linear_qkv`` output as ``[s, b, ng, (np/ng + 2) · hn]`` (``ng`` query groups and ``np``
heads per tensor-parallel rank), splits it along the last dimension with Transformer Engine's
``SplitAlongDim`` (``_SplitAlongDim``, a ``torch.split`` of views) and reshapes the query
``[s, b, ng, np/ng · hn] -> [s, b, np, hn]``. Three copies follow from that code, none of them
in the generator's ops (its q, k, v are three projections with no split):

- **The query's reshape** (grouped-query attention, ``ng > 1`` on the rank). The query is a
  strided view whose group stride is ``(np/ng + 2) · hn``; merging the group dimension with the
  ``np/ng`` heads inside it needs a stride of ``np/ng · hn``, so ``reshape`` cannot view it and
  copies it (PyTorch's ``reshape``: a view when the strides allow one, else a copy). With one
  group on the rank (or multi-head attention, ``np/ng = 1``) the merge is a view. Its backward
  is a view of the contiguous gradient. Forward only: Megatron-Core's selective recompute
  (``core_attn``) re-runs the attention module, not the split.
- **The value made contiguous** (keys that are a fresh tensor: rotary embedding or a key norm).
  Megatron-Core rotates (or normalises) the query and key into new contiguous tensors; the value
  stays a view of the fused output. Transformer Engine's ``DotProductAttention.forward`` detects
  the layout (``_get_qkv_layout``: ``transformer_engine/pytorch/attention.py`` of TE 1.x, read at
  NVIDIA/TransformerEngine 001b7360; ``get_qkv_layout`` in ``attention/dot_product_attention/
  utils.py`` of TE 2.x): keys and values of different strides match no layout
  (``"not_supported"``), and TE then makes all three contiguous, ``q, k, v = [x.contiguous() for
  x in [q, k, v]]`` — a copy of the value (the query and key already are). The kernel reads it
  inside ``DotProductAttention``, so a recompute of the attention module copies it again.
- **The split's backward concatenation.** ``_SplitAlongDim.backward`` returns a view of the
  gradients when they are consecutive slices of one buffer with the fused output's strides
  (``noop_ok``: same storage, strides and the split's offsets; the same code in TE 1.x
  ``attention.py`` and TE 2.x ``dot_product_attention/utils.py``), else ``torch.cat(grad_outputs,
  dim=split_dim)``, a read and write of ``dq``, ``dk``, ``dv``. One buffer comes only from cuDNN's
  fused attention on the interleaved ``sbh3d`` layout (multi-head attention straight from the
  split, no rotary embedding): TE's ``fused_attn_bwd`` allocates ``dQKV`` in that layout and
  returns ``dQ``, ``dK``, ``dV`` as its slices (``transformer_engine/pytorch/csrc/extensions/
  attention.cu``, layout group ``NVTE_H3D``). A rotary embedding's (or key norm's) backward
  writes fresh ``dq`` / ``dk``, the flash-attn package returns three tensors (or, on TE's
  head-dim-128 ``sbh3d`` path, ``_PrepareQKVForFA.backward``'s ``tex.fa_prepare_bwd`` writes the
  interleaved buffer, the same bytes as the concatenation), and grouped-query layouts take
  separate ``dQ`` / ``dKV`` buffers: the copy runs. Megatron-Core says as much of its option
  ``fused_single_qkv_rope`` (``TransformerConfig``, default False): "If set, avoid splitting QKV
  before ROPE forward and avoid concatenating ROPE dgrads"; TE's pull request #2122 (NVIDIA/
  TransformerEngine, "Fused RoPE with combined QKV input", 2025) names the two copies it removes:
  "extra memcopies due to value.contiguous() during FPROP and concatenating the q,k,v dgrads".
  The legacy Megatron-LM attention (``megatron/model/transformer.py``, ``torch.split`` of the
  ``query_key_value`` output) concatenates always (``split_with_sizes_backward``: ``at::cat``).

On the flash-attn package path (``attention_kernel`` ``fa2``:
:mod:`~stage_explore.analytical.eager_flash_layout`) the value copy is not added: there the query,
key and value copies already charged include it (legacy Megatron-LM's ``rearrange(...)
.contiguous()``; Megatron-Core's ``TEDotProductAttention`` of 2024 under ``apply_rope_fusion``,
which sets ``qkv_format = "bshd"`` and copies ``x.transpose(0, 1).contiguous()`` of all three,
"WAR for peak memory usage"). Not charged: that 2024 workaround's copies on the cuDNN path (a
2026 Megatron-Core, NVIDIA/Megatron-LM 004fe2f1, keeps ``sbhd`` and has no such copies; when it
went away was not read) and FP8 attention (``fp8_dot_product_attention``).

Under Megatron-Core's ``fused_single_qkv_rope`` (framework option of the same name, 7 Dec 2026,
s31 qkvrope: :func:`single_qkv_rope_split`) ``SelfAttention.forward`` does not split: it passes
the fused ``linear_qkv`` output to Transformer Engine's ``apply_fused_qkv_rotary_pos_emb`` when
the layer has a rotary embedding, no query / key norm, no packed sequences and is not
cross-attention (else it asserts "fused_single_qkv_rope requested but not available/supported";
``megatron/core/transformer/attention.py``, NVIDIA/Megatron-LM f41b4fd4). TE's
``fused_qkv_rope_forward`` (``transformer_engine/pytorch/csrc/extensions/apply_rope.cpp``,
NVIDIA/TransformerEngine#2122) allocates ``q_out`` already ``[s, b, np, hn]``, ``k_out`` and
``v_out`` and one kernel (``nvte_fused_qkv_rope_forward``) reads the fused buffer and writes all
three; ``fused_qkv_rope_backward`` allocates one ``[s, b, ng, (np/ng + 2) · hn]`` gradient and
one kernel (``nvte_fused_qkv_rope_backward``) writes it from ``dq``, ``dk``, ``dv``. So, against
the split path:

- the query's reshape is gone (the kernel writes the query in the attention's shape);
- the value is still read and written, now inside the fused kernel (``v_out``) instead of TE's
  ``v.contiguous()``: the same bytes, but once, in the first forward (the rotary kernel is
  outside the core attention a selective recompute re-runs, where ``v.contiguous()`` ran);
- the concatenation is gone for ``dq`` and ``dk`` (the rotary backward writes them into the
  fused gradient, the bytes the generator's rotary backward already counts) but not for ``dv``,
  which the backward kernel reads and writes into the buffer: one copy per element of ``dv``.

The rotary embedding is then this one kernel whatever ``apply_rope_fusion`` says (Megatron-LM
does not call ``apply_rotary_pos_emb`` on this path): the caller charges it as the fused kernel.

Every copy reads and writes one 16-bit element per element (``BF16 + BF16``).
"""

from __future__ import annotations

from stage_core.models.spec import ModelSpec, Position
from stage_explore.analytical.eager import BF16
from stage_explore.analytical.eager_flash_layout import FLASH_ATTN_PACKAGE

#: A copy: one 16-bit element read and one written (module docstring).
COPY = BF16 + BF16


def megatron_qkv_split(
    model: ModelSpec, attention_kernel: str | None, tp: int
) -> tuple[int, int, int]:
    """Bytes per element (the query's reshape, per element of ``q`` in the first forward; the
    value made contiguous, per element of ``v`` in every forward; the split's backward
    concatenation, per element of ``dq``, ``dk`` and ``dv``) of Megatron-Core's fused QKV split
    on tensor-parallel size ``tp`` (module docstring); zeros for latent attention (its own
    module, no fused QKV split)."""
    if tp < 1:
        raise ValueError(f"tensor-parallel size must be a positive integer, but got {tp!r}")
    if model.kv_lora_rank or model.q_lora_rank:
        return (0, 0, 0)
    fresh_keys = model.position is Position.ROTARY or model.qk_norm
    grouped = model.kv_heads != model.heads
    query = COPY if grouped and model.kv_heads // tp > 1 else 0
    flash = attention_kernel in FLASH_ATTN_PACKAGE
    value = COPY if fresh_keys and not flash else 0
    interleaved = not fresh_keys and not grouped
    cudnn = attention_kernel is not None and attention_kernel.startswith("cudnn")
    grads = 0 if interleaved and cudnn else COPY
    return (query, value, grads)


def single_qkv_rope_split(model: ModelSpec) -> tuple[int, int, int, int, int] | None:
    """Bytes per element (the query's reshape, the value's copy in every forward, the ``dq`` /
    ``dk`` / ``dv`` concatenation, the ``dv`` copy into the fused gradient, the value's copy in
    the first forward) of Megatron-Core's fused QKV path
    under ``fused_single_qkv_rope`` (module docstring), on any attention kernel (the fused
    kernel writes ``v_out`` whatever reads it) and tensor-parallel size, or ``None`` when
    Megatron-Core does not take that path for ``model`` (no rotary embedding, a query / key
    norm, latent attention): the caller then charges :func:`megatron_qkv_split`."""
    if model.position is not Position.ROTARY or model.qk_norm:
        return None
    if model.kv_lora_rank or model.q_lora_rank:
        return None
    return (0, 0, 0, COPY, COPY)


def qkv_split(
    model: ModelSpec, attention_kernel: str | None, tp: int, single_qkv_rope: bool
) -> tuple[int, ...]:
    """Bytes per element of
    :class:`~stage_explore.analytical.eager_attention.AttentionEager`'s ``query``, ``value``,
    ``input_grads``, ``value_grad`` and ``value_once`` for Megatron-Core's fused QKV: under
    ``single_qkv_rope`` (``fused_single_qkv_rope``) where Megatron-Core takes that path
    (:func:`single_qkv_rope_split`), else the split's (:func:`megatron_qkv_split`, no ``dv``
    copy of its own, its value copy in every forward)."""
    fused = single_qkv_rope_split(model) if single_qkv_rope else None
    if fused is not None:
        return fused
    return (*megatron_qkv_split(model, attention_kernel, tp), 0, 0)
