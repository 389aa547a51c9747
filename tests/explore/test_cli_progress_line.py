"""The progress line of ``stage explore``: repeats the sampler proposed are shown apart; the
refinement's first and last point; piped, the final count and no flood of lines."""

from __future__ import annotations

import importlib
import io
import time
from pathlib import Path

import pytest

from stage_explore.cli.explore import ProgressLine
from stage_explore.search.progress import Progress, RefineProgress

support = importlib.import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def line_for(repeats: int) -> str:
    stream = io.StringIO()  # not a terminal: one line per snapshot
    ProgressLine(stream)(
        Progress(
            study="s",
            done=10,
            total=100,
            ok=8,
            infeasible=1,
            failed=1,
            best="best 1.0 s",
            rate_per_s=2.0,
            elapsed_s=5.0,
            repeats=repeats,
        )  # fmt: skip
    )
    return stream.getvalue()


def test_repeats_are_shown_only_when_there_are_some() -> None:
    assert line_for(3).rstrip().endswith("· 3 repeats from cache")
    assert "repeats" not in line_for(0)


def test_a_one_point_refinement_says_point() -> None:
    # s26 review: "1/1 points" where the search's line says "1/1 trial"
    stream = io.StringIO()
    ProgressLine(stream).refine(
        RefineProgress(backend="astra-sim", done=1, total=1, ok=1, failed=0, elapsed_s=3.0)
    )
    assert stream.getvalue() == (
        "re-evaluating the front with astra-sim: 1/1 point · 1 feasible · 0 failed · 0:03\n"
    )


def test_the_refinement_shows_its_first_and_last_point_even_when_piped() -> None:
    # s19 usertour: a two-stage study's re-evaluation of the front printed nothing.
    stream = io.StringIO()
    line = ProgressLine(stream)
    line(Progress(study="s", done=1, total=1, ok=1, infeasible=0, failed=0, best="b",
                  rate_per_s=1.0, elapsed_s=1.0))  # fmt: skip
    for done in range(4):  # within 10 s of the search's line: only the first and last show
        line.refine(RefineProgress(backend="astra-sim", done=done, total=3, ok=done, failed=0,
                                   elapsed_s=65.0))  # fmt: skip
    lines = stream.getvalue().splitlines()
    assert lines[1:] == [
        "re-evaluating the front with astra-sim: 0/3 points · 0 feasible · 0 failed · 1:05",
        "re-evaluating the front with astra-sim: 3/3 points · 3 feasible · 0 failed · 1:05",
    ]


def snapshot(done: int, elapsed_s: float = 1.0) -> Progress:
    return Progress(study="s", done=done, total=40, ok=done, infeasible=0, failed=0, best="b",
                    rate_per_s=1.0, elapsed_s=elapsed_s)  # fmt: skip


def test_a_piped_short_study_ends_with_its_final_count() -> None:
    # s25 review: on a non-terminal stderr the first snapshot ("0/40 trials") showed and the
    # next only 10 s later: a short study logged the zero line alone before its summary.
    stream = io.StringIO()
    line = ProgressLine(stream)
    for done in range(0, 41, 8):  # within 10 s of the first line
        line(snapshot(done))
    line(snapshot(40, elapsed_s=1.5))  # the driver's final snapshot: the same counts
    line.end()
    lines = stream.getvalue().splitlines()
    assert [text.split(" · ")[0] for text in lines] == ["s: 0/40 trials", "s: 40/40 trials"]
    assert lines[1].endswith("0:01")


def test_a_piped_two_stage_study_shows_the_search_count_before_the_refinement() -> None:
    stream = io.StringIO()
    line = ProgressLine(stream)
    line(snapshot(0))
    line(snapshot(40))
    for done in range(3):  # interrupted at 2 of 3 points
        line.refine(RefineProgress(backend="astra-sim", done=done, total=3, ok=done, failed=0,
                                   elapsed_s=65.0))  # fmt: skip
    line(snapshot(40, elapsed_s=70.0))  # the driver's final snapshot, after the refinement
    line.end()
    assert [text.split(" · ")[0] for text in stream.getvalue().splitlines()] == [
        "s: 0/40 trials",
        "s: 40/40 trials",
        "re-evaluating the front with astra-sim: 0/3 points",
        "re-evaluating the front with astra-sim: 2/3 points",
    ]


def test_a_piped_long_study_shows_a_line_every_10_s_not_every_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = {"now": 1000.0}
    monkeypatch.setattr(time, "monotonic", lambda: clock["now"])
    stream = io.StringIO()
    line = ProgressLine(stream)
    for done in range(0, 120):  # a snapshot every 0.5 s for 60 s (the driver's pace)
        line(snapshot(done))
        clock["now"] += 0.5
    line.end()
    shown = [int(text.split(" ")[1].split("/")[0]) for text in stream.getvalue().splitlines()]
    assert shown == [0, 20, 40, 60, 80, 100, 119]


def test_stage_explore_piped_logs_the_final_count_before_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stage_explore.cli import main

    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=40))
    assert main(["explore", str(study), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()  # stderr is not a terminal here
    progress = [text for text in captured.err.splitlines() if text.startswith("demo: ")]
    assert progress[-1].startswith("demo: 40/40 trials · ")
    assert captured.out.startswith("study demo: 40 trials")
