"""Shared pieces of the GEMM tests: the h100-80gb preset's kernel model and a bf16 kernel timer
on it, a bare bf16 GEMM instruction, a system with its accelerator's ``persistent_gemm`` flag
off, and a preset's modelled TFLOP/s at a GEMM shape with its K fall-off against a measured
series (the A100 / Hopper / Blackwell GEMM-shape tests); the Hopper systems those tests run on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from stage_core.lower.bind import Instr
from stage_explore.analytical.gemm_tiles import gemm_time_s
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System

H100 = load_system("h100-80gb")
#: The project's systems files (beside the presets).
SYSTEMS_DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data" / "systems"
#: Every Hopper system: the presets and the two systems files on H100s (the Hopper GEMM tests).
HOPPER_SYSTEMS = (
    "h100-80gb",
    "h200",
    "h800",
    str(SYSTEMS_DATA / "ibm-h100-800g.toml"),
    str(SYSTEMS_DATA / "grand-teton-h100.toml"),
)


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


def model_tflops(system: str, dtype: str, batch: int, m: int, n: int, k: int) -> float:
    """The preset ``system``'s modelled rate (TFLOP/s) for ``batch`` GEMMs [m, k] x [k, n] in a
    2-byte ``dtype``, its operands and output read and written once at achieved HBM bandwidth."""
    accelerator = load_system(system).accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    flops = 2 * batch * m * n * k
    memory_s = (
        2 * batch * (m * k + k * n + m * n) / accelerator.achieved_memory_bandwidth_bytes_per_s
    )
    seconds = gemm_time_s(accelerator, kernels, dtype, (batch, m, n, k), flops, memory_s)
    return flops / seconds / 1e12


def k_ratio_errors(
    system: str, series: tuple[int, int, int], ks: tuple[int, ...], measured: tuple[float, ...]
) -> list[float]:
    """The model's bf16 rate at each K of ``ks`` over its rate at the last K, against the same
    ratio of ``measured`` (TFLOP/s at ``ks`` for ``series`` = (batch, M, N)), minus 1, for every K
    but the last: burst-clock tables compared by their fall-off, not their level."""
    model = [model_tflops(system, "bf16", *series, k) for k in ks]
    return [(model[i] / model[-1]) / (measured[i] / measured[-1]) - 1 for i in range(len(ks) - 1)]
