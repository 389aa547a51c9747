"""Persistent GEMMs beside NCCL collectives (:func:`~stage_explore.analytical.contention.
persistent_wait_s`, :func:`~stage_explore.analytical.contention.beside_persistent`): the blocks
that find no SM wait for the first ones and run their share of the tiles, against closed forms
computed here; the kernel timer's GEMM-only seconds; an evaluation on Hopper pays it beside
FSDP's collectives, and not without the preset's ``persistent_gemm``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.contention import (
    NcclLoad,
    beside_persistent,
    contended_share,
    on_fewer_sms,
    persistent_wait_s,
)
from stage_explore.system import load_system
from tests.explore.gemm_helpers import (
    bf16_gemm,
    h100_kernels,
    h100_timer,
    without_persistent_gemm,
)

H100 = load_system("h100-80gb")


def test_the_waiting_blocks_run_their_share_of_the_tiles() -> None:
    kernels = replace(h100_kernels(), sm_count=132, gemm_tile=(128, 256))
    # 132 tiles, one per block: 24 blocks wait and take the whole GEMM's time again
    assert persistent_wait_s(kernels, (1, 128 * 11, 256 * 12, 4096), 1.0, 24) == 1.0
    # 1024 tiles (64 x 16, or 32 x 32 turned): blocks 0..99 hold 8 tiles, 100..131 hold 7;
    # the waiting ones (108..131) hold 7 of the largest share's 8
    assert persistent_wait_s(kernels, (1, 8192, 4096, 4096), 2.0, 24) == pytest.approx(2 * 7 / 8)
    # 516 tiles = 3 x 132 + 120: the first 120 blocks hold 4, and 108..119 wait among them
    assert persistent_wait_s(kernels, (1, 128 * 43, 256 * 12, 4096), 1.0, 24) == 1.0
    # 108 tiles fit in the SMs left: no block waits; nor without a collective
    assert persistent_wait_s(kernels, (1, 128 * 9, 256 * 12, 4096), 1.0, 24) == 0.0
    assert persistent_wait_s(kernels, (1, 8192, 4096, 4096), 1.0, 0) == 0.0
    # however few SMs the collective holds, a full grid waits (the PyTorch issue's 2x); with
    # 2 channels blocks 100..129 (7 tiles) end a tile early and the 2 waiting blocks of 7
    # tiles start then: 14 of 8 tiles' time
    assert persistent_wait_s(kernels, (1, 8192, 4096, 4096), 1.0, 2) == pytest.approx(6 / 8)
    # 200 tiles: blocks 0..67 hold 2, 68..131 one; the 24 waiting blocks (one tile each) start
    # when the 40 resident one-tile blocks 68..107 end, and end with the two-tile blocks
    assert persistent_wait_s(kernels, (1, 128 * 10, 256 * 20, 4096), 1.0, 24) == 0.0
    # 232 tiles: 100 two-tile blocks, 8 one-tile blocks resident before the 24 waiting ones;
    # the 9th waiting block starts when the first two-tile blocks end: half again
    assert persistent_wait_s(kernels, (1, 128 * 8, 256 * 29, 4096), 1.0, 24) == pytest.approx(
        1 / 2
    )


def test_the_timer_s_gemm_seconds_are_the_gemm_s_only() -> None:
    timer = h100_timer()
    gemm = bf16_gemm(8192, 4096, 4096)
    assert timer.gemm_kernel_s(gemm) == timer(gemm)
    assert timer.gemm_kernel_s(replace(gemm, flops=0)) == 0.0  # a copy
    assert timer.gemm_kernel_s(replace(gemm, kind="attention")) == 0.0


def test_a_gemm_beside_a_collective_waits_and_a_copy_does_not() -> None:
    timer = h100_timer()
    load = NcclLoad(24, 0.2)
    fewer = on_fewer_sms(timer, load)
    assert fewer is not None
    beside = beside_persistent(timer, fewer, load.channels)
    gemm = bf16_gemm(8192, 4096, 4096)
    shape = (1, 8192, 4096, 4096)
    wait = persistent_wait_s(timer.kernels, shape, timer(gemm), 24)
    assert wait > 0.0
    assert beside(gemm) == pytest.approx(timer(gemm) + wait)
    assert beside(gemm) > fewer(gemm)  # beyond the wave model's SM ratio
    copy = replace(gemm, flops=0)
    assert beside(copy) == fewer(copy)  # memory-bound: the HBM share only
    small = bf16_gemm(128, 256, 4096)  # one tile: its grid fits
    assert beside(small) == fewer(small)
    share = contended_share((gemm,), timer(gemm), beside)
    assert share == pytest.approx(1 - timer(gemm) / (timer(gemm) + wait))


def test_an_fsdp_evaluation_on_hopper_pays_it() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
    parallel = ParallelConfig(dp=8, micro_batch=1, global_batch=8, zero=3)
    backend = AnalyticalBackend(framework="torchtitan")
    slow = backend.evaluate(model, parallel, H100)
    fast = backend.evaluate(model, parallel, without_persistent_gemm(H100))
    assert slow.step_time_s > fast.step_time_s
    contention = "exposed_nccl_contention"
    assert slow.breakdown[contention] > fast.breakdown[contention] > 0.0


def test_megatron_s_async_tp_collective_delays_the_weight_gradientbf16_gemm() -> None:
    """Without userbuffers (the embedding and output layers here) Megatron issues the tp
    collective before the weight-gradient GEMM (CUDA_DEVICE_MAX_CONNECTIONS=1): on Hopper the
    GEMM's blocks wait for its SMs."""
    model = get_flavor("llama3-70b").with_overrides(layers=2, seq_len=8192)
    parallel = ParallelConfig(tp=4, sp=True, micro_batch=1, global_batch=2)
    backend = AnalyticalBackend(framework="megatron-core")
    slow = backend.evaluate(model, parallel, H100).breakdown["compute"]
    fast = backend.evaluate(model, parallel, without_persistent_gemm(H100)).breakdown["compute"]
    assert slow > fast
