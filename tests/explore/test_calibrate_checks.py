"""``stage calibrate`` on runs a demanding user gives it (s24 review): a configuration measured
twice made the leave-one-out error in-sample (the run "left out" was predicted by a fit on its
twin); a repeated id, runs of one configuration that disagree, runs of another GPU than the
system, and a parameter no run exercises (fitted, moved and written without a word)."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path

import pytest

from stage_explore.calibrate import (
    current_values,
    default_parameters,
    fit,
    leave_one_out,
    objective,
    user_cases,
)
from stage_explore.calibrate_checks import setup_groups
from stage_explore.cli import main
from stage_explore.system import load_system

calibrate_tests = import_module(
    f"{__package__}.test_calibrate" if __package__ else "test_calibrate"
)
HEADER, RUNS, SYSTEM = calibrate_tests.HEADER, calibrate_tests.RUNS, calibrate_tests.SYSTEM
TWIN = "a2" + RUNS[0][1:]  # run a's configuration under another id


def _csv(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


def _calibrate(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> dict[str, object]:
    argv = ["calibrate", "--runs", str(path), "--system", SYSTEM, "--json", *extra]
    assert main([*argv, "--framework", "megatron-lm-2021"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def test_leave_one_out_leaves_a_repeated_configuration_out_whole(tmp_path: Path) -> None:
    path = _csv(tmp_path, f"{RUNS[0]},0.08", f"{TWIN},0.08", f"{RUNS[4]},0.1")
    cases = user_cases(path, SYSTEM, "megatron-lm-2021", "megatron-gpt-1.7b")
    assert setup_groups(cases) == [[0, 1], [2]]
    system = load_system(SYSTEM)
    names = default_parameters(system, ["bf16"])[:1]  # the GEMM efficiency
    calls: list[tuple[int, int, str]] = []
    loo = leave_one_out(cases, system, names, max_evaluations=30,
                        progress=lambda *call: calls.append(call))  # fmt: skip
    assert calls == [(0, 2, "without a, a2"), (1, 2, "without e"), (2, 2, "")]
    assert [r.case.id for r in loo] == ["a", "a2", "e"]
    # a and a2 are predicted by a fit on e alone (0.102 s), not by one holding the other twin,
    # which fits a's own 0.08 s (0.088 s): an in-sample figure under the leave-one-out name
    alone = fit([cases[2]], system, names, max_evaluations=30)
    (expected,) = objective([cases[0]], alone.system)[1]
    assert loo[0].predicted == loo[1].predicted == expected.predicted
    held = fit([cases[1], cases[2]], system, names, max_evaluations=30)
    twin = objective([cases[0]], held.system)[1][0].predicted
    assert abs(twin - 0.08) < abs(expected.predicted - 0.08) - 0.01


def test_every_run_one_configuration_has_no_leave_one_out(tmp_path: Path) -> None:
    path = _csv(tmp_path, f"{RUNS[0]},0.2", f"{TWIN},0.2")
    cases = user_cases(path, SYSTEM, "megatron-lm-2021", "megatron-gpt-1.7b")
    loo = leave_one_out(cases, load_system(SYSTEM), ["memory"], max_evaluations=5)
    assert not any(r.evaluated for r in loo)
    assert loo[0].note == "every run is this configuration: no fit is left to predict it"


def test_a_repeated_id_is_left_out_and_disagreeing_twins_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, f"{RUNS[0]},0.2", f"{RUNS[0]},0.25", f"{TWIN},0.4", f"{RUNS[4]},0.3")
    data = _calibrate(capsys, path, "--fit", "memory", "--no-loo")
    assert data["runs"] == 3
    assert data["not_evaluated"] == {
        "a": "duplicate id 'a': row 1 has it (a run listed twice would count twice in the "
        "fit); give each row its own id"
    }
    assert data["run_warnings"] == [
        "runs a, a2 are one configuration measured 0.2, 0.4 iter_time_s (2.00x apart): no "
        "parameter values fit them all, the fit splits the difference; check what differs "
        "between them (a setting not in the CSV)"
    ]


def test_runs_of_another_gpu_than_the_system_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = HEADER.replace(",iter_time_s", ",gpu,iter_time_s")
    path = _csv(
        tmp_path, f"{RUNS[0]},H100 80GB,0.2", f"{RUNS[4]},A100 80GB,0.3", f"{RUNS[1]},H9000,0.3",
        header=header,
    )  # fmt: skip
    warnings = _calibrate(capsys, path, "--fit", "memory", "--no-loo")["run_warnings"]
    assert isinstance(warnings, list) and len(warnings) == 2
    assert warnings[0] == (
        "a: gpu 'H100 80GB' is the h100-80gb preset's H100-SXM5-80GB, but the runs are fitted "
        "to a100-80gb's A100-SXM4-80GB; fit each GPU's runs to its own --system"
    )
    assert warnings[1].startswith("b: gpu 'H9000' matches no system preset")
    assert warnings[1].endswith("it is fitted as a100-80gb's A100-SXM4-80GB all the same")


def test_a_parameter_no_run_exercises_is_kept_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs on one node never use the scale-out dim: its efficiency was 'fitted' (the simplex
    moved it: 0.434 from 0.9) and written into the system file."""
    single = RUNS[1]  # tp 8, pp 1, dp 1: one 8-GPU node
    path = _csv(tmp_path, f"{single},0.3", f"b2{single[1:].replace(',16,4,', ',32,4,')},0.55")
    out = tmp_path / "fitted.toml"
    names = ["memory", "network.infiniband-hdr"]
    data = _calibrate(capsys, path, "--fit", *names, "--no-loo", "--out", str(out))
    kept = current_values(load_system(SYSTEM))["network.infiniband-hdr"]
    fitted = data["fitted"]
    assert isinstance(fitted, dict) and fitted["network.infiniband-hdr"] == kept
    assert current_values(load_system(out))["network.infiniband-hdr"] == pytest.approx(kept)
    warnings = data["warnings"]
    assert isinstance(warnings, list)
    assert warnings[-1] == (
        "network.infiniband-hdr moves no run's prediction (from 0.2 to 1 every run predicts the "
        f"same: the runs do not exercise it), so it is not fitted: kept at the system's {kept:.4g}"
        "; leave it out of --fit"
    )
    assert not any(w.startswith("memory moves") for w in warnings)
