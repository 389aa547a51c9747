"""Megatron's fused QKV projection (``fused_qkv``): the generator's three q, k, v GEMMs timed as
one GEMM of the concatenated weights in each phase — shapes against closed forms of the model's
dims, the work conserved, the input gradient's accumulation adds spared — and the profile option
reaching the step time."""

from __future__ import annotations

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.fused_qkv import fuse_qkv
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.system import load_system

A100 = load_system("a100-80gb")


def _layer(model: ModelSpec, tp: int) -> BoundBlock:
    parallel = ParallelConfig(tp=tp, dp=1, global_batch=1, recompute=Recompute.FULL)
    return bind_all(make_workload(model, parallel))["layer"]


def _named(instrs: tuple[Instr, ...], phase: str, name: str) -> Instr:
    (instr,) = (i for i in instrs if i.phase == phase and i.name == name)
    return instr


def _working(instrs: tuple[Instr, ...], phase: str, names: list[str]) -> Instr:
    """The one of ``names`` that still does work (the first of its group in the list)."""
    (instr,) = (i for i in instrs if i.phase == phase and i.name in names and i.flops)
    return instr


def _check(model: ModelSpec, tp: int, prefix: str) -> None:
    block = _layer(model, tp)
    weights = frozenset(w.name for w in block.weights)
    m = model.seq_len  # one sequence per micro-batch
    h, d = model.hidden, model.head_dim
    n = (model.heads + 2 * model.kv_heads) * d // tp  # the concatenated q, k, v columns
    dln1 = "d.ln1"
    for instrs, phases in ((block.fwd, ("fwd",)), (block.bwd, ("recompute", "bwd"))):
        fused = fuse_qkv(instrs, weights)
        assert len(fused) == len(instrs)
        gemm_flops = [sum(i.flops for i in x if i.kind == "einsum") for x in (fused, instrs)]
        assert gemm_flops[0] == gemm_flops[1]  # the same matmul work, in fewer kernels
        for phase in phases:
            if phase in ("fwd", "recompute"):
                assert gemm_shape(_named(fused, phase, f"q{prefix}")) == (1, m, n, h)
                for other in ("k", "v"):
                    idle = _named(fused, phase, f"{other}{prefix}")
                    assert (idle.flops, idle.bytes_read, idle.bytes_written) == (0, 0, 0)
        if "bwd" not in phases:
            continue
        dgrad = _working(fused, "bwd", [f"{x}{prefix}.dln1" for x in "qkv"])
        assert gemm_shape(dgrad) == (1, m, h, n)
        assert dgrad.bytes_written == m * h * 2  # the input's gradient written once
        wgrad = _working(fused, "bwd", [f"{x}{prefix}.dw{x}" for x in "qkv"])
        batch, rows, cols, depth = gemm_shape(wgrad) or (0, 0, 0, 0)
        assert (batch, depth, rows * cols) == (1, m, n * h)
        # the three partial input gradients are no longer summed
        before = [i for i in instrs if ".accumulate." in i.name and i.name.endswith(dln1)]
        after = [i for i in fused if ".accumulate." in i.name and i.name.endswith(dln1)]
        assert len(before) == 2
        assert all(i.bytes_read == i.bytes_written == 0 for i in after)


def test_fused_qkv_of_a_biased_multi_head_gpt_layer() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    _check(model, tp=2, prefix=".nobias")


def test_fused_qkv_of_a_grouped_query_llama_layer() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    assert model.kv_heads < model.heads
    _check(model, tp=2, prefix="")


def test_fuse_qkv_leaves_other_instructions_alone() -> None:
    block = _layer(get_flavor("megatron-gpt-1.7b").with_overrides(layers=2), tp=2)
    weights = frozenset(w.name for w in block.weights)
    fused = fuse_qkv(block.bwd, weights)
    touched = {i.name.split(".")[0] for i, j in zip(block.bwd, fused, strict=True) if i != j}
    assert touched <= {"q", "k", "v", "ln1"}
    assert fuse_qkv(block.bwd, frozenset()) == tuple(block.bwd)


def test_the_option_reaches_the_step_time() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(tp=8, dp=1, global_batch=4, micro_batch=2, recompute=Recompute.FULL)
    assert get_framework("megatron-lm-2021").fused_qkv
    fused = AnalyticalBackend(framework="megatron-lm-2021").evaluate(model, parallel, A100)
    separate = AnalyticalBackend(
        framework="megatron-lm-2021", overrides={"fused_qkv": False}
    ).evaluate(model, parallel, A100)
    # the same work: the fused GEMMs fill more of the GPU and skip two adds per backward
    assert fused.model_flops_per_step == separate.model_flops_per_step
    assert fused.step_time_s < separate.step_time_s


def test_megatron_core_runs_linear_qkv_as_one_gemm() -> None:
    """Megatron-Core's ``SelfAttention.linear_qkv`` (output ``query_projection_size + 2 *
    kv_projection_size``) is one GEMM: the profile fuses, and a grouped-query layer's step is
    faster than with three separate GEMMs for the same work."""
    assert get_framework("megatron-core").fused_qkv
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=4, dp=1, global_batch=2, micro_batch=1)
    fused = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, A100)
    separate = AnalyticalBackend(
        framework="megatron-core", overrides={"fused_qkv": False}
    ).evaluate(model, parallel, A100)
    assert fused.model_flops_per_step == separate.model_flops_per_step
    assert fused.step_time_s < separate.step_time_s


def test_llm_foundrys_mpt_runs_its_wqkv_as_one_gemm() -> None:
    """MPT's attention projects q, k and v with one linear (llm-foundry's ``Wqkv``); torchtitan's
    Llama keeps three (``wq``, ``wk``, ``wv``)."""
    assert get_framework("llm-foundry-2023").fused_qkv
    assert not get_framework("torchtitan").fused_qkv
