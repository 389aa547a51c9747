"""A study on a local Ray instance started for it (num_cpus=2, no dashboard), and the
executor choices of the command line."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.search import EvaluationJob, Explorer, create_executor
from stage_explore.study import ExecutorKind, parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


@pytest.mark.ray
def test_study_on_a_local_ray_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    # the Ray workers are new processes: they find the synthetic backend through PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", support.subprocess_env()["PYTHONPATH"])
    text = support.study_text(
        trials=120,
        batch_size=24,
        options="fail_tp = 8, sleep_s = 0.01",
        executor='kind = "ray"\nworkers = 2\nchunk_size = 4',
    )
    spec = parse_study(text, tmp_path / "study.toml")
    tasks: list[int] = []

    def executor_factory(job: EvaluationJob):  # type: ignore[no-untyped-def]
        executor = create_executor(spec.executor, job)
        tasks.append(executor.parallelism)
        return executor

    assert not ray.is_initialized()
    summary = Explorer(spec, out=tmp_path / "out", executor_factory=executor_factory).run()
    assert not ray.is_initialized()  # the instance started for the study is shut down
    assert tasks == [2]
    frame = load_results(summary.directory)
    assert sorted(frame["trial"]) == list(range(120))
    assert summary.stopped_by == "budget"
    failed = frame[frame["status"] == "failed"]
    assert len(failed) and (failed["reason"] == "RuntimeError: synthetic failure at tp=8").all()
    evaluated = frame[frame["status"].isin(["ok", "failed"]) & (frame["worker"] != "cache")]
    assert len(evaluated) and evaluated["worker"].str.fullmatch(r".+:\d+").all()  # host:pid
    assert evaluated["worker"].nunique() >= 2  # more than one Ray worker process


def test_an_address_needs_the_ray_executor(tmp_path: Path) -> None:
    spec = parse_study(support.study_text(), tmp_path / "study.toml")
    job = EvaluationJob(study=spec, factory=support.SyntheticBackend, options={})
    with pytest.raises(ConfigError, match="--address 10.0.0.1:6379 names a Ray cluster"):
        create_executor(spec.executor, job, kind=ExecutorKind.LOCAL, address="10.0.0.1:6379")
