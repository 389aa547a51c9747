"""``stage validate --loso --jobs N`` (s19 losojobs): the leave-one-source-out fits in worker
processes give the figure one process gives, float for float and in the same order; the
progress line counts finished sources; bad ``--jobs`` values, and ``--jobs`` without ``--loso``
(nothing to fit), are one-line errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore.cli import main
from stage_explore.validation.infer import INFERRED_PREFIX
from stage_explore.validation.loso import fit_key, leave_one_source_out
from stage_explore.validation.run import RowResult, analytical_factory, evaluate_cases
from stage_explore.validation.setups import data_dir
from tests.explore.package_cases import package_cases

#: Sources fitted on their own system's rows (the A100 and H100 ones), on their accelerator's
#: (IBMFSDP-H100's system file) and on nothing (TRAINY-H200: no other H200 source here), and
#: two inferred copies of NAR21-T1, which share one fit (``fit_key``).
SOURCES = ("KOR22-T5", "NAR21-T1", "MTNLG", "MCORE08", "IBMFSDP-H100", "TRAINY-H200")
COPIES = (f"{INFERRED_PREFIX}A", f"{INFERRED_PREFIX}B")


@pytest.fixture(scope="module")
def results() -> list[RowResult]:
    cases = [c for c in package_cases() if c.source in SOURCES]
    copies = [replace(c, source=name) for name in COPIES for c in cases if c.source == "NAR21-T1"]
    return evaluate_cases([*cases, *copies])


def test_inferred_sources_on_one_system_share_a_fit_key(results: list[RowResult]) -> None:
    timing = [r.case for r in results if r.evaluated and r.case.metric != "peak_mem_gib"]
    keys = {name: fit_key(name, timing, {}) for name in (*SOURCES, *COPIES)}
    assert keys[COPIES[0]] == keys[COPIES[1]]  # one group: fitted once, in one worker
    assert len(set(keys.values())) == len(SOURCES) + 1


def test_workers_fit_the_figure_one_process_fits(results: list[RowResult]) -> None:
    serial = leave_one_source_out(results, max_evaluations=2)
    calls: list[tuple[int, int, str]] = []
    parallel = leave_one_source_out(
        results, max_evaluations=2, jobs=2, progress=lambda *call: calls.append(call)
    )
    assert list(parallel) == list(serial) == [*SOURCES, *COPIES]  # the sources' data order
    assert json.dumps(parallel) == json.dumps(serial)  # every float, every key, in order
    assert "mae" in serial["IBMFSDP-H100"] and "reason" in serial["TRAINY-H200"]
    # Progress: finished sources counted, the first still running named with how many more.
    assert calls[0] == (0, len(serial), "KOR22-T5 and 1 more")
    assert calls[-1] == (len(serial), len(serial), "")
    done = [call[0] for call in calls]
    assert done == sorted(done) and all(call[2] for call in calls[:-1])


@pytest.mark.parametrize("jobs", [0, -2, True, 1.5])
def test_a_bad_jobs_value_is_refused(results: list[RowResult], jobs: Any) -> None:
    with pytest.raises(ConfigError, match=r"jobs must be an integer >= 1, but got"):
        leave_one_source_out(results, max_evaluations=1, jobs=jobs)


def test_a_factory_that_cannot_reach_a_worker_is_refused(results: list[RowResult]) -> None:
    factory = analytical_factory()  # a closure: it does not pickle
    with pytest.raises(ConfigError, match="cannot be sent to worker processes"):
        leave_one_source_out(results, factory, max_evaluations=1, jobs=2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", "--jobs must be an integer >= 1, but got 0"), ("-3", "but got -3"),
     ("x", "argument --jobs: invalid int value: 'x'")],
)  # fmt: skip
def test_cli_refuses_a_bad_jobs_value_in_one_line(
    value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["validate", "--loso", "--jobs", value])
    except SystemExit as stop:  # argparse's own error (OneLineParser)
        code = stop.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_cli_hands_jobs_to_the_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import stage_explore.validation.suite as suite

    seen: list[int] = []

    def record(results: Any, factory: Any = None, progress: Any = None, jobs: int = 1) -> Any:
        seen.append(jobs)
        return {}

    monkeypatch.setattr(suite, "leave_one_source_out", record)
    csv = str(Path(data_dir()) / "published_runs.csv")
    assert main(["validate", "--data", csv, "--loso", "--jobs", "3", "--json"]) == 0
    assert main(["validate", "--data", csv, "--loso", "--json"]) == 0
    assert seen == [3, 1]
    capsys.readouterr()


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_cli_refuses_jobs_without_loso_in_one_line(
    jobs: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --loso nothing is fitted: --jobs was accepted and ignored (s22 review); it is
    refused before any row is evaluated."""
    import stage_explore.validation.suite as suite

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validate ran with an ignored --jobs")

    monkeypatch.setattr(suite, "run_validation", refuse)
    csv = str(Path(data_dir()) / "published_runs.csv")
    assert main(["validate", "--data", csv, "--jobs", jobs, "--json"]) == 2
    err = capsys.readouterr().err
    assert f"--jobs {jobs} runs the leave-one-source-out fits at once and needs --loso" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_json_is_byte_identical_with_two_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    csv = str(Path(data_dir()) / "published_runs.csv")  # two sources fitted: ~20 s each run
    outputs = []
    for jobs in ("1", "2"):
        assert main(["validate", "--data", csv, "--loso", "--jobs", jobs, "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert "mae" in json.loads(outputs[0])["leave_one_source_out"]["KOR22-T5"]


def test_sigterm_ends_the_workers_as_ctrl_c_does(
    results: list[RowResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM to the driver alone (``kill PID``, a batch system's time limit) ended it and
    left its spawned workers fitting, orphaned, for a fit's minutes each (s35 review8); it now
    ends the pool as Ctrl-C does and stops the figure as interrupted."""
    import os
    import signal

    import stage_explore.validation.loso_jobs as loso_jobs

    unhandled: list[int] = []  # the handler in force before the fits: called on old code only

    def record(number: int, frame: Any) -> None:
        unhandled.append(number)

    previous = signal.signal(signal.SIGTERM, record)
    ended: list[int] = []
    real_wait, real_end = loso_jobs.wait, loso_jobs._end

    def wait_after_sigterm(*args: Any, **kwargs: Any) -> Any:
        if not ended:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_wait(*args, **kwargs)

    def end(pool: Any) -> None:
        ended.append(len(dict(pool._processes or {})))
        real_end(pool)

    monkeypatch.setattr(loso_jobs, "wait", wait_after_sigterm)
    monkeypatch.setattr(loso_jobs, "_end", end)
    try:
        with pytest.raises(KeyboardInterrupt):
            leave_one_source_out(results, max_evaluations=2, jobs=2)
        assert unhandled == [] and ended == [2]  # both workers ended, the old handler untouched
        assert signal.getsignal(signal.SIGTERM) is record  # the handler before it, restored
    finally:
        signal.signal(signal.SIGTERM, previous)
