"""The Python API as the README tours it, given bad values (s23 review): one clear
:class:`ConfigError` naming the argument, what was expected and what was given, where a flavor
name for a model, a dict for a parallel config, a preset name for a system, a list for a program
set or a text column for an objective got an ``AttributeError``, a ``TypeError`` from deep
inside, or a ``global_batch`` of 2^27 ran for minutes (the command line refused it); and a study
runs from Python as ``explore(load_study("quickstart"), out="results")``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.emit import write_chakra
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower, make_workload
from stage_core.models import get_flavor, load_model
from stage_core.parallel import ParallelConfig
from stage_core.serving import (
    ServingConfig,
    ServingStep,
    kv_cache_bytes_per_token,
    lower_step,
    max_batch,
    serving_memory,
)
from stage_explore import load_results, pareto_front
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import evaluate_decode, evaluate_serve
from stage_explore.search import explore
from stage_explore.study import load_study
from stage_explore.system import load_system

MODEL = get_flavor("llama3-8b")
PARALLEL = ParallelConfig(dp=2, global_batch=4, seq_len=1024)
H100 = load_system("h100-80gb")
DECODE = ServingConfig(phase="decode", batch=8, context_len=128)

CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("flavor", lambda: get_flavor(None), r"flavor name: expected a str .* but got None"),
    ("lower", lambda: lower("llama3-8b", PARALLEL), r"model: expected a ModelSpec .*'llama3-8b'"),
    ("lower", lambda: lower(MODEL, None), r"parallel: expected a ParallelConfig .* got None"),
    (
        "evaluate",
        lambda: AnalyticalBackend().evaluate(MODEL, {"dp": 2}, H100),
        r"parallel: expected a ParallelConfig .*\{'dp': 2\} \(dict\)",
    ),
    (
        "evaluate",
        lambda: AnalyticalBackend().evaluate(MODEL, PARALLEL, "h100-80gb"),
        r"system: expected a System \(load_system\('h100-80gb'\)",
    ),
    ("memory", lambda: memory_report([]), r"programs: expected a ProgramSet \(lower\(model"),
    ("chakra", lambda: write_chakra([], "traces"), r"programs: expected a ProgramSet"),
    (
        "chakra",
        lambda: write_chakra(lower(MODEL, PARALLEL), None),  # type: ignore[arg-type]
        r"out_dir: expected a str or PathLike",
    ),
    ("system", lambda: load_system(None), r"system: expected a str or PathLike .* got None"),
    (
        "system",
        lambda: replace(H100, accelerator=None),
        r"system 'h100-80gb' `accelerator`: expected an Accelerator, but got None",
    ),
    (
        "system",
        lambda: replace(H100, network=(8, 128)),
        r"system 'h100-80gb' `network` dim: expected a NetworkDim",
    ),
    ("model", lambda: load_model(None), r"model: expected a str or Path"),
    (
        "backend",
        lambda: AnalyticalBackend(network_efficiency=0.5),  # type: ignore[arg-type]
        r"`network_efficiency` must be a non-empty list .* but got 0.5",
    ),
    (
        "decode",
        lambda: evaluate_decode(AnalyticalBackend(), "llama3-8b", DECODE, H100),
        r"model: expected a ModelSpec",
    ),
    (
        "decode",
        lambda: evaluate_decode(AnalyticalBackend(), MODEL, DECODE, H100, "0.9"),
        r"`memory_utilization` must be in \(0, 1\], but got '0.9'",
    ),
    (
        "serve",
        lambda: evaluate_serve(AnalyticalBackend(), MODEL, DECODE, H100, (2000, 500)),
        r"mix: expected a RequestMix",
    ),
    (
        "serving",
        lambda: lower_step(MODEL, {"phase": "decode"}, ServingStep(1, 129)),
        r"config: expected a ServingConfig",
    ),
    ("serving", lambda: lower_step(MODEL, DECODE, (1, 129)), r"step: expected a ServingStep"),
    ("serving", lambda: serving_memory("x"), r"program: expected a ServingProgram"),
    ("serving", lambda: max_batch(MODEL, DECODE, "80"), r"`capacity_bytes` must be an int"),
    ("serving", lambda: kv_cache_bytes_per_token("llama3-8b", 2), r"model: expected a ModelSpec"),
    ("results", lambda: load_results(None), r"directory: expected a str or PathLike"),
    ("study", lambda: load_study(None), r"path: expected a str or PathLike"),
    ("explore", lambda: explore("quickstart", out="x"), r"spec: expected a StudySpec"),
    (
        "explore",
        lambda: explore(load_study("quickstart"), out="x", trials=0),
        r"trials: expected a positive integer or None, got 0",
    ),
]


@pytest.mark.parametrize(("where", "call", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_one_clear_error(
    where: str, call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_the_size_limits_hold_for_python_callers() -> None:
    # 2^21 sequences: over the command line's limit, which the API skipped (2^27 ran minutes)
    config = ParallelConfig(dp=8, global_batch=1 << 21, seq_len=1024)
    with pytest.raises(ConfigError, match=r"`global_batch`: expected at most 1,048,576"):
        make_workload(MODEL, config)
    with pytest.raises(ConfigError, match=r"`global_batch`: expected at most"):
        AnalyticalBackend().evaluate(MODEL, config, H100)
    with pytest.raises(ConfigError, match=r"`seq_len`: expected at most 16,777,216"):
        lower(MODEL, ParallelConfig(seq_len=1 << 25))
    make_workload(MODEL, ParallelConfig(dp=8, global_batch=1 << 20, seq_len=1024))  # at it: ok


def test_a_text_column_is_no_objective(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"trial": [0, 1], "recompute": ["none", "full"], "mfu": [0.3, 0.4]})
    with pytest.raises(ConfigError, match=r"objective column\(s\) recompute .*expected numbers"):
        pareto_front(frame, {"recompute": "min"})
    with pytest.raises(ConfigError, match=r"df: expected a DataFrame"):
        pareto_front(frame.to_dict(), ["mfu"])  # type: ignore[arg-type]
    assert list(pareto_front(frame, ["mfu"]).trial) == [1]


STUDY = """\
[study]
name = "api"

[model]
flavor = "gpt3-1.3b"

[workload]
global_batch = 64
sequence_length = 2048

[system]
preset = "a100-80gb"

[space]
num_gpus = 8
tp = [1, 2]

[objectives]
step_time_s = "min"

[sampler]
kind = "grid"

[executor]
kind = "local"
workers = 1
"""


def test_a_study_runs_from_python_with_its_own_executor(tmp_path: Path) -> None:
    study = tmp_path / "api.toml"
    study.write_text(STUDY)
    summary = explore(load_study(str(study)), out=str(tmp_path / "results"))  # str paths
    assert summary.progress.done == 2 and summary.progress.ok == 2
    assert len(load_results(tmp_path / "results" / "api")) == 2
    assert load_study("quickstart").name == "quickstart"  # a bundled study by name


def test_a_front_over_an_output_folder_keeps_every_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``load_results`` of an output folder concatenates its studies; their rows with the same
    knobs are different points (another study), which ``pareto_front`` counted once: the study
    sorted first by name hid every row of the other."""
    from importlib import import_module

    from stage_explore.pareto import distinct_configurations
    from stage_explore.study import parse_study

    support = import_module(
        f"{__package__}.test_search_support" if __package__ else "test_search_support"
    )
    for name in ("alpha", "beta"):  # the same space and backend: equal rows, two studies
        path = tmp_path / f"{name}.toml"
        path.write_text(support.study_text(trials=12, name=name))
        spec = parse_study(path.read_text(), path)
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    both = load_results(tmp_path / "out")
    assert len(both) == 24 and len(distinct_configurations(both)) == 24
    front = pareto_front(both, {"step_time_s": "min", "mfu": "max"})
    assert set(front.study) == {"alpha", "beta"}  # equal points: each study's copy stays
    assert len(front[front.study == "alpha"]) == len(front[front.study == "beta"])
    from stage_explore.cli import main

    assert main(["report", str(tmp_path / "out")]) == 0  # trial numbers repeat: say whose
    lines = capsys.readouterr().out.splitlines()
    headers = [line.split() for line in lines if "num_gpus" in line.split()]
    assert headers and all(h[:2] == ["study", "trial"] for h in headers)
    assert any(line.startswith("alpha ") for line in lines)
    assert any(line.startswith("beta ") for line in lines)


def test_the_trace_writers_name_a_bad_path_or_worker_count(tmp_path: Path) -> None:
    from stage_core.lower.emit import write_json, write_symmetric

    programs = lower(MODEL, PARALLEL)
    with pytest.raises(ConfigError, match=r"path: expected a str or PathLike"):
        write_json(programs, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"path: expected a str or PathLike"):
        write_symmetric(programs, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"cannot write {tmp_path}"):
        write_symmetric(programs, tmp_path)  # a folder (IsADirectoryError before)
    with pytest.raises(ConfigError, match=r"`workers` must be an integer >= 1, but got '2'"):
        write_chakra(programs, tmp_path / "t", workers="2")  # type: ignore[arg-type]


def test_a_serving_batch_over_the_limit_is_named_as_the_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The step's ParallelConfig carries the serving batch as ``global_batch``: the size limit
    now met there would name a training option the user did not give."""
    with pytest.raises(ConfigError, match=r"`batch` must be at most 1,048,576 sequences"):
        ServingConfig(phase="decode", batch=1 << 21, context_len=128)
    from stage_explore.cli import main

    argv = ["eval", "--phase", "decode", "--model", "llama3-8b", "--system", "h100-80gb"]
    assert main([*argv, "--batch", str(1 << 21), "--context-len", "128"]) == 2
    err = capsys.readouterr().err
    assert "`batch` must be at most" in err and "global_batch" not in err


def test_the_largest_serving_batch_stops_at_the_size_limit() -> None:
    """``max_batch`` lowers its answer: past the batch limit that lowering is refused, so the
    answer stops at the limit instead of raising on a batch the caller never gave."""
    tiny = ServingConfig(phase="decode", batch=1, context_len=1)
    assert max_batch(get_flavor("gpt3-125m"), tiny, 1 << 50) == 1 << 20
    two = ServingConfig(phase="decode", batch=2, dp=2, context_len=1)
    assert max_batch(get_flavor("gpt3-125m"), two, 1 << 50) == 1 << 20


def test_run_validation_names_a_folder_that_is_no_path() -> None:
    """``run_validation(5)`` gave pathlib's TypeError (found by the s23 review)."""
    from stage_explore.validation.suite import run_validation

    with pytest.raises(ConfigError, match=r"^folder: expected a str or Path .*but got 5 \(int\)$"):
        run_validation(5)  # type: ignore[arg-type]


def test_convergence_over_an_output_folder_is_one_line_per_study(tmp_path: Path) -> None:
    """The report's best-so-far plot took an output folder's trials of every study as one
    sequence, though trial numbers restart in each study (found by the s23 review): each study
    is now its own line, its best the best of its own trials so far."""
    from importlib import import_module

    from stage_explore.report import build_report
    from stage_explore.report.html import render_html
    from stage_explore.study import parse_study

    support = import_module(
        f"{__package__}.test_search_support" if __package__ else "test_search_support"
    )
    for name, trials in (("alpha", 12), ("beta", 7)):
        path = tmp_path / f"{name}.toml"
        path.write_text(support.study_text(trials=trials, name=name))
        spec = parse_study(path.read_text(), path)
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    report = build_report(tmp_path / "out", objectives={"step_time_s": "min"})
    series = dict(report.convergence())
    assert sorted(series) == ["alpha", "beta"]
    frame = report.frame[report.frame["status"] == "ok"]
    for study, rows in series.items():
        own = frame[frame.study == study].sort_values("trial")
        assert list(rows["trial"]) == list(own["trial"])
        assert list(rows["best"]) == list(own["step_time_s"].cummin())
    page = render_html(report, [])
    assert page.count('class="front-line"><title>study ') == 2
