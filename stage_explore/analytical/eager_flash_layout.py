"""The layout copies around the flash-attn package in Megatron's ``sbhd`` attention.

Megatron keeps activations as ``[s, b, ...]``; the flash-attn package wants ``[b, s, h, d]``
(or its ``[(b s), h, d]`` varlen flattening). Both Megatron paths that hand the attention to
the package therefore copy around the kernel, in eager PyTorch:

- Megatron-LM's legacy ``megatron/model/transformer.py`` with ``--use-flash-attn``
  (NVIDIA/Megatron-LM 00baee46, 2023; ``ParallelAttention.forward``)::

      q, k, v = [rearrange(x, 's b ... -> b s ...').contiguous() for x in (q, k, v)]
      context_layer = self.core_attention_flash(q, k, v)   # FlashSelfAttention: varlen kernel
      context_layer = rearrange(context_layer, 'b s h d -> s b (h d)').contiguous()

- Transformer Engine's ``DotProductAttention`` FlashAttention backend with ``qkv_format``
  ``"sbhd"`` (Megatron-Core's ``TEDotProductAttention``, NeMo 1.x under ``NVTE_FUSED_ATTN=0``):
  ``FlashAttention.forward`` makes q, k, v ``x.transpose(0, 1).contiguous()`` (or, for head dim
  128 and the interleaved ``sbh3d`` layout, one ``tex.fa_prepare_fwd`` kernel writing the three
  ``[b, s, h, d]`` tensors: the same bytes), flattens them to ``[b * s, h, d]`` for
  ``flash_attn_varlen_func`` and returns ``output.view(b, s, -1).transpose(0, 1).contiguous()``
  (``transformer_engine/pytorch/attention.py`` of TE 1.x, read at NVIDIA/TransformerEngine
  6792ecaa and a mid-1.x copy with ``window_size`` / ``alibi_slopes``; TE 2.x
  ``attention/dot_product_attention/backends.py`` keeps the input copies and
  ``output.contiguous()`` of the transposed view).

Per element of each of q, k, v and of the output, the forward reads and writes one 16-bit
element (``BF16 + BF16``). In the backward, autograd carries the output gradient (contiguous
``[s, b, h * d]`` from the projection's dgrad) back through the transpose (a view) and the
``[(b s), h, d]`` flattening, which a transposed tensor cannot view: ``ViewBackward0`` reshapes
it with a copy (again ``BF16 + BF16`` per element of the output gradient). The gradients of q,
k, v leave the kernel as ``[b, s, h, d]`` and reach the QKV split's backward (``torch.cat``,
which every path runs) as transposed views: no copy of their own. Not counted: TE's
``_PrepareQKVForFA.backward`` (``tex.fa_prepare_bwd``, interleaving dq, dk, dv once more on the
head-dim-128 ``sbh3d`` path; the legacy path has no such kernel, and the profile's ``fa2`` does
not tell the two apart), and TE 2.x's non-varlen ``flash_attn_func`` for unpadded ``sbhd``,
which takes the output gradient's strided view without the copy.

cuDNN's fused attention (``attention_kernel`` ``cudnn``) reads the ``sbhd`` strides itself
(TE passes the ``sbh3d`` / ``sbhd_sbhd_sbhd`` layout to the cuDNN graph): nothing here.
"""

from __future__ import annotations

from stage_explore.analytical.eager import BF16

#: A layout copy: one 16-bit element read and one written (module docstring).
LAYOUT_COPY = BF16 + BF16

#: The profile's attention kernels that are the flash-attn package in Megatron's code.
FLASH_ATTN_PACKAGE = ("fa2",)


def megatron_attention_eager(attention_kernel: str | None) -> tuple[int, int, int]:
    """Bytes per element (q/k/v copied in, output copied out, output gradient copied) that
    Megatron moves around a flash-attn package kernel (module docstring; the argument of
    :func:`~stage_explore.analytical.eager_attention.attention_eager_bytes`); zeros for another
    kernel."""
    if attention_kernel not in FLASH_ATTN_PACKAGE:
        return (0, 0, 0)
    return (LAYOUT_COPY, LAYOUT_COPY, LAYOUT_COPY)
