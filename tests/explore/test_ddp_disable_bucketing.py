"""Megatron-Core buckets the gradients of only the first model chunk of the first pipeline
stage (``ddp_bucket_first_chunk_only``; ``DistributedDataParallel`` sets ``bucket_size = None``
under ``disable_bucketing`` — model chunks after the first — and on pipeline ranks past the
first): such a chunk reduces its gradients in one collective after its last backward and gathers
its parameters in one all-gather hidden behind one forward of the chunk."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.lower.compact import chunk_runs
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Schedule
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

H100 = load_system("h100-80gb")
MODEL = get_flavor("llama3-8b").with_overrides(layers=8, vocab=32000)


def _first_chunk(backend: AnalyticalBackend, parallel: ParallelConfig, bucketed: bool) -> Any:
    """The first chunk of pipeline stage 0, costed as that chunk of ``parallel``."""
    point = bound_point(backend, MODEL, parallel, H100)
    layout = chunk_runs(*backend._layout_key(point.workload))
    runs = layout[0]
    kinds = {k: backend._kind(point, k) for k, _ in runs}
    axes = sorted({a for parts in kinds.values() for a in parts.span_axes})
    spans = {a: backend._spans(point, a)[0] for a in axes}
    return backend._chunk(point, runs, kinds, spans, bucketed), point, runs, kinds, spans


def test_an_unbucketed_chunk_reduces_once_and_hides_its_gather_behind_one_forward() -> None:
    parallel = ParallelConfig(tp=2, dp=32, zero=1, global_batch=64)
    backend = AnalyticalBackend(framework="megatron-core")
    part, point, runs, kinds, spans = _first_chunk(backend, parallel, bucketed=False)
    # one reduce-scatter of every gradient of the chunk, after its last backward
    keys = {key for kind, _ in runs for key in kinds[kind].sync[0]}
    assert len(keys) == 1  # dense blocks: one reduce-scatter over the data-parallel group
    ((collective, group),) = keys
    grads = sum(n * size for kind, n in runs for size in kinds[kind].sync[0].values())
    one = backend._collective_time(point, spans[group], collective, grads)
    assert part.sync.total_s == pytest.approx(one, rel=1e-12)
    backward = part.timing.backward_s
    assert part.sync.latest_s == pytest.approx(backward + one, rel=1e-9)
    # the whole chunk's all-gather, less one forward of the chunk
    gathered: dict[tuple[str, ...], int] = {}
    for kind, n in runs:
        for gather_axes, size in kinds[kind].sync[1].items():
            gathered[gather_axes] = gathered.get(gather_axes, 0) + n * size
    whole = sum(
        backend._collective_time(point, spans[a], CollectiveKind.ALL_GATHER, size)
        for a, size in gathered.items()
    )
    assert whole > 0
    assert part.sync.gather_s == pytest.approx(max(0.0, whole - part.timing.forward_s), rel=1e-9)
    # a bucketed chunk of the same runs reduces in several buckets: more collectives
    bucketed, *_ = _first_chunk(backend, parallel, bucketed=True)
    assert bucketed.sync.total_s > part.sync.total_s


def _step(option: bool, parallel: ParallelConfig) -> float:
    backend = AnalyticalBackend(
        framework="megatron-core", overrides={"ddp_bucket_first_chunk_only": option}
    )
    result = backend.evaluate(MODEL, parallel, H100)
    assert result.feasible, result.reason
    return result.step_time_s


def test_only_later_stages_and_chunks_change() -> None:
    assert get_framework("megatron-core").ddp_bucket_first_chunk_only
    assert not get_framework("megatron-lm-2021").ddp_bucket_first_chunk_only
    # one stage, one chunk: it is the bucketed one either way
    single = ParallelConfig(tp=2, dp=32, zero=1, global_batch=64)
    assert _step(True, single) == _step(False, single)
    # a later pipeline stage and later virtual chunks are unbucketed: the step differs (and
    # the option is part of what the backend's memos key on)
    staged = ParallelConfig(
        tp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, dp=32, zero=1, global_batch=256
    )
    assert _step(True, staged) != pytest.approx(_step(False, staged), rel=1e-6)
