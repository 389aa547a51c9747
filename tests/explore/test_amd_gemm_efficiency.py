"""The AMD presets' GEMM efficiencies reproduce AMD's own benchmarks through the tile model:
hipBLASLt's Max-Achievable FLOPs on MI300X / MI325X at the benchmark's shapes (16-bit
4096 x 4864 x 32896, FP8 4096 x 3648 x 32896; ROCm/rocm-blogs
measuring-max-achievable-flops-part2, Table 1 and Appendix B) and MI355X's FP8 hipBLASLt rate at
8192^3 (rocm-blogs cdna4-gemm-kernels, Table 5, x 0.85 sustained / burst), each with
``gemm_k_overhead`` 160; and a kernel model's per-dtype tile (``gemm_tile_by_dtype``: the FP8
MAF shape's N = 19 x 192 is one 256 x 192 tile per CU) is the one that dtype's GEMMs use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.analytical.gemm_tiles import gemm_time_s
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel

PRESETS = Path(__file__).resolve().parents[2] / "stage_explore" / "system" / "presets"
SIXTEEN_BIT = (1, 4096, 4864, 32896)
FP8_MAF = (1, 4096, 3648, 32896)
#: (preset, dtype) -> (shape, measured TFLOP/s, peak TFLOP/s): AMD's MAF Table 1.
MEASURED = {
    ("mi300x", "bf16"): (SIXTEEN_BIT, 708.0, 1307.4),
    ("mi300x", "fp16"): (SIXTEEN_BIT, 654.0, 1307.4),
    ("mi300x", "fp8"): (FP8_MAF, 1273.0, 2614.9),
    ("mi325x", "bf16"): (SIXTEEN_BIT, 843.0, 1307.4),
    ("mi325x", "fp16"): (SIXTEEN_BIT, 794.0, 1307.4),
    ("mi325x", "fp8"): (FP8_MAF, 1519.0, 2614.9),
    ("mi355x", "fp8"): ((1, 8192, 8192, 8192), 3130.21 * 0.85, 5033.2),
}


def _modelled_fraction(name: str, dtype: str, shape: tuple[int, int, int, int]) -> float:
    accelerator = load_system(name).accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    _, m, n, k = shape
    flops = 2 * m * n * k
    seconds = gemm_time_s(accelerator, kernels, dtype, shape, flops, 0.0)
    return flops / seconds / accelerator.peak(dtype)


@pytest.mark.parametrize(("name", "dtype"), list(MEASURED))
def test_the_preset_reproduces_its_benchmark_at_the_benchmarks_shape(name: str, dtype: str) -> None:
    shape, measured, peak = MEASURED[(name, dtype)]
    assert _modelled_fraction(name, dtype, shape) == pytest.approx(measured / peak, rel=1.5e-3)


@pytest.mark.parametrize("name", ["mi300x", "mi325x"])
def test_the_fp8_maf_shape_is_one_wave_of_the_fp8_tile(name: str) -> None:
    """N = 3648 = 19 x 192: 16 x 19 = 304 tiles of 256 x 192 fill the 304 CUs once, where
    256 x 256 tiles would leave a quarter of them idle."""
    kernels = load_system(name).accelerator.kernels
    assert kernels is not None
    assert kernels.tile("fp8") == (256, 192)
    assert kernels.tile("bf16") == kernels.gemm_tile == (256, 256)
    square = replace(kernels, gemm_tile_by_dtype={})
    accelerator = replace(load_system(name).accelerator, kernels=square)
    _, m, n, k = FP8_MAF
    flops = 2 * m * n * k
    per_tile = gemm_time_s(accelerator, kernels, "fp8", FP8_MAF, flops, 0.0)
    one_tile = gemm_time_s(accelerator, square, "fp8", FP8_MAF, flops, 0.0)
    assert one_tile / per_tile == pytest.approx(304 * 256 * 256 / (m * n), rel=1e-9)


def test_mi355x_bf16_is_its_fp8_fraction_times_cdna3s_ratio() -> None:
    """No MI355X BF16 figure: CDNA 3's BF16 / FP8 ratio of the sustained fractions (each through
    the tile model at AMD's MAF shapes) carries to CDNA 4."""
    ratios = []
    for name in ("mi300x", "mi325x"):
        kernels = load_system(name).accelerator.kernels
        assert kernels is not None
        ratios.append(kernels.gemm_efficiency["bf16"] / kernels.gemm_efficiency["fp8"])
    kernels = load_system("mi355x").accelerator.kernels
    assert kernels is not None
    expected = kernels.gemm_efficiency["fp8"] * sum(ratios) / len(ratios)
    assert kernels.gemm_efficiency["bf16"] == pytest.approx(expected, abs=1e-3)
    assert kernels.gemm_efficiency["fp16"] == kernels.gemm_efficiency["bf16"]


def test_a_dtype_without_its_own_tile_uses_gemm_tile() -> None:
    kernels = load_system("mi300x").accelerator.kernels
    assert kernels is not None
    assert kernels.tile("fp16") == (256, 256)
    assert KernelModel(**kernels.to_dict()) == kernels  # the per-dtype tile round-trips


def test_a_bad_per_dtype_tile_is_refused_in_one_line(tmp_path: Path) -> None:
    text = (PRESETS / "mi300x.toml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("gemm_tile_by_dtype"))
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(line, "gemm_tile_by_dtype = { fp8 = [256, 0] }"))
    with pytest.raises(ConfigError) as error:
        load_system(str(bad))
    message = str(error.value)
    assert "\n" not in message
    assert "gemm_tile_by_dtype.fp8" in message and "[256, 0]" in message
