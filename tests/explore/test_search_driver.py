"""The study driver with the synthetic backend: records, statuses, Optuna bookkeeping,
failures, grid exhaustion, resume, refusal, time limit and interruption."""

from __future__ import annotations

import json
import os
import signal
from importlib import import_module
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.search import Explorer, LocalExecutor, explore
from stage_explore.search.progress import Progress, StudySummary
from stage_explore.search.retry import RetryPolicy
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import canonical_params

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

REQUIRED_COLUMNS = {
    "trial",
    "status",
    "reason",
    "backend",
    "step_time_s",
    "peak_memory_bytes",
    "mfu",
    "num_gpus",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "sp",
    "zero",
    "recompute",
    "schedule",
    "vpp",
    "micro_batch",
    "eval_s",
    "finished_at",
    "worker",
}


InlineExecutor = support.InlineExecutor


def spec_of(tmp_path: Path, **kwargs: Any) -> StudySpec:
    return parse_study(support.study_text(**kwargs), tmp_path / "study.toml")


def run(spec: StudySpec, tmp_path: Path, **kwargs: Any) -> StudySummary:
    kwargs.setdefault("executor_factory", InlineExecutor)
    return explore(spec, out=tmp_path / "out", **kwargs)


def assert_contiguous(frame: Any, count: int) -> None:
    assert sorted(frame["trial"]) == list(range(count))


def completed(study: optuna.Study) -> int:
    """Trials told with values (repeats of a configuration are told as failed)."""
    return sum(trial.state is TrialState.COMPLETE for trial in study.trials)


def test_local_executor_study_end_to_end(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=60, batch_size=16)
    explorer = Explorer(
        spec, out=tmp_path / "out", executor_factory=lambda job: LocalExecutor(job, 2)
    )
    summary = explorer.run()
    frame = load_results(summary.directory)
    assert summary.stopped_by == "budget" and summary.progress.done == 60
    assert_contiguous(frame, 60)
    assert REQUIRED_COLUMNS <= set(frame.columns)
    counts = frame["status"].value_counts().to_dict()
    assert counts.get("ok", 0) == summary.progress.ok > 0
    assert counts.get("infeasible", 0) == summary.progress.infeasible > 0
    assert "failed" not in counts
    ok = frame[frame["status"] == "ok"]
    assert ok["feasible"].all() and (ok["reason"] == "").all()
    assert (ok["peak_memory_bytes"] <= ok["memory_capacity_bytes"]).all()
    assert (ok["dp"] * ok["tp"] * ok["pp"] * ok["cp"] == ok["num_gpus"]).all()
    assert set(ok["worker"]) - {"cache"}  # evaluated in worker processes
    assert explorer.study is not None and completed(explorer.study) == 60


def test_infeasible_points_are_told_as_constraint_violations(tmp_path: Path) -> None:
    explorer = Explorer(
        spec_of(tmp_path, sampler="tpe", trials=48),
        out=tmp_path / "out",
        executor_factory=InlineExecutor,
    )
    explorer.run()
    frame = load_results(tmp_path / "out" / "demo")
    assert explorer.study is not None
    choices = explorer.spec.space.choices()
    trials = [t for t in explorer.study.trials if t.state is TrialState.COMPLETE]
    assert len(trials) == 48
    memory = frame[frame["reason"].str.startswith("out of memory")]
    structural = frame[frame["reason"].str.contains("does not divide")]
    assert len(memory) and len(structural)
    by_params = {
        tuple(sorted(canonical_params(t.params, choices, moe=False).items())): t for t in trials
    }
    for _, row in memory.iterrows():
        told = by_params[tuple(sorted((name, row[name]) for name in trials[0].params))]
        assert told.constraints["memory"] > 0  # the excess, so the sampler learns how far off
        assert told.values[0] == pytest.approx(row["step_time_s"])
    for _, row in structural.iterrows():
        assert row["status"] == "infeasible" and row["backend"] == support.BACKEND
    feasible = [t for t in trials if all(v <= 0 for v in t.constraints.values())]
    assert len(feasible) == (frame["status"] == "ok").sum()


def test_failing_evaluation_is_a_failed_row_and_the_study_completes(tmp_path: Path) -> None:
    summary = run(spec_of(tmp_path, trials=40, options="fail_tp = 4"), tmp_path)
    frame = load_results(summary.directory)
    assert_contiguous(frame, 40)
    failed = frame[frame["status"] == "failed"]
    assert len(failed) and (failed["tp"] == 4).all()
    assert (failed["reason"] == "RuntimeError: synthetic failure at tp=4").all()
    assert failed["step_time_s"].isna().all()
    assert summary.progress.failed == len(failed) and summary.stopped_by == "budget"


def test_backend_config_error_makes_the_point_infeasible_with_its_message(tmp_path: Path) -> None:
    frame = load_results(
        run(spec_of(tmp_path, trials=40, options="reject_pp = 2"), tmp_path).directory
    )
    rejected = frame[frame["reason"] == "pp=2 does not divide the 30 layers"]
    assert (
        len(rejected) and (rejected["status"] == "infeasible").all() and (rejected["pp"] == 2).all()
    )


def test_memory_constraint_of_the_study_makes_points_infeasible(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=40, extra="[constraints]\nmax_memory_gib = 40\n")
    frame = load_results(run(spec, tmp_path).directory)
    ok = frame[frame["status"] == "ok"]
    assert (ok["peak_memory_bytes"] <= 40 << 30).all()
    over = frame[frame["reason"].str.contains("exceeds the constraint max_memory_gib = 40")]
    assert len(over) and (over["peak_memory_bytes"] > 40 << 30).all()


def test_worker_process_death_fails_its_trials_and_the_study_goes_on(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=24, batch_size=8)

    summary = explore(
        spec,
        out=tmp_path / "out",
        executor_factory=lambda job: LocalExecutor(job, 2),
        backend_factory=support.ExitingBackend,
        retry=RetryPolicy(retries=1, backoff_s=0.0),
    )
    frame = load_results(summary.directory)
    assert_contiguous(frame, 24)
    died = frame[frame["reason"].str.contains("worker process died")]
    # a dead worker is an infrastructure failure: retried once, then recorded as such
    assert len(died) and (died["status"] == "infrastructure_failed").all()
    assert died["reason"].str.endswith("(gave up after 2 attempts)").all()
    assert (frame["status"] == "ok").sum() > 0


@pytest.mark.parametrize("sampler", ["random", "tpe", "nsga2"])
def test_resume_continues_without_repeating_or_losing_trials(tmp_path: Path, sampler: str) -> None:
    spec = spec_of(tmp_path, sampler=sampler, trials=50)
    first = run(spec, tmp_path, trials=30)
    assert first.progress.done == 30
    explorer = Explorer(spec, out=tmp_path / "out", executor_factory=InlineExecutor, resume=True)
    second = explorer.run()
    frame = load_results(second.directory)
    assert second.resumed == 30 and second.progress.done == 50
    assert_contiguous(frame, 50)
    assert explorer.study is not None and completed(explorer.study) == 50
    before = frame[frame["trial"] < 30].drop(columns=["finished_at"])
    again = load_results(first.directory).drop(columns=["finished_at"])
    assert before.equals(again[again["trial"] < 30])


def test_existing_output_is_refused_without_resume(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=5)
    run(spec, tmp_path)
    with pytest.raises(ConfigError, match=r"already holds records of study 'demo'; pass --resume"):
        run(spec, tmp_path)


def test_resume_refuses_a_changed_study_definition(tmp_path: Path) -> None:
    run(spec_of(tmp_path, trials=5), tmp_path)
    changed = spec_of(
        tmp_path, trials=10, space=support.SPACE.replace("tp = [1, 2, 4, 8]", "tp = [1, 2]")
    )
    with pytest.raises(ConfigError, match=r"\[space\] differs from the study recorded"):
        run(changed, tmp_path, resume=True)


def _forget_knobs(directory: Path, names: tuple[str, ...]) -> None:
    """Make the recorded study one recorded before the ``names`` knobs existed."""
    meta = directory / "_study.json"
    content = json.loads(meta.read_text())
    for name in names:
        del content["fingerprint"]["space"]["knobs"][name]
    meta.write_text(json.dumps(content))


def test_resume_of_a_study_recorded_before_a_knob_existed(tmp_path: Path) -> None:
    """A study recorded before the precision knobs ran them at their defaults: resuming it with
    the knobs at those defaults continues it; searching another value is a changed study."""
    spec = spec_of(tmp_path, trials=10)
    first = run(spec, tmp_path, trials=5)
    _forget_knobs(first.directory, ("precision", "fp8_recipe"))
    summary = run(spec, tmp_path, resume=True)
    assert summary.resumed == 5 and summary.progress.done == 10
    _forget_knobs(summary.directory, ("precision", "fp8_recipe"))
    searched = spec_of(tmp_path, trials=20, space=support.SPACE + 'precision = ["bf16", "fp8"]\n')
    with pytest.raises(ConfigError, match=r"\[space\] differs from the study recorded"):
        run(searched, tmp_path, resume=True)


def test_python_resume_of_an_empty_folder_is_refused_as_the_cli_refuses(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=5)
    with pytest.raises(ConfigError, match=r"holds no recorded study .*start it without resume"):
        run(spec, tmp_path, resume=True)
    assert not (tmp_path / "out" / "demo" / "_study.json").exists()


def test_grid_visits_each_possible_point_once_and_ends_when_exhausted(tmp_path: Path) -> None:
    space = "num_gpus = [8, 16]\ntp = [1, 2, 4, 8]\npp = [1, 2, 3]\nzero = [1, 3]\n"
    spec = spec_of(tmp_path, sampler="grid", trials=None, space=space, batch_size=8)
    summary = run(spec, tmp_path, trials=10)
    assert summary.stopped_by == "budget" and summary.progress.done == 10
    summary = run(spec, tmp_path, resume=True)
    frame = load_results(summary.directory)
    expected = {
        (g, t, p, z)
        for g in (8, 16)
        for t in (1, 2, 4, 8)
        for p in (1, 2, 3)
        for z in (1, 3)
        if g % (t * p) == 0 and not (g == t * p and z == 3)  # at dp = 1 ZeRO is pinned
    }
    seen = list(zip(frame["num_gpus"], frame["tp"], frame["pp"], frame["zero"], strict=True))
    assert summary.stopped_by == "grid" and summary.resumed == 10
    assert len(seen) == len(set(seen)) and set(seen) == expected
    assert_contiguous(frame, len(expected))
    assert not frame["reason"].str.contains("does not divide").any()  # never proposed
    again = run(spec, tmp_path, resume=True, trials=1000)
    assert again.progress.done == len(expected) and again.stopped_by == "grid"


def test_repeated_proposals_reuse_the_first_evaluation(tmp_path: Path) -> None:
    space = "num_gpus = 8\ntp = [1, 2]\n"
    summary = run(spec_of(tmp_path, trials=12, space=space), tmp_path)
    frame = load_results(summary.directory)
    assert sorted(frame["tp"]) == [1, 2]  # two configurations, each recorded once
    assert summary.stopped_by == "exhausted" and summary.progress.done == 2
    assert summary.progress.repeats >= 1  # answered from the first evaluation


def test_time_limit_stops_asking_and_keeps_what_finished(tmp_path: Path) -> None:
    text = support.study_text(trials=10_000, options="sleep_s = 0.01").replace(
        "batch_size = 16", "batch_size = 4\ntime_limit_s = 0.3"
    )
    summary = run(parse_study(text, tmp_path / "s.toml"), tmp_path)
    frame = load_results(summary.directory)
    assert summary.stopped_by == "time limit" and 0 < len(frame) < 10_000
    assert_contiguous(frame, len(frame))


def test_interrupt_stops_cleanly_and_the_study_resumes(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, trials=200, batch_size=4, options="sleep_s = 0.01")
    seen: list[Progress] = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when the suite runs as a background job

    def interrupt(progress: Progress) -> None:
        seen.append(progress)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    summary = run(spec, tmp_path, on_progress=interrupt)
    assert summary.interrupted and 0 < summary.progress.done < 200
    assert signal.getsignal(signal.SIGINT) is before  # restored
    kept = load_results(summary.directory)
    assert_contiguous(kept, summary.progress.done)
    resumed = run(spec, tmp_path, resume=True)
    assert resumed.stopped_by == "budget"
    assert_contiguous(load_results(resumed.directory), 200)


def test_a_study_without_budget_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[sampler\] trials: expected a trial budget"):
        run(spec_of(tmp_path, trials=None), tmp_path)


def test_bad_backend_options_fail_before_any_trial(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"\[backend\] options: .*unexpected keyword argument 'speed'"
    ):
        run(spec_of(tmp_path, options="speed = 2"), tmp_path)
    assert not (tmp_path / "out" / "demo").exists()


def test_optuna_is_quiet_and_seeded(tmp_path: Path) -> None:
    first = load_results(run(spec_of(tmp_path / "a", trials=20), tmp_path / "a").directory)
    second = load_results(run(spec_of(tmp_path / "b", trials=20), tmp_path / "b").directory)
    columns = ["num_gpus", "tp", "pp", "zero", "recompute", "micro_batch"]
    assert first[columns].equals(second[columns])  # random sampler, same seed, same points
    assert optuna.__version__
