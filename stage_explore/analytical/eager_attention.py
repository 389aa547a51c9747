"""The element-wise kernels a framework's model code runs around its attention kernel.

Split from :mod:`~stage_explore.analytical.eager` (s33 simplify), whose tables count a module's
kernels per element of one op's output; these count per element of an attention kernel's
query, key, value and output instead, and the kernel timer adds them to the attention
instruction (:class:`~stage_explore.analytical.kernels.KernelTimer` ``attention_eager``).

Holds :class:`AttentionEager` (the per-element counts), :func:`eager_attention` (a framework's
counts: AutoModel's FlexAttention path,
:func:`~stage_explore.analytical.eager_automodel.automodel_attention_eager`; Megatron-Core's
``sbhd`` layout copies and fused QKV split,
:mod:`~stage_explore.analytical.eager_flash_layout`,
:mod:`~stage_explore.analytical.eager_qkv_split`) and :func:`attention_eager_bytes` (an
instruction's bytes under them).
"""

from __future__ import annotations

from typing import NamedTuple

from stage_core.lower.bind import Instr
from stage_core.models.spec import ModelSpec
from stage_explore.analytical.eager import BF16


class AttentionEager(NamedTuple):
    """Bytes per element of the kernels a framework's code runs around an attention kernel
    (:func:`attention_eager_bytes`): per element of the query, key and value each forward copies
    (``inputs``), of the output (``output``), of the output gradient the backward copies
    (``output_grad``), of the query the first forward copies (``query``), of the value each
    forward copies (``value``), of the query, key and value gradients the backward copies
    (``input_grads``), of the value gradient alone the backward copies (``value_grad``), of the
    value the first forward copies (``value_once``)."""

    inputs: int = 0
    output: int = 0
    output_grad: int = 0
    query: int = 0
    value: int = 0
    input_grads: int = 0
    value_grad: int = 0
    value_once: int = 0


def eager_attention(
    model: ModelSpec,
    eager_modules: str,
    attention_kernel: str | None,
    *,
    tp: int = 1,
    fused_qkv: bool = False,
    single_qkv_rope: bool = False,
) -> AttentionEager:
    """What the framework's model code runs around its attention kernel, per element
    (:func:`attention_eager_bytes`): AutoModel's FlexAttention path under ``"automodel"``;
    under ``"megatron-core"`` Megatron's ``sbhd`` layout copies around the flash-attn package
    (:mod:`~stage_explore.analytical.eager_flash_layout`) and, with ``fused_qkv``, the copies
    around its fused QKV split on tensor-parallel size ``tp``, or its fused QKV rotary
    embedding under ``single_qkv_rope`` (``fused_single_qkv_rope``:
    :mod:`~stage_explore.analytical.eager_qkv_split`); nothing for every other table."""
    if eager_modules == "megatron-core":
        from stage_explore.analytical.eager_flash_layout import megatron_attention_eager
        from stage_explore.analytical.eager_qkv_split import qkv_split

        split = qkv_split(model, attention_kernel, tp, single_qkv_rope) if fused_qkv else ()
        return AttentionEager(*megatron_attention_eager(attention_kernel), *split)
    if eager_modules != "automodel":
        return AttentionEager()
    from stage_explore.analytical.eager_automodel import automodel_attention_eager

    return AttentionEager(*automodel_attention_eager(model, attention_kernel))


def attention_eager_bytes(instr: Instr, per_element: AttentionEager) -> int:
    """HBM bytes of the element-wise kernels a framework runs around an attention kernel
    (``per_element``, :class:`AttentionEager`; e.g. AutoModel's FlexAttention path,
    :func:`~stage_explore.analytical.eager_automodel.automodel_attention_eager`); 0 for any
    other instruction. The query's own copy is the first forward's (not a recompute's)."""
    if instr.kind != "attention" or not any(per_element):
        return 0
    if instr.name.endswith(".backward"):
        op = instr.name.removesuffix(".backward")
        out_grad = sum(size for name, size in instr.inputs if name == f"d.{op}")
        grads = sum(size for _, size in instr.outputs[:3])  # dq, dk, dv (a sink's may follow)
        dv = instr.outputs[2][1] if per_element.value_grad else 0
        return (
            out_grad * per_element.output_grad
            + grads * per_element.input_grads
            + dv * per_element.value_grad
        ) // BF16
    q, k, v = (size for _, size in instr.inputs[:3])  # q, k, v (a sink vector may follow)
    out = sum(size for name, size in instr.outputs if name == instr.name)
    first = instr.phase != "recompute"
    return (
        (q + k + v) * per_element.inputs
        + out * per_element.output
        + q * (per_element.query if first else 0)
        + v * (per_element.value + (per_element.value_once if first else 0))
    ) // BF16
