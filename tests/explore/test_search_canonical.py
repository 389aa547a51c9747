"""The canonical search space: knobs without effect pinned, the grid enumerating each
configuration once, the analytical backend agreeing that pinned points are the same workload,
and ``pareto_front`` counting a configuration once."""

from __future__ import annotations

import itertools
from collections import Counter
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stage_explore import load_results, pareto_front
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search import explore
from stage_explore.search.design import build_design_point, model_is_moe
from stage_explore.search.samplers import canonical_size
from stage_explore.study import parse_study
from stage_explore.study.space import (
    canonical_key,
    canonical_params,
    grid_points,
    structural_reason,
)

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)
ROOT = Path(__file__).resolve().parents[2]

CHOICES: dict[str, tuple[Any, ...]] = {
    "num_gpus": (8, 16),
    "tp": (1, 2),
    "pp": (1, 2),
    "cp": (1, 2),
    "ep": (1, 2),
    "sp": (False, True),
    "zero": (0, 1, 3),
    "recompute": ("none",),
    "schedule": ("1f1b", "interleaved"),
    "vpp": (1, 2),
    "micro_batch": (1,),
}


def point(**overrides: Any) -> dict[str, Any]:
    params = {name: values[0] for name, values in CHOICES.items()}
    params.update(overrides)
    return params


@pytest.mark.parametrize(
    ("params", "moe", "pinned"),
    [
        (point(tp=1, sp=True), False, {"sp": False}),  # sequence parallelism is a no-op at tp 1
        (point(tp=2, sp=True), False, {}),
        (point(schedule="1f1b", vpp=2), False, {"vpp": 1}),  # chunks only when interleaved
        (point(schedule="interleaved", pp=2, vpp=2), False, {}),
        (point(num_gpus=8, tp=2, pp=4, cp=1, zero=3), False, {"zero": 0}),  # dp·cp = 1
        (point(num_gpus=8, tp=2, pp=2, cp=2, zero=3), False, {}),  # dp = 1, cp = 2: ZeRO shards
        (point(num_gpus=8, tp=2, pp=2, cp=1, zero=3), False, {}),  # dp = 2
        (point(ep=2), False, {"ep": 1}),  # a dense model has no experts
        (point(ep=2), True, {}),
        (point(ep=2), None, {}),  # model unknown: left as it is
    ],
)
def test_knobs_without_effect_are_pinned_to_their_neutral_value(
    params: dict[str, Any], moe: bool | None, pinned: dict[str, Any]
) -> None:
    canonical = canonical_params(params, CHOICES, moe=moe)
    assert canonical == {**params, **pinned}
    assert canonical_params(canonical, CHOICES, moe=moe) == canonical  # idempotent


def test_a_pinned_knob_keeps_a_value_the_study_lists() -> None:
    choices = {**CHOICES, "sp": (True,), "zero": (1, 3)}
    canonical = canonical_params(point(tp=1, sp=True, pp=8, zero=3), choices, moe=False)
    assert canonical["sp"] is True and canonical["zero"] == 1  # neutral not listed: the first
    listed = {**CHOICES, "sp": (True, False)}
    assert canonical_params(point(sp=True), listed, moe=False)["sp"] is False


CANON = """\
[study]
name = "canon"
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 16
sequence_length = 2048
[system]
preset = "a100-80gb"
[space]
num_gpus = [4, 8]
tp = [1, 2]
pp = [1, 2]
cp = [1, 2]
sp = [false, true]
zero = [0, 1, 2]
schedule = ["1f1b", "interleaved"]
vpp = [1, 2]
micro_batch = [1, 2]
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
"""


def test_the_analytical_backend_gives_a_point_and_its_canonical_point_the_same_result(
    tmp_path: Path,
) -> None:
    spec = parse_study(CANON, tmp_path / "canon.toml")
    choices, names = spec.space.choices(), spec.space.names()
    backend = AnalyticalBackend()
    results: dict[tuple[Any, ...], tuple[float, int]] = {}
    for combination in itertools.product(*choices.values()):
        params = dict(zip(names, combination, strict=True))
        if structural_reason(params, spec.workload, spec.constraints) is None:
            evaluation = backend.evaluate(*build_design_point(spec, params))
            results[combination] = (evaluation.step_time_s, evaluation.peak_memory_bytes)
    merged: Counter[str] = Counter()
    for combination, result in results.items():
        params = dict(zip(names, combination, strict=True))
        canonical = canonical_params(params, choices, moe=False)
        assert results[canonical_key(canonical, names)] == result, params
        merged.update(name for name in names if canonical[name] != params[name])
    # each pin merged possible points (vpp > 1 without interleaving is impossible, not merged)
    assert set(merged) == {"sp", "zero"}
    grid = list(grid_points(spec.space, spec.workload, spec.constraints, moe=False))
    assert len(grid) == len({canonical_key(p, names) for p in grid}) < len(results)
    # ZeRO does shard over cp: at dp = 1 and cp = 2 the stages differ, so they are not pinned
    fixed = {"num_gpus": 4, "tp": 2, "pp": 1, "cp": 2, "sp": True, "schedule": "1f1b"}
    zero_at_cp2 = {
        result
        for combination, result in results.items()
        if all(dict(zip(names, combination, strict=True))[k] == v for k, v in fixed.items())
        and combination[names.index("micro_batch")] == 1
    }
    assert len(zero_at_cp2) == 3


def test_the_quickstart_grid_enumerates_each_configuration_once() -> None:
    path = ROOT / "studies" / "quickstart.toml"
    if not path.exists():
        path = ROOT / "stage_explore" / "studies" / "quickstart.toml"
    spec = parse_study(path.read_text(encoding="utf-8"), path)
    points = list(grid_points(spec.space, spec.workload, spec.constraints, moe=False))
    keys = {canonical_key(p, spec.space.names()) for p in points}
    # 1,056 structurally possible points of which 216 repeat another (sp at tp 1, ZeRO at dp 1)
    assert len(points) == len(keys) == canonical_size(spec, moe=model_is_moe(spec)) == 840
    assert not any(p["tp"] == 1 and p["sp"] for p in points)


def test_a_grid_study_records_each_configuration_once(tmp_path: Path) -> None:
    space = "num_gpus = [8, 16]\ntp = [1, 2]\npp = [1, 2]\nsp = [false, true]\nzero = [0, 1]\n"
    text = support.study_text(sampler="grid", trials=None, space=space, batch_size=4)
    spec = parse_study(text, tmp_path / "s.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    keys = list(zip(*(frame[name] for name in spec.space.names()), strict=True))
    assert len(keys) == len(set(keys)) == summary.progress.done
    assert not ((frame["tp"] == 1) & frame["sp"]).any()
    assert not ((frame["dp"] * frame["cp"] == 1) & (frame["zero"] > 0)).any()


def test_pareto_front_counts_a_configuration_once() -> None:
    base = {name: values[0] for name, values in CHOICES.items()}
    rows = [
        {**base, "trial": 0, "sp": False, "status": "ok", "step_time_s": 1.0, "mfu": 0.5},
        {**base, "trial": 1, "sp": True, "status": "ok", "step_time_s": 1.0, "mfu": 0.5},  # tp 1
        {**base, "trial": 2, "tp": 2, "sp": True, "status": "ok", "step_time_s": 1.0, "mfu": 0.5},
        {**base, "trial": 3, "sp": False, "status": "ok", "step_time_s": 1.0, "mfu": 0.5},
    ]
    frame = pd.DataFrame(rows).iloc[::-1]
    front = pareto_front(frame, {"step_time_s": "min", "mfu": "max"})
    assert sorted(front["trial"]) == [0, 2]  # the first of each configuration
    bare = frame.drop(columns=["tp"])  # without the knobs, rows are kept as they are
    assert len(pareto_front(bare, ["step_time_s", "mfu"])) == 4
