"""The analytical backend's speed memos are exact: a memoised part gives what computing it
afresh gives, bit for bit (the pipeline timeline memo shared by plans that differ only in what
the schedule's timeline does not read; the task graph built without the schedule memo)."""

from __future__ import annotations

import pytest

from stage_core.lower.schedule import schedule
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Schedule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.pipeline import activation_profiles
from stage_explore.analytical.taskgraph import compile_shape, periodic, rank_order, shape
from stage_explore.system import load_system

A100 = load_system("a100-80gb")
SMALL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved", "zb"])
def test_zero_levels_share_one_timeline_and_match_fresh_backends(schedule: str) -> None:
    """ZeRO 0 and 1 change the gradient synchronisation and the model states, not the
    forward/backward seconds: the second plan reuses the first one's pipeline timeline, and
    both results equal those of fresh backends."""
    vpp = 2 if schedule == "interleaved" else 1
    configs = [
        ParallelConfig(
            tp=2, pp=2, dp=2, zero=zero, schedule=Schedule(schedule), vpp=vpp, global_batch=32
        )
        for zero in (0, 1)
    ]
    shared = AnalyticalBackend()
    results = [shared.evaluate(SMALL, config, A100) for config in configs]
    stats = shared.cache_stats()
    assert stats["plans"]["misses"] == 2  # two plans (ZeRO enters the plan) ...
    assert stats["timelines"] == {"hits": 1, "misses": 1, "entries": 1}  # ... one timeline
    for config, result in zip(configs, results, strict=True):
        assert result == AnalyticalBackend().evaluate(SMALL, config, A100)
    assert results[1].peak_memory_bytes < results[0].peak_memory_bytes  # two distinct plans


@pytest.mark.parametrize(
    ("kind", "p", "m", "vpp"),
    [("1f1b", 4, 8, 1), ("gpipe", 3, 5, 1), ("interleaved", 4, 8, 2), ("zb", 4, 8, 1),
     ("dualpipe", 4, 8, 1)],
)  # fmt: skip
def test_task_graphs_are_built_from_the_schedule_without_keeping_its_tasks(
    kind: str, p: int, m: int, vpp: int
) -> None:
    """rank_order is the schedule itself; building a shape (and its periodicity proof) leaves
    nothing in the schedule's process-wide memo (its Task objects would live on there)."""
    for rank in range(p):
        assert rank_order(kind, rank, p, m, vpp) == schedule(kind, rank, p, m, vpp)
    schedule.cache_clear()
    for memoised in (shape, compile_shape, periodic, activation_profiles):
        memoised.cache_clear()
    compile_shape(kind, p, m, vpp)
    periodic(kind, p, vpp, 2 * p)
    activation_profiles(kind, 0, p, m, vpp)
    assert schedule.cache_info().currsize == 0
