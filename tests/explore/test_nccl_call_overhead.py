"""NCCL's fixed cost per call (``collective_overhead_s``, collectives module docstring): paid
once per collective, the largest of the dims its group spans, and only by collectives that run
on NCCL — not by Transformer Engine's userbuffers tensor-parallel exchanges (megatron-core's
``tp_comm_overlap``), PyTorch's symmetric-memory async TP (torchtitan's ``micro_pipeline_tp``),
DeepEP's dispatch and combine, or an inference engine's own small all-reduces."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.serving import ServingConfig, lower_step
from stage_core.serving.config import Phase
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s, call_overhead_s
from stage_explore.analytical.overlap import _TP_GROUPS, UB_FREE_BLOCKS
from stage_explore.analytical.serving import CUSTOM_ALL_REDUCE_MAX_BYTES, _timers
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.analytical_point import bound_point

AR = CollectiveKind.ALL_REDUCE
AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER
A2A = CollectiveKind.ALL_TO_ALL
SIZE = 64 * 2**20


def _with_overheads(system: System, *overheads: float) -> System:
    """``system`` with its network dims' ``collective_overhead_s`` set to ``overheads`` and no
    ``small_message_overhead_s`` (the Simple protocol alone: NCCL's LL protocol, which the
    presets' small figures would let the larger overheads here fall back to, is
    test_nccl_protocols')."""
    dims = tuple(
        replace(dim, collective_overhead_s=seconds, small_message_overhead_s=None)
        for dim, seconds in zip(system.network, overheads, strict=True)
    )
    return replace(system, network=dims)


@pytest.mark.parametrize("kind", [AR, RS, AG, A2A])
def test_a_call_pays_the_largest_overhead_of_its_dims_once(kind: CollectiveKind) -> None:
    system = _with_overheads(load_system("h100-80gb"), 300e-6, 20e-6)
    bare = _with_overheads(system, 0.0, 0.0)
    for group, overhead in ((list(range(8)), 300e-6), (list(range(32)), 300e-6)):
        timed = alpha_beta_collective_s(system, kind, SIZE, group)
        untimed = alpha_beta_collective_s(bare, kind, SIZE, group)
        assert timed - untimed == pytest.approx(overhead, rel=1e-9)
        not_nccl = alpha_beta_collective_s(system, kind, SIZE, group, nccl=False)
        # outside NCCL: no per-call cost (nor NCCL's flat-ring latency for an all-gather or
        # reduce-scatter over two dims, test_ring_latency), the bare system's own time
        bare_not_nccl = alpha_beta_collective_s(bare, kind, SIZE, group, nccl=False)
        assert not_nccl == pytest.approx(bare_not_nccl, rel=1e-12)
    across = list(range(0, 32, 8))  # one rank per node: the InfiniBand dim alone
    timed = alpha_beta_collective_s(system, kind, SIZE, across)
    assert timed - alpha_beta_collective_s(bare, kind, SIZE, across) == pytest.approx(20e-6)
    assert call_overhead_s(system.network, [0, 1]) == 300e-6
    assert call_overhead_s(system.network, [0, 1], nccl=False) == 0.0


def _tp_collective_times(framework: str, **overrides: Any) -> list[tuple[str, bool, float, float]]:
    """For each collective of every block's forward and backward on tp 4 (sequence parallel)
    in one node: (the block's kind, a tensor-parallel all-gather or reduce-scatter, the time
    the backend charges it, the time of the same collective as an NCCL call). The NVLink dim's
    per-call cost is set to 1 ms, so that it shows."""
    system = _with_overheads(load_system("h100-80gb"), 1e-3, 20e-6)
    model = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=2048)
    parallel = ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=16)
    backend = AnalyticalBackend(framework=framework, overrides=overrides)
    point = bound_point(backend, model, parallel, system)
    found = []
    for kind in point.blocks:
        parts = backend._kind(point, kind)
        spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
        for phase in ("fwd", "bwd"):
            program = backend._phase_program(point, kind, phase, spans)
            for instr in program.instrs:
                if instr.collective is None or instr.kind == "ring":
                    continue
                nccl = backend._collective_time(
                    point, spans[instr.axes], instr.collective, instr.comm_bytes
                )
                exchange = instr.axes in _TP_GROUPS and instr.collective in (AG, RS)
                found.append((kind, exchange, program.comm_s(instr), nccl))
    return found


def test_userbuffers_tp_exchanges_pay_no_nccl_call() -> None:
    """megatron-core's ``tp_comm_overlap`` (Transformer Engine userbuffers): no tp all-gather or
    reduce-scatter of a transformer layer pays the 1 ms; every other collective does — the
    embedding's reduce-scatter and the output layer's all-gather (and their gradients'),
    which run outside userbuffers (overlap.UB_FREE_BLOCKS), and the loss's tp all-reduces;
    switched off, every one does (plain NCCL calls)."""
    overlapped = _tp_collective_times("megatron-core")
    layers = [(c, n) for kind, on_tp, c, n in overlapped if on_tp and kind not in UB_FREE_BLOCKS]
    assert layers
    assert all(charged < 1e-3 <= nccl for charged, nccl in layers)
    ends = [(c, n) for kind, on_tp, c, n in overlapped if on_tp and kind in UB_FREE_BLOCKS]
    assert {kind for kind, on_tp, _, _ in overlapped if on_tp} >= {"embedding", "head"}
    assert ends and all(charged == nccl for charged, nccl in ends)
    assert all(charged == nccl for _, on_tp, charged, nccl in overlapped if not on_tp)
    plain = _tp_collective_times("megatron-core", tp_comm_overlap=False)
    assert all(charged == nccl for _, _, charged, nccl in plain)
    assert any(on_tp for _, on_tp, _, _ in plain)


def test_async_tp_fused_collectives_pay_no_nccl_call_and_the_rest_do() -> None:
    """torchtitan's ``micro_pipeline_tp``: the collectives Inductor fuses into symmetric-memory
    matmuls pay no NCCL call, the reduce-scatters it leaves alone (summed input gradients) do,
    and so do the embedding's and output layer's (``apply_compile`` compiles the transformer
    blocks alone)."""
    found = _tp_collective_times("torchtitan", tp_comm_overlap=True)
    tp = [(charged, nccl) for kind, on_tp, charged, nccl in found if on_tp]
    assert any(charged < 1e-3 for charged, _ in tp)
    assert any(charged == nccl for charged, nccl in tp)
    ends = [(c, n) for kind, on_tp, c, n in found if on_tp and kind in UB_FREE_BLOCKS]
    assert ends and all(charged == nccl for charged, nccl in ends)


def test_embedding_and_output_layer_run_their_tp_collectives_as_without_userbuffers() -> None:
    """Under ``tp_comm_overlap`` the output layer's forward all-gather waits whole before its
    GEMM (Megatron's ``ColumnParallelLinear``: ``dist_all_gather_func``, no userbuffers ring),
    and the embedding's forward reduce-scatter is not pipelined with a GEMM: the overlap rule
    leaves the forward collectives of both blocks alone, as it does with the option off."""
    system = load_system("h100-80gb")
    model = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=2048)
    parallel = ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=16)
    for overlap in (True, False):
        overrides = {"tp_comm_overlap": overlap}
        backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
        point = bound_point(backend, model, parallel, system)
        for kind in ("embedding", "head"):
            parts = backend._kind(point, kind)
            spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
            program = backend._phase_program(point, kind, "fwd", spans)
            exchanges = [
                i for i in program.instrs if i.axes in _TP_GROUPS and i.collective in (AG, RS)
            ]
            assert exchanges, kind
            rule = program.rule
            assert rule is None or all(rule(i) is None for i in exchanges), (kind, overlap)
        layer = next(k for k in point.blocks if k not in UB_FREE_BLOCKS)
        parts = backend._kind(point, layer)
        spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
        program = backend._phase_program(point, layer, "fwd", spans)
        overlapped = [i for i in program.instrs if program.rule and program.rule(i) is not None]
        assert bool(overlapped) is overlap  # the transformer layers keep their userbuffers


def test_deepep_dispatch_pays_no_nccl_call() -> None:
    system = _with_overheads(load_system("h100-80gb"), 1e-3, 20e-6)
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(ep=8, dp=8, zero=1, global_batch=16)
    times = {}
    for deepep in (False, True):
        backend = AnalyticalBackend(framework="automodel", overrides={"moe_deepep": deepep})
        point = bound_point(backend, model, parallel, system)
        charged = []
        for kind in point.blocks:
            parts = backend._kind(point, kind)
            spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
            program = backend._phase_program(point, kind, "fwd", spans)
            charged += [program.comm_s(i) for i in program.instrs if i.collective is A2A]
        times[deepep] = charged
    assert times[False] and all(seconds >= 1e-3 for seconds in times[False])
    assert times[True] and all(seconds < 1e-3 for seconds in times[True])


def test_an_inference_engine_runs_small_all_reduces_on_its_own_kernels() -> None:
    """Serving: a tp all-reduce up to ``CUSTOM_ALL_REDUCE_MAX_BYTES`` in one NVLink domain
    pays no NCCL call; a larger one does."""
    system = _with_overheads(load_system("h100-80gb"), 1e-3, 20e-6)
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    for batch, expect_nccl in ((64, False), (4096, True)):
        config = ServingConfig(phase=Phase.DECODE, batch=batch, context_len=1024, tp=8)
        program = lower_step(model, config, config.steps()[0])
        stage = program.stages[0]
        _, comm_s = _timers(AnalyticalBackend(), system, program, stage)
        reduces = [
            i for block in stage.blocks for i in block.fwd
            if i.collective is AR and i.axes == ("tp",)
        ]  # fmt: skip
        assert reduces
        for instr in reduces:
            assert (instr.comm_bytes > CUSTOM_ALL_REDUCE_MAX_BYTES) is expect_nccl
            assert (comm_s(instr) >= 1e-3) is expect_nccl
