"""The trace mode on ring (P2P) context parallelism against the levelled mode
(docs/analytical.md, "The timing engine", "Still separate").

The trace runs every cp rank of every pipeline stage; a ring's key/value exchanges are
point-to-point messages between them (each the backend's α–β time of one ring step). Under
Transformer Engine's overlap (``te_cp_overlap``, the megatron-core profile) the attention runs
as its ``cp`` steps with the exchanges posted between them as ``AttnFuncWithCPAndKVP2P`` posts
them (:mod:`~stage_explore.analytical.trace_ring`); the levelled mode charges the ring only what
those steps leave exposed (:func:`~stage_explore.analytical.te_context_parallel.
te_ring_exposed_s`). Without it the ring's messages run one after the other before the
attention, in both modes. Contract: the optimizer ends at the same time in both modes (1e-9
relative: the same sums in another order), whether the exchanges are partly exposed (short
sequences across a slow link) or hidden (long sequences).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_core.trace import CollectiveKind, NodeKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.trace_mode import TraceStep, trace_step
from stage_explore.analytical.trace_ring import ring_program, torch_ring_program
from stage_explore.system import load_system
from stage_explore.validation.run import analytical_factory
from tests.explore.package_cases import package_cases
from tests.explore.trace_helpers import optimizer_end

_REAL = load_system("a100-80gb")
SYSTEM = replace(_REAL, network=tuple(replace(d, nccl_channels=None) for d in _REAL.network))

#: Ring context parallelism with tp, dp, sp and ZeRO-1, full recompute (a recomputed forward's
#: ring inside the backward), a pipeline, and cp over all-gathers (no ring) for contrast.
CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("cp2-tp2", 4096, dict(tp=2, cp=2, cp_style="ring", global_batch=4)),
    ("cp4-dp2", 8192, dict(cp=4, dp=2, cp_style="ring", global_batch=4)),
    ("cp2-sp-zero1", 4096,
     dict(tp=2, cp=2, dp=2, sp=True, zero=1, cp_style="ring", global_batch=8)),
    ("cp2-recompute", 4096,
     dict(tp=2, cp=2, cp_style="ring", recompute=Recompute.FULL, global_batch=4)),
    ("cp2-pp2", 4096, dict(tp=2, cp=2, pp=2, cp_style="ring", global_batch=8)),
    ("cp2-allgather", 4096, dict(tp=2, cp=2, global_batch=4)),
]  # fmt: skip


def _run(framework: str, seq_len: int, kwargs: dict[str, Any]) -> tuple[float, Any, TraceStep]:
    backend = AnalyticalBackend(framework=framework)
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=seq_len)
    parallel = ParallelConfig(**kwargs)
    evaluation = backend.evaluate(model, parallel, SYSTEM)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    return (
        levelled,
        evaluation,
        trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False),
    )


@pytest.mark.parametrize(("seq_len", "kwargs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("framework", sorted(set(FRAMEWORKS) - {"torchtitan"}))
def test_ring_context_parallelism_ends_the_step_as_the_levelled_mode(
    framework: str, seq_len: int, kwargs: dict[str, Any]
) -> None:
    levelled, _, traced = _run(framework, seq_len, kwargs)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    cp, pp = kwargs["cp"], kwargs.get("pp", 1)
    assert len(traced.result.ranks) == cp * pp  # every cp rank of every stage
    ring = kwargs.get("cp_style") == "ring"
    sends = [i for i in traced.templates[0] if i.node.kind is NodeKind.SEND]
    assert bool(sends) == (ring or pp > 1)
    steps = [i for i in traced.templates[0] if ".step" in i.node.name]
    te = AnalyticalBackend(framework=framework).framework.te_cp_overlap
    assert bool(steps) == (ring and te)


@pytest.mark.parametrize(
    ("seq_len", "cp", "exposed"), [(1024, 2, True), (2048, 4, True), (16384, 4, False)]
)
def test_transformer_engines_ring_per_step_as_the_levelled_mode_charges_it(
    seq_len: int, cp: int, exposed: bool
) -> None:
    """cp across A100 nodes (tp 8): on short sequences a message outlasts an attention step and
    much of the ring is exposed, on long ones nearly all of it hides; the trace finds the
    levelled mode's charge in both (the levelled ``exposed_p2p`` is not the whole ring)."""
    kwargs = dict(tp=8, cp=cp, cp_style="ring", global_batch=2)
    levelled, evaluation, traced = _run("megatron-core", seq_len, kwargs)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    rank = min(traced.result.ranks)
    times = traced.result.node_times
    ring_s = sum(
        times[(rank, i.node.id)][1] - times[(rank, i.node.id)][0]
        for i in traced.templates[0]
        if i.node.kind is NodeKind.SEND
    )
    charged = evaluation.breakdown.get("exposed_p2p", 0.0)
    assert charged < ring_s * (1 - 1e-6)
    if exposed:  # more than a quarter of the ring's seconds (60-71 % measured)
        assert charged > 0.25 * ring_s
    else:  # the middle backward exchanges' two messages barely outlast a step (0.4 %)
        assert charged < 0.01 * ring_s


#: torch's ``context_parallel`` (torchtitan, ``cp_merge_fp32``): its gathers and gradient ring
#: with tp, dp, ZeRO-3 and full recompute (a recomputed forward's gathers), a pipeline, cp 8 on
#: a short sequence (every message outlasting a chunk), cp across A100 nodes (tp 8), and a
#: ``ring`` style (the P2P ring emitted as written, as the levelled mode times it).
TORCH_CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("cp2-tp2", 4096, dict(tp=2, cp=2, global_batch=4)),
    ("cp4-dp2", 8192, dict(cp=4, dp=2, global_batch=4)),
    ("cp2-zero3-full", 4096,
     dict(cp=2, dp=2, zero=3, recompute=Recompute.FULL, global_batch=4)),
    ("cp2-pp2", 4096, dict(tp=2, cp=2, pp=2, global_batch=8)),
    ("cp8-short", 1024, dict(cp=8, global_batch=1)),
    ("cp2-nodes", 2048, dict(tp=8, cp=2, global_batch=2)),
    ("cp2-ring-style", 4096, dict(tp=2, cp=2, cp_style="ring", global_batch=4)),
]  # fmt: skip


def _torch_run(
    compiled: bool, seq_len: int, kwargs: dict[str, Any], system: Any = SYSTEM,
) -> tuple[float, Any, TraceStep]:
    backend = AnalyticalBackend(framework="torchtitan", overrides={"fused_elementwise": compiled})
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=seq_len)
    parallel = ParallelConfig(**kwargs)
    evaluation = backend.evaluate(model, parallel, system)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    traced = trace_step(backend, model, parallel, system, record_nodes=True, gathers_ahead=False)
    return levelled, evaluation, traced


@pytest.mark.parametrize(
    ("seq_len", "kwargs"), [c[1:] for c in TORCH_CASES], ids=[c[0] for c in TORCH_CASES]
)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_torchs_context_parallel_ends_the_step_as_the_levelled_mode(
    compiled: bool, seq_len: int, kwargs: dict[str, Any]
) -> None:
    """The trace runs torch's ring (``trace_ring.torch_ring_program``: ``cp`` SDPA calls, the
    rotater's gathers beside the first, ``cp`` gradient messages between the cp ranks; compiled,
    every collective waited for where it is issued) and finds the levelled charge
    (``cp_comm_timer``): the optimizer ends at the same time (was a ConfigError for the ``ring``
    style, and the gathers' and scatters' charged seconds taken as given otherwise)."""
    levelled, _, traced = _torch_run(compiled, seq_len, kwargs)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    cp, ring = kwargs["cp"], kwargs.get("cp_style") == "ring"
    template = traced.templates[0]
    steps = [i for i in template if ".step" in i.node.name]
    messages = [i for i in template if i.node.kind is NodeKind.SEND and "dkv_ring" in i.node.name]
    assert bool(steps) == (not ring) and bool(messages) == (not ring)
    if not ring:  # cp SDPA calls per attention, cp gradient messages per backward
        backward = [i for i in steps if "backward" in i.node.name]
        assert len(steps) % cp == 0 and len(backward) == cp * len(messages) // cp
        assert len(messages) % cp == 0 and messages


@pytest.mark.parametrize(
    ("flavor", "kwargs", "ring"),
    [
        ("deepseek-v2-lite", dict(cp=2, dp=2, ep=2, global_batch=4), True),
        ("mixtral-8x7b", dict(cp=2, tp=2, ep=2, global_batch=4), True),
        ("megatron-gpt-1.7b", dict(cp=4, recompute=Recompute.SELECTIVE, global_batch=2), False),
    ],
    ids=["mla-moe", "moe", "unfused-attention"],
)
def test_torchs_context_parallel_on_other_attentions(
    flavor: str, kwargs: dict[str, Any], ring: bool
) -> None:
    """Latent attention with experts and a Mixtral MoE run torch's ring in the trace; GPT's
    unfused attention (einsums, no attention instruction) keeps its cp collectives as written,
    as the levelled ``cp_comm_timer`` does (it charges only phases with an attention). Equal
    either way."""
    backend = AnalyticalBackend(framework="torchtitan")
    model = get_flavor(flavor).with_overrides(layers=2, seq_len=4096)
    parallel = ParallelConfig(**kwargs)
    evaluation = backend.evaluate(model, parallel, SYSTEM)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    traced = trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    messages = [i for i in traced.templates[0] if "dkv_ring" in i.node.name]
    assert bool(messages) == ring


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_torchs_first_chunk_runs_beside_the_gathers_unless_compiled(compiled: bool) -> None:
    """Across A100 nodes (tp 8, cp 2, sequence 2,048): eager, an attention's first SDPA call
    does not wait for the rotater's gathers (the second does), and in the forward it runs
    beside them; compiled, it waits for them (waited for where issued). The levelled mode
    charges the gathers only what the first chunk leaves, and the step ends alike."""
    levelled, _, traced = _torch_run(compiled, 2048, dict(tp=8, cp=2, global_batch=2))
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    rank = min(traced.result.ranks)
    times = traced.result.node_times
    gathers: dict[int, float] = {}  # the cp gathers since the last attention: id → end
    beside = []
    for item in traced.templates[0]:
        node = item.node
        if node.collective is CollectiveKind.ALL_GATHER and item.group_axes == ("cp",):
            gathers[node.id] = times[(rank, node.id)][1]
        elif node.name.endswith(".step0"):
            assert gathers and (set(gathers) <= set(node.data_deps)) == compiled
            if node.name.startswith("F"):
                beside.append(times[(rank, node.id)][0] < max(gathers.values()))
            gathers = {}
    assert beside and all(beside) == (not compiled) and any(beside) == (not compiled)


@pytest.mark.parametrize("row", ["TTITAN-T2-3", "TTITAN-T2-4"])
def test_the_torchtitan_cp_rows_run_in_the_trace_as_in_the_levelled_mode(row: str) -> None:
    """TorchTitan's Table 2 rows with cp 4 and 8 (FSDP over dp × cp, full recompute, Float8,
    compiled), without ``nccl_channels`` (with them the modes charge NCCL's SMs differently:
    +3.7e-6 and +6.5e-6 relative)."""
    case = next(c for c in package_cases() if c.id == row)
    real = load_system(case.system_source)
    system = replace(real, network=tuple(replace(d, nccl_channels=None) for d in real.network))
    backend = analytical_factory()(case.backend_key)
    evaluation = backend.evaluate(case.model, case.parallel, system)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    traced = trace_step(
        backend, case.model, case.parallel, system, record_nodes=True, gathers_ahead=False
    )
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    assert any("dkv_ring" in i.node.name for i in traced.templates[0])


def _instr(name: str, kind: str, deps: tuple[int, ...] = (), steps: int = 0) -> Instr:
    phase = "bwd" if name.startswith("d") else "fwd"
    if kind == "ring":
        return Instr(name, phase, "ring", axes=("cp",), comm_bytes=8, deps=deps, ring_steps=steps)
    return Instr(name, phase, kind, flops=840, bytes_read=40, bytes_written=40, deps=deps)


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_the_per_step_program_keeps_every_message_and_the_attentions_work(cp: int) -> None:
    """Forward: the ring's ``cp − 1`` messages, one per exchange, the first where the ring was;
    backward: ``2·(cp − 1)``, two per middle exchange; ``cp`` attention steps of ``1/cp`` each;
    what read the attention waits for its last step (and, backward, the last exchange)."""
    forward = (
        _instr("qkv", "einsum"),
        _instr("ring:attn", "ring", (0,), cp - 1),
        _instr("attn", "attention", (0, 1)),
        _instr("proj", "einsum", (2,)),
    )
    backward = (
        _instr("dproj", "einsum"),
        _instr("dring:attn", "ring", (0,), 2 * (cp - 1)),
        _instr("dattn", "attention", (0, 1)),
        _instr("dqkv", "einsum", (2,)),
    )
    for instrs, messages, exchanges in (
        (forward, cp - 1, cp - 1),
        (backward, 2 * (cp - 1), cp),
    ):
        emitted = ring_program(instrs, cp, steps=True)
        rings = [i for i in emitted.instrs if i.kind == "ring"]
        assert sum(i.ring_steps for i in rings) == messages and len(rings) == exchanges
        assert emitted.instrs[1].kind == "ring" and emitted.origin[1] == 1
        steps = [k for k, o in enumerate(emitted.origin) if o == 2]
        assert len(steps) == cp and all(emitted.share[k] == 1.0 / cp for k in steps)
        assert sum(emitted.instrs[k].flops for k in steps) == 840
        last = emitted.instrs[-1]
        assert last.name == instrs[-1].name and steps[-1] in last.deps
        if instrs is backward:
            last_exchange = max(k for k, i in enumerate(emitted.instrs) if i.kind == "ring")
            assert last_exchange in last.deps
        unchanged = ring_program(instrs, cp, steps=False)
        assert unchanged.instrs == instrs


def _cp_comm(
    name: str, phase: str, kind: CollectiveKind, size: int, deps: tuple[int, ...]
) -> Instr:
    return Instr(name, phase, "comm", collective=kind, axes=("cp",), comm_bytes=size, deps=deps)


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "compiled"])
def test_torchs_ring_program_posts_and_waits_as_torch_does(cp: int, traced: bool) -> None:
    """``torch_ring_program`` on a grouped-query attention (4 query heads per key/value head):
    the gathers keep their place with the repeated bytes (timed on their own), the attention
    becomes ``cp`` SDPA calls of ``1/cp``; backward, message ``i`` waits for call ``i`` and the
    receive of message ``i − 1``, call ``i + 1`` for the receive of message ``i − 1`` (eager:
    the compute stream waits before the add) or ``i`` (compiled), and the reduce-scatters'
    readers for the last of the ``cp`` messages, which carry the fp32 repeated gradients."""
    local = 64  # bytes of the rank's keys (or values); the queries: 4x, gathered keys: cp x
    query = ("q", 4 * local)
    forward = (
        _instr("qkv", "einsum"),
        _cp_comm("all_gather:k", "fwd", CollectiveKind.ALL_GATHER, local, (0,)),
        _cp_comm("all_gather:v", "fwd", CollectiveKind.ALL_GATHER, local, (0,)),
        replace(_instr("attn", "attention", (0, 1, 2)),
                inputs=(query, ("k", cp * local), ("v", cp * local))),
        _instr("proj", "einsum", (3,)),
    )  # fmt: skip
    backward = (
        _instr("dproj", "einsum"),
        _cp_comm("all_gather:k", "bwd", CollectiveKind.ALL_GATHER, local, ()),
        _cp_comm("all_gather:v", "bwd", CollectiveKind.ALL_GATHER, local, ()),
        replace(_instr("dattn", "attention", (0, 1, 2)),
                outputs=(query, ("dk", cp * local), ("dv", cp * local))),
        _cp_comm("reduce_scatter:dk", "bwd", CollectiveKind.REDUCE_SCATTER, cp * local, (3,)),
        _instr("dk_reader", "einsum", (4,)),
        _instr("dq_reader", "einsum", (3,)),
        _cp_comm("reduce_scatter:dv", "bwd", CollectiveKind.REDUCE_SCATTER, cp * local, (3,)),
        _instr("dv_reader", "einsum", (7,)),
    )  # fmt: skip
    for instrs in (forward, backward):
        emitted = torch_ring_program(instrs, cp, traced)
        out = emitted.instrs
        gathers = [k for k, i in enumerate(out) if i.collective is CollectiveKind.ALL_GATHER]
        assert set(gathers) == emitted.own and all(out[k].comm_bytes == 4 * local for k in gathers)
        steps = [k for k, o in enumerate(emitted.origin) if o == 3]
        assert len(steps) == cp and all(emitted.share[k] == 1.0 / cp for k in steps)
        assert sum(out[k].flops for k in steps) == 840
        first = set(out[steps[0]].deps)
        assert (set(gathers) <= first) == traced and (traced or not set(gathers) & first)
        assert all(set(gathers) <= set(out[k].deps) for k in steps[1:])
        messages = [k for k, i in enumerate(out) if i.kind == "ring"]
        if instrs is forward:
            assert not messages and sum(1 for i in out if i.collective) == len(gathers) == 2
            continue
        assert len(messages) == cp and all(out[k].ring_steps == 1 for k in messages)
        assert all(out[k].comm_bytes == 2 * local * 4 * 2 for k in messages)  # dk, dv fp32 x4
        for i, k in enumerate(messages):
            assert steps[i] in out[k].deps and (i == 0 or messages[i - 1] in out[k].deps)
            if i + 1 == cp:
                continue
            after = set(out[steps[i + 1]].deps)
            if traced:
                assert messages[i] in after
            else:
                assert messages[i] not in after and (i == 0 or messages[i - 1] in after)
        assert not any(i.collective is CollectiveKind.REDUCE_SCATTER for i in out)
        readers = {i.name: i for i in out if i.name.endswith("_reader")}
        assert messages[-1] in readers["dk_reader"].deps
        assert messages[-1] in readers["dv_reader"].deps
        assert steps[-1] in readers["dq_reader"].deps
