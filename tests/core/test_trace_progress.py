"""Progress of a long trace write (s24 review): for Llama 3.1 405B on 1,024 ranks the first of
22 s went by with nothing shown for 18 s — building and encoding the pipeline stages — and the
forked writer's first report came after 512 ranks. ``write_chakra``'s ``stage_progress`` counts
the stages' building and encoding; the calling process reports its own ranks as it writes
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra import filesink
from stage_core.chakra.filesink import write_rank_files
from stage_core.lower.emit import write_chakra
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig


def test_stage_building_and_encoding_is_reported(tmp_path: Path) -> None:
    programs = lower(
        get_flavor("llama3-8b").with_overrides(layers=4),
        ParallelConfig(pp=4, dp=2, global_batch=8, seq_len=512),
    )
    stages: list[tuple[int, int]] = []
    ranks: list[tuple[int, int]] = []
    write_chakra(programs, tmp_path, progress=lambda *c: ranks.append(c),
                 stage_progress=lambda *c: stages.append(c))  # fmt: skip
    assert stages == [(done, 8) for done in range(1, 9)]  # 4 built, then 4 encoded
    assert ranks[-1] == (8, 8)


def test_the_caller_reports_its_own_ranks_as_it_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filesink, "PARALLEL_MIN_RANKS", 0)
    monkeypatch.setattr(filesink, "_DRAIN_EVERY_S", 0.0)
    calls: list[tuple[int, int]] = []
    write_rank_files(tmp_path, "f.{}".format, lambda rank: b"x", 600, workers=2,
                     progress=lambda *call: calls.append(call))  # fmt: skip
    assert calls[-1] == (600, 600)
    assert len(calls) >= 300  # one report per rank of its own block of 300, not per 256
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
