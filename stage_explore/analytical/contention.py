"""Compute slowed by the NCCL collectives it overlaps: :func:`nccl_channels`,
:func:`on_fewer_sms`, :func:`contended_share` and :func:`contended_s`.

An NCCL collective is a kernel of one thread block per channel, and each block holds an SM for
the whole collective: "NCCL CTAs won't share an SM with compute kernels" (NCCL maintainer,
https://github.com/NVIDIA/nccl/issues/689), whether they are moving data or waiting for the
network. A GEMM or attention kernel that runs beside it therefore has ``sm_count − channels``
SMs: for ``min(comm_s, compute_s)`` of overlap it runs at ``1 − channels / sm_count`` of its
rate — or less: a GEMM whose tiles filled its waves exactly needs one wave more (NVIDIA forum
"Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail
Effect": an H100 GEMM of exactly 132 tiles nearly doubles beside FSDP's 24-block all-gather).
Memory-bound kernels lose nothing to it (a few SMs saturate HBM). So the slowdown of a block's
compute is found by timing its kernels again on the SMs left (:func:`on_fewer_sms`: the wave
model on ``sm_count − channels`` SMs, each SM's peak unchanged; memory-bound kernels as
before), and :func:`contended_share` is the share of its rate lost.

How many channels: NCCL "uses the minimal number of SMs to achieve the performance of the
platform" (same thread: one NIC of 12-24 GB/s → 2 SMs, a DGX with 8 NICs → 16). A ring that
crosses nodes runs as many channels as its inter-node graph found (one per NIC at up to NCCL's
top per-channel speed), doubled ("execution channels are typically 2x the search channels",
https://github.com/NVIDIA/nccl/issues/1041); a ring inside an NVLink node as many as the
GPU's NVLinks carry. So the count is a property of the network dim a group's ring is
bottlenecked by: its outermost dim (:attr:`~stage_explore.system.model.NetworkDim.
nccl_channels`, each preset citing its NCCL log). A dim without a figure takes no SMs.

Not modelled: the HBM bandwidth the collective's copies and reductions take from memory-bound
kernels (an inter-node ring at 50 GB/s per GPU moves ~3× that through HBM, < 5 % of an H100's
3.35 TB/s; an NVLink ring several times more), nor NVLS / CollNet channel counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system.model import System


def nccl_channels(system: System, counts: Sequence[int]) -> int:
    """Thread blocks per GPU of an NCCL collective over a group spanning ``counts`` ranks per
    network dim (dim 0 fastest): the ``nccl_channels`` of the outermost dim it spans (0 when
    that dim has no figure, or the group is one rank)."""
    for index in range(len(counts) - 1, -1, -1):
        if counts[index] > 1:
            channels = system.network[index].nccl_channels
            return channels or 0
    return 0


def on_fewer_sms(timer: KernelTimer, held: int) -> KernelTimer | None:
    """``timer`` on the SMs ``held`` thread blocks leave: ``sm_count − held`` SMs in the GEMM
    wave model and every peak FLOP/s scaled by ``(sm_count − held) / sm_count`` (HBM as
    before); None when nothing is held or nothing would be left."""
    sms = timer.kernels.sm_count
    if held <= 0 or held >= sms:
        return None
    left = sms - held
    kernels = replace(timer.kernels, sm_count=left)
    peaks = {dtype: peak * left / sms for dtype, peak in timer.accelerator.peak_flops_per_s.items()}
    accelerator = replace(timer.accelerator, peak_flops_per_s=peaks, kernels=kernels)
    return replace(timer, accelerator=accelerator, kernels=kernels)


def contended_share(
    instrs: Iterable[Instr], timer: Callable[[Instr], float], fewer: Callable[[Instr], float]
) -> float:
    """The share of its rate the compute of ``instrs`` loses on fewer SMs: ``1 − Σ timer /
    Σ fewer`` over the compute instructions (0 when there is none)."""
    alone = beside = 0.0
    for instr in instrs:
        if instr.collective is None and instr.kind != "ring":
            alone += timer(instr)
            beside += fewer(instr)
    return 1.0 - alone / beside if beside > alone > 0.0 else 0.0


def contended_s(
    duration_s: float, compute_s: float, comm_s: float, beside: Sequence[tuple[float, float]]
) -> float:
    """Wall seconds of a block of ``duration_s`` (``compute_s`` of it busy compute) beside
    collectives on streams of their own that end after ``comm_s``; ``beside`` lists each
    stream's (seconds, share of the SMs it holds). While they run the compute proceeds at
    ``1 − Σ share`` of its rate, so each leaves ``share · min(seconds, compute_s / (1 − Σ
    share))`` of it for after; the block lasts at least ``comm_s``."""
    shares = sum(share for seconds, share in beside if seconds > 0.0)
    if shares <= 0.0 or compute_s <= 0.0:
        return max(comm_s, duration_s)
    limit = compute_s / (1.0 - shares) if shares < 1.0 else float("inf")
    lost_s = sum(share * min(seconds, limit) for seconds, share in beside if seconds > 0.0)
    return max(comm_s, duration_s + lost_s)
