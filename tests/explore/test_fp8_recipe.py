"""FP8 recipes: which GEMMs run in FP8 (fprop/dgrad/wgrad, layers only), the quantization kernels
each recipe adds (memory-bound), the FP8 weight copies and scales `stage memory` reports, MXFP8
only on Blackwell, and one-line errors for bad values."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.fp8 import cast_bytes, linear_weights, weight_copy_bytes
from stage_core.lower.memory import memory_report
from stage_core.lower.program import bind_all, lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_roles import cast_shares, gemm_role
from stage_explore.analytical.gemm_tiles import gemm_shape, gemm_time_s
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.cli import main
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
B200 = load_system("b200")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2)


def _fp8(**fields: object) -> ParallelConfig:
    return ParallelConfig(tp=2, sp=True, global_batch=1, precision="fp8", **fields)  # type: ignore[arg-type]


def _timer(system: object, parallel: ParallelConfig, kind: str = "layer") -> KernelTimer:
    accelerator = system.accelerator  # type: ignore[attr-defined]
    block = bind_all(make_workload(MODEL, parallel))[kind]
    weights = frozenset(w.name for w in block.weights)
    shares = cast_shares((*block.fwd, *block.bwd), weights, parallel.fp8_gemms)
    return KernelTimer(
        accelerator, accelerator.kernels, "fp8", weights, 4096, 128, True,
        fp8_recipe=str(parallel.fp8_recipe), fp8_gemms=parallel.fp8_gemms,
        fp8_block=kind == "layer", fp8_training=True, shares=shares,
    )  # fmt: skip


def _layer(parallel: ParallelConfig, kind: str = "layer") -> tuple[object, frozenset[str]]:
    block = bind_all(make_workload(MODEL, parallel))[kind]
    return block, frozenset(w.name for w in block.weights)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"fp8_recipe": "mx"}, "`fp8_recipe` must be one of 'delayed', 'tensorwise', 'blockwise'"),
        ({"fp8_gemms": ("fprop", "bwd")}, "`fp8_gemms` must name some of fprop, dgrad, wgrad"),
        ({"fp8_gemms": ()}, "`fp8_gemms` must name some of"),
        ({"fp8_gemms": ("fprop", "fprop")}, "`fp8_gemms` must name some of"),
    ],
)
def test_bad_recipe_values_are_one_line_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _fp8(**fields)


def test_mxfp8_needs_blackwell_tensor_cores() -> None:
    parallel = dataclasses.replace(_fp8(fp8_recipe="mxfp8"), global_batch=1)
    with pytest.raises(ConfigError, match="'mxfp8' needs MXFP8 tensor cores .*H100"):
        AnalyticalBackend().evaluate(MODEL, parallel, H100)
    assert AnalyticalBackend().evaluate(MODEL, parallel, B200).feasible


@pytest.mark.parametrize("gemms", [("fprop",), ("dgrad",), ("wgrad",), ("fprop", "wgrad")])
def test_only_the_named_gemms_of_the_layers_run_in_fp8(gemms: tuple[str, ...]) -> None:
    parallel = _fp8(fp8_gemms=gemms)
    block, weights = _layer(parallel)
    fp8 = _timer(H100, parallel)
    accelerator = H100.accelerator
    assert accelerator.kernels is not None
    seen = set()
    for instr in (*block.fwd, *block.bwd):  # type: ignore[attr-defined]
        role = gemm_role(instr, weights)
        shape = gemm_shape(instr)
        if role is None or shape is None:
            continue
        seen.add(role)
        memory_s = (instr.bytes_read + instr.bytes_written) / (
            accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
        )
        bf16_s = gemm_time_s(accelerator, accelerator.kernels, "bf16", shape, instr.flops, memory_s)
        if role in gemms:
            assert fp8(instr) < bf16_s
        else:
            assert fp8(instr) == bf16_s
    assert seen == {"fprop", "dgrad", "wgrad"}


def test_the_output_layer_stays_bf16() -> None:
    parallel = _fp8()
    head, weights = _layer(parallel, "head")
    fp8 = _timer(H100, parallel, "head")
    bf16 = dataclasses.replace(fp8, dtype="bf16")
    linear = [i for i in (*head.fwd, *head.bwd) if gemm_role(i, weights)]  # type: ignore[attr-defined]
    assert linear
    assert all(fp8(instr) == bf16(instr) for instr in linear)


def test_the_moe_router_stays_16_bit() -> None:
    """Megatron-Core's router is a torch linear outside Transformer Engine's fp8_autocast: its
    forward, input- and weight-gradient GEMMs time as 16-bit ones, without casts, and its input
    (ln2) and output gradient are no FP8 cast's share; the experts' GEMMs run in FP8."""
    model = get_flavor("qwen3-235b-a22b").with_overrides(layers=2, seq_len=512)
    parallel = _fp8()
    block = bind_all(make_workload(model, parallel))["moe_layer"]
    weights = frozenset(w.name for w in block.weights)
    instrs = (*block.fwd, *block.bwd)
    shares = cast_shares(instrs, weights, parallel.fp8_gemms)
    accelerator = H100.accelerator
    fp8 = KernelTimer(
        accelerator, accelerator.kernels, "fp8", weights, 512, 128, True,
        fp8_gemms=parallel.fp8_gemms, fp8_training=True, shares=shares,
    )  # fmt: skip
    bf16 = dataclasses.replace(fp8, dtype="bf16")
    router = [
        i
        for i in instrs
        if gemm_role(i, weights)
        and any(n in ("router", "d.router") for n, _ in (*i.inputs, *i.outputs))
    ]
    assert {gemm_role(i, weights) for i in router} == {"fprop", "dgrad", "wgrad"}
    assert all(fp8(i) == bf16(i) for i in router)
    assert not {name for _, name in shares} & {"ln2", "d.moe.logits"}
    up = next(i for i in instrs if i.name == "experts.up")
    assert fp8(up) < bf16(up)


def test_a_cast_costs_its_bytes_at_the_achieved_bandwidth() -> None:
    """fprop on H100, delayed scaling: read the 16-bit activation once, write a row-wise and
    a column-wise FP8 copy (Hopper's FP8 GEMMs take only TN); tensorwise reads it once more."""
    elements = 4096 * 4096
    assert cast_bytes(elements, "delayed", 2) == 2 * elements + 2 * elements
    assert cast_bytes(elements, "tensorwise", 2) == 4 * elements + 2 * elements
    assert cast_bytes(elements, "mxfp8", 1) == 2 * elements + elements + elements // 32
    assert cast_bytes(elements, "blockwise", 1) == 2 * elements + elements + elements // 128 * 4
    parallel = _fp8()
    block, weights = _layer(parallel)
    fprop = next(i for i in block.fwd if gemm_role(i, weights) == "fprop")  # type: ignore[attr-defined]
    delayed, current = _timer(H100, parallel), _timer(H100, _fp8(fp8_recipe="tensorwise"))
    name, size = next((name, size) for name, size in fprop.inputs if name not in weights)
    activation, share = size // 2, delayed.shares[fprop.phase, name]
    assert share == 3  # q, k and v read one normed input: one cast
    bandwidth = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
    assert current(fprop) - delayed(fprop) == pytest.approx(2 * activation / bandwidth / share)


def test_blackwell_per_tensor_needs_no_transposed_copy() -> None:
    parallel = _fp8()
    block, weights = _layer(parallel)
    fprop = next(i for i in block.fwd if gemm_role(i, weights) == "fprop")  # type: ignore[attr-defined]
    name, size = next((name, size) for name, size in fprop.inputs if name not in weights)
    bandwidth = B200.accelerator.memory_bandwidth_bytes_per_s * B200.accelerator.efficiency.memory
    delayed, mx = _timer(B200, parallel), _timer(B200, _fp8(fp8_recipe="mxfp8"))
    extra = cast_bytes(size // 2, "mxfp8", 2) - cast_bytes(size // 2, "delayed", 1)
    share = delayed.shares[fprop.phase, name]
    casts = mx._cast_s(fprop, "fprop") - delayed._cast_s(fprop, "fprop")
    assert casts == pytest.approx(extra / bandwidth / share)
    # the rest is the GEMM itself (MXFP8's block-scaled fraction, test_blackwell_kernels.py)
    assert mx(fprop) - delayed(fprop) >= casts


@pytest.mark.parametrize(
    ("recipe", "gemms", "per_element"),
    [
        ("delayed", ("fprop", "dgrad", "wgrad"), 2),
        ("mxfp8", ("fprop",), 1),
        ("delayed", ("wgrad",), 0),
    ],
)
def test_memory_holds_the_fp8_weight_copies(
    recipe: str, gemms: tuple[str, ...], per_element: int
) -> None:
    parallel = _fp8(fp8_recipe=recipe, fp8_gemms=gemms)
    (stage,) = memory_report(lower(MODEL, parallel))
    (bf16_stage,) = memory_report(
        lower(MODEL, dataclasses.replace(parallel, precision=Precision.BF16))
    )
    layer = bind_all(make_workload(MODEL, parallel))["layer"]
    linear = linear_weights(layer)
    elements = sum(w.elements for w in layer.weights if w.name in linear)
    # q, k, v, o and the three SwiGLU matrices of a Llama layer, split over tp = 2
    h, kv, f = MODEL.hidden, MODEL.kv_heads * MODEL.head_dim, MODEL.ffn
    assert elements == (2 * h * h + 2 * h * kv + 3 * h * f) // 2
    expected = MODEL.layers * sum(
        weight_copy_bytes(w.elements, recipe, gemms) for w in layer.weights if w.name in linear
    )
    assert stage.fp8_weights_bytes == expected
    assert expected >= per_element * MODEL.layers * elements
    assert stage.weights_bytes - bf16_stage.weights_bytes == expected


def test_stage_memory_shows_the_fp8_copies(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "llama3-8b", "--layers", "2", "--tp", "2", "--sp"]
    assert main([*argv, "--precision", "fp8", "--fp8-recipe", "blockwise", "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert rank["fp8_weights_bytes"] > 0
    assert main([*argv, "--precision", "fp8"]) == 0
    assert "FP8 weight copies and scales" in capsys.readouterr().out
    assert main([*argv, "--precision", "fp8", "--fp8-gemms", "fprop,bwd"]) == 2
    assert "`fp8_gemms` must name some of" in capsys.readouterr().err


def test_one_backend_keeps_recipes_apart() -> None:
    """The memoised parts are keyed by the recipe: the same backend gives each recipe its own
    step time and memory, and BF16 is unaffected by the FP8 fields."""
    backend, model = AnalyticalBackend(), get_flavor("llama3-8b").with_overrides(layers=4)
    base = ParallelConfig(tp=2, dp=4, sp=True, global_batch=8, precision=Precision.FP8)
    delayed = backend.evaluate(model, base, H100)
    current = backend.evaluate(model, dataclasses.replace(base, fp8_recipe="tensorwise"), H100)
    fprop = backend.evaluate(model, dataclasses.replace(base, fp8_gemms=("fprop",)), H100)
    assert delayed.step_time_s < current.step_time_s
    assert delayed.step_time_s < fprop.step_time_s
    assert fprop.peak_memory_bytes < delayed.peak_memory_bytes
    bf16 = dataclasses.replace(base, precision=Precision.BF16)
    other = dataclasses.replace(bf16, fp8_recipe="blockwise", fp8_gemms=("wgrad",))
    assert backend.evaluate(model, bf16, H100) == backend.evaluate(model, other, H100)
