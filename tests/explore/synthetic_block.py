"""Synthetic instructions for two-stream timing tests: one unit of time per ``UNIT`` FLOPs or
bytes, a GEMM and a tensor-parallel collective built from their durations (shared by
test_async_tp.py and test_issue_order.py)."""

from __future__ import annotations

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind

#: One unit of time per 1,000 FLOPs or bytes in these synthetic blocks.
UNIT = 1000


def gemm(name: str, seconds: float, inputs: tuple[str, str], output: str) -> Instr:
    """A backward GEMM of ``seconds`` reading two operands and writing one."""
    size = 4 * UNIT
    return Instr(
        name, "bwd", "einsum", flops=int(seconds * UNIT),
        inputs=((inputs[0], size), (inputs[1], size)), outputs=((output, size),),
    )  # fmt: skip


def collective(
    kind: CollectiveKind, seconds: float, deps: tuple[int, ...], operand: str, phase: str = "bwd"
) -> Instr:
    """A tp collective of ``seconds`` on ``operand``, in place."""
    return Instr(
        f"{kind}:{operand}", phase, "comm", collective=kind, axes=("tp",),
        comm_bytes=int(seconds * UNIT), deps=deps, inputs=((operand, 1),),
        outputs=((operand, 1),),
    )  # fmt: skip
