"""s34 review7b: two messages s34 review7 left open — ``stage eval --backend astra-sim`` without
the binary pointed at a study's ``[backend.options]``, and a second Ctrl-C during ``stage
explore`` ended without the ``--resume`` line (each test fails on main b21af38)."""

from __future__ import annotations

import signal
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore.astrasim import AstraSimBackend
from stage_explore.cli import main
from stage_explore.records import load_results
from stage_explore.search.driver import Explorer

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


@pytest.fixture
def no_astra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ASTRA_SIM_BIN, and a PATH with nothing but an empty folder."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    monkeypatch.setenv("PATH", str(empty))


EVAL = ["eval", "--model", "gpt3-125m", "--layers", "2", "--dp", "2", "--global-batch", "2",
        "--system", "a100-80gb", "--backend", "astra-sim"]  # fmt: skip


def test_eval_without_astra_sim_says_what_eval_reads(
    no_astra: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The study's way ("set `binary` in the study's [backend.options]") does not apply to
    ``stage eval``, which reads ASTRA_SIM_BIN and PATH only."""
    assert main(EVAL) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "stage eval: error: ASTRA-sim not found: ASTRA_SIM_BIN is not set and "
        "AstraSim_Analytical_Congestion_Unaware is not on PATH; "
    )
    assert "[backend.options]" not in err and "`binary`" not in err
    assert err.rstrip().endswith(
        "put the binary on PATH, or set ASTRA_SIM_BIN=/path/to/binary "
        "(stage eval has no option naming the binary)"
    )


def test_eval_with_a_missing_astra_sim_bin_names_it_and_the_eval_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ASTRA_SIM_BIN naming no file: the same ending, after the path it named."""
    missing = tmp_path / "nowhere" / "astra"
    monkeypatch.setenv("ASTRA_SIM_BIN", str(missing))
    assert main(EVAL) == 2
    err = capsys.readouterr().err
    assert f"ASTRA-sim binary from ASTRA_SIM_BIN does not exist: {missing}; " in err
    assert "[backend.options]" not in err
    assert err.rstrip().endswith("(stage eval has no option naming the binary)")


def test_a_study_still_names_its_binary_option(no_astra: None) -> None:
    """The backend as a study runs it keeps the three ways, ``binary`` included."""
    with pytest.raises(ConfigError) as error:
        AstraSimBackend().preflight()
    assert str(error.value).endswith("or set `binary` in the study's [backend.options]")


def test_a_second_interrupt_keeps_exit_130_and_the_resume_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Ctrl-C in a row: the driver's handler stops at the first and raises
    KeyboardInterrupt at the second (records flushed); the CLI printed "stage explore:
    interrupted" only, though ``--resume`` continues the study. The two signals are raised
    inside the driver's loop, where a user's would arrive."""
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=12))
    out = tmp_path / "out"

    def interrupted_twice(self: Explorer, *args: Any, **kwargs: Any) -> str:
        signal.raise_signal(signal.SIGINT)  # the first: stop after what is running
        signal.raise_signal(signal.SIGINT)  # the second: abort
        raise AssertionError("the second interrupt did not abort")

    with monkeypatch.context() as patched:
        patched.setattr(Explorer, "_loop", interrupted_twice)
        code = main(["explore", str(study), "--out", str(out), "--executor", "local"])
    assert code == 130
    captured = capsys.readouterr()
    assert "stage explore: aborted by the interrupt; what was recorded is kept" in captured.err
    lines = captured.out.splitlines()
    assert lines[-1] == (
        f"interrupted: continue with stage explore {study} --out {out} --executor local --resume"
    )
    assert lines[-2].startswith(f"records: {out / 'demo'}")
    # the hint works: the resumed run records the whole budget
    assert main(["explore", str(study), "--out", str(out), "--executor", "local", "--resume"]) == 0
    assert len(load_results(out / "demo")) == 12


def test_an_interrupt_before_the_study_is_recorded_gives_no_resume_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C before ``_study.json`` is written (the backend's preflight, Ray's start): there
    is nothing ``--resume`` could continue, so no hint, and no empty folder is left."""
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=12))
    out = tmp_path / "out"

    def interrupted_early(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("stage_explore.search.driver.explore", interrupted_early)
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip().endswith("stage explore: interrupted")
    assert "--resume" not in captured.out + captured.err
    assert not (out / "demo").exists()


def test_report_help_and_a_bad_objective_direction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stage report --help`` said DIR is "a study's records folder" (an OUT folder holding
    studies is read too) and ``--top`` sized "the" table (there is one per objective); a bad
    direction in ``--objectives`` was "objective 'x': …", not naming the option."""
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=12))
    out = tmp_path / "out"
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--top", "1"]) == 0  # the OUT folder, as the help says
    text = capsys.readouterr().out
    assert text.startswith("study demo: 12 trials, ")
    assert text.count("lowest first:\ntrial") + text.count("highest first:\ntrial") == 2
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "an OUT folder of several" in helptext
    assert "rows of each best-configurations table, one per objective" in helptext
    assert main(["report", str(out / "demo"), "--objectives", "step_time_s:up"]) == 2
    assert capsys.readouterr().err == (
        "stage report: error: --objectives: objective 'step_time_s': expected direction "
        '"min" or "max", got \'up\'\n'
    )
