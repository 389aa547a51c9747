"""Megatron's ``--tp-comm-overlap`` as Transformer Engine's userbuffers run it: the forward
reduce-scatter pipelined with the GEMM producing it ("pipeline", 4 row chunks), the backward
input-gradient reduce-scatter beside the weight-gradient GEMMs of the same linear layers
("bulk"), checked against closed forms of the two-stream timing."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import (
    UB_COMM_SMS,
    UB_PIPELINE_SPLITS,
    overlap_block,
    overlap_collectives,
    overlap_rule,
    sm_margin,
)
from stage_explore.analytical.overlap_reorder import defer_weight_gradients
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system

RS = CollectiveKind.REDUCE_SCATTER
#: One unit of time per 1,000 FLOPs or bytes in these synthetic blocks.
UNIT = 1000


def _gemm(name: str, seconds: float, inputs: tuple[str, str], output: str, **kw: object) -> Instr:
    size = 4 * UNIT  # divisible by the chunk count: every chunk the same
    return Instr(
        name, str(kw.get("phase", "fwd")), "einsum", flops=int(seconds * UNIT),
        deps=tuple(kw.get("deps", ())),  # type: ignore[arg-type]
        inputs=((inputs[0], size), (inputs[1], size)), outputs=((output, size),),
    )  # fmt: skip


def _scatter(seconds: float, deps: tuple[int, ...], operand: str, phase: str = "fwd") -> Instr:
    return Instr(
        f"reduce_scatter:{operand}", phase, "comm", collective=RS, axes=("tp",),
        comm_bytes=int(seconds * UNIT), deps=deps, inputs=((operand, 1),),
        outputs=((operand, 1),),
    )  # fmt: skip


def _timed(instrs: tuple[Instr, ...] | list[Instr]) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / UNIT, lambda i: i.comm_bytes / UNIT)


def _rule() -> object:
    rule = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=8, sp=True)
    assert rule is not None
    return rule


@pytest.mark.parametrize(("gemm_s", "scatter_s"), [(8.0, 4.0), (4.0, 8.0), (6.0, 6.0)])
def test_forward_reduce_scatter_is_pipelined_with_its_gemm(gemm_s: float, scatter_s: float) -> None:
    block = [
        _gemm("proj", gemm_s, ("attn", "wo"), "proj.partial"),
        _scatter(scatter_s, (0,), "proj.partial"),
        Instr("residual", "fwd", "elementwise", flops=1 * UNIT, deps=(1,)),
    ]
    assert _timed(block).duration_s == gemm_s + scatter_s + 1  # serial without the overlap
    rewritten = overlap_collectives(block, _rule())  # type: ignore[arg-type]
    n = UB_PIPELINE_SPLITS
    chunks = [i for i in rewritten if i.collective is RS]
    assert len(chunks) == n and sum(i.comm_bytes for i in chunks) == block[1].comm_bytes
    assert sum(i.flops for i in rewritten if i.kind == "einsum") == block[0].flops
    g, r = gemm_s / n, scatter_s / n  # a chunk's GEMM and its reduce-scatter
    pipelined = g + r + (n - 1) * max(g, r)  # the last chunk's scatter ends the pipeline
    assert _timed(rewritten).duration_s == pytest.approx(pipelined + 1)


def test_a_reduce_scatter_of_something_else_than_a_gemm_keeps_one_chunk_on_the_path() -> None:
    block = [
        _gemm("proj", 4.0, ("attn", "wo"), "proj.partial"),
        Instr("bias", "fwd", "elementwise", flops=1 * UNIT, deps=(0,)),
        _scatter(8.0, (1,), "proj.partial"),
    ]
    rewritten = overlap_collectives(block, _rule())  # type: ignore[arg-type]
    assert [i.comm_bytes for i in rewritten if i.collective] == [2000, 6000]
    assert [i.flops for i in rewritten if not i.collective] == [i.flops for i in block[:2]]


def test_backward_reduce_scatter_runs_beside_the_weight_gradients_of_its_linear() -> None:
    # qkv-like backward: three input-gradient GEMMs accumulate d.x, each with its weight
    # gradient; an unrelated earlier weight gradient (another layer's) must stay in place
    block = [
        _gemm("fc.dw", 3.0, ("d.h", "y"), "d.wfc", phase="bwd"),
        _gemm("q.dx", 2.0, ("d.q", "wq"), "d.x", phase="bwd"),
        _gemm("q.dw", 2.0, ("d.q", "x"), "d.wq", phase="bwd"),
        _gemm("k.dx", 2.0, ("d.k", "wk"), "d.x", phase="bwd"),
        _gemm("k.dw", 2.0, ("d.k", "x"), "d.wk", phase="bwd"),
        Instr("accumulate", "bwd", "elementwise", flops=1 * UNIT, deps=(1, 3)),
        _scatter(5.0, (5,), "d.x", phase="bwd"),
        Instr("norm.backward", "bwd", "backwardop", flops=1 * UNIT, deps=(6,)),
    ]
    assert _timed(block).duration_s == 3 + 2 * 4 + 1 + 5 + 1
    deferred = defer_weight_gradients(block, lambda i: i.collective is RS)
    assert [i.name for i in deferred] == [
        "fc.dw", "q.dx", "k.dx", "accumulate", "reduce_scatter:d.x", "q.dw", "k.dw",
        "norm.backward",
    ]  # fmt: skip
    rewritten = overlap_collectives(block, _rule())  # type: ignore[arg-type]
    assert [i.name for i in rewritten] == [i.name for i in deferred]
    assert [i.comm_bytes for i in rewritten if i.collective] == [5000]  # waited for whole
    # fc.dw, the two input gradients, the accumulation; then the scatter beside 4 s of
    # weight gradients; the norm's backward waits for the scatter
    assert _timed(rewritten).duration_s == 3 + 2 * 2 + 1 + max(5, 2 * 2) + 1


def test_userbuffers_shorten_a_tensor_parallel_megatron_core_step() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(tp=8, dp=2, sp=True, global_batch=4, recompute=Recompute.SELECTIVE)
    system = load_system("h100-80gb")
    on = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, system)
    off = AnalyticalBackend(
        framework="megatron-core", overrides={"tp_comm_overlap": False}
    ).evaluate(model, parallel, system)
    exposed = ("exposed_all_gather", "exposed_reduce_scatter")
    # without userbuffers TE still issues the backward input-gradient reduce-scatter before
    # the weight gradient (async NCCL, test_mcore_issue_order.py): userbuffers' gain is the
    # forward all-gathers and reduce-scatters and the backward all-gathers
    assert sum(on.breakdown.get(k, 0.0) for k in exposed) < 0.75 * sum(
        off.breakdown.get(k, 0.0) for k in exposed
    )
    assert on.step_time_s < off.step_time_s
    assert on.model_flops_per_step == off.model_flops_per_step  # chunking moves no FLOP


def test_gemms_beside_a_userbuffers_kernel_run_on_the_sms_it_leaves() -> None:
    """TE's "pipeline" and "bulk" overlaps launch the GEMM on ``sm - 16`` SMs (set_sm_margin)."""
    sms = 132
    scale = sms / (sms - UB_COMM_SMS)
    block = [
        _gemm("proj", 8.0, ("attn", "wo"), "proj.partial"),
        _scatter(4.0, (0,), "proj.partial"),
    ]
    rewritten, shared = overlap_block(block, _rule())  # type: ignore[arg-type]
    assert shared == {i for i in rewritten if i.kind == "einsum"}  # the 4 chunks
    timed = time_block(
        rewritten,
        sm_margin(lambda i: i.flops / UNIT, shared, sms),
        lambda i: i.comm_bytes / UNIT,
    )
    n = UB_PIPELINE_SPLITS
    g, r = 8.0 / n * scale, 4.0 / n
    assert timed.duration_s == pytest.approx(g + r + (n - 1) * max(g, r))
    backward = [
        _gemm("q.dx", 2.0, ("d.q", "wq"), "d.x", phase="bwd"),
        _gemm("q.dw", 3.0, ("d.q", "x"), "d.wq", phase="bwd"),
        _scatter(5.0, (0,), "d.x", phase="bwd"),
    ]
    rewritten, shared = overlap_block(backward, _rule())  # type: ignore[arg-type]
    assert [i.name for i in shared] == ["q.dw"]  # the weight gradient beside the scatter
    timed = time_block(
        rewritten,
        sm_margin(lambda i: i.flops / UNIT, shared, sms),
        lambda i: i.comm_bytes / UNIT,
    )
    assert timed.duration_s == pytest.approx(2 + max(5.0, 3 * scale))

    def plain(instr: Instr) -> float:
        return instr.flops / UNIT

    assert sm_margin(plain, frozenset(), sms) is plain  # nothing shared: the timer unchanged


def test_the_backend_charges_the_sm_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wired into the analytical backend: without the margin (0 SMs taken) the same step
    computes for less, by at most the margin's factor on every kernel."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=8, dp=1, sp=True, global_batch=2)
    system = load_system("h100-80gb")
    charged = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, system)
    monkeypatch.setattr("stage_explore.analytical.overlap.UB_COMM_SMS", 0)
    free = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, system)
    sms = system.accelerator.kernels.sm_count if system.accelerator.kernels else 0
    assert free.breakdown["compute"] < charged.breakdown["compute"]
    assert charged.breakdown["compute"] < free.breakdown["compute"] * sms / (sms - UB_COMM_SMS)
