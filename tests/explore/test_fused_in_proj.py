"""A Mamba-2 mixer's five input projections (``z``, ``x``, ``B``, ``C``, ``dt``) timed as
Megatron-Core's one ``in_proj`` GEMM of output ``2·d_inner + 2·ngroups·d_state + nheads`` in
each phase: shapes against closed forms of the model's dims, the work conserved, the four adds
of partial input gradients spared, and the step faster than with five GEMMs."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical import costing_compute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fused_in_proj import IN_PROJ_WEIGHTS, fuse_in_proj
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.analytical.kernels import gemm_role
from stage_explore.system import load_system

TP = 8
MODEL = get_flavor("nemotron-h-56b").with_overrides(layers=2, layer_pattern="mamba, mlp")


def _block() -> BoundBlock:
    parallel = ParallelConfig(tp=TP, dp=1, global_batch=1)
    return bind_all(make_workload(MODEL, parallel))["layer_mamba_none"]


def _in_proj(instrs: tuple[Instr, ...], weights: frozenset[str]) -> list[Instr]:
    """The working GEMMs of the input projections: those reading an ``ssm.in_*`` weight or
    writing its gradient."""
    own = tuple(f"ssm.{name}" for name in IN_PROJ_WEIGHTS)
    return [
        i
        for i in instrs
        if i.kind == "einsum" and i.flops and gemm_role(i, weights) is not None
        and any(n.endswith(own) for n, _ in (*i.inputs, *i.outputs))
    ]  # fmt: skip


def test_one_gemm_per_phase_of_the_megatron_in_proj_width() -> None:
    block = _block()
    weights = frozenset(w.name for w in block.weights)
    m = MODEL
    inner, bc = m.ssm_heads * m.ssm_head_dim, m.ssm_groups * m.ssm_state
    width = (2 * inner + 2 * bc + m.ssm_heads) // TP  # z x B C dt (mamba_mixer.py in_proj)
    rows = m.seq_len
    for instrs in (block.fwd, block.bwd):
        fused = fuse_in_proj(instrs, weights)
        assert len(fused) == len(instrs)
        flops = [sum(i.flops for i in x if i.kind == "einsum") for x in (fused, instrs)]
        assert flops[0] == flops[1]
        assert len(_in_proj(instrs, weights)) == 5 * (1 if instrs is block.fwd else 2)
        working = _in_proj(fused, weights)
        roles = sorted(str(gemm_role(i, weights)) for i in working)
        if instrs is block.fwd:
            assert roles == ["fprop"]
            (fprop,) = working
            assert fprop.name == "ssm.x"
            assert (gemm_shape(fprop) or (0,))[1:] == (rows, width, m.hidden)
            continue
        assert roles == ["dgrad", "wgrad"]
        (dgrad,) = (i for i in working if gemm_role(i, weights) == "dgrad")
        assert (gemm_shape(dgrad) or (0,))[1:] == (rows, m.hidden, width)
        (wgrad,) = (i for i in working if gemm_role(i, weights) == "wgrad")
        _, k_m, k_n, k = gemm_shape(wgrad) or (0, 0, 0, 0)
        assert (k, k_m * k_n) == (rows, width * m.hidden)
        adds = [i for i in instrs if ".accumulate.d.ln1" in i.name and i.bytes_read]
        assert len(adds) == 4  # five partial gradients of ln1 summed by the generator
        assert not [i for i in fused if ".accumulate.d.ln1" in i.name and i.bytes_read]


def test_a_block_without_a_mamba_mixer_is_unchanged() -> None:
    parallel = ParallelConfig(tp=TP, dp=1, global_batch=1)
    block = bind_all(make_workload(MODEL, parallel))["layer_none_mlp"]
    weights = frozenset(w.name for w in block.weights)
    assert fuse_in_proj(block.bwd, weights) == tuple(block.bwd)


def test_the_fused_in_proj_makes_the_step_faster() -> None:
    """Five GEMMs (the small ``dt``, ``B`` and ``C`` ones at low efficiency) and four adds
    cost more than the one GEMM Megatron runs."""
    parallel = ParallelConfig(tp=TP, dp=1, global_batch=1)
    system = load_system("h100-80gb")
    fused = AnalyticalBackend(framework="megatron-core").evaluate(MODEL, parallel, system)
    original = costing_compute.fuse_in_proj
    costing_compute.fuse_in_proj = lambda instrs, weights: tuple(instrs)  # type: ignore[assignment]
    try:
        apart = AnalyticalBackend(framework="megatron-core").evaluate(MODEL, parallel, system)
    finally:
        costing_compute.fuse_in_proj = original  # type: ignore[assignment]
    assert fused.step_time_s < apart.step_time_s
    # the same model FLOPs: MFU scales with the speed-up alone
    assert fused.mfu * fused.step_time_s == pytest.approx(apart.mfu * apart.step_time_s)
