"""torchao Float8's row-wise recipe (s23 rowwise): ``fp8_recipe='rowwise'`` (``rowwise_with_gw_hp``
is it with ``fp8_gemms`` fprop,dgrad), its casts (torchao's roofline bytes), its forward GEMM at
the fast-accumulation rate and its slow-accumulation GEMMs' output rescale, no FP8 copy saved or
held, no FP8 FSDP gather, refused where Transformer Engine runs FP8, read from a precision cell."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.fp8 import cast_bytes, with_fp8_saved
from stage_core.lower.memory import memory_report
from stage_core.lower.program import bind_all, lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_casts import quantize_cost
from stage_explore.analytical.fp8_gathers import fsdp_float8_gathers
from stage_explore.analytical.fp8_roles import cast_shares, gemm_role
from stage_explore.analytical.framework_costs import FP8_DYNAMIC_CAST_BYTES, weight_cast_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.infer_fields import Uninferable, infer_precision

H100 = load_system("h100-80gb")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2)
ALL = ("fprop", "dgrad", "wgrad")


def _fp8(**fields: object) -> ParallelConfig:
    return ParallelConfig(dp=8, zero=3, global_batch=8, precision="fp8", **fields)  # type: ignore[arg-type]


def _timer(parallel: ParallelConfig) -> tuple[KernelTimer, object, frozenset[str]]:
    accelerator = H100.accelerator
    block = bind_all(make_workload(MODEL, parallel))["layer"]
    weights = frozenset(w.name for w in block.weights)
    shares = cast_shares((*block.fwd, *block.bwd), weights, parallel.fp8_gemms)
    timer = KernelTimer(
        accelerator, accelerator.kernels, "fp8", weights, 8192, 128, True,  # type: ignore[arg-type]
        fp8_recipe=str(parallel.fp8_recipe), fp8_gemms=parallel.fp8_gemms,
        fp8_training=True, shares=shares,
    )  # fmt: skip
    return timer, block, weights


def _gemm(block: object, weights: frozenset[str], role: str) -> object:
    instrs = (*block.fwd, *block.bwd)  # type: ignore[attr-defined]
    return next(i for i in instrs if gemm_role(i, weights) == role)


def test_row_wise_casts_cost_torchaos_roofline_bytes_and_kernels() -> None:
    """torchao roofline_utils.py (05980129), activation under rowwise: one kernel reads 2 B and
    writes the row-wise FP8 copy (1 B) and a 16-bit transpose (2 B), a second reads that (2 B)
    and writes the column-wise copy (1 B); the row-wise copy alone is 3 B in one kernel."""
    n = 8192 * 4096
    assert cast_bytes(n, "rowwise", 2) == 8 * n
    assert cast_bytes(n, "rowwise", 1) == 3 * n
    assert quantize_cost(n, "rowwise", 2, 1, False) == (8 * n, 2)
    assert quantize_cost(n, "rowwise", 1, 1, False) == (3 * n, 1)


def test_weight_casts_per_use_follow_the_recipe() -> None:
    assert weight_cast_bytes("tensorwise", "fprop", ALL) == FP8_DYNAMIC_CAST_BYTES
    assert weight_cast_bytes("rowwise", "fprop", ALL) == 3
    assert weight_cast_bytes("rowwise", "dgrad", ALL) == 7
    # rowwise_with_gw_hp: the input gradient's weight is scaled tensor-wise, its amax read again
    assert weight_cast_bytes("rowwise", "dgrad", ("fprop", "dgrad")) == FP8_DYNAMIC_CAST_BYTES


def test_forward_gemm_at_fast_accumulation_gradients_rescaled() -> None:
    """The forward GEMM's kernel time equals the tensor-wise one (fast accumulation); the
    input- and weight-gradient GEMMs pay a read and write of their 16-bit output on top of the
    tensor-wise split-accumulator GEMM (torchao's unit-scale cuBLAS call, then output *= s)."""
    rowwise, block, weights = _timer(_fp8(fp8_recipe="rowwise"))
    tensorwise, _, _ = _timer(_fp8(fp8_recipe="tensorwise"))
    fprop = _gemm(block, weights, "fprop")
    assert rowwise.gemm_kernel_s(fprop) == pytest.approx(tensorwise.gemm_kernel_s(fprop))  # type: ignore[arg-type]
    hbm = H100.accelerator.achieved_memory_bandwidth_bytes_per_s
    for role in ("dgrad", "wgrad"):
        gemm = _gemm(block, weights, role)
        output = sum(size for _, size in gemm.outputs)  # type: ignore[attr-defined]
        rescale = 2 * output / hbm + rowwise.memory_kernel_s
        assert rowwise._rescale_s(gemm, role) == pytest.approx(rescale)  # type: ignore[arg-type]
        assert rowwise.gemm_kernel_s(gemm) == pytest.approx(tensorwise.gemm_kernel_s(gemm))  # type: ignore[arg-type]
        assert rowwise(gemm) - rowwise._cast_s(gemm, role) == pytest.approx(  # type: ignore[arg-type]
            tensorwise(gemm) - tensorwise._cast_s(gemm, role) + rescale  # type: ignore[arg-type]
        )
    assert rowwise._rescale_s(fprop, "fprop") == 0.0  # type: ignore[arg-type]
    assert tensorwise._rescale_s(_gemm(block, weights, "dgrad"), "dgrad") == 0.0  # type: ignore[arg-type]


def test_no_fp8_copy_is_saved_or_held_and_fsdp_gathers_16_bit() -> None:
    parallel = _fp8(fp8_recipe="rowwise")
    (stage,) = memory_report(lower(MODEL, parallel))
    (bf16,) = memory_report(lower(MODEL, dataclasses.replace(parallel, precision=Precision.BF16)))
    assert stage.fp8_weights_bytes == 0
    assert stage.activations_bytes == bf16.activations_bytes
    (tensorwise,) = memory_report(lower(MODEL, _fp8(fp8_recipe="tensorwise")))
    assert tensorwise.activations_bytes < bf16.activations_bytes  # TE saves FP8 copies
    workload = make_workload(MODEL, parallel)
    block = bind_all(workload)["layer"]
    assert with_fp8_saved(block, *_symbolic(workload), parallel) is block
    profile = dataclasses.replace(FRAMEWORKS["torchtitan"], fsdp_float8_all_gather=True)
    assert not fsdp_float8_gathers(profile, workload, "layer")
    tensorwise_workload = make_workload(MODEL, _fp8(fp8_recipe="tensorwise"))
    assert fsdp_float8_gathers(profile, tensorwise_workload, "layer")


def _symbolic(workload: object) -> tuple[object, object, object]:
    from stage_core.blocks import Structure
    from stage_core.lower.bind import symbolic_block

    w = workload
    structure = Structure.of(w.model)  # type: ignore[attr-defined]
    symbolic = symbolic_block("layer", structure, w.options, w.flags, "none")  # type: ignore[attr-defined]
    return symbolic, w.sizes, w.axis_sizes  # type: ignore[attr-defined]


def test_transformer_engine_frameworks_refuse_it_in_one_line() -> None:
    parallel = _fp8(fp8_recipe="rowwise")
    refused = "'rowwise' is torchao Float8's row-wise scaling, but framework 'megatron-core' runs"
    with pytest.raises(ConfigError, match=refused + " FP8 through Transformer Engine"):
        AnalyticalBackend(framework="megatron-core").evaluate(MODEL, parallel, H100)
    torchtitan = AnalyticalBackend(framework="torchtitan")
    rowwise = torchtitan.evaluate(MODEL, parallel, H100)
    tensorwise = torchtitan.evaluate(MODEL, _fp8(fp8_recipe="tensorwise"), H100)
    gw_hp = _fp8(fp8_recipe="rowwise", fp8_gemms=("fprop", "dgrad"))
    gw_hp_step = torchtitan.evaluate(MODEL, gw_hp, H100).step_time_s
    assert rowwise.feasible and tensorwise.step_time_s < rowwise.step_time_s
    assert gw_hp_step != rowwise.step_time_s


def test_the_cli_runs_it_under_torchtitan_only(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--model", "llama3-8b", "--layers", "2", "--dp", "8", "--zero", "3",
            "--global-batch", "8", "--precision", "fp8", "--fp8-recipe", "rowwise",
            "--system", "h100-80gb"]  # fmt: skip
    assert main([*argv, "--framework", "torchtitan"]) == 0
    capsys.readouterr()
    assert main([*argv, "--framework", "megatron-core"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'rowwise' is torchao Float8's row-wise scaling" in err and "\n" not in err


@pytest.mark.parametrize(
    ("cell", "gemms"),
    [
        ("FP8 rowwise", ()),
        ("float8 rowwise", ()),
        ("FP8 rowwise_with_gw_hp", ("fprop", "dgrad")),
        ("fp8 row-wise (gw hp)", ("fprop", "dgrad")),
    ],
)
def test_a_precision_cell_reads_the_row_wise_recipes(cell: str, gemms: tuple[str, ...]) -> None:
    read = infer_precision(cell, "torchtitan")
    assert (read.precision, read.fp8_recipe, read.fp8_gemms) == ("fp8", "rowwise", gemms)
    with pytest.raises(Uninferable, match="Transformer Engine: it has no row-wise recipe"):
        infer_precision(cell, "megatron-core")
