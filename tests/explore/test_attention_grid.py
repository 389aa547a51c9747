"""The fused attention kernel's grid in waves (stage_explore.analytical.attention_grid): the
launch figures read from flash-attention's launch templates, each CTA's blocks, FA2's split-KV
heuristic, a short grid slower than a full one, the benchmark grid unchanged, ring context
parallelism's half-block steps and the presets' ``attention_grids``."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_explore.analytical.attention_grid import (
    FA2,
    FA3,
    AttentionLaunch,
    _works,
    attention_launch,
    benchmark_grid,
    call_grids,
    fa2_splits,
    grid_factor,
)
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.te_context_parallel import te_ring_time_factor
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel

H100 = load_system("h100-80gb")
KERNELS = H100.accelerator.kernels
assert KERNELS is not None


def test_launch_figures_are_the_launch_templates() -> None:
    # FA2 flash_fwd_launch_template.h run_mha_fwd_hdim128 (sm80 / sm90): 128 x 64, 4 warps, two
    # CTAs per SM (flash_api.cpp: "multiply number of SMs by 2 ... 128 threads per block")
    assert attention_launch(FA2, 128, True, False) == AttentionLaunch(128, 64, 2, split_kv=True)
    assert attention_launch(FA2, 64, True, False) == AttentionLaunch(128, 128, 2, split_kv=True)
    assert attention_launch(FA2, 192, True, False) == AttentionLaunch(128, 64, 1, split_kv=True)
    # FA2 flash_bwd_launch_template.h run_mha_bwd_hdim128: 64 x 128, 8 warps, grid over keys
    assert attention_launch(FA2, 128, True, True) == AttentionLaunch(64, 128, 1, over_keys=True)
    assert attention_launch(FA2, 192, False, True) == AttentionLaunch(64, 64, 1, over_keys=True)
    # FA3 hopper/tile_size.h tile_size_fwd_sm90, hdim 128: 128 x 128 causal, 128 x 176 else
    assert attention_launch(FA3, 128, True, False) == AttentionLaunch(128, 128, 1, False, True)
    assert attention_launch(FA3, 128, False, False) == AttentionLaunch(128, 176, 1)
    # FA3 hopper/flash_bwd_launch_template.h run_mha_bwd_hdim128: 64 x 128 causal (LPT), 80 else
    assert attention_launch(FA3, 128, True, True) == AttentionLaunch(64, 128, 1, True, True)
    assert attention_launch(FA3, 128, False, True) == AttentionLaunch(80, 128, 1, True)
    assert attention_launch(FA3, 192, True, True) is None  # not in the tables: no grid term
    assert attention_launch("cudnn", 128, True, False) is None


def test_each_cta_runs_the_blocks_the_mask_leaves() -> None:
    forward = attention_launch(FA2, 128, True, False)
    assert forward is not None
    # 4,096 rows in 32 blocks of 128; row block i sees keys up to (i + 1) * 128: 2 (i + 1) of 64
    assert _works(forward, 4096, 4096, True) == tuple(2 * (i + 1) for i in range(32))
    assert _works(forward, 4096, 4096, False) == (64,) * 32
    # a query chunk against the whole sequence (keys 8,192): the mask aligned bottom right
    assert _works(forward, 4096, 8192, True)[0] == 66
    backward = attention_launch(FA2, 128, True, True)
    assert backward is not None
    # 32 key blocks of 128; key block j is seen by the 64-row query blocks from 2 j on
    assert _works(backward, 4096, 4096, True) == tuple(64 - 2 * j for j in range(32))


def test_fa2_split_heuristic_by_hand() -> None:
    # 4 (batch, head) pairs x 32 blocks of 64 rows = 128 < 0.8 x 216 slots (108 SMs x 2): split.
    # 16 key blocks of 128; wave efficiency n/ceil(n) of 128 s / 216: s=1 .593, 2 .593, 3 .889,
    # 4 .790, 5 .988 (best), 6 .889, 8 .948 (7 not eligible): the fewest >= .85 x .988 is 3
    assert fa2_splits(4, 2048, 2048, 128, 108) == 3
    assert fa2_splits(24, 2048, 2048, 128, 132) == 1  # 768 blocks fill the slots


@pytest.mark.parametrize("family", [FA2, FA3])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seq", [512, 2048, 8192])
def test_the_benchmark_grid_keeps_the_preset_fraction(
    family: str, backward: bool, causal: bool, seq: int
) -> None:
    pairs = benchmark_grid(seq, 128)
    assert pairs == (16384 // seq) * 16
    factor = grid_factor(family, 132, pairs, seq, seq, 128, causal, backward)
    assert factor == pytest.approx(1.0, rel=1e-12)


def test_a_short_grid_is_slower_than_a_full_one() -> None:
    # NeMo's GPT-3 175B at tp 8: 12 heads x micro-batch 1 at 2,048 -> 192 FA2 CTAs on 264 slots
    short = grid_factor(FA2, 132, 12, 2048, 2048, 128, True, False)
    assert short < 0.8
    assert grid_factor(FA2, 132, 12, 2048, 2048, 128, True, True) < 0.8
    assert grid_factor(FA2, 132, 256, 2048, 2048, 128, True, False) > 0.95
    # FA3's persistent longest-first schedule keeps more of a short grid than FA2's
    assert grid_factor(FA3, 132, 12, 2048, 2048, 128, True, False) > short


def test_a_grid_fuller_than_the_benchmarks_gains_and_zero_sizes_are_neutral() -> None:
    # s25 review: grid_factor's docstring said 1 for a full grid, less for a short one; the
    # benchmark's own grid is short at 16,384 keys (16 pairs), so a fuller grid gains
    assert grid_factor(FA2, 132, 1024, 16384, 16384, 128, True, False) == pytest.approx(
        1.158, abs=5e-4
    )
    assert grid_factor(FA2, 108, 1024, 16384, 16384, 128, True, False) == pytest.approx(
        1.128, abs=5e-4
    )
    for sizes in ((0, 2048, 2048), (12, 0, 2048), (12, 2048, 0)):
        assert grid_factor(FA2, 132, *sizes, 128, True, False) == 1.0
    assert grid_factor(FA2, 132, 12, 2048, 2048, 512, True, False) == 1.0  # no table row


def _attention(pairs: int, seq: int, phase: str = "fwd") -> Instr:
    q = pairs * seq * 128 * 2
    inputs = (("q", q), ("k", q), ("v", q))
    if phase == "bwd":
        inputs = (("d.attn", q), *inputs, ("attn", q))
    return Instr(
        "attn", phase, "attention",
        flops=4 * pairs * seq * seq * 128 // 2 * (2 if phase == "bwd" else 1),
        bytes_read=3 * q, bytes_written=q, inputs=inputs, outputs=(("attn", q),),
    )  # fmt: skip


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_the_timer_charges_a_short_grid_per_flop(phase: str) -> None:
    timer = KernelTimer(
        H100.accelerator, KERNELS, "bf16", frozenset(), keys=2048, head_dim=128, causal=True,
        attention_kernel="fa2", attention_queries=2048,
    )  # fmt: skip
    short, full = _attention(12, 2048, phase), _attention(256, 2048, phase)
    per_flop_short = timer(short) / short.flops
    per_flop_full = timer(full) / full.flops
    assert per_flop_short > 1.2 * per_flop_full
    ungridded = dataclasses.replace(timer, attention_queries=0)  # no grid term: equal per FLOP
    assert ungridded(short) / short.flops == pytest.approx(ungridded(full) / full.flops)
    cudnn = dataclasses.replace(timer, attention_kernel="cudnn")  # not public: no grid term
    assert cudnn(short) / short.flops == pytest.approx(cudnn(full) / full.flops)


def test_ring_steps_run_the_half_block_grids() -> None:
    # cp 2 at 8,192: each rank's 4,096 rows; later steps 4,096 x 2,048 or 2,048 x 4,096
    instr = _attention(16, 4096)
    first, later = call_grids(KERNELS, "fa2", instr, 4096, 4096, 128, True, 2, 2)
    assert first == pytest.approx(grid_factor(FA2, 132, 16, 4096, 4096, 128, True, False))
    assert later == pytest.approx(
        min(
            grid_factor(FA2, 132, 16, 4096, 2048, 128, False, False),
            grid_factor(FA2, 132, 16, 2048, 4096, 128, False, False),
        )
    )
    assert te_ring_time_factor(4, 1.1, first, later) == pytest.approx(
        1 / (4 * first) + 3 / (4 * 1.1 * later)
    )
    assert te_ring_time_factor(4, 1.1) == pytest.approx(1 / 4 + 3 / (4 * 1.1))
    # no launch model for the kernel, or no rows: full grids
    assert call_grids(KERNELS, "cudnn", instr, 4096, 4096, 128, True, 2, 2) == (1.0, 1.0)
    assert call_grids(KERNELS, "fa2", instr, 0, 4096, 128, True, 2, 1) == (1.0, 1.0)


def test_presets_name_the_launch_their_kernels_run() -> None:
    assert KERNELS.grid_family(None) == FA3 and KERNELS.grid_family("fa2") == FA2
    assert KERNELS.grid_family("cudnn") == ""
    a100 = load_system("a100-80gb").accelerator.kernels
    assert a100 is not None and a100.grid_family(None) == FA2
    mi300x = load_system("mi300x").accelerator.kernels
    assert mi300x is not None and mi300x.grid_family("fa2") == ""  # ROCm's kernels: none
    assert KernelModel(**{**KERNELS.to_dict(), "gemm_tile": (128, 256)}) == KERNELS
    with pytest.raises(ConfigError, match=r"`attention_grids.cudnn` must be one of fa2, fa3"):
        dataclasses.replace(KERNELS, attention_grids={"cudnn": "fa9"})
