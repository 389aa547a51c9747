"""The ``dp_shard`` study knob (hybrid sharding, HSDP): parsing, structural reasons, the
canonical pin (checked against the analytical backend), design points and the records column."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search import explore
from stage_explore.search.design import build_design_point
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import canonical_key, canonical_params, structural_reason

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

STUDY = """\
[study]
name = "hsdp"
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 16
sequence_length = 2048
[system]
preset = "h100-80gb"
[space]
num_gpus = [4, 8]
tp = [1, 2]
zero = [0, 3]
{shard}
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
"""


def study(tmp_path: Path, shard: str = "dp_shard = [0, 2, 4]") -> StudySpec:
    return parse_study(STUDY.format(shard=shard), tmp_path / "hsdp.toml")


#: A design point of a study's space: the given knobs, else each knob's first choice.
params_of: Callable[..., dict[str, Any]] = support.params_of


def test_the_knob_defaults_to_all_of_dp_and_takes_integers_from_0(tmp_path: Path) -> None:
    assert study(tmp_path, "").space.choices()["dp_shard"] == (0,)
    assert study(tmp_path, "dp_shard = [0, 8]").space.choices()["dp_shard"] == (0, 8)
    assert study(tmp_path, 'dp_shard = "auto"').space.choices()["dp_shard"] == (0, 1, 2, 4, 8)
    for bad in ("dp_shard = -1", "dp_shard = [2, 2]", 'dp_shard = "node"'):
        with pytest.raises(ConfigError, match="dp_shard"):
            study(tmp_path, bad)


def test_structural_reasons(tmp_path: Path) -> None:
    spec = study(tmp_path, "dp_shard = [0, 3]")
    reason = structural_reason(
        params_of(spec, num_gpus=8, zero=3, dp_shard=3), spec.workload, spec.constraints
    )
    assert reason == "dp_shard=3 does not divide dp=8"
    # without ZeRO dp_shard has no effect: nothing to refuse
    no_zero = params_of(spec, num_gpus=8, zero=0, dp_shard=3)
    assert structural_reason(no_zero, spec.workload, spec.constraints) is None


def test_dp_shard_is_pinned_where_it_has_no_effect(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices = spec.space.choices()
    cases = [
        (dict(num_gpus=8, tp=1, zero=3, dp_shard=4), {}),  # dp 8 in groups of 4: HSDP
        (dict(num_gpus=8, tp=2, zero=3, dp_shard=4), {"dp_shard": 0}),  # dp 4: all of dp
        (dict(num_gpus=8, tp=1, zero=0, dp_shard=2), {"dp_shard": 0}),  # no ZeRO
    ]
    for values, pinned in cases:
        params = params_of(spec, **values)
        canonical = canonical_params(params, choices, moe=False)
        assert canonical == {**params, **pinned}
        assert canonical_params(canonical, choices, moe=False) == canonical
    # 0 not listed: the first listed value that covers dp is the same workload
    listed = {**choices, "dp_shard": (2, 16)}
    params = params_of(spec, num_gpus=8, tp=2, zero=3, dp_shard=2)  # dp 4: groups of 2 = HSDP
    assert canonical_params(params, listed, moe=False)["dp_shard"] == 2
    params = params_of(spec, num_gpus=4, tp=2, zero=3, dp_shard=2)  # dp 2: groups of 2 = all
    assert canonical_params(params, listed, moe=False)["dp_shard"] == 2
    params = params_of(spec, num_gpus=4, tp=1, zero=3, dp_shard=16)  # dp 4 < 16: all of dp
    assert canonical_params({**params, "dp_shard": 16}, listed, moe=False)["dp_shard"] == 16


def test_a_point_and_its_canonical_point_are_the_same_workload(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices, names = spec.space.choices(), spec.space.names()
    backend = AnalyticalBackend(framework="fsdp")
    results: dict[tuple[Any, ...], tuple[float, int]] = {}
    for combination in itertools.product(*choices.values()):
        params = dict(zip(names, combination, strict=True))
        if structural_reason(params, spec.workload, spec.constraints) is None:
            model, parallel, system = build_design_point(spec, params)
            hybrid = params["zero"] and 0 < params["dp_shard"] < parallel.dp
            assert parallel.dp_shard == (params["dp_shard"] if hybrid else None)
            evaluation = backend.evaluate(model, parallel, system)
            results[combination] = (evaluation.step_time_s, evaluation.peak_memory_bytes)
    for combination, result in results.items():
        params = dict(zip(names, combination, strict=True))
        canonical = canonical_params(params, choices, moe=False)
        assert results[canonical_key(canonical, names)] == result, params
    # hybrid sharding is a distinct workload: 8 GPUs, ZeRO-3, groups of 2 or 4 or all 8
    distinct = {
        results[canonical_key(params_of(spec, num_gpus=8, tp=1, zero=3, dp_shard=s), names)]
        for s in (0, 2, 4)
    }
    assert len(distinct) == 3


def test_records_have_a_dp_shard_column(tmp_path: Path) -> None:
    space = "num_gpus = 16\ntp = 1\nzero = 3\ndp_shard = [0, 8]\n"
    text = support.study_text(sampler="grid", trials=None, space=space, batch_size=4)
    spec = parse_study(text, tmp_path / "s.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    assert sorted(frame["dp_shard"]) == [0, 8]
