"""NeMo AutoModel's pipeline schedule per local batch (framework option ``local_batch_size``):
the step is that many back-to-back schedules, each with its own fill and drain."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system

MODEL = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=1024)
SYSTEM = load_system("h100-80gb")


def _evaluate(global_batch: int, pp: int = 4, **options: int) -> tuple[float, float, float]:
    backend = AnalyticalBackend(framework="automodel", overrides=options)
    parallel = ParallelConfig(dp=2, pp=pp, micro_batch=1, global_batch=global_batch)
    result = backend.evaluate(MODEL, parallel, SYSTEM)
    return result.step_time_s, result.extra["pipeline_end_s"], result.breakdown["compute"]


def test_each_local_batch_is_its_own_schedule() -> None:
    """16 micro-batches per rank in local batches of 4: four schedules of 4, one after the
    other; the last ends the pipeline as a lone 4-micro-batch step would, 3 makespans later."""
    step, end, compute = _evaluate(32, local_batch_size=4)
    one_step, one_end, one_compute = _evaluate(8)  # a single local batch
    assert end == pytest.approx(3 * one_end + one_end, rel=1e-9)
    assert step == pytest.approx(one_step + 3 * one_end, rel=1e-9)
    assert compute == pytest.approx(4 * one_compute, rel=1e-12)
    whole, _, _ = _evaluate(32)  # one schedule of 16: one fill and drain
    assert whole < step


def test_no_pipeline_or_one_local_batch_changes_nothing() -> None:
    assert _evaluate(32, pp=1, local_batch_size=4) == _evaluate(32, pp=1)
    assert _evaluate(8, local_batch_size=4) == _evaluate(8)


def test_indivisible_local_batches_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="local batches of 3"):
        _evaluate(32, local_batch_size=3)
    backend = AnalyticalBackend(framework="automodel", overrides={"local_batch_size": 3})
    parallel = ParallelConfig(dp=2, pp=4, micro_batch=2, global_batch=32)
    with pytest.raises(ConfigError, match="multiple of the micro-batch"):
        backend.evaluate(MODEL, parallel, SYSTEM)
    with pytest.raises(ConfigError, match="local_batch_size"):
        AnalyticalBackend(framework="automodel", overrides={"local_batch_size": -1})
