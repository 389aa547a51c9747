"""The progress line of ``stage explore``: repeats the sampler proposed are shown apart."""

from __future__ import annotations

import io

from stage_explore.cli.explore import ProgressLine
from stage_explore.search.progress import Progress


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
