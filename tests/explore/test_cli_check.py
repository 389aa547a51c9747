"""``stage check``: JSON keys, the grouped text table, and exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.examples import sample_run_programs
from stage_core.chakra.writer import write_trace_set
from stage_explore.cli import COMMANDS, main
from stage_explore.cli.check import rank_ranges
from tests.fixtures import SAMPLE_RUN

COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}


@pytest.fixture()
def sound_dir(tmp_path: Path) -> Path:
    write_trace_set(tmp_path, sample_run_programs())
    return tmp_path


@pytest.fixture()
def broken_dir(tmp_path: Path) -> Path:
    programs = sample_run_programs()
    programs[0] = tuple(replace(node, tag=8) if node.id == 3 else node for node in programs[0])
    write_trace_set(tmp_path, programs)
    return tmp_path


def test_check_is_registered() -> None:
    assert "check" in COMMANDS


def test_sound_trace_set_json(sound_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(sound_dir), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"violations", "ranks"}
    assert document["violations"] == []
    assert set(document["ranks"]) == {"0", "1", "2", "3"}
    for totals in document["ranks"].values():
        assert set(totals) == {"flops", "comm_bytes", "send_bytes", "recv_bytes"}
        assert set(totals["comm_bytes"]) == COLLECTIVES
        assert totals["flops"] == 6 * 4096**3
    assert document["ranks"]["0"]["send_bytes"] == 16 << 20
    assert document["ranks"]["3"]["recv_bytes"] == 16 << 20


def test_text_table_groups_identical_ranks(
    sound_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(sound_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["ranks", "flops"]
    assert [line.split()[0] for line in lines[1:3]] == ["0-1", "2-3"]
    assert "412,316,860,416" in lines[1] and "16,777,216" in lines[1]
    assert lines[-1] == "sound: 4 ranks, no violations"


def test_violations_exit_1(broken_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(broken_dir), "--json"]) == 1
    violations = json.loads(capsys.readouterr().out)["violations"]
    assert len(violations) == 2 and any("tag 8 to rank 2" in line for line in violations)
    assert main(["check", str(broken_dir)]) == 1
    out = capsys.readouterr().out
    assert "2 violations in 4 ranks:" in out and f"  {violations[1]}" in out


@pytest.mark.parametrize("problem", ["missing directory", "garbled file", "wrong prefix"])
def test_unreadable_input_exits_2_with_one_line(
    sound_dir: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    argv = ["check", str(sound_dir)]
    if problem == "missing directory":
        argv = ["check", str(sound_dir / "nope")]
    elif problem == "garbled file":
        (sound_dir / "workload.2.et").write_bytes(b"\x07\x0a\x05")
    else:
        argv += ["--prefix", "trace"]
    assert main(argv + ["--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("stage check: error: ") and captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["notes.txt"], "notes.txt: expected a trace folder (<prefix>.<rank>.et files) or a "),
        (["runs.csv", "--for", "astra-sim"], "--for applies to a trace folder, but got 'runs.csv'"),
        (["runs.csv", "--prefix", "trace"], "--prefix applies to a trace folder, but got 'runs"),
    ],
)
def test_a_file_or_a_trace_option_with_a_csv_is_a_one_line_error(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # s22 review: a file said only "… is not a directory"; --for / --prefix were ignored on a
    # runs CSV (whose rows `stage check` checks against themselves).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / "runs.csv").write_text("id,gpu,iter_time_s\nr1,H100,1.0\n", encoding="utf-8")
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_prefix_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_trace_set(tmp_path, sample_run_programs(), prefix="trace")
    assert main(["check", str(tmp_path), "--prefix", "trace", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["violations"] == []


def test_the_real_astra_sim_inputs_are_sound(capsys: pytest.CaptureFixture[str]) -> None:
    if not SAMPLE_RUN.is_dir():
        pytest.fail(f"reference data missing: {SAMPLE_RUN.resolve()}")
    assert main(["check", str(SAMPLE_RUN), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"]["1"]["comm_bytes"]["all_gather"] == 8 << 20


@pytest.mark.parametrize(
    ("ranks", "text"), [([0], "0"), ([0, 1, 2, 5], "0-2,5"), ([3, 5, 6, 7, 9], "3,5-7,9")]
)
def test_rank_ranges(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


def test_for_astra_sim_flags_work_astra_sim_would_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    programs = sample_run_programs()
    first = next(node.id for node in programs[0] if node.kind.name == "COMP")
    programs[0] = tuple(
        replace(node, tensor_bytes=0) if node.id == first else node for node in programs[0]
    )
    write_trace_set(tmp_path, programs)
    assert main(["check", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--for", "astra-sim"]) == 1
    out = capsys.readouterr().out
    assert "1 violation in 4 ranks:" in out  # s19 polish: it read "1 violation(s)"
    assert "ASTRA-sim skips it, so its work takes no time" in out


def test_for_astra_sim_passes_stage_traces(
    sound_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(sound_dir), "--for", "astra-sim"]) == 0
    assert "sound: 4 ranks, no violations" in capsys.readouterr().out


TRACE_ARGS = ("trace", "--model", "gpt3-125m", "--layers", "2", "--tp", "2", "--pp", "2",
              "--global-batch", "4", "--seq-len", "256")  # fmt: skip


def test_stage_trace_checks_for_astra_sim_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*TRACE_ARGS, "--out", str(tmp_path)]) == 0
    assert "ASTRA-sim:" not in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--for", "astra-sim"]) == 0


def test_stage_trace_reports_what_astra_sim_would_mistime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import stage_explore.cli.trace as trace_cli

    original = trace_cli.stage_nodes  # type: ignore[attr-defined]

    def without_bytes(programs: Any, stage: Any) -> list[Any]:
        items = original(programs, stage)
        first = next(i for i, item in enumerate(items) if item.node.kind.name == "COMP")
        node = replace(items[first].node, flops=10**6, tensor_bytes=0)
        return [*items[:first], replace(items[first], node=node), *items[first + 1 :]]

    monkeypatch.setattr(trace_cli, "stage_nodes", without_bytes)
    assert main([*TRACE_ARGS, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "ASTRA-sim: stage 0: node" in err and "ASTRA-sim skips it" in err
    assert main([*TRACE_ARGS, "--out", str(tmp_path), "--for", "any"]) == 0


def test_progress_shows_reading_and_checking_each_rank_on_stderr(
    sound_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # s19 usertour: checking the README's 32,768-rank set took a silent minute.
    assert main(["check", str(sound_dir), "--progress"]) == 0
    captured = capsys.readouterr()
    assert "reading rank files: 4/4" in captured.err and "checking ranks: 4/4" in captured.err
    assert captured.out.startswith("ranks")
    assert main(["check", str(sound_dir)]) == 0  # piped (as under pytest): no meter
    assert capsys.readouterr().err == ""


def test_check_help_names_the_default_rules(capsys: pytest.CaptureFixture[str]) -> None:
    # s19 usertour: the README said a bare `stage check` flags what makes ASTRA-sim abort;
    # those rules need --for astra-sim (the default is any), which the help did not say.
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "any (default)" in " ".join(capsys.readouterr().out.split())
