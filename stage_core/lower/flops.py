"""FLOP accounting of a lowered step: what MFU and HFU count.

Model FLOPs are the matmul and attention FLOPs (instruction kinds ``einsum`` and
``attention``, forward and backward) without recompute — Megatron's 72·B·s·L·h²(…) formula;
hardware FLOPs add the recomputed ones (Korthikanti et al. 2022's HFU). Both backends
(analytical and ASTRA-sim) use these functions, so their MFU figures are computed identically.

**Attention convention** (:class:`AttentionFlops`, one option for every model family). The
attention core — the score and context matmuls over (query, key) pairs, forward and backward —
is counted over *every* pair by default (:attr:`AttentionFlops.FULL`, as Megatron's formulas
and most published MFU figures count it), or over the unmasked half under a causal mask
(:attr:`AttentionFlops.CAUSAL`, FlashAttention's and PaLM's convention). The generator emits
what the kernel computes: Megatron's unfused core (GPT family) computes every pair; the fused
kernel (the other families) skips the masked half. The count is converted from what was
emitted, so the convention changes the reported FLOPs, never the timing.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from stage_core.blocks import BlockOptions
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import Chunk, ProgramSet, Workload

#: ``ssdscan``: Mamba-2's SSD scan (chunked matmuls on tensor cores; Megatron-LM's hybrid FLOP
#: count includes the scan, ``7·b·s·d_inner·N`` per layer).
MODEL_FLOP_KINDS = frozenset({"einsum", "attention", "ssdscan"})
#: The unfused attention core's einsums (forward names; their backward einsums extend them).
ATTENTION_CORE_EINSUMS = ("attn.scores", "attn.context")


class AttentionFlops(StrEnum):
    """How MFU and HFU count the attention core's FLOPs (module docstring)."""

    FULL = "full"
    CAUSAL = "causal"


#: The convention MFU/HFU use unless told otherwise.
DEFAULT_ATTENTION_FLOPS = AttentionFlops.FULL


def is_attention_core(instr: Instr) -> bool:
    """A fused attention kernel, or one of the unfused core's score/context einsums."""
    if instr.kind == "attention":
        return True
    return instr.kind == "einsum" and any(
        instr.name == name or instr.name.startswith(f"{name}.") for name in ATTENTION_CORE_EINSUMS
    )


def counted_flops(instr: Instr, attention: AttentionFlops, fused_causal: bool = True) -> int:
    """The FLOPs ``instr`` counts for under ``attention``. A fused kernel's emitted FLOPs are
    the causal half when ``fused_causal`` (the generator's fused kernels are causal, see
    :func:`stage_core.blocks.default_options`); the unfused core's are every pair (even
    integers: 2·B·N·S·S·D per einsum, so the half is exact)."""
    if not is_attention_core(instr):
        return instr.flops
    emitted_half = instr.kind == "attention" and fused_causal
    if attention is AttentionFlops.FULL:
        return 2 * instr.flops if emitted_half else instr.flops
    return instr.flops if emitted_half else instr.flops // 2


def block_flops(
    block: BoundBlock,
    attention: AttentionFlops = DEFAULT_ATTENTION_FLOPS,
    fused_causal: bool = True,
) -> tuple[int, int]:
    """Matmul and attention FLOPs of a block: without recompute (model), with it (hardware)."""
    model = hardware = 0
    for instr in (*block.fwd, *block.bwd):
        if instr.kind in MODEL_FLOP_KINDS:
            flops = counted_flops(instr, attention, fused_causal)
            hardware += flops
            if instr.phase != "recompute":
                model += flops
    return model, hardware


def _fused_causal(options: BlockOptions) -> bool:
    return options.attention == "fused" and options.causal


def chunks_flops(
    workload: Workload,
    stages: Iterable[Iterable[Chunk]],
    attention: AttentionFlops = DEFAULT_ATTENTION_FLOPS,
) -> tuple[int, int]:
    """Model and hardware FLOPs of one step over all ranks: the per-block FLOPs of every
    stage's chunks × micro-batches × ranks per pipeline stage (each block costed once)."""
    per_block: dict[int, tuple[int, int]] = {}
    causal = _fused_causal(workload.options)
    model = hardware = 0
    for chunks in stages:
        for chunk in chunks:
            for block in chunk.blocks:
                if id(block) not in per_block:
                    per_block[id(block)] = block_flops(block, attention, causal)
                block_model, block_hardware = per_block[id(block)]
                model += block_model
                hardware += block_hardware
    scale = workload.micro_batches * (workload.world_size // workload.parallel.pp)
    return model * scale, hardware * scale


def step_flops(
    programs: ProgramSet, attention: AttentionFlops = DEFAULT_ATTENTION_FLOPS
) -> tuple[int, int]:
    """:func:`chunks_flops` of a program set."""
    return chunks_flops(programs.workload, (stage.chunks for stage in programs.stages), attention)
