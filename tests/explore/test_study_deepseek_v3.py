"""The bundled DeepSeek-V3 studies (H800 and GB200 NVL72): they load, their grid holds the
report's layout (PP16 under DualPipe, EP64, TP1, ZeRO-1), and a few trials evaluate — the
report's layout fits the H800's 80 GiB only with full recomputation here (no FP8, no BF16
optimizer moments), and DualPipe beats 1F1B on the same layout."""

from __future__ import annotations

import pytest

from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search.design import build_design_point
from stage_explore.study import grid_points, load_study
from stage_explore.study.loader import bundled_studies

NAMES = ("deepseek_v3_h800", "deepseek_v3_gb200_nvl72")


def _point(name: str, **knobs: object) -> dict[str, object]:
    study = load_study(bundled_studies()[name])
    points = grid_points(study.space, study.workload, study.constraints)
    matching = [p for p in points if all(p[k] == v for k, v in knobs.items())]
    assert matching, f"{knobs} not in the grid of {name}"
    return matching[0]


@pytest.mark.parametrize("name", NAMES)
def test_the_study_loads_with_the_schedules_in_its_space(name: str) -> None:
    study = load_study(bundled_studies()[name])
    assert study.model.flavor == "deepseek-v3" and study.workload.global_batch == 15360
    points = grid_points(study.space, study.workload, study.constraints)
    assert {p["schedule"] for p in points} == {"1f1b", "zb", "dualpipe"}
    assert all(p["num_gpus"] == 2048 for p in points)


def test_the_reports_layout_evaluates_and_dualpipe_beats_1f1b_on_h800() -> None:
    study = load_study(bundled_studies()["deepseek_v3_h800"])
    backend = AnalyticalBackend()
    results = {}
    for schedule in ("1f1b", "dualpipe"):
        for recompute in ("selective", "full"):
            params = _point("deepseek_v3_h800", tp=1, pp=16, ep=64, micro_batch=1,
                            schedule=schedule, recompute=recompute)  # fmt: skip
            model, parallel, system = build_design_point(study, params)
            results[schedule, recompute] = backend.evaluate(model, parallel, system)
    for result in results.values():
        assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)
    assert not results["dualpipe", "selective"].feasible  # out of memory: an infeasible result
    assert "out of memory" in results["dualpipe", "selective"].reason
    assert results["dualpipe", "full"].feasible and results["1f1b", "full"].feasible
    assert results["dualpipe", "full"].step_time_s < results["1f1b", "full"].step_time_s
    # DualPipe: two stages per rank, so more parameters and activations than 1F1B
    assert results["dualpipe", "full"].peak_memory_bytes > results["1f1b", "full"].peak_memory_bytes


def test_nvl72_keeps_the_all_to_all_inside_the_rack() -> None:
    """The same layout, EP16: on H800 its all-to-all crosses InfiniBand (two nodes), on
    GB200 NVL72 it stays in the NVLink domain; the GB200 step is faster by more than the
    compute ratio alone would make it."""
    backend = AnalyticalBackend()
    steps = {}
    for name in NAMES:
        study = load_study(bundled_studies()[name])
        params = _point(name, tp=1, pp=16, ep=16, micro_batch=1, schedule="1f1b",
                        recompute="full")  # fmt: skip
        model, parallel, system = build_design_point(study, params)
        steps[name] = backend.evaluate(model, parallel, system)
    h800, gb200 = steps["deepseek_v3_h800"], steps["deepseek_v3_gb200_nvl72"]
    assert gb200.step_time_s < h800.step_time_s
    exposed = {
        n: sum(v for k, v in r.breakdown.items() if "all_to_all" in k) for n, r in steps.items()
    }
    assert exposed["deepseek_v3_gb200_nvl72"] < exposed["deepseek_v3_h800"]
