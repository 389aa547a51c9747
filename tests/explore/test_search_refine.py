"""Two-stage studies: a screening backend searches, a second backend re-evaluates the front.

The refining backend here is the synthetic backend with step times 10 % longer, so the test
can tell which numbers came from which stage; its ``preflight`` can be made to fail, standing
in for a missing ASTRA-sim binary.
"""

from __future__ import annotations

import importlib
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results, pareto_front
from stage_explore.evaluation import Evaluation
from stage_explore.search import explore
from stage_explore.search.progress import RefineProgress
from stage_explore.study import parse_study

support = importlib.import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


class RefiningBackend(support.SyntheticBackend):  # type: ignore[name-defined,misc]
    """The synthetic backend, 10 % slower, with a preflight that can fail."""

    name = "synthetic-refined"

    def __init__(self, missing: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.missing = missing

    def preflight(self) -> None:
        if self.missing:
            raise ConfigError("refining backend: its program was not found (stand-in)")

    def evaluate(self, model: Any, parallel: Any, system: Any) -> Evaluation:
        base = super().evaluate(model, parallel, system)
        values = base.to_dict()
        values.update(step_time_s=base.step_time_s * 1.1, backend=self.name)
        values.pop("breakdown")
        values.pop("extra")
        return Evaluation(**values, breakdown=base.breakdown)


REFINER = f"{__name__}:RefiningBackend"


def two_stage_text(options: str = "") -> str:
    text = support.study_text(name="two-stage", trials=40)
    screen = (
        f'[backend]\nname = "{REFINER}"\noptions = {{ {options} }}\nscreen = "{support.BACKEND}"\n'
    )
    start = text.index("[backend]")
    end = text.index("[executor]")
    return text[:start] + screen + "\n" + text[end:]


def run(tmp_path: Path, options: str = "", resume: bool = False) -> Any:
    spec = parse_study(two_stage_text(options), tmp_path / "study.toml")
    return explore(
        spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=resume
    )


def test_the_front_is_re_evaluated_and_both_numbers_are_in_the_records(tmp_path: Path) -> None:
    run(tmp_path)
    frame = load_results(tmp_path / "out" / "two-stage")
    screened = frame[frame.status == "ok"]
    front = pareto_front(screened, {"step_time_s": "min", "mfu": "max"})
    refined = frame[frame.refined_status.notna()]
    assert sorted(refined.trial) == sorted(front.trial)
    assert (refined.backend == "synthetic").all()
    assert (refined.refined_backend == "synthetic-refined").all()
    for _, row in refined.iterrows():
        assert math.isclose(row.refined_step_time_s, 1.1 * row.step_time_s, rel_tol=1e-12)
    others = frame[frame.refined_status.isna()]
    assert len(others) == len(frame) - len(front)


def test_resume_refines_nothing_twice(tmp_path: Path) -> None:
    run(tmp_path)
    parts = sorted((tmp_path / "out" / "two-stage" / "_refined").glob("part-*.parquet"))
    run(tmp_path, resume=True)
    again = sorted((tmp_path / "out" / "two-stage" / "_refined").glob("part-*.parquet"))
    assert again == parts


def test_a_missing_refining_backend_fails_before_any_trial(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="was not found"):
        run(tmp_path, options="missing = true")
    assert not (tmp_path / "out" / "two-stage").exists()


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ('name = "analytical"\nscreen = "analytical"', "a faster backend"),
        ('name = "astra-sim"\nscreen_options = { a = 1 }', "expected `screen` too"),
    ],
)
def test_two_stage_study_errors(tmp_path: Path, backend: str, message: str) -> None:
    text = support.study_text()
    start, end = text.index("[backend]"), text.index("[executor]")
    broken = text[:start] + "[backend]\n" + backend + "\n\n" + text[end:]
    with pytest.raises(ConfigError, match=message):
        parse_study(broken, tmp_path / "study.toml")


def test_the_refinement_reports_progress_and_its_counts(tmp_path: Path) -> None:
    # s19 usertour: a two-stage study re-evaluated its front (ASTRA-sim: minutes a point)
    # without a line of progress, and its summary did not say how that went.
    seen: list[RefineProgress] = []
    spec = parse_study(two_stage_text(), tmp_path / "study.toml")
    summary = explore(
        spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, on_refine=seen.append
    )
    refined = summary.refined
    assert refined is not None and refined.backend == REFINER and refined.total > 0
    assert (refined.done, refined.ok, refined.failed) == (refined.total, refined.total, 0)
    assert [p.done for p in seen] == list(range(refined.total + 1))
    assert summary.to_dict()["refined"]["done"] == refined.total
    again = run(tmp_path, resume=True).refined
    assert again is not None and (again.total, again.done) == (0, 0)


def test_an_interrupt_while_refining_is_reported_and_resume_refines_the_rest(
    tmp_path: Path,
) -> None:
    # s19 usertour: Ctrl-C during the refinement ended with exit 0, "stopped by budget", no
    # word that front points were left for --resume.
    before = signal.getsignal(signal.SIGINT)

    def interrupt(progress: RefineProgress) -> None:
        if progress.done == 0:
            os.kill(os.getpid(), signal.SIGINT)

    spec = parse_study(two_stage_text(), tmp_path / "study.toml")
    summary = explore(
        spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, on_refine=interrupt
    )
    assert signal.getsignal(signal.SIGINT) is before
    assert summary.interrupted and summary.refined is not None
    assert summary.refined.done < summary.refined.total
    left = summary.refined.total - summary.refined.done
    resumed = run(tmp_path, resume=True)
    assert not resumed.interrupted and resumed.refined is not None
    assert resumed.refined.done == resumed.refined.total == left


def test_pandas_reads_a_two_stage_study_folder_one_row_per_trial(tmp_path: Path) -> None:
    # s25 review: the refined records sat in <study>/refined/, which pyarrow's dataset reader
    # walks into: pandas.read_parquet(<study>) returned each refined trial twice.
    import pandas as pd

    run(tmp_path)
    folder = tmp_path / "out" / "two-stage"
    frame = pd.read_parquet(folder)
    assert not frame.trial.duplicated().any()
    assert len(frame) == len(load_results(folder))


def test_a_study_refined_before_s25_is_read_and_its_folder_renamed_on_resume(
    tmp_path: Path,
) -> None:
    run(tmp_path)
    folder = tmp_path / "out" / "two-stage"
    (folder / "_refined").rename(folder / "refined")  # the layout before s25
    before = load_results(folder)
    assert before.refined_status.notna().any()
    again = run(tmp_path, resume=True).refined
    assert again is not None and again.total == 0  # nothing refined twice
    assert not (folder / "refined").exists() and (folder / "_refined").is_dir()
    after = load_results(folder)
    assert after.refined_step_time_s.equals(before.refined_step_time_s)


def test_stage_explore_names_the_folder_the_refined_records_are_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stage_explore.cli import main

    (tmp_path / "study.toml").write_text(two_stage_text())
    assert main(["explore", str(tmp_path / "study.toml"), "--out", str(tmp_path / "out")]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("front "))
    named = Path(line.rsplit("(records: ", 1)[1].rstrip(")"))
    assert named == tmp_path / "out" / "two-stage" / "_refined" and named.is_dir()


def test_structurally_impossible_screening_points_name_the_screening_backend(
    tmp_path: Path,
) -> None:
    # s25 review: a point refused before any evaluation (tp·pp·cp not dividing the GPUs) was
    # recorded with the refining backend's name, which never saw it.
    run(tmp_path)
    frame = load_results(tmp_path / "out" / "two-stage")
    structural = frame[frame.reason.str.contains("does not divide", na=False)]
    assert len(structural) > 0
    assert set(structural.backend) == {support.BACKEND}  # the [backend] screen, as written
    assert "synthetic-refined" not in set(frame.backend)


#: Set once the study's first executor is made: a backend created after that is on a worker.
_ON_WORKERS: dict[str, bool] = {"yes": False}


def _unbuildable_on_workers() -> None:
    if _ON_WORKERS["yes"]:
        raise FileNotFoundError("astra-sim: no such file on this worker (stand-in)")


class WorkerlessScreen(support.SyntheticBackend):  # type: ignore[name-defined,misc]
    """The synthetic backend, which the driver can create (its preflight passes) and a worker
    cannot (ASTRA-sim installed on the head node only)."""

    def __init__(self, **options: Any) -> None:
        _unbuildable_on_workers()
        super().__init__(**options)


class WorkerlessRefiner(RefiningBackend):
    """:class:`RefiningBackend`, which a worker cannot create."""

    def __init__(self, **options: Any) -> None:
        _unbuildable_on_workers()
        super().__init__(**options)


def run_on_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, screen: str) -> Any:
    monkeypatch.setitem(_ON_WORKERS, "yes", False)

    def on_workers(job: Any) -> Any:
        _ON_WORKERS["yes"] = True  # after the driver's preflight, which created both backends
        return support.InlineExecutor(job)

    text = support.study_text(name="two-stage", trials=40)
    backend = f'[backend]\nname = "{name}"\nscreen = "{screen}"\n\n'
    text = text[: text.index("[backend]")] + backend + text[text.index("[executor]") :]
    spec = parse_study(text, tmp_path / "study.toml")
    explore(spec, out=tmp_path / "out", executor_factory=on_workers)
    return load_results(tmp_path / "out" / "two-stage")


def test_a_screening_backend_a_worker_cannot_create_is_named_in_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # s25 review: the failure was recorded under [backend] name, the refining backend, which
    # never saw the search's points (0e77282 fixed the same for points refused before it).
    screen = f"{__name__}:WorkerlessScreen"
    frame = run_on_workers(tmp_path, monkeypatch, REFINER, screen)
    assert sorted(frame.trial) == list(range(40))  # no trial lost
    failed = frame[frame.status == "failed"]
    assert len(failed) == len(frame[frame.status != "infeasible"]) > 0
    reason = "FileNotFoundError: astra-sim: no such file on this worker (stand-in)"
    assert set(failed.reason) == {f"creating the backend: {reason}"}
    assert set(frame.backend) == {screen}


def test_a_refining_backend_a_worker_cannot_create_is_named_in_the_refined_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refiner = f"{__name__}:WorkerlessRefiner"
    frame = run_on_workers(tmp_path, monkeypatch, refiner, support.BACKEND)
    refined = frame[frame.refined_status.notna()]
    assert len(refined) > 0 and (refined.status == "ok").all()
    assert set(refined.refined_status) == {"failed"}
    assert set(refined.refined_backend) == {refiner}
    assert refined.refined_reason.str.startswith("creating the backend: FileNotFoundError").all()
    assert set(frame.backend) <= {"synthetic", support.BACKEND}  # the screen's, never refiner's
