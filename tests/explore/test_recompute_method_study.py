"""The ``recompute_method`` study knob (which N layers ``recompute_num_layers`` recomputes:
block, every, uniform, spread): parsing, the canonical pin (checked against the analytical
backend: a pinned point is the same workload), design points and the records column."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.parallel import ParallelConfig
from stage_core.parallel.vocab import RECOMPUTE_METHODS
from stage_explore import load_results
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search import explore
from stage_explore.search.design import build_design_point
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import canonical_key, canonical_params, structural_reason

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

#: gpt3-1.3b has 24 layers: at pp 2 a stage builds 12.
STUDY = """\
[study]
name = "methods"
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 16
sequence_length = 2048
[system]
preset = "h100-80gb"
[space]
num_gpus = 8
pp = 2
recompute = ["selective", "full"]
recompute_num_layers = [0, 4]
{methods}
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
"""


def study(tmp_path: Path, methods: str = 'recompute_method = ["block", "uniform"]') -> StudySpec:
    return parse_study(STUDY.format(methods=methods), tmp_path / "methods.toml")


#: A design point of a study's space: the given knobs, else each knob's first choice.
params_of: Callable[..., dict[str, Any]] = support.params_of


def test_the_knob_defaults_to_block_and_takes_the_methods(tmp_path: Path) -> None:
    assert study(tmp_path, "").space.choices()["recompute_method"] == ("block",)
    every = study(tmp_path, 'recompute_method = "auto"').space.choices()["recompute_method"]
    assert every == RECOMPUTE_METHODS
    for text in ('recompute_method = "random"', 'recompute_method = ["block", "block"]',
                 "recompute_method = 2", "recompute_method = { min = 1, max = 2 }"):  # fmt: skip
        with pytest.raises(ConfigError, match="recompute_method") as error:
            study(tmp_path, text)
        assert "\n" not in str(error.value)


def test_the_knob_is_pinned_without_a_count_to_pick(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices = spec.space.choices()
    picked = params_of(spec, recompute="full", recompute_num_layers=4, recompute_method="uniform")
    assert canonical_params(picked, choices, moe=False) == picked
    for recompute, layers in (("full", 0), ("selective", 4)):
        point = params_of(
            spec, recompute=recompute, recompute_num_layers=layers, recompute_method="uniform"
        )
        canonical = canonical_params(point, choices, moe=False)
        assert canonical["recompute_method"] == "block"
        assert canonical_params(canonical, choices, moe=False) == canonical
    # "block" not listed: the pin takes the first listed value
    listed = {**choices, "recompute_method": ("every", "uniform")}
    point = params_of(spec, recompute="selective", recompute_method="uniform")
    assert canonical_params(point, listed, moe=False)["recompute_method"] == "every"


def test_every_point_is_its_canonical_points_workload_and_the_cli_config(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices, names = spec.space.choices(), spec.space.names()
    backend = AnalyticalBackend(framework="megatron-core")
    results: dict[tuple[Any, ...], tuple[float, int]] = {}
    for combination in itertools.product(*choices.values()):
        params = dict(zip(names, combination, strict=True))
        if structural_reason(params, spec.workload, spec.constraints) is not None:
            continue
        model, parallel, system = build_design_point(spec, params)
        evaluation = backend.evaluate(model, parallel, system)
        results[combination] = (evaluation.step_time_s, evaluation.peak_memory_bytes)
        partial = params["recompute"] == "full" and params["recompute_num_layers"] > 0
        direct = ParallelConfig(
            dp=4,
            pp=2,
            recompute=params["recompute"],
            recompute_num_layers=params["recompute_num_layers"] if partial else None,
            recompute_method=params["recompute_method"] if partial else "block",
            global_batch=16,
            seq_len=2048,
        )
        again = AnalyticalBackend(framework="megatron-core").evaluate(model, direct, system)
        assert (again.step_time_s, again.peak_memory_bytes) == results[combination]
    for combination, result in results.items():
        params = dict(zip(names, combination, strict=True))
        canonical = canonical_params(params, choices, moe=False)
        assert results[canonical_key(canonical, names)] == result, params

    def picked(method: str) -> tuple[float, int]:
        point = params_of(spec, recompute="full", recompute_num_layers=4, recompute_method=method)
        return results[canonical_key(point, names)]

    block, uniform = picked("block"), picked("uniform")
    # uniform recomputes all 12 layers of a stage (groups of 4), block only 4 of them
    assert uniform[0] > block[0] and uniform[1] < block[1]


def test_records_have_a_recompute_method_column(tmp_path: Path) -> None:
    space = (
        'num_gpus = 8\nrecompute = "full"\nrecompute_num_layers = [0, 2]\n'
        'recompute_method = ["block", "uniform"]\n'
    )
    text = support.study_text(sampler="grid", trials=None, space=space, batch_size=4)
    spec = parse_study(text, tmp_path / "s.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    pairs = sorted(zip(frame["recompute_num_layers"], frame["recompute_method"], strict=True))
    assert pairs == [(0, "block"), (2, "block"), (2, "uniform")]
