"""The ``recompute_num_layers`` study knob (partial activation checkpointing): parsing, the
canonical pin (checked against the analytical backend), design points, the layer-count refusal
and the records column."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.parallel import ParallelConfig
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
name = "partial"
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 16
sequence_length = 2048
[system]
preset = "h100-80gb"
[space]
num_gpus = 8
pp = [1, 2]
recompute = ["selective", "full"]
{layers}
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
"""


def study(tmp_path: Path, layers: str = "recompute_num_layers = [0, 4, 12]") -> StudySpec:
    return parse_study(STUDY.format(layers=layers), tmp_path / "partial.toml")


#: A design point of a study's space: the given knobs, else each knob's first choice.
params_of: Callable[..., dict[str, Any]] = support.params_of


def test_the_knob_defaults_to_every_layer_and_takes_integers_from_0(tmp_path: Path) -> None:
    assert study(tmp_path, "").space.choices()["recompute_num_layers"] == (0,)
    spaced = study(tmp_path, "recompute_num_layers = { min = 0, max = 6, step = 3 }")
    assert spaced.space.choices()["recompute_num_layers"] == (0, 3, 6)
    bad = (
        "recompute_num_layers = -1",
        "recompute_num_layers = [2, 2]",
        'recompute_num_layers = "auto"',
        "recompute_num_layers = true",
    )
    for text in bad:
        with pytest.raises(ConfigError, match="recompute_num_layers") as error:
            study(tmp_path, text)
        assert "\n" not in str(error.value)


def test_the_knob_is_pinned_unless_every_layer_is_fully_recomputed(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices = spec.space.choices()
    full = params_of(spec, recompute="full", recompute_num_layers=4)
    assert canonical_params(full, choices, moe=False) == full
    selective = params_of(spec, recompute="selective", recompute_num_layers=4)
    canonical = canonical_params(selective, choices, moe=False)
    assert canonical == {**selective, "recompute_num_layers": 0}
    assert canonical_params(canonical, choices, moe=False) == canonical
    # 0 not listed: the pin takes the first listed value (it has no effect there)
    listed = {**choices, "recompute_num_layers": (4, 12)}
    assert canonical_params(selective, listed, moe=False)["recompute_num_layers"] == 4


def test_design_points_carry_the_count_under_full_recompute_only(tmp_path: Path) -> None:
    spec = study(tmp_path)
    _, parallel, _ = build_design_point(
        spec, params_of(spec, pp=2, recompute="full", recompute_num_layers=4)
    )
    assert (parallel.recompute_num_layers, parallel.recompute_method) == (4, "block")
    for recompute, layers in (("full", 0), ("selective", 4)):
        _, parallel, _ = build_design_point(
            spec, params_of(spec, recompute=recompute, recompute_num_layers=layers)
        )
        assert parallel.recompute_num_layers is None
    # more layers than a stage builds (24 / pp 2 = 12): a one-line refusal naming the knob's field
    with pytest.raises(ConfigError, match="recompute_num_layers") as error:
        build_design_point(spec, params_of(spec, pp=2, recompute="full", recompute_num_layers=13))
    assert "\n" not in str(error.value)


def test_a_point_and_its_canonical_point_are_the_same_workload(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices, names = spec.space.choices(), spec.space.names()
    backend = AnalyticalBackend(framework="megatron-core")
    results: dict[tuple[Any, ...], tuple[float, int]] = {}
    for combination in itertools.product(*choices.values()):
        params = dict(zip(names, combination, strict=True))
        if structural_reason(params, spec.workload, spec.constraints) is None:
            model, parallel, system = build_design_point(spec, params)
            evaluation = backend.evaluate(model, parallel, system)
            results[combination] = (evaluation.step_time_s, evaluation.peak_memory_bytes)
            # the explorer's point is the configuration the CLI would evaluate
            full = params["recompute"] == "full"
            direct = ParallelConfig(
                dp=8 // params["pp"],
                pp=params["pp"],
                recompute=params["recompute"],
                recompute_num_layers=(params["recompute_num_layers"] or None) if full else None,
                global_batch=16,
                seq_len=2048,
            )
            again = backend.evaluate(model, direct, system)
            assert (again.step_time_s, again.peak_memory_bytes) == results[combination]
    for combination, result in results.items():
        params = dict(zip(names, combination, strict=True))
        canonical = canonical_params(params, choices, moe=False)
        assert results[canonical_key(canonical, names)] == result, params

    def partial(layers: int) -> dict[str, Any]:
        return params_of(spec, pp=2, recompute="full", recompute_num_layers=layers)

    # the count is a distinct workload under full recompute: fewer recomputed layers keep more
    # activations (more memory) and re-run fewer forwards (less time)
    points = [results[canonical_key(partial(n), names)] for n in (4, 12, 0)]
    assert len(set(points)) == 2  # 12 of a stage's 12 layers is every layer: the same as 0
    (time_4, memory_4), (time_12, memory_12), _ = points
    assert memory_4 > memory_12 and time_4 < time_12


def test_records_have_a_recompute_num_layers_column(tmp_path: Path) -> None:
    space = 'num_gpus = 8\nrecompute = "full"\nrecompute_num_layers = [0, 2]\n'
    text = support.study_text(sampler="grid", trials=None, space=space, batch_size=4)
    spec = parse_study(text, tmp_path / "s.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    assert sorted(frame["recompute_num_layers"]) == [0, 2]
