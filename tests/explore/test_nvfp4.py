"""NVFP4 training precision (``precision='fp4'``, recipe ``nvfp4``): config validation, the FP4
weight copies and saved weight-gradient inputs counted from the lowered program in exact bytes,
the three cast kernels of a random-Hadamard-transformed operand, the refusal on a system without
a measured NVFP4 GEMM fraction, and evaluations on GB300 and B200."""

from __future__ import annotations

import dataclasses
import math

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.fp8 import cast_bytes, copy_bytes, linear_weights, weight_copy_bytes
from stage_core.lower.memory import memory_report
from stage_core.lower.program import bind_all, lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical import parts
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_casts import quantize_cost
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.cli import main
from stage_explore.system import System, load_system
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fields import Uninferable, infer_precision
from tests.explore.published_rows import minimal_row

GB300 = load_system("gb300-nvl72")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)


def _fp4(**fields: object) -> ParallelConfig:
    return ParallelConfig(tp=2, sp=True, global_batch=1, precision="fp4", **fields)  # type: ignore[arg-type]


def test_fp4_config_and_its_one_line_errors() -> None:
    parallel = _fp4()
    assert parallel.precision is Precision.FP4
    assert parallel.quantized and parallel.linear_recipe == "nvfp4"
    assert _fp4(fp8_gemms=("fprop",)).fp8_gemms == ("fprop",)
    with pytest.raises(ConfigError, match="precision='fp4' and an FP8 recipe are exclusive"):
        _fp4(fp8_recipe="mxfp8")
    with pytest.raises(ConfigError, match="`fp4_recipe` must be one of 'nvfp4'"):
        _fp4(fp4_recipe="mxfp4")
    bf16 = ParallelConfig(global_batch=1)
    assert not bf16.quantized


def test_nvfp4_bytes_per_copy() -> None:
    """E2M1 data (two per byte), one E4M3 scale per 16 elements, one FP32 amax per copy; the
    casts read the 16-bit tensor once for the amax and once per copy (TE NVFP4Quantizer)."""
    n = 4096 * 1024 + 3  # odd: the halves and the 16-blocks round up
    assert copy_bytes(n, "nvfp4", weight=False) == math.ceil(n / 2) + math.ceil(n / 16) + 4
    assert weight_copy_bytes(n, "nvfp4", ("fprop", "dgrad", "wgrad")) == 2 * copy_bytes(
        n, "nvfp4", weight=True
    )
    assert cast_bytes(n, "nvfp4", 2) == 3 * 2 * n + 2 * copy_bytes(n, "nvfp4", weight=False)
    assert cast_bytes(n, "nvfp4", 1) == 2 * 2 * n + copy_bytes(n, "nvfp4", weight=False)
    moved, kernels = quantize_cost(n, "nvfp4", 2, 1, norm_fused=False)
    assert (moved, kernels) == (cast_bytes(n, "nvfp4", 2), 3)


def test_memory_holds_the_fp4_weight_copies() -> None:
    """The lowered program's weights: the 16-bit weights plus two FP4 copies (row- and
    column-wise 2-D blocks) of every decoder-layer linear weight, none of the output layer."""
    parallel = _fp4()
    (stage,) = memory_report(lower(MODEL, parallel))
    bf16 = dataclasses.replace(parallel, precision=Precision.BF16)
    (bf16_stage,) = memory_report(lower(MODEL, bf16))
    layer = bind_all(make_workload(MODEL, parallel))["layer"]
    linear = linear_weights(layer)
    h, kv, f = MODEL.hidden, MODEL.kv_heads * MODEL.head_dim, MODEL.ffn
    sizes = [w.elements for w in layer.weights if w.name in linear]
    assert sum(sizes) == (2 * h * h + 2 * h * kv + 3 * h * f) // 2  # split over tp = 2
    per_copy = sum(n // 2 + n // 16 + 4 for n in sizes)  # every local size divides by 16
    assert stage.fp8_weights_bytes == MODEL.layers * 2 * per_copy
    assert stage.weights_bytes - bf16_stage.weights_bytes == MODEL.layers * 2 * per_copy


def test_saved_wgrad_inputs_are_fp4_copies() -> None:
    """A Llama layer keeps its QKV, MLP and fc2 inputs only as FP4 copies (0.5625 B per
    element) and the attention output both 16-bit and as an FP4 copy (closed form as
    tests/core/test_fp8_saved.py's for FP8)."""
    settings = {"dp": 1, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 1}
    bf16 = bind_all(make_workload(MODEL, ParallelConfig(**settings)))["layer"]  # type: ignore[arg-type]
    fp4 = bind_all(make_workload(MODEL, ParallelConfig(precision="fp4", **settings)))["layer"]  # type: ignore[arg-type]
    s, h, ffn, q = MODEL.seq_len, MODEL.hidden, MODEL.ffn, MODEL.heads * MODEL.head_dim

    def copy(n: int) -> int:
        return n // 2 + n // 16 + 4

    expected = (
        bf16.saved_bytes
        - sum(2 * n - copy(n) for n in (s * h, s * h, s * ffn))
        + copy(s * q)
    )
    assert fp4.saved_bytes == expected


def test_fp4_gemms_and_casts_on_gb300() -> None:
    """Each linear GEMM runs at the nvfp4 peak and fraction on a quarter of the 16-bit operand
    bytes, after three cast kernels per RHT operand; faster than MXFP8 at these shapes."""
    parallel = _fp4()
    block = bind_all(make_workload(MODEL, parallel))["layer"]
    weights = frozenset(w.name for w in block.weights)
    accelerator = GB300.accelerator
    kernels = accelerator.kernels
    assert kernels is not None
    fp4 = KernelTimer(
        accelerator, kernels, "fp8", weights, 1024, 128, True, fp8_recipe="nvfp4",
        fp8_block=True, fp8_training=True, memory_kernel_s=kernels.memory_kernel_s,
    )  # fmt: skip
    mx = dataclasses.replace(fp4, fp8_recipe="mxfp8")
    assert fp4._fp8_dtype() == "nvfp4" and mx._fp8_dtype() == "mxfp8"
    fc1 = max(
        (i for i in block.fwd if gemm_role(i, weights) == "fprop"), key=lambda i: i.flops
    )
    assert fp4.gemm_kernel_s(fc1) < mx.gemm_kernel_s(fc1)
    size = next(s for n, s in fc1.inputs if n not in weights)
    bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
    casts = cast_bytes(size // 2, "nvfp4", 2) / bandwidth + 3 * kernels.memory_kernel_s
    assert fp4._cast_s(fc1, "fprop") == pytest.approx(casts)


def _without_nvfp4_fraction(preset: str) -> System:
    """``preset`` as a user system file that states the NVFP4 peak but no NVFP4 GEMM fraction."""
    system = load_system(preset)
    kernels = system.accelerator.kernels
    assert kernels is not None
    fractions = {k: v for k, v in kernels.gemm_efficiency.items() if k != "nvfp4"}
    accelerator = dataclasses.replace(
        system.accelerator, kernels=dataclasses.replace(kernels, gemm_efficiency=fractions)
    )
    return dataclasses.replace(system, accelerator=accelerator)


def test_fp4_is_refused_without_a_measured_nvfp4_fraction() -> None:
    parallel = _fp4()
    for preset in ("b200", "gb200-nvl72"):
        system = _without_nvfp4_fraction(preset)
        assert "nvfp4" in system.accelerator.peak_flops_per_s  # the vendor's peak is stated
        refusal = rf"on system '{system.name}' needs a grounded NVFP4"
        with pytest.raises(ConfigError, match=refusal) as error:
            AnalyticalBackend().evaluate(MODEL, parallel, system)
        assert "gemm_efficiency.nvfp4" in str(error.value)
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="peak_flops_per_s.nvfp4"):
        AnalyticalBackend().evaluate(MODEL, parallel, load_system("h100-80gb"))


@pytest.mark.parametrize("preset", ["gb300-nvl72", "b200", "gb200-nvl72"])
def test_fp4_eval_is_faster_than_fp8_and_bf16(preset: str) -> None:
    system = load_system(preset)
    backend = AnalyticalBackend(framework="megatron-core")
    model = get_flavor("llama3-8b").with_overrides(layers=4)
    base = ParallelConfig(dp=8, global_batch=16, precision="fp4")
    fp4 = backend.evaluate(model, base, system)
    mx = backend.evaluate(
        model, dataclasses.replace(base, precision=Precision.FP8, fp8_recipe="mxfp8"), system
    )
    bf16 = backend.evaluate(model, dataclasses.replace(base, precision=Precision.BF16), system)
    assert fp4.feasible and mx.feasible
    assert fp4.step_time_s < mx.step_time_s < bf16.step_time_s
    # MFU against the nvfp4 peak: three times the FP8 peak on Blackwell Ultra, twice on Blackwell
    peaks = system.accelerator.peak_flops_per_s
    ratio = (fp4.mfu * fp4.step_time_s) / (mx.mfu * mx.step_time_s)
    assert ratio == pytest.approx(peaks["mxfp8"] / peaks["nvfp4"])


def test_cli_accepts_fp4(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--model", "llama3-8b", "--layers", "2", "--dp", "8", "--json"]
    assert main([*argv, "--precision", "fp4", "--system", "gb300-nvl72"]) == 0
    capsys.readouterr()
    assert main([*argv, "--precision", "fp4", "--system", "b200"]) == 0
    capsys.readouterr()
    assert main([*argv, "--precision", "fp4", "--system", "h100-80gb"]) == 2
    err = capsys.readouterr().err
    assert "needs a grounded NVFP4 GEMM rate" in err and err.count("\n") == 1


#: Dense FP4 PFLOP/s per board as the vendor states it: HGX B200 / B300 "sparse | dense" per 8
#: GPUs (144 | 72, 144 | 108), GB300 NVL72 "1,440 | 1,080" per 72, GB200 NVL72 1,440 sparse.
FP4_DENSE = {
    "b200": 72 / 8, "b300": 108 / 8, "gb300-nvl72": 1080 / 72, "gb200-nvl72": 1440 / 72 / 2,
}  # fmt: skip


@pytest.mark.parametrize("preset", sorted(FP4_DENSE))
def test_nvfp4_presets_follow_the_cited_peaks(preset: str) -> None:
    """The vendor's dense FP4 peaks; the fractions: test_nvfp4_fractions.py."""
    accelerator = load_system(preset).accelerator
    assert accelerator.peak("nvfp4") == pytest.approx(FP4_DENSE[preset] * 1e15)
    assert accelerator.kernels is not None
    assert "nvfp4" in accelerator.kernels.gemm_efficiency


@pytest.mark.parametrize("cell", ["NVFP4", "FP4", "nvfp4 mixed"])
def test_an_fp4_precision_cell_reads_as_nvfp4(cell: str) -> None:
    bridge = infer_precision(cell, "megatron-core", bridge=True)
    assert (bridge.precision, bridge.fp8_recipe) == ("fp4", "")
    assert "no layer pinned to BF16" in bridge.assumption  # Megatron-Bridge's perf scripts
    plain = infer_precision(cell, "megatron-core")
    assert plain.precision == "fp4" and "no BF16 layer count stated" in plain.assumption
    with pytest.raises(Uninferable, match="not MXFP4"):
        infer_precision("MXFP4", "megatron-core")


def _bridge_row(tp: str) -> dict[str, str]:
    """A Megatron-Bridge 26.02 GB300 Llama 3 70B NVFP4 row (64 GPUs, GBS 256)."""
    return minimal_row(
        source="NVIDIA Megatron-Bridge performance summary (26.02 container)",
        model="Llama 3 70B", gpu="GB300", precision="NVFP4", global_batch_seqs="256",
        num_gpus="64", tp=tp, pp="1", cp="1", micro_batch="1", seq_len="8192",
    )  # fmt: skip


def test_bridge_llama_nvfp4_runs_without_tp_overlap() -> None:
    """Megatron-Bridge's Llama 3 perf configs set tp_comm_overlap = False under nvfp4; a TP 1
    row has no TP communication to overlap (no option set)."""
    (case, *_) = row_cases(_bridge_row("2"), "extra.csv", 1)
    assert case.parallel is not None, case.reason
    assert case.parallel.precision is Precision.FP4
    assert dict(case.framework_options).get("tp_comm_overlap") is False
    (single, *_) = row_cases(_bridge_row("1"), "extra.csv", 1)
    assert single.parallel is not None, single.reason
    assert "tp_comm_overlap" not in dict(single.framework_options)


def test_an_fp4_evaluation_checks_its_nvfp4_rate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """s19 review2: the MFU's peak reuses the evaluation's compute dtype; ``peak_dtype`` ran
    ``compute_dtype`` (and with it the NVFP4 check) a second time per evaluation."""
    checked: list[str] = []
    check = parts.check_nvfp4

    def counted(system: str, accelerator: object) -> None:
        checked.append(system)
        check(system, accelerator)  # type: ignore[arg-type]

    monkeypatch.setattr(parts, "check_nvfp4", counted)
    backend = AnalyticalBackend(framework="megatron-core")
    result = backend.evaluate(MODEL, ParallelConfig(dp=8, global_batch=16, precision="fp4"), GB300)
    assert result.feasible and checked == [GB300.name]
    fp4, bf16 = ParallelConfig(global_batch=1, precision="fp4"), ParallelConfig(global_batch=1)
    assert parts.peak_dtype(fp4, "fp8") == "nvfp4" and parts.peak_dtype(bf16, "bf16") == "bf16"
