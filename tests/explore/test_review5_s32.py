"""s32 review5: a resumed study continues exactly where it stopped, and bad study files and
``eval --phase decode`` options are one-line errors (each test fails on main 01eba73)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.cli import main
from stage_explore.search import Candidate, LocalExecutor, explore
from stage_explore.search.progress import Progress
from stage_explore.search.worker import EvaluationJob
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

PARAMS = ["num_gpus", "dp", "tp", "pp", "zero", "recompute", "micro_batch", "status", "reason"]


@pytest.mark.parametrize(
    ("sampler", "stop"), [("tpe", 37), ("tpe", 100), ("nsga2", 70), ("random", 33)]
)
def test_a_resumed_study_records_what_an_uninterrupted_one_records(
    tmp_path: Path, sampler: str, stop: int
) -> None:
    """Stopped part-way through a generation (the budget) and resumed with the full budget,
    the study records, trial for trial, the configurations of one run straight through: no
    configuration proposed anew, none twice, the same structurally impossible ones."""
    spec = parse_study(support.study_text(sampler=sampler, trials=150), tmp_path / "s.toml")
    whole = explore(spec, out=tmp_path / "whole", executor_factory=support.InlineExecutor)
    explore(spec, out=tmp_path / "split", executor_factory=support.InlineExecutor, trials=stop)
    resumed = explore(
        spec, out=tmp_path / "split", executor_factory=support.InlineExecutor, resume=True
    )
    expected = load_results(whole.directory).sort_values("trial")[["trial", *PARAMS]]
    got = load_results(resumed.directory).sort_values("trial")[["trial", *PARAMS]]
    assert resumed.resumed == stop
    assert resumed.progress.done == whole.progress.done == len(got)
    assert got.reset_index(drop=True).equals(expected.reset_index(drop=True))


@pytest.mark.parametrize("command", ["eval", "memory", "trace"])
def test_a_decode_step_without_its_context_names_the_option(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--phase decode`` without ``--context-len`` ran over an empty KV cache (s31 review4:
    "largest batch that fits 95,092" for Llama 3 8B); it is a one-line error naming it."""
    argv = [command, "--phase", "decode", "--model", "llama3-8b", "--batch", "8"]
    if command != "memory":
        argv += ["--out", str(tmp_path / "t")] if command == "trace" else ["--system", "h100-80gb"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--phase decode needs --context-len" in err
    assert main([*argv, "--context-len", "0"]) == 0  # an empty cache, when asked for
    assert main([*argv, "--context-len", "4096"]) == 0


def test_a_prefill_step_still_defaults_to_no_cached_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["eval", "--phase", "prefill", "--model", "llama3-8b", "--system", "h100-80gb"]
    assert main([*argv, "--prompt-len", "512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context_len"] == 0


def local(job: EvaluationJob) -> LocalExecutor:
    return LocalExecutor(job, 2)


def test_a_study_interrupted_mid_generation_resumes_as_if_never_stopped(tmp_path: Path) -> None:
    """Ctrl-C keeps the finished trials of the generation in flight (s31 review4: the resumed
    TPE study then proposed 24 more impossible points than an uninterrupted one)."""
    text = support.study_text(sampler="tpe", trials=150, options="sleep_s = 0.05")
    spec = parse_study(text.replace("batch_size = 16", "batch_size = 4"), tmp_path / "s.toml")
    whole = explore(spec, out=tmp_path / "whole", executor_factory=local)
    sent: list[int] = []

    def interrupt(progress: Progress) -> None:
        if 70 <= progress.done < 150 and not sent:  # not the summary's call, after the run
            sent.append(progress.done)
            os.kill(os.getpid(), signal.SIGINT)

    first = explore(spec, out=tmp_path / "split", executor_factory=local, on_progress=interrupt)
    assert first.interrupted and 64 < first.progress.done < 150
    resumed = explore(spec, out=tmp_path / "split", executor_factory=local, resume=True)
    # trials finished behind an unfinished one keep their earlier numbers: the same
    # configurations, each once, numbered 0 … n-1
    expected = load_results(whole.directory).sort_values(PARAMS)[PARAMS]
    got = load_results(resumed.directory)
    assert resumed.progress.done == whole.progress.done == len(got)
    assert sorted(got["trial"]) == list(range(len(got)))
    assert (
        got.sort_values(PARAMS)[PARAMS]
        .reset_index(drop=True)
        .equals(expected.reset_index(drop=True))
    )


def test_a_misspelt_backend_names_the_study_key_and_the_closest_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was 'unknown backend 'analytic'; expected one of …' with no file, key or hint."""
    text = support.study_text(trials=5).replace(support.BACKEND, "analytic")
    study = tmp_path / "s.toml"
    study.write_text(text)
    assert main(["explore", str(study), "--executor", "local", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "s.toml: [backend] name: unknown backend 'analytic' (did you mean 'analytical'?)" in err


def test_a_bad_inline_model_names_the_file_and_key_once(tmp_path: Path) -> None:
    """'s.toml:N: [model] dims: s.toml [model.dims]: unknown model flavor …' said both twice."""
    text = support.study_text(trials=5)
    start = text.index("[model]")
    end = text.index("[", start + 1)
    text = text[:start] + '[model]\ndims = { base = "gpt3-1.3x", layers = 4 }\n\n' + text[end:]
    with pytest.raises(ConfigError) as caught:
        parse_study(text, tmp_path / "s.toml")
    message = str(caught.value)
    assert "[model] dims: unknown model flavor 'gpt3-1.3x'; close names: gpt3-1.3b" in message
    assert message.count("s.toml") == 1 and "[model.dims]" not in message


def test_cancelling_a_local_pool_with_pending_tasks_raises_in_no_thread(tmp_path: Path) -> None:
    """Ctrl-C's ``cancel`` ended the worker processes after cancelling the pending futures; the
    pool's thread then failed those cancelled futures and raised InvalidStateError, printed as a
    thread traceback (seen as a PytestUnhandledThreadExceptionWarning in the s32 final run)."""
    spec = parse_study(support.study_text(options="sleep_s = 2.0"), tmp_path / "s.toml")
    job = EvaluationJob(study=spec, factory=support.SyntheticBackend, options={"sleep_s": 2.0})
    raised: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    executor = LocalExecutor(job, 1)
    try:
        for key in range(4):  # one running on the one worker, the rest pending behind it
            executor.submit([Candidate(key=key, params=support.params_of(spec, tp=1))])
        time.sleep(1.0)
        executor.cancel()
        assert executor.in_flight == 0
        time.sleep(0.5)  # the pool's thread fails the tasks of the ended process
    finally:
        executor.close()
        threading.excepthook = previous
    assert raised == []
