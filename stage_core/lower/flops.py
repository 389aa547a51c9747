"""FLOP accounting of a lowered step: what MFU and HFU count.

Model FLOPs are the matmul and attention FLOPs (instruction kinds ``einsum`` and
``attention``, forward and backward) without recompute — Megatron's 72·B·s·L·h²(…) formula;
hardware FLOPs add the recomputed ones. Both backends (analytical and ASTRA-sim) use these
functions, so their MFU figures are computed identically.
"""

from __future__ import annotations

from collections.abc import Iterable

from stage_core.lower.bind import BoundBlock
from stage_core.lower.program import Chunk, ProgramSet, Workload

MODEL_FLOP_KINDS = frozenset({"einsum", "attention"})


def block_flops(block: BoundBlock) -> tuple[int, int]:
    """Matmul and attention FLOPs of a block: without recompute (model), with it (hardware)."""
    model = hardware = 0
    for instr in (*block.fwd, *block.bwd):
        if instr.kind in MODEL_FLOP_KINDS:
            hardware += instr.flops
            if instr.phase != "recompute":
                model += instr.flops
    return model, hardware


def chunks_flops(workload: Workload, stages: Iterable[Iterable[Chunk]]) -> tuple[int, int]:
    """Model and hardware FLOPs of one step over all ranks: the per-block FLOPs of every
    stage's chunks × micro-batches × ranks per pipeline stage (each block costed once)."""
    per_block: dict[int, tuple[int, int]] = {}
    model = hardware = 0
    for chunks in stages:
        for chunk in chunks:
            for block in chunk.blocks:
                if id(block) not in per_block:
                    per_block[id(block)] = block_flops(block)
                block_model, block_hardware = per_block[id(block)]
                model += block_model
                hardware += block_hardware
    scale = workload.micro_batches * (workload.world_size // workload.parallel.pp)
    return model * scale, hardware * scale


def step_flops(programs: ProgramSet) -> tuple[int, int]:
    """:func:`chunks_flops` of a program set."""
    return chunks_flops(programs.workload, (stage.chunks for stage in programs.stages))
