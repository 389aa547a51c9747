"""Megatron's fused fc1 (``fused_fc1``): a gated MLP's gate and up GEMMs timed as one GEMM of
output ``2 · ffn`` in each phase — shapes against closed forms of the model's dims, the work
conserved, the sum of the two partial input gradients spared (dense MLP, shared experts, routed
experts) — and the profile option reaching the step time."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.expert_gemms import grouped_gemm_groups
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.fused_fc1 import fuse_fc1
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.system import load_system

H100 = load_system("h100-80gb")


def _blocks(model: ModelSpec, tp: int) -> dict[str, BoundBlock]:
    parallel = ParallelConfig(tp=tp, dp=1, global_batch=1, recompute=Recompute.FULL)
    return bind_all(make_workload(model, parallel))


def _working(instrs: tuple[Instr, ...], phase: str, names: list[str]) -> Instr:
    """The one of ``names`` in ``phase`` that still does work."""
    (instr,) = (i for i in instrs if i.phase == phase and i.name in names and i.flops)
    return instr


def _adds(instrs: tuple[Instr, ...], gradient: str) -> list[Instr]:
    """The backward's adds of partial ``gradient``s that still do work."""
    return [
        i
        for i in instrs
        if i.phase == "bwd" and i.name.endswith(f".accumulate.{gradient}") and i.bytes_read
    ]


def _check_gated(block: BoundBlock, prefix: str, rows: int, width: int, hidden: int) -> None:
    """``prefix``'s gate and up GEMMs fused in every phase: fprop ``(rows, 2·width, hidden)``,
    dgrad ``(rows, hidden, 2·width)`` writing the input's gradient once, wgrad over
    ``2·width·hidden`` weights; the GEMM FLOPs unchanged."""
    weights = frozenset(w.name for w in block.weights)
    gate, up = f"{prefix}.gate", f"{prefix}.up"
    for instrs, phases in ((block.fwd, ("fwd",)), (block.bwd, ("recompute", "bwd"))):
        fused = fuse_fc1(instrs, weights)
        assert len(fused) == len(instrs)
        flops = [sum(i.flops for i in x if i.kind == "einsum") for x in (fused, instrs)]
        assert flops[0] == flops[1]
        for phase in phases:
            if phase in ("fwd", "recompute"):
                fprop = _working(fused, phase, [gate, up])
                assert fprop.name == up  # the grouped fc1 (expert_gemms.GROUPED_EXPERT_GEMMS)
                assert (gemm_shape(fprop) or (0,))[1:] == (rows, 2 * width, hidden)
        if "bwd" not in phases:
            continue
        working = [
            i for i in fused if i.phase == "bwd" and i.name.startswith((gate, up)) and i.flops
        ]
        (dgrad,) = (i for i in working if gemm_role(i, weights) == "dgrad")
        assert (gemm_shape(dgrad) or (0,))[1:] == (rows, hidden, 2 * width)
        (wgrad,) = (i for i in working if gemm_role(i, weights) == "wgrad")
        batch, m, n, k = gemm_shape(wgrad) or (0, 0, 0, 0)
        assert (k, m * n) == (rows, 2 * width * hidden)
        assert batch == (gemm_shape(dgrad) or (0,))[0]


def test_dense_swiglu_mlp_sums_no_input_gradients() -> None:
    """Llama's MLP: one ``d.ln2`` add in the generator's backward (gate + up); none fused."""
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    tp = 2
    block = _blocks(model, tp)["layer"]
    _check_gated(block, "mlp", model.seq_len, model.ffn // tp, model.hidden)
    weights = frozenset(w.name for w in block.weights)
    assert len(_adds(tuple(block.bwd), "d.ln2")) == 1
    assert _adds(fuse_fc1(block.bwd, weights), "d.ln2") == []


def test_moe_experts_and_shared_experts_fuse_their_fc1() -> None:
    """DeepSeekMoE: the routed experts' ``d.moe.tokens`` add is spared and one of the three
    ``d.ln2`` adds (shared gate + up; the router's and the dispatch's gradients are still
    summed); the fused expert GEMM keeps one grouped GEMM's groups."""
    model = get_flavor("deepseek-moe-16b").with_overrides(layers=2)
    block = _blocks(model, tp=1)["moe_layer"]
    weights = frozenset(w.name for w in block.weights)
    fused = fuse_fc1(block.bwd, weights)
    assert len(_adds(tuple(block.bwd), "d.moe.tokens")) == 1
    assert _adds(fused, "d.moe.tokens") == []
    assert len(_adds(tuple(block.bwd), "d.ln2")) == 3
    assert len(_adds(fused, "d.ln2")) == 2
    shared = _working(fuse_fc1(block.fwd, weights), "fwd", ["shared.gate", "shared.up"])
    assert (gemm_shape(shared) or (0,))[2] == 2 * model.num_shared_experts * model.expert_ffn
    experts = _working(fuse_fc1(block.fwd, weights), "fwd", ["experts.gate", "experts.up"])
    shape = gemm_shape(experts) or (0, 0, 0, 0)
    assert shape[0] == model.num_experts and shape[2] == 2 * model.expert_ffn
    assert grouped_gemm_groups(experts, shape) == model.num_experts


def test_non_gated_mlp_is_left_alone() -> None:
    block = _blocks(get_flavor("megatron-gpt-1.7b").with_overrides(layers=2), tp=2)["layer"]
    weights = frozenset(w.name for w in block.weights)
    assert fuse_fc1(block.bwd, weights) == tuple(block.bwd)
    assert fuse_fc1(block.fwd, weights) == tuple(block.fwd)


def test_megatron_core_runs_linear_fc1_as_one_gemm() -> None:
    """Megatron-Core fuses gate and up (``linear_fc1`` of ``2 · ffn``): the same work, a faster
    step than two GEMMs and their gradients' add; TorchTitan's ``w1`` / ``w3`` stay two."""
    assert get_framework("megatron-core").fused_fc1 == "all"
    assert get_framework("megatron-lm-2021").fused_fc1 == get_framework("deepspeed").fused_fc1
    assert get_framework("torchtitan").fused_fc1 == get_framework("fsdp").fused_fc1 == "none"
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=4, dp=1, global_batch=2, micro_batch=1)
    fused = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, H100)
    separate = AnalyticalBackend(
        framework="megatron-core", overrides={"fused_fc1": "none"}
    ).evaluate(model, parallel, H100)
    assert fused.model_flops_per_step == separate.model_flops_per_step
    assert fused.step_time_s < separate.step_time_s


def test_automodel_fuses_its_grouped_experts_only() -> None:
    """NeMo AutoModel's ``GroupedExperts`` hold one ``gate_and_up_projs``; its ``MLP`` (dense
    layers, shared experts) keeps ``gate_proj`` and ``up_proj``: scope ``experts`` spares the
    routed experts' ``d.moe.tokens`` add and keeps every ``d.ln2`` add and the shared GEMMs."""
    assert get_framework("automodel").fused_fc1 == "experts"
    model = get_flavor("deepseek-moe-16b").with_overrides(layers=2)
    block = _blocks(model, tp=1)["moe_layer"]
    weights = frozenset(w.name for w in block.weights)
    fused = fuse_fc1(block.bwd, weights, "experts")
    assert _adds(fused, "d.moe.tokens") == []
    assert len(_adds(fused, "d.ln2")) == 3
    shared = [i for i in fused if i.name.startswith(("shared.gate", "shared.up"))]
    assert shared == [i for i in block.bwd if i.name.startswith(("shared.gate", "shared.up"))]
    assert fuse_fc1(block.bwd, weights, "none") == tuple(block.bwd)


def test_an_unknown_scope_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fused_fc1"):
        get_framework("megatron-core").with_overrides({"fused_fc1": True})
