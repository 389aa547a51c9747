"""Shared pieces of the contention tests: the h100-80gb preset's kernel model and a bf16 kernel
timer on it, a bare bf16 GEMM instruction, and a system with its accelerator's
``persistent_gemm`` flag off."""

from __future__ import annotations

from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System

H100 = load_system("h100-80gb")


def h100_kernels() -> KernelModel:
    """The h100-80gb preset's kernel model."""
    kernels = H100.accelerator.kernels
    assert kernels is not None
    return kernels


def h100_timer() -> KernelTimer:
    """A bf16 kernel timer on the h100-80gb preset (4,096 causal keys, head dim 128)."""
    return KernelTimer(
        H100.accelerator, h100_kernels(), "bf16", frozenset(), keys=4096, head_dim=128, causal=True
    )


def bf16_gemm(m: int, n: int, k: int) -> Instr:
    """A bf16 GEMM [m, k] x [k, n] (no weight names: not a linear layer)."""
    return Instr(
        name="g", kind="einsum", phase="fwd", flops=2 * m * n * k,
        bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n,
        inputs=(("a", 2 * m * k), ("b", 2 * k * n)), outputs=(("c", 2 * m * n),),
    )  # fmt: skip


def without_persistent_gemm(system: System) -> System:
    """``system`` with its kernel model's ``persistent_gemm`` off."""
    kernels = system.accelerator.kernels
    assert kernels is not None
    accelerator = replace(system.accelerator, kernels=replace(kernels, persistent_gemm=False))
    return replace(system, accelerator=accelerator)
