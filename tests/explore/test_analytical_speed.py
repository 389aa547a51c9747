"""The analytical backend's speed memos are exact: a memoised part gives what computing it
afresh gives, bit for bit (the pipeline timeline memo shared by plans that differ only in what
the schedule's timeline does not read; the task graph built without the schedule memo)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sympy

from stage_core.errors import ConfigError, ShardingError
from stage_core.layout import Layout
from stage_core.lower.program import make_workload
from stage_core.lower.schedule import schedule
from stage_core.models import get_flavor
from stage_core.ops import local_elements, local_extent
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Schedule
from stage_core.parallel.split import cached_split_layers, split_layers
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.parts import Memo
from stage_explore.analytical.pipeline import _peak_activations, activation_profiles
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


def test_peak_activations_are_the_largest_profile_sum() -> None:
    """The memoised peak is the largest dot product of a profile vector with the sizes
    (computed here from the profiles), for every stage of an interleaved schedule."""
    kind, p, m, vpp = "interleaved", 4, 16, 2
    sizes = (3_000_001, 7_000_003)
    for stage in range(p):
        expected = max(
            counts[0] * sizes[0] + counts[1] * sizes[1]
            for counts in activation_profiles(kind, stage, p, m, vpp)
        )
        assert _peak_activations(kind, stage, p, m, vpp, sizes) == expected


def test_memo_orders_hits_only_once_half_full_and_evicts_the_oldest() -> None:
    """Below half its size a hit does not reorder (nothing is evicted there); past it a hit
    makes its entry the newest, so the oldest untouched entry is the one evicted."""
    memo = Memo(4)
    for key in "ab":
        memo.get(key, lambda key=key: key.upper())  # type: ignore[misc]
    memo.get("a", lambda: "never")  # 2 entries = half: not reordered
    assert list(memo.items) == ["a", "b"]
    memo.get("c", lambda: "C")
    memo.get("a", lambda: "never")  # 3 entries > half: "a" becomes the newest
    assert list(memo.items) == ["b", "c", "a"]
    memo.get("d", lambda: "D")
    memo.get("e", lambda: "E")  # five entries: the oldest, "b", goes
    assert list(memo.items) == ["c", "a", "d", "e"]
    assert (memo.hits, memo.misses) == (2, 5)
    assert memo.get("b", lambda: "B2") == "B2"  # evicted: computed again


def test_local_elements_multiplies_the_local_extents() -> None:
    """The inlined product equals the product of local_extent's (closed form: dims divided by
    the product of their axes), and a dim the axes do not divide is an error naming it."""
    layout = Layout(("B", "S", "H"), (("dp",), (), ("tp", "cp")))
    sizes, axes = {"B": 8, "S": 6, "H": 24}, {"dp": 2, "tp": 4, "cp": 3}
    assert local_elements(layout, sizes, axes) == (8 // 2) * 6 * (24 // 12)
    assert local_elements(layout, sizes, axes) == math.prod(
        local_extent(d, a, sizes, axes) for d, a in zip(layout.dims, layout.shards, strict=True)
    )
    with pytest.raises(ShardingError, match="dim H over tp"):
        local_elements(layout, {**sizes, "H": 20}, axes)
    symbolic = local_elements(layout, {**sizes, "S": sympy.Symbol("S")}, axes)
    assert sympy.simplify(symbolic - 4 * sympy.Symbol("S") * 2) == 0


def test_compiled_rows_are_its_columns() -> None:
    """Compiled.tasks rebuilds (rank, dependency, slot) from the columns: each task's rank
    previous task (``after``) is the last earlier task of that rank."""
    compiled = compile_shape("interleaved", 4, 8, 2)
    latest: dict[int, int] = {}
    for index, (rank, dependency, slot) in enumerate(compiled.tasks):
        assert compiled.after[index] == latest.get(rank, -1) + 1
        assert compiled.waits[index] == dependency + 1
        assert compiled.slot_of[index] == slot
        assert dependency < index  # a topological order
        latest[rank] = index
    assert compiled.last_task == tuple(latest[rank] for rank in range(4))


def test_equal_model_state_inputs_share_one_number_and_others_do_not() -> None:
    """The point's state number is a memo key: two configs that differ only in the gradient
    dtype (a model-state input) get different numbers and different results; the same config
    again gets the same number."""
    backend = AnalyticalBackend()
    model = SMALL

    def state(config: ParallelConfig) -> Any:
        workload = make_workload(model, config)
        key, blocks = backend._bound(workload)
        net, token = backend._network(A100)
        return backend._point(workload, key, blocks, net, token, "bf16", ()).state_key

    fp32, bf16 = (ParallelConfig(tp=2, dp=2, zero=1, grad_fp32=g) for g in (True, False))
    assert state(fp32) == state(ParallelConfig(tp=2, dp=2, zero=1, grad_fp32=True))
    assert state(fp32) != state(bf16)
    assert backend.evaluate(model, fp32, A100) != backend.evaluate(model, bf16, A100)


def test_the_memoised_split_is_the_split_and_raises_each_time() -> None:
    """cached_split_layers gives split_layers' counts (summing to the layers) and raises its
    ConfigError, with the same message, again on every call."""
    counts = cached_split_layers(10, 4, 1, "ends", None, None, ())
    assert counts == split_layers(10, 4, 1, split="ends")
    assert len(counts) == 4 and sum(counts) == 10
    with pytest.raises(ConfigError) as direct:
        split_layers(2, 4, 1, split="even")
    for _ in range(2):
        with pytest.raises(ConfigError) as cached:
            cached_split_layers(2, 4, 1, "even", None, None, ())
        assert str(cached.value) == str(direct.value)
