"""Attention without a fused kernel: Transformer Engine's ``UnfusedDotProductAttention`` (the
attention kernel name :data:`UNFUSED`), timed as the kernels it launches.

**When a framework runs it.** Transformer Engine's ``get_attention_backend`` picks, among the
backends its inputs allow, FlashAttention, then cuDNN's FusedAttention, then the unfused path.
Latent attention (DeepSeek-V3's MLA: query/key head dim 192, value head dim 128) on Blackwell
(sm100) during training has neither fused backend before cuDNN 9.11: FlashAttention-2 is
disabled for ``head_dim_qk != head_dim_v`` ("Disabling FlashAttention 2 as it does not support
MLA"), FlashAttention-3 only runs on sm90, and ``nvte_get_fused_attn_backend``
(``transformer_engine/common/fused_attn/fused_attn.cpp``) allows cuDNN's arbitrary-sequence
backend for head dims above 128 only on Hopper (``<= 256 + Hopper + bprop`` from cuDNN 9.5) or,
on Blackwell, for ``d_qk = 192, d_v = 128 + Blackwell + bprop`` from cuDNN 9.11
(cudnn-frontend PR #145, June 2025: "For Blackwell allow d > 128 for cudnn version > 9.11.0";
TransformerEngine issue #2285 shows FusedAttention refused for DeepSeek-V3 on B200 with cuDNN
9.10.1). A framework profile names the path through ``attention_kernel`` /
``sm100_attention_kernel`` = ``"unfused"`` for the software that ran it.

**What it runs** (``transformer_engine/pytorch/attention/dot_product_attention/backends.py``,
``UnfusedDotProductAttention.forward``): ``torch.baddbmm`` of the queries and keys into a
``[b·np, sq, sk]`` score tensor in the query's 16-bit type (every score: the causal mask is
applied afterwards, nothing is skipped), ``FusedScaleMaskSoftmax`` (one fused masked-softmax
kernel that reads the scores and writes the probabilities, ``softmax.py``; Megatron's
``masked_softmax_fusion``), dropout (none at DeepSeek-V3's ``attention_dropout`` 0.0:
``torch.nn.functional.dropout`` returns its input at p = 0), ``torch.bmm`` of the
probabilities and values, and a permute copy of the output. Autograd's backward: the two
gradients of the second BMM (``dP = dO·Vᵀ`` written, ``dV = Pᵀ·dO`` reading the probabilities),
the fused softmax backward (reads the probabilities and ``dP``, writes ``dS``), and the two of
the first (``dQ = dS·K``, ``dK = dSᵀ·Q``, each reading ``dS``).

:func:`unfused_kernels` lists those kernels (GEMM shapes and FLOPs with the score bytes each
moves, and the memory-bound kernels' bytes) for one of the generator's attention instructions;
:class:`~stage_explore.analytical.kernels.KernelTimer` times the GEMMs with its GEMM model and
the rest at the achieved HBM bandwidth. The score count comes from the instruction's FLOPs (the
generator counts ``2·B·Sq·Skv·N·(d_qk + d_v)`` forward, halved when causal, twice that
backward). Not modelled: the boolean causal mask the softmax reads (``sq·sk`` bytes, shared by
every head) and the transient memory of the score tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from stage_core.lower.bind import Instr

#: The attention kernel name of Transformer Engine's ``UnfusedDotProductAttention``.
UNFUSED = "unfused"
#: Bytes of one score or probability: ``matmul_result`` is allocated in the query's dtype
#: (BF16) and the fused softmax writes the same type.
SCORE_BYTES = 2


#: One BMM: (batch, M, N, K), its FLOPs, and the score bytes it reads or writes.
Gemm = tuple[tuple[int, int, int, int], int, int]


@dataclass(frozen=True, slots=True)
class UnfusedKernels:
    """The kernels of one unfused attention instruction: GEMMs as (batch, M, N, K), FLOPs and
    the score bytes each reads or writes; and the bytes of the memory-bound kernels (the
    softmax, forward or backward)."""

    gemms: tuple[Gemm, ...]
    memory_bytes: int


def score_elements(instr: Instr, head_dims: tuple[int, int], causal: bool) -> int:
    """Every score ``B·N·Sq·Skv`` of an attention instruction whose query/key and value head
    dims are ``head_dims``: from its FLOPs (the generator's forward ``2·E·(d_qk + d_v)``,
    halved when causal, doubled for the backward)."""
    qk, v = head_dims
    flops = instr.flops * (2 if causal else 1)
    if instr.phase == "bwd":
        flops //= 2
    return round(flops / (2 * (qk + v)))


def unfused_kernels(
    instr: Instr, head_dims: tuple[int, int], keys: int, causal: bool
) -> UnfusedKernels:
    """The kernels ``UnfusedDotProductAttention`` runs for ``instr`` (module docstring):
    ``keys`` the keys per query row (self-attention: as many queries), ``head_dims`` (d_qk,
    d_v). A forward (or its recompute) runs two BMMs and the softmax; a backward four BMMs
    and the softmax's backward."""
    qk, v = head_dims
    scores = score_elements(instr, head_dims, causal)
    batch = max(1, round(scores / (keys * keys)))  # b·np score matrices of keys x keys
    size = scores * SCORE_BYTES
    s = keys
    gemms: tuple[Gemm, ...]
    if instr.phase != "bwd":
        gemms = (
            ((batch, s, s, qk), 2 * scores * qk, size),  # scores = Q·Kᵀ, written
            ((batch, s, v, s), 2 * scores * v, size),  # context = P·V, P read
        )
        return UnfusedKernels(gemms, 2 * size)  # softmax: scores in, probabilities out
    gemms = (
        ((batch, s, s, v), 2 * scores * v, size),  # dP = dO·Vᵀ, written
        ((batch, s, v, s), 2 * scores * v, size),  # dV = Pᵀ·dO, P read
        ((batch, s, qk, s), 2 * scores * qk, size),  # dQ = dS·K, dS read
        ((batch, s, qk, s), 2 * scores * qk, size),  # dK = dSᵀ·Q, dS read
    )
    return UnfusedKernels(gemms, 3 * size)  # softmax backward: P and dP in, dS out
