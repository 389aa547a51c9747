"""The per-kernel compute model: GEMM shapes recovered from exact counts, tile and wave
quantization, attention by keys, mask, head dim and direction, FP8 only on linear GEMMs, and
the kernel tables of the shipped presets (load, round trip, bad values)."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_roles import is_linear
from stage_explore.analytical.gemm_tiles import gemm_efficiency, gemm_shape, gemm_time_s
from stage_explore.analytical.kernels import KernelTimer, attention_efficiency
from stage_explore.system import load_system, system_from_mapping
from stage_explore.system.accelerator import KernelModel

H100 = load_system("h100-80gb")


def _kernels() -> KernelModel:
    kernels = H100.accelerator.kernels
    assert kernels is not None
    return kernels


KERNELS = _kernels()


def einsum(batch: int, m: int, n: int, k: int, names: tuple[str, str] = ("x", "w")) -> Instr:
    """``batch`` GEMMs of (m×k)·(k×n) with 2-byte elements, as the generator counts them."""
    return Instr(
        "mm", "fwd", "einsum",
        flops=2 * batch * m * n * k,
        bytes_read=2 * batch * (m * k + k * n),
        bytes_written=2 * batch * m * n,
        inputs=((names[0], 2 * batch * m * k), (names[1], 2 * batch * k * n)),
        outputs=(("y", 2 * batch * m * n),),
    )  # fmt: skip


@pytest.mark.parametrize(
    "shape", [(1, 8192, 1536, 12288), (1, 4096, 14336, 4096), (32, 2048, 2048, 128), (64, 7, 3, 5)]
)
def test_gemm_shape_is_recovered_from_bytes_and_flops(shape: tuple[int, int, int, int]) -> None:
    assert gemm_shape(einsum(*shape)) == shape


def test_non_gemms_have_no_shape() -> None:
    assert gemm_shape(Instr("ln", "fwd", "reduction", flops=10, bytes_read=8)) is None
    assert gemm_shape(Instr("mm", "fwd", "einsum", flops=0, inputs=(("a", 2), ("b", 2)))) is None


def test_a_wave_aligned_large_gemm_runs_at_the_sustained_efficiency() -> None:
    tm, tn = KERNELS.gemm_tile
    sms = KERNELS.sm_count
    shape = (1, tm * sms, tn * 8, 16384)  # exactly 8 waves
    main_loop = 16384 / (16384 + KERNELS.gemm_k_overhead)
    expected = KERNELS.gemm_efficiency["bf16"] * main_loop
    assert gemm_efficiency(KERNELS, "bf16", shape) == pytest.approx(expected)


def test_one_tile_more_than_a_wave_costs_a_second_wave() -> None:
    tm, tn = KERNELS.gemm_tile
    sms = KERNELS.sm_count
    full = gemm_efficiency(KERNELS, "bf16", (1, tm * sms, tn, 8192))
    spill = gemm_efficiency(KERNELS, "bf16", (1, tm * (sms + 1), tn, 8192))
    assert spill == pytest.approx(full * (sms + 1) / (2 * sms))


def test_ragged_tiles_and_short_k_lose_efficiency() -> None:
    aligned = gemm_efficiency(KERNELS, "bf16", (1, 8448, 8192, 8192))
    assert gemm_efficiency(KERNELS, "bf16", (1, 8448 + 1, 8192, 8192)) < aligned
    assert gemm_efficiency(KERNELS, "bf16", (1, 8448, 8192, 64)) < aligned / 1.9


def test_attention_efficiency_by_keys_mask_direction_and_head_dim() -> None:
    long = attention_efficiency(KERNELS, 16384, 128, causal=False, backward=False)
    assert long == pytest.approx(
        KERNELS.attention_forward * 16384 / (16384 + KERNELS.attention_half_keys)
    )
    assert attention_efficiency(KERNELS, 512, 128, causal=False, backward=False) < long
    assert attention_efficiency(KERNELS, 16384, 128, causal=True, backward=False) == pytest.approx(
        attention_efficiency(KERNELS, 8192, 128, causal=False, backward=False)
    )
    backward = attention_efficiency(KERNELS, 16384, 128, causal=False, backward=True)
    assert backward / long == pytest.approx(KERNELS.attention_backward / KERNELS.attention_forward)
    assert attention_efficiency(KERNELS, 16384, 64, causal=False, backward=False) < long


def test_linear_means_a_weight_operand_or_a_weight_gradient() -> None:
    weights = {"wq"}
    assert is_linear(einsum(1, 4, 4, 4, ("x", "wq")), weights)
    assert not is_linear(einsum(1, 4, 4, 4, ("q", "k")), weights)
    wgrad = dataclasses.replace(einsum(1, 4, 4, 4, ("d.q", "x")), outputs=(("d.wq", 32),))
    assert is_linear(wgrad, weights)


def test_fp8_speeds_up_only_the_linear_gemms() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=2, dp=1, sp=True, global_batch=1, precision=Precision.FP8)
    block = bind_all(make_workload(model, parallel))["layer"]
    weights = frozenset(w.name for w in block.weights)
    fp8 = KernelTimer(H100.accelerator, KERNELS, "fp8", weights, 8192, 128, True)
    bf16 = KernelTimer(H100.accelerator, KERNELS, "bf16", weights, 8192, 128, True)
    kinds = set()
    for instr in (*block.fwd, *block.bwd):
        if instr.collective is not None or instr.kind == "ring":
            continue
        if is_linear(instr, weights):
            kinds.add("linear")
            assert fp8(instr) < bf16(instr)
        else:
            kinds.add(instr.kind)
            assert fp8(instr) == bf16(instr)
    assert {"linear", "attention"} <= kinds


def test_fp8_step_is_faster_but_far_from_twice_as_fast() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=4)
    times = {}
    for precision in ("bf16", "fp8"):
        parallel = ParallelConfig(
            tp=2, dp=4, sp=True, global_batch=8, precision=Precision(precision)
        )
        times[precision] = AnalyticalBackend().evaluate(model, parallel, H100).step_time_s
    assert 1.1 < times["bf16"] / times["fp8"] < 1.8


@pytest.mark.parametrize("name", ["a100-80gb", "h100-80gb", "h200", "b200", "b300", "gb300-nvl72"])
def test_the_gpu_presets_have_kernel_tables_and_link_efficiencies_that_round_trip(
    name: str,
) -> None:
    system = load_system(name)
    assert system.accelerator.kernels is not None
    assert all(dim.bus_efficiency is not None for dim in system.network)
    assert system_from_mapping(system.to_dict()) == system


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sm_count": 0}, "`sm_count` must be >= 1"),
        ({"gemm_tile": (128,)}, "`gemm_tile` must be two positive integers"),
        ({"gemm_efficiency": {"bf16": 1.5}}, "`gemm_efficiency.bf16` must be <= 1"),
        ({"attention_forward": 0.0}, "`attention_forward` must be a finite number > 0"),
        ({"attention_half_keys": -1.0}, "`attention_half_keys` must be >= 0"),
        ({"grouped_gemm_group_s": 20}, r"`grouped_gemm_group_s` is in seconds, .*<= 0.001"),
        ({"memory_kernel_s": 3.3}, r"`memory_kernel_s` is in seconds, .* 3.3e-06 s"),
        ({"grouped_kernel_group_s": -1e-6}, "`grouped_kernel_group_s` must be >= 0"),
    ],
)
def test_bad_kernel_values_are_config_errors(change: dict[str, object], message: str) -> None:
    values = {**KERNELS.to_dict(), "gemm_tile": KERNELS.gemm_tile, **change}
    with pytest.raises(ConfigError, match=message):
        KernelModel(**values)


def test_an_unknown_kernel_key_in_a_file_names_it(tmp_path: object) -> None:
    data = H100.to_dict()
    data["accelerator"]["kernels"]["tile"] = 3
    with pytest.raises(ConfigError, match="accelerator.kernels.tile"):
        system_from_mapping(data)


def test_a_named_older_attention_kernel_is_slower_and_unknown_names_fall_back() -> None:
    best = attention_efficiency(KERNELS, 8192, 128, causal=True, backward=False)
    fa2 = attention_efficiency(KERNELS, 8192, 128, causal=True, backward=False, kernel="fa2")
    forward, _ = KERNELS.attention_kernels["fa2"]
    assert fa2 / best == pytest.approx(forward / KERNELS.attention_forward)
    assert attention_efficiency(KERNELS, 8192, 128, True, False, kernel="fa9") == best
    with pytest.raises(ConfigError, match="attention_kernels.fa2"):
        KernelModel(**{**KERNELS.to_dict(), "attention_kernels": {"fa2": (0.3,)}})


def test_a_framework_on_fa2_is_slower_on_hopper_only_where_attention_runs() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=2, dp=2, sp=True, global_batch=4)
    best = AnalyticalBackend(framework="fsdp", overrides={"attention_kernel": None})
    fast = best.evaluate(model, parallel, H100)
    slow = AnalyticalBackend(framework="fsdp").evaluate(model, parallel, H100)  # SDPA: FA2
    assert slow.breakdown["compute"] > fast.breakdown["compute"]


def test_split_k_fills_an_under_filled_wave_when_k_is_long() -> None:
    tm, tn = KERNELS.gemm_tile
    sms = KERNELS.sm_count
    shape = (1, tm * (sms // 2 + 1), tn, 16384)  # just over half a wave of tiles
    one = gemm_efficiency(KERNELS, "bf16", shape, split=1)
    assert gemm_efficiency(KERNELS, "bf16", shape, split=2) < one  # 2·(half + 1) spills
    assert gemm_efficiency(KERNELS, "bf16", (1, tm * (sms // 2), tn, 16384), split=2) > one
    flops = 2 * shape[1] * shape[2] * shape[3]
    unsplit = flops / (H100.accelerator.peak("bf16") * one)
    assert gemm_time_s(H100.accelerator, KERNELS, "bf16", shape, flops, 0.0) <= unsplit
