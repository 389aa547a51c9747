"""Transformer Engine's FP8 quantization kernels as kernels
(:mod:`stage_explore.analytical.fp8_casts`): each cast pays the kernel model's
``memory_kernel_s``; a fused norm + linear layer's norm writes its FP8 input under delayed
scaling; a column-wise copy made from FP8 data (the norm's output, a userbuffers-gathered
operand) is a transpose kernel of its own on Hopper."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from stage_core.lower.fp8 import cast_bytes
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_casts import launches_casts, quantize_cost
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

H100 = load_system("h100-80gb")
B200 = load_system("b200")
DENSE = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=2048)
MOE = get_flavor("mixtral-8x7b").with_overrides(layers=2, vocab=32000, seq_len=2048)
E = 2048 * 4096


def _parallel(**kwargs: Any) -> ParallelConfig:
    return ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=16, **kwargs)


def _timer(
    model: Any, recipe: str, system: Any = H100, framework: str = "megatron-core", **over: Any
) -> tuple[KernelTimer, Any, frozenset[str]]:
    backend = AnalyticalBackend(framework=framework, overrides=over)
    parallel = _parallel(precision="fp8", fp8_recipe=recipe)
    if model is MOE:
        parallel = replace(parallel, ep=2)
    point = bound_point(backend, model, parallel, system)
    kind = "moe_layer" if model is MOE else "layer"
    timer = backend._compute_timer(point, kind)
    assert isinstance(timer, KernelTimer)
    block = point.blocks[kind]
    weights = frozenset(w.name for w in block.weights)
    return timer, backend._timed_instrs(block, weights), weights


def test_quantize_cost_by_where_the_row_wise_copy_comes_from() -> None:
    whole = cast_bytes(E, "delayed", 2)
    assert quantize_cost(E, "delayed", 2, 1, norm_fused=False) == (whole, 1)  # cast-transpose
    shard = cast_bytes(E, "delayed", 1) / 4 + E + E  # local cast, then read and write E
    assert quantize_cost(E, "delayed", 2, 4, norm_fused=False) == (shard, 2)
    assert quantize_cost(E, "delayed", 2, 1, norm_fused=True) == (2 * E, 1)  # transpose only
    assert quantize_cost(E, "delayed", 1, 4, norm_fused=True) == (0.0, 0)  # Blackwell: none
    mx = cast_bytes(E, "mxfp8", 2) - cast_bytes(E, "mxfp8", 1)  # MXFP8: both from 16-bit
    assert quantize_cost(E, "mxfp8", 2, 4, norm_fused=False) == (
        cast_bytes(E, "mxfp8", 1) / 4 + mx,
        1,
    )


def test_the_norms_write_the_fp8_inputs_of_fused_norm_linear_layers() -> None:
    timer, _, _ = _timer(DENSE, "delayed")
    assert timer.norm_casts == {("fwd", "ln1"), ("fwd", "ln2")}
    # current scaling: the norm computes the amax (FUSED_NORM_AMAX_FP8), a cast follows
    assert _timer(DENSE, "tensorwise")[0].norm_casts == timer.norm_casts
    assert not _timer(DENSE, "tensorwise", te_current_scaling=False)[0].norm_casts
    assert not _timer(DENSE, "mxfp8", B200)[0].norm_casts  # UNFUSED by default
    moe, _, _ = _timer(MOE, "delayed")
    assert moe.norm_casts == {("fwd", "ln1")}  # the router reads ln2 in 16 bits


def test_each_cast_kernel_pays_the_fixed_time() -> None:
    """Per FP8 GEMM of the layer, the difference with and without ``memory_kernel_s`` is that
    time × the cast kernels its operand costs: on Hopper under delayed scaling and
    userbuffers, one transpose of each norm output, one cast-transpose of each whole operand,
    a cast and a transpose of each gathered output gradient, none for the weight gradients
    (their operands' copies are made for fprop and dgrad)."""
    timer, instrs, weights = _timer(DENSE, "delayed")
    assert timer.memory_kernel_s > 0
    free = replace(timer, memory_kernel_s=0.0)
    launches = {}
    for instr in instrs:
        role = gemm_role(instr, weights)
        if instr.kind != "einsum" or role is None or instr.flops == 0:
            continue
        extra = timer._cast_s(instr, role) - free._cast_s(instr, role)
        launches[instr.phase, instr.name] = round(extra / timer.memory_kernel_s, 9)
    assert launches == {
        ("fwd", "q"): 1,  # the transpose of ln1's FP8 output
        ("fwd", "attn.proj"): 1,
        ("fwd", "mlp.up"): 1,  # the transpose of ln2's
        ("fwd", "mlp.fc2"): 1,
        ("bwd", "mlp.fc2.dmlp.act"): 2,  # gathered: the shard's cast, the gathered transpose
        ("bwd", "mlp.fc2.dmlp.w2"): 0,
        ("bwd", "mlp.up.dln2"): 1,
        ("bwd", "mlp.up.dmlp.wu"): 0,
        ("bwd", "attn.proj.dattn.core"): 2,
        ("bwd", "attn.proj.dwo"): 0,
        ("bwd", "v.dln1"): 1,
        ("bwd", "v.dwv"): 0,
    }


def test_norm_fused_and_gathered_operands_transpose_on_hopper_only() -> None:
    hopper, instrs, weights = _timer(DENSE, "delayed")
    blackwell, _, _ = _timer(DENSE, "delayed", B200)
    (q,) = [
        i
        for i in instrs
        if i.phase == "fwd"
        and gemm_role(i, weights) == "fprop"
        and any(n == "ln1" for n, _ in i.inputs)
    ][:1]
    share = hopper.shares.get(("fwd", "ln1"), 1)
    bandwidth = H100.accelerator.achieved_memory_bandwidth_bytes_per_s
    elements = dict(q.inputs)["ln1"] // 2
    expected = (2 * elements / bandwidth + hopper.memory_kernel_s) / share
    assert hopper._cast_s(q, "fprop") == pytest.approx(expected, rel=1e-12)
    assert blackwell._cast_s(q, "fprop") == 0.0  # the norm's FP8 output, no transpose


def test_pipelined_chunks_launch_the_cast_once() -> None:
    assert launches_casts("attn.proj")
    assert launches_casts("attn.proj.chunk0")
    assert not launches_casts("attn.proj.chunk1")
    assert not launches_casts("mlp.down.chunk12")
    assert launches_casts("mlp.chunky")
