"""s35 review8: a demanding user's pass over ``stage calibrate``, ``stage validate``, ``stage
report`` and ``stage trace`` (the generator): each test here fails on the code before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("missing", "no such folder"),
        ("file", "a file, not a folder"),
        ("empty", "no trial records (part-*.parquet) found"),
    ],
)
def test_report_on_a_folder_without_records_says_what_it_found_and_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, expected: str
) -> None:
    """``stage report /typo`` said "no trial records (part-*.parquet) found" for a path that
    does not exist and for a file alike, and never what it expected there."""
    target = tmp_path / "records"
    if make == "file":
        target.write_text("id,iter_time_s\n")
    elif make == "empty":
        target.mkdir()
    assert main(["report", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err == (
        f"stage report: error: {target}: {expected}; expected a study's records folder "
        "(OUT/<study>) or an OUT folder of several"
    )


#: ``stage trace`` in a child Python whose third rank file, once written, sends the process a
#: SIGTERM (as ``kill PID`` or a batch system's time limit would, mid-write).
_SIGTERM_MID_TRACE = """
import os, signal, sys
import stage_core.chakra.filesink as filesink
real, written = filesink.write_file, []
def write_file(path, data):
    real(path, data)
    written.append(path)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
filesink.write_file = write_file
from stage_explore.cli import main
sys.exit(main(["trace", "--model", "llama3-8b", "--layers", "2", "--dp", "8",
               "--global-batch", "8", "--format", "chakra", "--out", sys.argv[1]]))
"""


def test_sigterm_mid_trace_removes_the_incomplete_set_and_says_interrupted(
    tmp_path: Path,
) -> None:
    """SIGTERM killed ``stage trace`` mid-write with no word, leaving rank files 0-2 of 8 that
    read as a trace set; it now ends as Ctrl-C does: the incomplete set removed, a folder that
    was there kept with what it held, ``stage trace: interrupted``, exit 130."""
    import os
    import subprocess
    import sys

    out = tmp_path / "traces"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_MID_TRACE, str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (130, "stage trace: interrupted\n")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


_RUN_HEADER = (
    "id,model,layers,hidden,ffn,heads,kv_heads,vocab,seq_len,global_batch_seqs,micro_batch,"
    "tp,pp,dp,cp,sp,vpp,recompute,precision,zero,"
)


@pytest.mark.parametrize(
    ("column", "cell", "unit"),
    [("iter_time_s", "13.08 s", "seconds"), ("iter_time_s", "13080 ms", "seconds"),
     ("tokens_per_s_per_gpu", "8000 tok/s", "tokens/s per GPU"),
     ("tflops_per_gpu", "400 TFLOPS", "TFLOP/s per GPU")],
)  # fmt: skip
def test_calibrate_names_the_unit_a_measured_cell_should_be_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, cell: str, unit: str
) -> None:
    """A unit typed in the measured cell (``13.08 s``) was refused as "is not a number", never
    saying what was expected: the column name's unit, as a plain number."""
    runs = tmp_path / "runs.csv"
    runs.write_text(
        f"{_RUN_HEADER}{column}\n"
        f"r1,llama3-8b,32,4096,14336,32,8,128256,8192,1024,1,1,1,32,2,no,1,none,bf16,1,{cell}\n"
    )
    assert main(["calibrate", "--runs", str(runs), "--system", "h100-80gb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"stage calibrate: error: r1: the {column} cell {cell!r} is not a number; expected a "
        f"plain number of {unit} (the unit in the header only)"
    )


@pytest.mark.parametrize(
    ("typed", "meant"), [("generate", "trace"), ("valdate", "validate"), ("calibrat", "calibrate")]
)
def test_a_wrong_command_names_the_one_meant(
    capsys: pytest.CaptureFixture[str], typed: str, meant: str
) -> None:
    """README's "Generate" is ``stage trace``: ``stage generate`` (and a misspelt command) listed
    the choices without saying which one was meant."""
    with pytest.raises(SystemExit) as stop:
        main([typed, "--model", "llama3-8b"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"invalid choice: '{typed}'" in err and f"; did you mean `stage {meant}`?" in err


def test_a_command_far_from_any_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["xyz"])
    assert "did you mean" not in capsys.readouterr().err
