"""A study killed hard (SIGKILL of the whole process group) in the middle, then resumed from
the command line, loses and duplicates no trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import import_module
from pathlib import Path

from stage_explore import load_results
from stage_explore.records import part_files

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

TRIALS = 300
SPACE = support.SPACE + 'sp = [false, true]\nvpp = [1, 2, 4]\nschedule = ["1f1b", "interleaved"]\n'


def command(study: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "stage_explore",
        "explore",
        str(study),
        "--out",
        str(out),
        "--executor",
        "local",
        *extra,
    ]


def test_killed_study_resumes_without_losing_or_repeating_trials(tmp_path: Path) -> None:
    study = tmp_path / "study.toml"
    study.write_text(
        support.study_text(trials=TRIALS, batch_size=8, space=SPACE, options="sleep_s = 0.04")
    )
    out = tmp_path / "out"
    folder = out / "demo"
    env = support.subprocess_env()
    process = subprocess.Popen(
        command(study, out),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not part_files(folder) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its worker processes
        process.wait()
    assert process.returncode == -signal.SIGKILL
    killed = load_results(folder)
    done = len(killed)
    assert 0 < done < TRIALS
    assert sorted(killed["trial"]) == list(range(done))

    refused = subprocess.run(command(study, out), env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "already holds records of study 'demo'; pass --resume" in refused.stderr
    assert refused.stderr.count("\n") == 1  # one line, no traceback

    resumed = subprocess.run(
        command(study, out, "--resume"), env=env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"({done} resumed)" in resumed.stdout
    final = load_results(folder)
    assert sorted(final["trial"]) == list(range(TRIALS))
    before = killed.drop(columns=["finished_at"]).reset_index(drop=True)
    after = final[final["trial"] < done].drop(columns=["finished_at"]).reset_index(drop=True)
    assert before.equals(after)  # what was recorded before the kill is kept as it was
