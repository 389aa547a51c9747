"""The SSD scan as the kernels mamba_ssm launches (:mod:`stage_explore.analytical.ssd_kernels`):
each kernel's bytes on a small shape by hand, the partial-gradient splits, the timer's sum over
kernels with the gate op inside them, the Mamba block of a training step timed that way, and the
SSD kernels' measured HBM fraction (``KernelModel.ssd_memory``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_roles import fp8_key
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.parts import Point, compute_dtype
from stage_explore.analytical.ssd_kernels import (
    SSDKernel,
    SSDShape,
    backward_kernels,
    forward_kernels,
    head_splits,
    ssd_kernels,
)
from stage_explore.system import load_system
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import System

#: One sequence of 8 tokens, 2 heads of 2 in one group, state 4, chunks of 4 (2 chunks).
#: Elements: x 8·2·2 = 32, B (or C) 8·1·4 = 32, dt 8·2 = 16, chunked dt / dA_cumsum
#: 2 heads·2 chunks·4 = 16, states 2 chunks·2 heads·2·4 = 32, C·Bᵀ 2 chunks·1·4·4 = 32,
#: Σq² = 2·16 = 32. BF16 activations (2 bytes), FP32 intermediates (4).
SMALL = SSDShape(batch=1, seq=8, heads=2, groups=1, head_dim=2, state=4, chunk=4)


def _by_name(kernels: tuple[SSDKernel, ...]) -> dict[str, SSDKernel]:
    return {kernel.name: kernel for kernel in kernels}


def test_forward_kernels_bytes_by_hand() -> None:
    kernels = forward_kernels(SMALL)
    assert [k.name for k in kernels] == [
        "_chunk_cumsum_fwd", "_chunk_state_fwd", "_state_passing_fwd", "_bmm_chunk_fwd",
        "_chunk_scan_fwd",
    ]  # fmt: skip
    moved = {k.name: (k.bytes_read, k.bytes_written, k.flops) for k in kernels}
    # dt 16·2 in; FP32 dt and dA_cumsum 2·16·4 out
    assert moved["_chunk_cumsum_fwd"] == (32, 128, 0)
    # x, B 64·2 and dt, dA_cumsum 2·16·4 in; FP32 states 32·4 out; 2·8 tokens·2 heads·2·4 FLOPs
    assert moved["_chunk_state_fwd"] == (256, 128, 256)
    # FP32 states 32·4 and one dA per chunk and head 4·4 in; 16-bit states 32·2 and the FP32
    # final state (2 heads·2·4)·4 out
    assert moved["_state_passing_fwd"] == (144, 128, 64)
    # C, B 64·2 in; FP32 C·Bᵀ 32·4 out; 2·Σq²·N per group
    assert moved["_bmm_chunk_fwd"] == (128, 128, 256)
    # C·Bᵀ 32·4, x and z 64·2, C 32·2, 16-bit states 32·2, dt and dA_cumsum 2·16·4 in;
    # out and out_x 64·2 out; C·h 256 + the diagonal blocks 32·2 heads·2·2 FLOPs
    assert moved["_chunk_scan_fwd"] == (512, 128, 512)


def test_backward_kernels_bytes_by_hand() -> None:
    kernels = backward_kernels(SMALL, sm_count=132)
    assert len(kernels) == 31
    named = _by_name(kernels)
    assert kernels[0].name == "causal_conv1d_fwd"  # the conv output recomputed first
    assert (named["causal_conv1d_fwd"].bytes_read, named["causal_conv1d_fwd"].bytes_written) == (
        (32 + 2 * 32) * 2,
        (32 + 2 * 32) * 2,
    )
    # x, z, out_x, dout 4·32·2 in; dz, dout_x 2·32·2 out
    dz = named["_chunk_scan_bwd_dz"]
    assert (dz.bytes_read, dz.bytes_written) == (256, 128)
    # FP32 states and dstates 2·32·4 and dA per chunk 4·4 in; 16-bit dstates and states
    # 2·32·2 and one FP32 ddA partial per chunk, head and 64 state values (4·1·4) out
    passing = named["_state_passing_bwd"]
    assert (passing.bytes_read, passing.bytes_written) == (272, 144)
    # the recomputed state passing keeps FP32 states: 32·4 + 4·4 in, 32·4 + 16·4 out
    recomputed = [k for k in kernels if k.name == "_state_passing_fwd"]
    assert [(k.bytes_read, k.bytes_written) for k in recomputed] == [(144, 192)]
    # one sequence, 2 chunks, 2 heads on 132 SMs: one head per program, two FP32 partials of
    # dB (8·1·4 each) written and summed
    assert head_splits(SMALL, 132) == 2
    db = named["_chunk_state_bwd_db"]
    assert db.bytes_written == 2 * 32 * 4 + 16 * 4
    assert (named["dB.sum"].bytes_read, named["dB.sum"].bytes_written) == (2 * 32 * 4, 32 * 4)
    assert sum(1 for k in kernels if k.name == "_bmm_chunk_bwd") == 2


def test_head_splits_follow_the_sm_count() -> None:
    """Nemotron-H 56B at TP 8 (32 heads, one group, 64 chunks): 2048 head-chunks over 132 SMs
    → 16 heads per program, 2 splits; the small shape's 4 head-chunks on one SM: both heads of
    the group in one program, no split."""
    big = SSDShape(batch=1, seq=8192, heads=32, groups=1, head_dim=64, state=256, chunk=128)
    assert head_splits(big, 132) == 2
    assert head_splits(SMALL, 1) == 1


def test_timer_sums_the_kernels_and_drops_the_gate() -> None:
    system = load_system("h100-80gb")
    accelerator, model = system.accelerator, system.accelerator.kernels
    assert model is not None
    kernels = ssd_kernels(SMALL, model.sm_count)
    kcost = model.memory_kernel_s
    timer = KernelTimer(
        accelerator, model, "bf16", frozenset(), 8, 128, True,
        memory_kernel_s=kcost, ssd_kernels=kernels,
    )  # fmt: skip
    ssd_hbm = accelerator.memory_bandwidth_bytes_per_s * model.ssd_memory  # the SSD kernels'
    forward = Instr("ssm.scan", "fwd", "ssdscan", 10**6, 10**9, 10**9)  # its own bytes unused
    expected = sum(
        (k.bytes_read + k.bytes_written) / ssd_hbm + kcost for k in kernels["fwd"]
    )  # every kernel memory-bound at this shape
    assert timer(forward) == pytest.approx(expected)
    unstated = replace(timer, kernels=replace(model, ssd_memory=0.0))  # efficiency.memory
    hbm = accelerator.achieved_memory_bandwidth_bytes_per_s
    assert unstated(forward) == pytest.approx(
        sum((k.bytes_read + k.bytes_written) / hbm + kcost for k in kernels["fwd"])
    )
    backward = Instr("ssm.scan.backward", "bwd", "ssdscan", 10**6, 10**9, 10**9)
    assert timer(backward) > 31 * kcost
    assert timer(Instr("ssm.gate", "fwd", "elementwise", 10, 10**9, 10**9)) == 0.0
    assert timer(Instr("ssm.gate.backward", "bwd", "backwardop", 10, 10**9, 10**9)) == 0.0
    plain = KernelTimer(
        accelerator, model, "bf16", frozenset(), 8, 128, True, memory_kernel_s=kcost
    )
    assert plain(Instr("ssm.gate", "fwd", "elementwise", 10, 10**9, 10**9)) > 0.0
    # the B and C convs run in the x conv's kernel: their bytes, no fixed time of their own
    conv = Instr("ssm.conv.b", "fwd", "causalconv1d", 10, 10**6, 10**6)
    assert timer(conv) == pytest.approx(2 * 10**6 / hbm)
    assert plain(conv) == pytest.approx(2 * 10**6 / hbm + kcost)


def test_training_step_times_the_mamba_block_by_its_kernels() -> None:
    """nemotron-h-8b at TP 2: the scan's time is the kernel list's on the rank's share (the
    micro-batch, 64 heads of 64 in 4 groups, state 128, chunk 128, 1024 tokens)."""
    model = get_flavor("nemotron-h-8b").with_overrides(seq_len=1024)
    parallel = ParallelConfig(tp=2, dp=2, sp=True, global_batch=4)
    system = load_system("h100-80gb")
    backend = AnalyticalBackend()
    kernels = backend._ssd_kernels(  # noqa: SLF001 - the timer's own input
        _point(backend, model, parallel, system), "layer_mamba_none"
    )
    shape = SSDShape(batch=1, seq=1024, heads=64, groups=4, head_dim=64, state=128, chunk=128)
    assert kernels == ssd_kernels(shape, 132)


def _point(
    backend: AnalyticalBackend, model: ModelSpec, parallel: ParallelConfig, system: System
) -> Point:
    """The backend's evaluation point for ``model`` on ``system`` (as ``evaluate`` builds it)."""
    workload = make_workload(model, parallel)
    key, blocks = backend._bound(workload)  # noqa: SLF001
    net, token = backend._network(system)  # noqa: SLF001
    dtype = compute_dtype(parallel, system)
    fp8 = fp8_key(str(parallel.fp8_recipe), parallel.fp8_gemms, dtype)
    return backend._point(workload, key, blocks, net, token, dtype, fp8)  # noqa: SLF001


#: vllm-project/vllm PR #27299 (cyang49, 2025-10-25, "single H100"): mamba_ssm-style forward
#: SSD kernels ("Original") at granite-4.0-h-small's dims, chunk 256, z None: tokens/s by
#: sequence length (the h100-80gb preset's ``ssd_memory`` source).
VLLM_27299_H100 = {4096: 1.206409e7, 8192: 1.262327e7, 16384: 1.292440e7}


@pytest.mark.parametrize("seq", sorted(VLLM_27299_H100))
def test_ssd_memory_reproduces_the_h100_measurement(seq: int) -> None:
    system = load_system("h100-80gb")
    accelerator, model = system.accelerator, system.accelerator.kernels
    assert model is not None and model.ssd_memory == 0.41
    shape = SSDShape(batch=1, seq=seq, heads=128, groups=1, head_dim=64, state=128, chunk=256)
    timer = KernelTimer(
        accelerator, model, "bf16", frozenset(), seq, 128, True,
        memory_kernel_s=model.memory_kernel_s,
        ssd_kernels={"fwd": forward_kernels(shape, gated=False)},
    )  # fmt: skip
    measured = seq / VLLM_27299_H100[seq]
    assert timer(Instr("ssm.scan", "fwd", "ssdscan", 1, 1, 1)) == pytest.approx(measured, rel=0.03)


def test_ssd_memory_is_read_from_a_system_and_checked() -> None:
    h100 = load_system("h100-80gb")
    data = h100.to_dict()
    assert data["accelerator"]["kernels"]["ssd_memory"] == 0.41
    assert system_from_mapping(data) == h100
    a100 = load_system("a100-80gb").accelerator.kernels
    assert a100 is not None and a100.ssd_memory == 0.0  # none stated: efficiency.memory
    for bad in (1.5, -0.2):
        data["accelerator"]["kernels"]["ssd_memory"] = bad
        with pytest.raises(ConfigError, match=f"ssd_memory.*but got {bad}"):
            system_from_mapping(data)


def test_an_evaluation_on_systems_differing_only_in_it() -> None:
    """nemotron-h-8b trains slower at the SSD kernels' measured fraction than at the preset's
    memory fraction, on one backend (no stale memo)."""
    model = get_flavor("nemotron-h-8b").with_overrides(seq_len=1024)
    parallel = ParallelConfig(tp=2, dp=2, sp=True, global_batch=4)
    h100 = load_system("h100-80gb")
    kernels = h100.accelerator.kernels
    assert kernels is not None
    plain = replace(
        h100, accelerator=replace(h100.accelerator, kernels=replace(kernels, ssd_memory=0.0))
    )
    backend = AnalyticalBackend()
    measured = backend.evaluate(model, parallel, h100).step_time_s
    assert measured > backend.evaluate(model, parallel, plain).step_time_s
