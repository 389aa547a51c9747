"""The trace mode on the FP8 amax reductions (the framework option ``fp8_amax_reduction``)
against the levelled mode (docs/analytical.md, "The timing engine", "Still separate").

Under Transformer Engine's delayed scaling Megatron-Core runs a chunk's layers inside one
``fp8_autocast`` whose amaxes are all-reduced at its exit and after the backward
(``async_op=False``): the levelled mode adds one latency-bound all-reduce after each of a
chunk's forwards and backwards (:meth:`~stage_explore.analytical.planning.StagePlanning.
_fp8_amax_s`, :func:`~stage_explore.analytical.blocktime.plus_exposed`). The trace emits it as
a collective node at the end of each pass (``NodeOptions(pass_end=...)``; after the W
task under a split backward), before the pass's pipeline send and the rank's next task, with
the backend's seconds. Contract: where the rest of the step is timed alike, the optimizer ends
at the same time in both modes (1e-9 relative). Under ZeRO-3 the trace is earlier, by design
and by at most the amax seconds: the levelled mode adds the backward's amax after the pass,
which ends with its last reduce-scatter; in the trace the all-reduce (another communicator)
waits for the last compute only and runs beside that scatter.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from stage_core.lower.program_node import PASS_END_BWD, PASS_END_FWD
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Schedule
from stage_core.trace import CollectiveKind, NodeKind
from stage_explore.analytical.amax_costing import FP8_AMAX
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.trace_mode import TraceStep, trace_step
from stage_explore.system import load_system
from tests.explore.trace_helpers import optimizer_end

#: The h100-80gb preset (FP8) without NCCL's channel counts, as the other trace-mode contracts.
_REAL = load_system("h100-80gb")
SYSTEM = replace(_REAL, network=tuple(replace(d, nccl_channels=None) for d in _REAL.network))

FP8 = dict(precision="fp8", fp8_recipe="delayed")

#: One stage with sp, ZeRO-1, a 1F1B pipeline, an interleaved one (two chunks per rank) and
#: ZB-H1 on GPT (whose split costs nothing under megatron-core: test_trace_mode_split.py).
EQUAL: list[tuple[str, str, dict[str, Any]]] = [
    ("llama-tp2-dp2-sp", "llama3-8b", dict(tp=2, dp=2, sp=True, global_batch=8)),
    ("llama-zero1", "llama3-8b", dict(tp=2, dp=2, zero=1, sp=True, global_batch=8)),
    ("llama-pp2", "llama3-8b", dict(tp=2, dp=2, pp=2, sp=True, global_batch=8)),
    ("llama-pp2-vpp2", "llama3-8b",
     dict(tp=2, dp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, sp=True, global_batch=16)),
    ("gpt-zb-pp2-dp2", "megatron-gpt-1.7b",
     dict(tp=2, dp=2, pp=2, schedule=Schedule.ZERO_BUBBLE, global_batch=8)),
]  # fmt: skip


def _run(
    name: str, kwargs: dict[str, Any], amax: str = "tp_dp_cp", layers: int = 4
) -> tuple[float, float, TraceStep]:
    """The levelled step (without the next step's parameter gather, which the trace does not
    run), its amax seconds and the trace."""
    backend = AnalyticalBackend(framework="megatron-core", overrides={"fp8_amax_reduction": amax})
    model = get_flavor(name).with_overrides(layers=layers, seq_len=1024)
    parallel = ParallelConfig(**kwargs, **FP8)  # type: ignore[arg-type]
    evaluation = backend.evaluate(model, parallel, SYSTEM)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    amax_s = evaluation.breakdown.get(f"exposed_{FP8_AMAX}", 0.0)
    return (
        levelled,
        amax_s,
        trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False),
    )


def _amax_nodes(traced: TraceStep) -> list[Any]:
    return [
        item
        for template in traced.templates
        for item in template
        if item.source is not None and item.source[1] in (PASS_END_FWD, PASS_END_BWD)
    ]


@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in EQUAL], ids=[c[0] for c in EQUAL])
def test_the_fp8_amax_reductions_end_the_step_as_the_levelled_mode(
    name: str, kwargs: dict[str, Any]
) -> None:
    levelled, amax_s, traced = _run(name, kwargs)
    assert amax_s > 0.0
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9)
    nodes = _amax_nodes(traced)
    parallel = ParallelConfig(**kwargs, **FP8)  # type: ignore[arg-type]
    micro_batches = parallel.global_batch // parallel.dp // parallel.micro_batch
    # one forward and one backward all-reduce per chunk and micro-batch, over tp x dp
    assert len(nodes) == 2 * parallel.pp * parallel.vpp * micro_batches
    assert {i.node.collective for i in nodes} == {CollectiveKind.ALL_REDUCE}
    assert {i.group_axes for i in nodes} == {("dp", "tp")}
    # without the reduction the trace emits none and the levelled step is shorter
    plain, plain_amax, plain_traced = _run(name, kwargs, amax="off")
    assert plain_amax == 0.0 and not _amax_nodes(plain_traced)
    assert plain < levelled
    assert math.isclose(optimizer_end(plain_traced), plain, rel_tol=1e-9)


def test_the_amax_reduction_precedes_the_pipeline_send_and_follows_the_pass() -> None:
    _, _, traced = _run("llama3-8b", dict(tp=2, dp=2, pp=2, sp=True, global_batch=8))
    template = traced.templates[0]
    by_id = {item.node.id: item for item in template}
    sends = [i for i in template if i.node.kind is NodeKind.SEND]
    assert sends
    for send in sends:
        (dep,) = send.node.data_deps
        assert by_id[dep].source is not None
        assert by_id[dep].source[1] in (PASS_END_FWD, PASS_END_BWD)  # type: ignore[index]
        (before,) = by_id[dep].node.data_deps
        assert by_id[before].node.kind is not NodeKind.SEND


def test_under_zero3_the_trace_runs_the_backward_amax_beside_the_last_scatter() -> None:
    """Earlier than the levelled mode, by at most the amax seconds (module docstring)."""
    kwargs = dict(tp=2, dp=4, zero=3, global_batch=8)
    levelled, amax_s, traced = _run("llama3-8b", kwargs, layers=2)
    end = optimizer_end(traced)
    assert amax_s > 0.0
    assert levelled - amax_s * (1 + 1e-9) <= end < levelled * (1 - 1e-9)
    plain, _, plain_traced = _run("llama3-8b", kwargs, amax="off", layers=2)
    assert math.isclose(optimizer_end(plain_traced), plain, rel_tol=1e-9)
