"""Fused attention backward at the kernels' five matmuls, per-kernel half-saturation keys,
Transformer Engine's cuDNN attention on Blackwell, and MXFP8's block-scaled GEMM fraction —
each against a closed form computed here from the preset's own values."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Fp8Recipe, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.gemm_tiles import gemm_time_s, k_overhead_scale
from stage_explore.analytical.kernels import (
    ATTENTION_BACKWARD_MATMULS,
    KernelTimer,
    attention_efficiency,
)
from stage_explore.system import system_from_mapping
from stage_explore.system.accelerator import KernelModel
from tests.explore.blackwell_systems import B200, GB200, H100, kernels_of


def _attention(phase: str, flops: int) -> Instr:
    return Instr("attn.core", phase, "attention", flops=flops, bytes_read=2, bytes_written=2)


def _timer(system: object, **changes: object) -> KernelTimer:
    accelerator = system.accelerator  # type: ignore[attr-defined]
    timer = KernelTimer(
        accelerator, kernels_of(system), "bf16", frozenset({"w"}), keys=8192, head_dim=128,
        causal=True,
    )  # fmt: skip
    return dataclasses.replace(timer, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", [None, "cudnn", "fa2"])
def test_a_fused_backward_runs_five_matmuls_where_four_are_counted(kernel: str | None) -> None:
    timer = _timer(B200, attention_kernel=kernel)
    kernels, peak = kernels_of(B200), B200.accelerator.peak("bf16")
    flops = 10**15
    for phase, backward in (("fwd", False), ("bwd", True)):
        efficiency = attention_efficiency(kernels, 8192, 128, True, backward, kernel)
        executed = flops * (5 / 4 if backward else 1)
        assert timer(_attention(phase, flops)) == pytest.approx(executed / (peak * efficiency))
    assert ATTENTION_BACKWARD_MATMULS == (5, 4)


def test_a_kernel_with_its_own_half_keys_saturates_on_its_own_curve() -> None:
    kernels = dataclasses.replace(
        kernels_of(H100), attention_kernels={"slow": (0.5, 0.4, 1500.0), "fa2": (0.35, 0.31)}
    )
    assert kernels.half_keys("slow") == 1500.0
    assert kernels.half_keys("fa2") == kernels.half_keys(None) == kernels.attention_half_keys
    for keys in (4096, 8192, 32768):
        seen = keys / 2
        expected = 0.5 * seen / (seen + 1500.0)
        assert attention_efficiency(kernels, keys, 128, True, False, "slow") == pytest.approx(
            expected
        )
        backward = attention_efficiency(kernels, keys, 128, True, True, "slow")
        assert backward == pytest.approx(0.4 * seen / (seen + 1500.0))


@pytest.mark.parametrize(
    ("entry", "message"),
    [((0.5, 0.4, 0.0), "half_keys must be a finite number > 0"), ((0.5,), "half_keys\\]")],
)
def test_bad_kernel_entries_are_one_line_config_errors(
    entry: tuple[float, ...], message: str
) -> None:
    values = {**kernels_of(H100).to_dict(), "attention_kernels": {"cudnn": entry}}
    with pytest.raises(ConfigError, match=message):
        KernelModel(**values)


def test_a_three_value_kernel_entry_loads_from_a_file_and_round_trips() -> None:
    data = B200.to_dict()
    assert len(data["accelerator"]["kernels"]["attention_kernels"]["cudnn"]) == 3
    assert system_from_mapping(data) == B200
    data["accelerator"]["kernels"]["attention_kernels"]["cudnn"] = [0.5, 0.4, 100.0, 1.0]
    with pytest.raises(ConfigError, match="attention_kernels"):
        system_from_mapping(data)


@pytest.mark.parametrize("system", [B200, GB200])
def test_blackwell_presets_list_cudnn_slower_than_fa4_at_8k(system: object) -> None:
    kernels = kernels_of(system)
    for backward in (False, True):
        fa4 = attention_efficiency(kernels, 8192, 128, True, backward)
        cudnn = attention_efficiency(kernels, 8192, 128, True, backward, "cudnn")
        assert cudnn < fa4


def test_megatron_core_runs_cudnn_below_the_best_kernel_on_blackwell_and_hopper() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=2, global_batch=4, precision=Precision.BF16)
    for system in (B200, H100):  # both presets list a `cudnn` kernel below their best at 8k
        te = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, system)
        best = AnalyticalBackend(
            framework="megatron-core", overrides={"attention_kernel": None}
        ).evaluate(model, parallel, system)
        assert te.breakdown["compute"] > best.breakdown["compute"]


def _linear_fp8(recipe: str) -> float:
    m, n, k = 16384, 4096, 4096
    instr = Instr(
        "q", "fwd", "einsum", flops=2 * m * n * k,
        bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n,
        inputs=(("x", 2 * m * k), ("w", 2 * k * n)), outputs=(("y", 2 * m * n),),
    )  # fmt: skip
    timer = _timer(B200, dtype="fp8", fp8_recipe=recipe, fp8_training=True)
    return timer(instr) - timer._cast_s(instr, "fprop")


def test_mxfp8_gemms_run_at_the_block_scaled_fraction() -> None:
    kernels, accelerator = kernels_of(B200), B200.accelerator
    assert kernels.gemm_efficiency["mxfp8"] < kernels.gemm_efficiency["fp8"]
    m, n, k = 16384, 4096, 4096
    flops = 2 * m * n * k
    memory_s = (m * k + k * n + 2 * m * n) / (
        accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    )
    for recipe, dtype in (("mxfp8", "mxfp8"), ("tensorwise", "fp8")):
        expected = gemm_time_s(accelerator, kernels, dtype, (1, m, n, k), flops, memory_s)
        assert _linear_fp8(recipe) == pytest.approx(expected)
    ratio = _linear_fp8("mxfp8") / _linear_fp8("tensorwise")
    # the sustained fractions' ratio, and each tile's fixed prologue / epilogue over its own
    # main-loop rate (k_overhead_scale: MXFP8's slower loop spans fewer K elements of it)
    loops = [
        k / (k + kernels.gemm_k_overhead * k_overhead_scale(accelerator, kernels, dtype))
        for dtype in ("fp8", "mxfp8")
    ]
    efficiencies = kernels.gemm_efficiency["fp8"] / kernels.gemm_efficiency["mxfp8"]
    assert ratio == pytest.approx(efficiencies * loops[0] / loops[1])
    assert loops[1] > loops[0]


def test_blockwise_gemms_run_as_mxfp8_on_blackwell_only() -> None:
    """TE emulates the DeepSeek-style blockwise recipe's GEMMs with MXFP8 on sm100."""
    assert _timer(B200, dtype="fp8", fp8_recipe="blockwise")._fp8_dtype() == "mxfp8"
    assert _timer(B200, dtype="fp8", fp8_recipe="delayed")._fp8_dtype() == "fp8"
    assert _timer(H100, dtype="fp8", fp8_recipe="blockwise")._fp8_dtype() == "fp8"


def test_a_preset_without_an_mxfp8_fraction_times_mxfp8_as_fp8() -> None:
    kernels = kernels_of(B200)
    plain = dict(kernels.gemm_efficiency)
    del plain["mxfp8"]
    timer = _timer(B200, dtype="fp8", fp8_recipe="mxfp8", fp8_training=True)
    timer = dataclasses.replace(timer, kernels=dataclasses.replace(kernels, gemm_efficiency=plain))
    assert timer._fp8_dtype() == "fp8"


def test_two_runs_differing_only_in_the_fp8_recipe_are_timed_apart() -> None:
    """The recipe is in the memo keys: one backend evaluates both without a stale timing."""
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    backend = AnalyticalBackend(framework="megatron-core")
    steps = []
    for recipe in (Fp8Recipe.TENSORWISE, Fp8Recipe.MXFP8):
        parallel = ParallelConfig(dp=2, global_batch=4, precision=Precision.FP8, fp8_recipe=recipe)
        steps.append(backend.evaluate(model, parallel, B200).step_time_s)
    assert steps[0] != steps[1]
