"""s34 review7: a user's pass over ``stage explore`` — an interrupt before the first record, a
design space with no feasible point, ``[executor] address`` and a Ray address that answers but
is no Ray cluster (each test fails on main abf80b7)."""

from __future__ import annotations

import subprocess
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore.cli import main
from stage_explore.search import connect
from stage_explore.search.progress import Progress, StudySummary
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

#: The synthetic study with ``precision`` searched (the summary then prints each precision's
#: best, read from the records).
PRECISION_SPACE = support.SPACE + 'precision = ["bf16", "fp8"]\n'


def test_an_interrupt_before_the_first_record_keeps_exit_130_and_the_resume_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the study folder was made but before any trial was recorded (seen on
    ``llama3_70b_h100_1024`` interrupted 12 s after its start on a new Ray instance): the
    per-precision lines read a folder with no record part, and the run ended in "error: …
    no trial records (part-*.parquet) found", exit 2, without the --resume hint."""
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(space=PRECISION_SPACE))
    out = tmp_path / "out"

    def interrupted_at_once(spec: Any, *, out: Path, **_: Any) -> StudySummary:
        directory = Path(out) / spec.name
        directory.mkdir(parents=True)
        progress = Progress(
            study=spec.name, done=0, total=60, ok=0, infeasible=0, failed=0,
            best="none feasible yet", rate_per_s=0.0, elapsed_s=1.7,
        )  # fmt: skip
        return StudySummary(
            directory=directory, progress=progress, resumed=0, stopped_by="interrupted"
        )

    monkeypatch.setattr("stage_explore.search.driver.explore", interrupted_at_once)
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 130
    captured = capsys.readouterr()
    assert "error" not in captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("study demo: 0 trials: 0 ok, 0 infeasible, 0 failed; ")
    assert "stopped by an interrupt after 1.7 s" in lines[0]
    assert lines[-1] == (
        f"interrupted: continue with stage explore {study} --out {out} --executor local --resume"
    )


def test_a_run_with_no_feasible_trial_says_so_with_the_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every point out of memory: the summary said "none feasible yet" (after the whole
    budget) and nothing of why; now "none feasible" and the most frequent reasons, exit 0 (each
    point is recorded with its reason: the study's answer, not an error)."""
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=12, options="capacity_gib = 0.001"))
    out = tmp_path / "out"
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("study demo: 12 trials: 0 ok, ")
    assert "; none feasible; stopped by budget" in lines[0]
    assert lines[1] == "no feasible configuration; the most frequent reasons:"
    reasons = [line for line in lines[2:] if line.startswith("  ")]
    counts = [int(line.split("×")[1].split(":")[0]) for line in reasons]
    assert reasons[0].startswith("  infeasible ×") and "out of memory: " in reasons[0]
    assert sum(counts) == 12  # every trial is in one line (structurally impossible ones too)
    assert lines[-1].startswith("records: ")


def test_a_bad_executor_address_in_the_study_file_names_the_file_and_key(
    tmp_path: Path,
) -> None:
    """``[executor] address = "bogus"`` loaded, and the run failed with "--address bogus: …",
    an option the user had not passed."""
    executor = 'kind = "ray"\naddress = "bogus"'
    with pytest.raises(ConfigError) as error:
        parse_study(support.study_text(executor=executor), tmp_path / "s.toml")
    assert str(error.value).endswith(
        '[executor] address: expected HOST:PORT, ray://HOST:PORT, "auto" or "local", got "bogus"'
    )
    assert "s.toml:" in str(error.value)
    for good in ("auto", "local", "head:6379", "ray://head:10001", "[::1]:6379"):
        text = support.study_text(executor=f'kind = "ray"\naddress = "{good}"')
        assert parse_study(text, tmp_path / "s.toml").executor.address == good


def test_an_address_that_answers_but_is_no_ray_cluster_says_what_was_expected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray gives up on an address that answers but is no GCS (an HTTP proxy, another service)
    with "ConnectionError: Failed to connect to Ray cluster at …": the error ended there."""
    stderr = (
        "gcs_client.cc:210: Failed to get cluster ID from GCS server: RpcError\n"
        "ConnectionError: Failed to connect to Ray cluster at 10.0.0.1:6379\n"
    )
    failed = subprocess.CompletedProcess(args=[], returncode=1, stdout="", stderr=stderr)
    monkeypatch.setattr(connect.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(ConfigError) as error:
        connect.probe_cluster("10.0.0.1:6379", 30.0, 30.0)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "cannot join the Ray cluster at 10.0.0.1:6379: ConnectionError: Failed to connect"
    )
    assert message.endswith(
        "; expected the GCS port of a running Ray head node of the same Ray version "
        "(`ray start --head` prints it)"
    )
