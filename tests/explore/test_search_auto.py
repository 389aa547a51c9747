"""The ``auto`` sampler, deduplicated model-based samplers and the bounded cost of TPE."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

import optuna
import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.search import Explorer, explore
from stage_explore.search.samplers import (
    REPEATS_PER_POINT,
    TPE_GENERATION,
    TPE_HISTORY,
    canonical_size,
    choose_sampler,
    is_fast,
)
from stage_explore.study import SamplerKind, StudySpec, grid_points, parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


class FastSyntheticBackend(support.SyntheticBackend):  # type: ignore[misc,name-defined]
    """The synthetic backend, declared fast enough for ``auto`` to enumerate."""

    fast = True


FAST = f"{FastSyntheticBackend.__module__}:{FastSyntheticBackend.__qualname__}"
SMALL = "num_gpus = [8, 16]\ntp = [1, 2, 4]\npp = [1, 2]\nzero = [0, 1]\nmicro_batch = [1, 2]\n"
LARGER = (
    "num_gpus = [8, 16, 32, 64]\ntp = [1, 2, 4, 8]\npp = [1, 2, 4]\nsp = [false, true]\n"
    'zero = [0, 1, 2, 3]\nrecompute = ["none", "selective", "full"]\nmicro_batch = [1, 2, 4]\n'
)


def spec_of(tmp_path: Path, *, fast: bool = False, **kwargs: Any) -> StudySpec:
    text = support.study_text(**kwargs)
    if fast:
        text = text.replace(support.BACKEND, FAST)
    return parse_study(text, tmp_path / "study.toml")


def distinct_keys(frame: Any, spec: StudySpec) -> set[tuple[Any, ...]]:
    keys = list(zip(*(frame[name] for name in spec.space.names()), strict=True))
    assert len(keys) == len(set(keys)), "a configuration was recorded twice"
    return set(keys)


@pytest.mark.parametrize(
    ("fast", "spare", "objectives", "expected"),
    [
        (True, 0, 2, SamplerKind.GRID),  # fits the budget exactly
        (True, None, 2, SamplerKind.GRID),  # no budget: the whole space
        (True, -1, 2, SamplerKind.NSGA2),  # one configuration too many
        (False, 1000, 2, SamplerKind.NSGA2),  # a slow backend is never enumerated
        (True, -1, 1, SamplerKind.TPE),
    ],
)
def test_auto_resolves_by_space_budget_and_backend_speed(
    tmp_path: Path, fast: bool, spare: int | None, objectives: int, expected: SamplerKind
) -> None:
    lines = 'step_time_s = "min"' + ('\nmfu = "max"' if objectives == 2 else "")
    spec = spec_of(tmp_path, sampler="auto", space=SMALL, objectives=lines)
    size = canonical_size(spec, moe=False)
    assert size == len(list(grid_points(spec.space, spec.workload, spec.constraints, moe=False)))
    budget = None if spare is None else size + spare
    assert choose_sampler(spec, budget=budget, fast=fast, moe=False) is expected
    assert choose_sampler(spec, budget=10, fast=fast, moe=False) is not SamplerKind.AUTO


def test_only_the_analytical_backend_and_declared_plugins_are_fast(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert not is_fast(spec, support.SyntheticBackend)
    assert is_fast(spec, FastSyntheticBackend)
    analytical = parse_study(
        support.study_text().replace(f'name = "{support.BACKEND}"', 'name = "analytical"'),
        tmp_path / "analytical.toml",
    )
    assert is_fast(analytical, object)


def test_auto_enumerates_a_space_that_fits_the_budget_once(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, fast=True, sampler="auto", trials=10_000, space=SMALL)
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    expected = {
        tuple(point.values())
        for point in grid_points(spec.space, spec.workload, spec.constraints, moe=False)
    }
    assert summary.stopped_by == "grid" and summary.progress.done == len(expected)
    assert distinct_keys(frame, spec) == expected
    assert summary.progress.repeats == 0


def test_auto_without_a_budget_needs_a_backend_it_enumerates(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, sampler="auto", trials=None, space=SMALL)
    with pytest.raises(ConfigError, match=r"\[sampler\] trials: expected a trial budget"):
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_a_model_based_study_evaluates_each_configuration_once_and_ends_when_exhausted(
    tmp_path: Path, sampler: str
) -> None:
    spec = spec_of(tmp_path, sampler=sampler, trials=5_000, space=SMALL, batch_size=8)
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    keys = distinct_keys(frame, spec)
    possible = {
        tuple(point.values())
        for point in grid_points(spec.space, spec.workload, spec.constraints, moe=False)
    }
    structural = frame["reason"].str.contains("does not divide")
    assert summary.stopped_by == "exhausted" and summary.progress.done == len(frame)
    assert possible <= keys and len(keys) - int(structural.sum()) == len(possible)
    assert summary.progress.repeats > 0  # proposed again, answered from the first evaluation


def test_tpe_cost_is_bounded_by_its_history_and_the_budget(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, sampler="tpe", trials=700, space=LARGER)
    size = canonical_size(spec, moe=False)
    assert size is not None and size > 700
    explorer = Explorer(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    summary = explorer.run()
    frame = load_results(summary.directory)
    assert summary.stopped_by == "budget" and len(distinct_keys(frame, spec)) == 700
    assert explorer.study is not None
    # the history was cut back: at most twice the bound plus one generation's asks
    limit = 2 * TPE_HISTORY + (1 + REPEATS_PER_POINT) * TPE_GENERATION
    assert len(explorer.study.trials) <= limit
    assert summary.progress.repeats <= REPEATS_PER_POINT * 700 + TPE_GENERATION  # rounding
    assert summary.progress.sampler_s > 0


def test_nsga2_with_remembered_parents_proposes_what_optuna_does() -> None:
    from optuna.distributions import BaseDistribution, CategoricalDistribution

    from stage_explore.search.samplers import _NSGAII

    distributions: dict[str, BaseDistribution] = {
        "a": CategoricalDistribution((1, 2, 4, 8)),
        "b": CategoricalDistribution(("x", "y", "z")),
        "c": CategoricalDistribution((False, True)),
    }
    proposals = []
    for sampler in (
        optuna.samplers.NSGAIISampler(seed=3, population_size=8),
        _NSGAII(seed=3, population_size=8),
    ):
        study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
        asked = []
        for _ in range(12):  # generations
            trials = [study.ask(distributions) for _ in range(8)]
            for trial in trials:
                a, b, c = trial.params["a"], trial.params["b"], trial.params["c"]
                study.tell(trial, [a * (1 + "xyz".index(b)), a / 8 + c])
            asked += [tuple(trial.params.values()) for trial in trials]
        proposals.append(asked)
    assert proposals[0] == proposals[1] and len(set(proposals[0])) > 8
