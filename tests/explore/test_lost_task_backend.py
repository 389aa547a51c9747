"""A task lost as a whole (its worker process died, Ray lost it) is recorded under the backend
the job runs, as a worker that cannot create its backend is (s25 leftovers, b542195): in a
two-stage study's search that is ``[backend] screen``, never an empty name."""

from __future__ import annotations

import time
from importlib import import_module
from pathlib import Path

import pytest

from stage_explore import load_results
from stage_explore.records import Outcome, TrialStatus
from stage_explore.search import (
    BaseExecutor,
    Candidate,
    EvaluationJob,
    LocalExecutor,
    RayExecutor,
    explore,
)
from stage_explore.search.retry import RetryPolicy
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

SCREEN = "the-screen"


def _job(tmp_path: Path) -> EvaluationJob:
    spec = parse_study(support.study_text(), tmp_path / "study.toml")
    return EvaluationJob(
        study=spec, factory=support.ExitingBackend, options={}, backend_name=SCREEN
    )


def _lost(executor: BaseExecutor, tmp_path: Path) -> list[tuple[int, Outcome]]:
    """Submit a tp = 8 point (its worker exits) and poll until its outcome is back."""
    spec = parse_study(support.study_text(), tmp_path / "study.toml")
    executor.submit([Candidate(key=5, params=support.params_of(spec, tp=8))])
    results: list[tuple[int, Outcome]] = []
    deadline = time.monotonic() + 120
    while not results and time.monotonic() < deadline:
        results = executor.poll(1.0)
    return results


def test_a_dead_local_worker_records_the_jobs_backend(tmp_path: Path) -> None:
    executor = LocalExecutor(_job(tmp_path), 1)
    try:
        [(key, outcome)] = _lost(executor, tmp_path)
    finally:
        executor.close()
    assert key == 5 and outcome.status is TrialStatus.INFRASTRUCTURE_FAILED
    assert outcome.reason.startswith("the worker process died: BrokenProcessPool")
    assert outcome.backend == SCREEN


def test_a_study_records_its_lost_trials_under_its_backend(tmp_path: Path) -> None:
    spec = parse_study(support.study_text(trials=24, batch_size=8), tmp_path / "study.toml")
    summary = explore(
        spec,
        out=tmp_path / "out",
        executor_factory=lambda job: LocalExecutor(job, 2),
        backend_factory=support.ExitingBackend,
        retry=RetryPolicy(retries=0, backoff_s=0.0),
    )
    frame = load_results(summary.directory)
    lost = frame[frame["status"] == "infrastructure_failed"]
    assert len(lost) and lost["reason"].str.contains("worker process died").all()
    assert (lost["backend"] == support.BACKEND).all()


@pytest.mark.ray
def test_a_lost_ray_task_records_the_jobs_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the Ray worker is a new process: it finds the synthetic backend through PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", support.subprocess_env()["PYTHONPATH"])
    executor = RayExecutor(_job(tmp_path), workers=1)
    try:
        [(key, outcome)] = _lost(executor, tmp_path)
    finally:
        executor.close()
    assert key == 5 and outcome.status is TrialStatus.INFRASTRUCTURE_FAILED
    assert outcome.reason.startswith("the Ray task failed: ")
    assert outcome.backend == SCREEN
