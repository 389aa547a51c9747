"""A trace set that cannot be written to the end (s24 review, on a real 256 KiB tmpfs: ranks 0-6
of 8 written, rank 7 truncated at 4,096 bytes, no ``comm_group.json``; ``stage check`` then read
the folder as a malformed trace set): the partly written file and the incomplete set are
removed, and the one-line error says so. ``os.write`` is made to run out of space part-way
through a chosen file, as a full disk does."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from stage_core.chakra import filesink, groups
from stage_core.chakra.filesink import removed_if_incomplete, write_file, write_rank_files
from stage_core.errors import ConfigError
from stage_core.lower.emit import write_chakra, write_symmetric
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

PROGRAMS = lower(get_flavor("llama3-8b").with_overrides(layers=2), ParallelConfig(dp=4, tp=2))


def _full_at(monkeypatch: pytest.MonkeyPatch, victim: Callable[[str], bool]) -> None:
    """``os.write`` into a file ``victim`` accepts half the bytes, then finds the disk full."""
    real_write, real_open = os.write, os.open
    opened: dict[int, str] = {}

    def fake_open(path: str, *args: int) -> int:
        fd = real_open(path, *args)
        opened[fd] = os.fspath(path)
        return fd

    def fake_write(fd: int, data: bytes | memoryview) -> int:
        name = opened.get(fd, "")
        if victim(name):
            if os.fstat(fd).st_size == 0:
                return real_write(fd, bytes(data)[: max(1, len(data) // 2)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(filesink.os, "open", fake_open)
    monkeypatch.setattr(filesink.os, "write", fake_write)


def test_a_file_cut_short_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_at(monkeypatch, lambda name: name.endswith("f"))
    with pytest.raises(ConfigError, match=r"cannot write .*/f: No space left on device$"):
        write_file(tmp_path / "f", b"x" * 100)
    assert not (tmp_path / "f").exists()


def test_a_trace_set_cut_short_is_removed_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    _full_at(monkeypatch, lambda name: name.endswith("workload.5.et"))
    with pytest.raises(ConfigError) as caught:
        write_chakra(PROGRAMS, tmp_path)
    assert str(caught.value) == (
        f"cannot write {tmp_path}/workload.5.et: No space left on device; the incomplete trace "
        "set was removed (5 files)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_comm_group_file_that_does_not_fit_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path | str, groups_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("stage_core.chakra.writer.write_comm_groups", full)
    assert groups.write_comm_groups is not full  # only the writer's name is replaced
    with pytest.raises(ConfigError, match=r"cannot write into .*: No space left on device; the "
                       r"incomplete trace set was removed \(8 files\)$"):  # fmt: skip
        write_chakra(PROGRAMS, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_forked_writers_failure_removes_the_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filesink, "PARALLEL_MIN_RANKS", 0)

    def emit(rank: int) -> bytes:
        if rank == 37:  # in the second worker's block
            raise ConfigError("rank 37 cannot be encoded")
        return bytes([rank % 256]) * 10

    names = "f.{}".format
    with (
        pytest.raises(ConfigError, match=r"^rank 37 cannot be encoded; the incomplete trace set "),
        removed_if_incomplete(tmp_path, names, 40),
    ):
        write_rank_files(tmp_path, names, emit, 40, workers=2)
    assert list(tmp_path.iterdir()) == []


def test_a_symmetric_file_cut_short_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _full_at(monkeypatch, lambda name: name.endswith("symmetric.json"))
    with pytest.raises(ConfigError, match=r"No space left on device$"):
        write_symmetric(PROGRAMS, tmp_path / "symmetric.json")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_without_its_comm_group_file_says_so(tmp_path: Path) -> None:
    """The state a full disk left before: rank files and no ``comm_group.json``; reading it said
    only that a pg_name "is not in the group table"."""
    from stage_core.chakra.reader import read_trace_set

    write_chakra(PROGRAMS, tmp_path)
    (tmp_path / "comm_group.json").unlink()
    with pytest.raises(ConfigError, match=r"but no group table was given \(a trace folder needs "
                       r"the comm_group.json written with its traces\)"):  # fmt: skip
        read_trace_set(tmp_path)


def test_bad_writer_arguments_touch_nothing(tmp_path: Path) -> None:
    """A prefix that is no str was a TypeError, a file as the folder 'File exists'; a bad worker
    count must not remove an earlier set (the writer removes what it wrote when it fails)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=r"^out_dir: expected a folder to write the traces "
                       r"into, but .*afile is a file$"):  # fmt: skip
        write_chakra(PROGRAMS, afile)
    with pytest.raises(ConfigError, match=r"`prefix` must be a non-empty file name prefix, but "
                       r"got 3$"):  # fmt: skip
        write_chakra(PROGRAMS, tmp_path / "t", prefix=3)  # type: ignore[arg-type]
    written = write_chakra(PROGRAMS, tmp_path / "t")
    before = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert len(before) == written.world_size + 1
    with pytest.raises(ConfigError, match=r"^`workers` must be an integer >= 1, but got 0$"):
        write_chakra(PROGRAMS, tmp_path / "t", workers=0)
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == before
