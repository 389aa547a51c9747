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


@pytest.mark.parametrize("rack", [64, 72])
def test_nvl72_keeps_the_all_to_all_inside_the_rack(rack: int) -> None:
    """The same layout, EP16: on H800 its all-to-all crosses InfiniBand (two nodes), on
    GB200 NVL72 racks using 64 GPUs each it stays in the NVLink domain: the MoE stages'
    exposed all-to-all per micro-batch drops, and the step is faster. With all 72 GPUs of a
    rack in use, some EP16 groups straddle two racks: their stage is the slowest."""
    steps, exposed = {}, {}
    for name in NAMES:
        backend = AnalyticalBackend()
        study = load_study(bundled_studies()[name])
        knobs: dict[str, object] = dict(tp=1, pp=16, ep=16, micro_batch=1, schedule="1f1b",
                                        recompute="full")  # fmt: skip
        if name == "deepseek_v3_gb200_nvl72":
            knobs["hw_network_0_size"] = rack
        params = _point(name, **knobs)
        model, parallel, system = build_design_point(study, params)
        steps[name] = backend.evaluate(model, parallel, system).step_time_s
        (plan,) = backend._plans.items.values()
        exposed[name] = max(
            sum(s for label, s in cls.exposed_s if "all_to_all" in label)
            for cls in plan.step.classes
        )
    assert steps["deepseek_v3_gb200_nvl72"] < steps["deepseek_v3_h800"]
    if rack == 64:
        assert 0 < exposed["deepseek_v3_gb200_nvl72"] < exposed["deepseek_v3_h800"] / 4
    else:  # the straddling groups' all-to-all crosses InfiniBand, slower than on H800 nodes
        assert exposed["deepseek_v3_gb200_nvl72"] > exposed["deepseek_v3_h800"] / 4


@pytest.mark.parametrize(
    ("pp", "global_batch", "reason"),
    [
        (4, 64, None),
        (3, 48, "schedule dualpipe needs an even pp and an even number of micro-batches of at "
                "least 2·pp, got pp=3 and 48 micro-batches"),
        (4, 6, "schedule dualpipe needs an even pp and an even number of micro-batches of at "
               "least 2·pp, got pp=4 and 6 micro-batches"),
    ],
)  # fmt: skip
def test_a_study_point_with_a_bad_dualpipe_shape_is_structurally_impossible(
    pp: int, global_batch: int, reason: str | None
) -> None:
    from stage_explore.study import structural_reason
    from stage_explore.study.spec import Constraints, WorkloadKind, WorkloadSpec

    workload = WorkloadSpec(
        kind=WorkloadKind.TRAINING, global_batch=global_batch, sequence_length=128
    )
    params = {"num_gpus": pp, "tp": 1, "pp": pp, "cp": 1, "ep": 1, "micro_batch": 1,
              "schedule": "dualpipe", "vpp": 1}  # fmt: skip
    assert structural_reason(params, workload, Constraints()) == reason
