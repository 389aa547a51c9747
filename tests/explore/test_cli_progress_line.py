"""The progress line of ``stage explore``: repeats the sampler proposed are shown apart."""

from __future__ import annotations

import io

from stage_explore.cli.explore import ProgressLine
from stage_explore.search.progress import Progress, RefineProgress


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
