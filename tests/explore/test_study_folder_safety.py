"""No silent loss of recorded trials (s23 review): one writer per study folder (a second run on
the same ``<out>/<study>`` stops at once instead of overwriting the first run's parts, which it
did, each reporting success), and parts written before the later training knobs existed are
read with the value those studies ran, so ``--resume`` continues them (it raised a ``KeyError``)
and ``load_results`` shows the knob (it showed nulls)."""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.records import LATER_KNOBS, part_files
from stage_explore.search import explore
from stage_explore.search.folder_lock import LOCK_FILE, study_lock
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import KNOB_DEFAULTS

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def _spec(tmp_path: Path, trials: int = 20, name: str = "demo") -> StudySpec:
    path = tmp_path / f"{name}-{trials}.toml"
    path.write_text(support.study_text(trials=trials, name=name))
    return parse_study(path.read_text(), path)


def test_a_second_writer_of_a_study_folder_stops_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "out" / "demo"
    with study_lock(folder):  # another run recording the study (flock: per open file)
        assert (folder / LOCK_FILE).read_text() == f"pid {os.getpid()}\n"
        with pytest.raises(ConfigError, match=r"another stage explore \(pid \d+\) is recording"):
            explore(_spec(tmp_path), out=tmp_path / "out", executor_factory=support.InlineExecutor)
        assert part_files(folder) == []  # it recorded nothing
    # once the first run is done the folder is free; the lock file goes with its holder
    summary = explore(
        _spec(tmp_path), out=tmp_path / "out", executor_factory=support.InlineExecutor
    )
    assert summary.progress.done == 20 and not (folder / LOCK_FILE).exists()
    with study_lock(folder):
        with pytest.raises(ConfigError, match="another stage explore"):
            explore(
                _spec(tmp_path, trials=30), out=tmp_path / "out", resume=True,
                executor_factory=support.InlineExecutor,
            )  # fmt: skip
    assert len(load_results(folder)) == 20


def test_a_lock_taken_after_its_file_was_removed_is_not_shared(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    with study_lock(folder):
        (folder / LOCK_FILE).unlink()  # as a holder releasing it while another opens it
        with study_lock(folder):  # a new file: a lock of its own, not the removed one's
            assert (folder / LOCK_FILE).exists()
            with pytest.raises(ConfigError, match="another stage explore"):
                with study_lock(folder):
                    pass


def test_parts_from_before_the_later_knobs_resume_and_load(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = explore(_spec(tmp_path), out=out, executor_factory=support.InlineExecutor).directory
    fresh = load_results(folder)
    for path in part_files(folder):  # as an older STAGE wrote them: no later-knob columns
        table = pq.read_table(path)
        keep = [name for name in table.column_names if name not in LATER_KNOBS]
        pq.write_table(table.select(keep).replace_schema_metadata(table.schema.metadata), path)
    old = load_results(folder)
    assert list(old.columns) == list(fresh.columns)
    for name in LATER_KNOBS:
        assert set(old[name]) == {KNOB_DEFAULTS[name]}
    timing = ["eval_s", "finished_at", "worker"]
    assert old.drop(columns=timing).equals(fresh.drop(columns=timing))
    summary = explore(
        _spec(tmp_path, trials=30), out=out, resume=True, executor_factory=support.InlineExecutor
    )
    assert summary.resumed == 20 and summary.progress.done == 30
    assert len(load_results(folder)) == 30


def test_report_says_when_a_study_is_still_being_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stage_explore.cli import main
    from stage_explore.search.folder_lock import recording_holder

    out = tmp_path / "out"
    folder = explore(_spec(tmp_path), out=out, executor_factory=support.InlineExecutor).directory
    assert recording_holder(folder) is None
    assert main(["report", str(out)]) == 0
    assert "still being recorded" not in capsys.readouterr().err
    with study_lock(folder):  # a run recording it now
        assert recording_holder(folder) == os.getpid()
        assert main(["report", str(out)]) == 0
        err = capsys.readouterr().err
    assert err == (
        f"stage report: note: {folder} is still being recorded (stage explore, pid "
        f"{os.getpid()}); this report covers the trials recorded so far\n"
    )
    (folder / LOCK_FILE).write_text("pid 999999999\n")  # left by a killed run: no such process
    assert recording_holder(folder) is None


def test_a_truncated_part_is_one_line_saying_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stage_explore.cli import main

    out = tmp_path / "out"
    spec = _spec(tmp_path, trials=20)
    folder = explore(spec, out=out, executor_factory=support.InlineExecutor).directory
    explore(
        _spec(tmp_path, trials=40), out=out, resume=True, executor_factory=support.InlineExecutor
    )
    first, *others = part_files(folder)
    data = first.read_bytes()
    first.write_bytes(data[: len(data) // 2])  # copied half-way
    needle = "not a readable Parquet part"
    advice = f"move this file out of {folder} to read them, and --resume continues"
    with pytest.raises(ConfigError, match=needle) as raised:
        load_results(folder)
    assert advice in str(raised.value) and "\n" not in str(raised.value)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and advice in err
    aside = tmp_path / first.name
    first.rename(aside)  # as the message says: the other parts read, the study continues
    assert 0 < len(load_results(folder)) < 40
    summary = explore(
        _spec(tmp_path, trials=40), out=out, resume=True, executor_factory=support.InlineExecutor
    )
    assert summary.progress.done == 40 and len(load_results(folder)) == 40
    assert others  # the study had more than the damaged part


def test_a_file_system_without_locks_runs_unlocked_and_other_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    import stage_explore.search.folder_lock as folder_lock

    assert folder_lock.fcntl is not None

    def refuse(code: int) -> object:
        def flock(fd: int, operation: int) -> None:
            raise OSError(code, os.strerror(code))

        return flock

    monkeypatch.setattr(folder_lock.fcntl, "flock", refuse(errno.ENOLCK))
    with caplog.at_level("WARNING"), study_lock(tmp_path / "nfs"):  # goes on, with a warning
        assert (tmp_path / "nfs" / LOCK_FILE).exists()
    assert "no lock" in caplog.text and not (tmp_path / "nfs" / LOCK_FILE).exists()
    monkeypatch.setattr(folder_lock.fcntl, "flock", refuse(errno.EIO))
    with pytest.raises(ConfigError, match=r"cannot write the study's lock: Input/output error"):
        with study_lock(tmp_path / "broken"):
            pass
