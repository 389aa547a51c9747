"""The explorer worker's garbage policy: what it freezes, and that freezing leaks nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search.worker import FREEZE_EVERY, GarbagePolicy
from stage_explore.system import load_system


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # leave the test process as the interpreter had it


def test_the_policy_freezes_once_every_n_evaluations(unfrozen: None) -> None:
    assert FREEZE_EVERY == GarbagePolicy().every
    gc.unfreeze()
    policy = GarbagePolicy(every=16)
    frozen = gc.get_freeze_count()
    assert frozen > 0  # created: what the process holds already
    freezes = []
    kept = []
    for evaluation in range(1, 50):
        kept.append([evaluation])  # a tracked object that survives
        policy.evaluated()
        if gc.get_freeze_count() > frozen:
            freezes.append(evaluation)
            frozen = gc.get_freeze_count()
            assert policy.pending == 0
    assert freezes == [1, 2, 4, 8, 16, 32, 48]  # powers of two up to `every`, then every 16
    policy.evaluated(2)  # one since the freeze at 48, and 14 more
    policy.evaluated(12)
    assert gc.get_freeze_count() == frozen  # 15 of the next 16
    policy.evaluated()
    assert gc.get_freeze_count() > frozen
    del kept


def test_the_analytical_backends_memos_hold_no_reference_cycles() -> None:
    """A frozen cycle is never reclaimed: dropping a backend that evaluated a sweep must leave
    nothing for the cycle collector."""
    model, system = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8), load_system("b200")
    configs = [
        ParallelConfig(dp=dp, tp=tp, pp=pp, micro_batch=1, global_batch=32, zero=zero,
                       schedule=schedule, vpp=vpp)
        for dp, tp, pp in ((8, 1, 1), (2, 2, 2), (1, 2, 4))
        for zero in (0, 1, 3)
        for schedule, vpp in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2))
        if pp > 1 or schedule != "interleaved"
    ]  # fmt: skip
    gc.collect()
    backend = AnalyticalBackend()
    results = [backend.evaluate(model, config, system) for config in configs]
    assert any(result.feasible for result in results)
    gc.collect()  # the evaluations' own short-lived cycles (sympy's, while binding): not the memos
    del backend, results
    assert gc.collect() == 0
