"""Storage failures are one-line errors (exit 2) and never lose or damage what was recorded:
a truncated ``_study.json``, ``--out`` naming a file, a read-only folder (new study, resume,
``report --html``, ``trace --out``) and a disk that fills up mid-study.

Read-only folders are made two ways: with ``chattr +i`` (an immutable folder refuses writes even
to root, unlike permission bits, which root bypasses; skipped where chattr is unavailable or not
permitted) and by making the OS calls fail with EACCES/EROFS through monkeypatching (always
runs). The full disk is a real tmpfs of a few pages where mounting is permitted (root), and a
monkeypatched ``os.fsync`` failing with ENOSPC everywhere.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path

import pyarrow as pa
import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.cli import main
from stage_explore.records import STUDY_FILE, RecordWriter, count_records, read_records
from stage_explore.search import driver as driver_module
from stage_explore.search import explore
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def _study(tmp_path: Path, trials: int = 20) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(support.study_text(trials=trials))
    return path


def _explore(study: Path, out: Path, *extra: str) -> int:
    return main(["explore", str(study), "--out", str(out), "--executor", "local", *extra])


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1] if err else ""
    assert "Traceback" not in err, err
    assert last.startswith("stage ") and ": error: " in last, err
    for needle in needles:
        assert needle in last, last
    return last


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A finished 20-trial study under tmp_path/out (run in-process); returns its folder."""
    spec = parse_study(_study(tmp_path).read_text(), tmp_path / "study.toml")
    return explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor).directory


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


# ---------------------------------------------------------------- truncated _study.json


def test_truncated_study_file_is_one_line_under_report_and_resume(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = recorded / STUDY_FILE
    meta.write_bytes(meta.read_bytes()[:100])
    before = load_results(recorded)
    assert main(["report", str(recorded)]) == 2
    _one_line_error(capsys, str(meta), "corrupt study definition")
    assert _explore(_study(tmp_path), tmp_path / "out", "--resume", "--trials", "30") == 2
    _one_line_error(capsys, str(meta), "records beside it are not affected")
    after = load_results(recorded)
    assert after.equals(before)  # nothing recorded was touched
    # the records alone still report with explicit objectives, and resume once it is removed
    assert main(["report", str(recorded), "--objectives", "step_time_s,mfu"]) == 0
    capsys.readouterr()
    meta.unlink()
    spec = parse_study(support.study_text(trials=30), tmp_path / "study.toml")
    summary = explore(
        spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=True
    )
    assert summary.resumed == 20 and summary.progress.done == 30
    assert load_results(recorded)["trial"].tolist() == list(range(30))


@pytest.mark.parametrize("content", ["[1, 2]", '{"fingerprint": 3}', ""])
def test_study_file_that_is_json_but_not_a_study_is_corrupt(
    recorded: Path, tmp_path: Path, content: str
) -> None:
    (recorded / STUDY_FILE).write_text(content)
    spec = parse_study(support.study_text(trials=30), tmp_path / "study.toml")
    with pytest.raises(ConfigError, match="corrupt study definition"):
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=True)


# ---------------------------------------------------------------- --out naming a file


def test_out_naming_a_file_or_under_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    study = _study(tmp_path)
    assert _explore(study, blocker) == 2
    _one_line_error(capsys, f"--out {blocker}", "expected a folder, got an existing file")
    assert _explore(study, blocker / "sub") == 2
    _one_line_error(capsys, f"--out {blocker / 'sub'}", "a file stands in its path")
    assert blocker.read_text() == "not a folder\n"
    trace = ["trace", "--model", "gpt3-1.3b", "--layers", "2", "--format", "json"]
    assert main([*trace, "--out", str(blocker / "traces")]) == 2
    _one_line_error(capsys, "--out", "a file stands in its path")


@pytest.mark.parametrize("out", ["", " "])
def test_empty_out_is_refused_not_taken_as_the_working_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: str,
) -> None:
    """``Path("")`` is ``Path(".")``: an empty ``--out`` (an unset ``$DIR``) wrote the traces, or
    the study's records, into the working folder without a word (s29 review2)."""
    monkeypatch.chdir(tmp_path)
    study = _study(tmp_path)
    trace = ["trace", "--model", "gpt3-1.3b", "--layers", "2", "--out", out]
    for argv in (trace, ["explore", str(study), "--out", out, "--executor", "local"]):
        with pytest.raises(SystemExit) as refused:  # argparse refuses the option itself
            main(argv)
        assert refused.value.code == 2
        _one_line_error(capsys, "--out", repr(out), "expected a path")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["study.toml"]


def test_report_html_naming_a_folder_or_under_a_file(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(recorded), "--html", str(tmp_path)]) == 2
    _one_line_error(capsys, "--html", "expected the HTML file to write, got a folder")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["report", str(recorded), "--html", str(blocker / "r.html")]) == 2
    _one_line_error(capsys, f"--html {blocker}", "expected a folder")


# ---------------------------------------------------------------- read-only folders


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i path`` for the duration (skips the test where that is impossible)."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("chattr is not installed: the immutable-folder variant cannot run")
    made = subprocess.run([chattr, "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not permitted here ({made.stderr.strip()})")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_immutable_folder_new_study_resume_report_and_trace(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _study(tmp_path)
    empty = tmp_path / "read-only"
    empty.mkdir()
    before = _snapshot(recorded)
    with immutable(empty):
        assert _explore(study, empty) == 2
        _one_line_error(capsys, f"--out {empty}", "expected a writable folder")
        trace = ["trace", "--model", "gpt3-1.3b", "--layers", "2", "--format", "json"]
        assert main([*trace, "--out", str(empty)]) == 2
        _one_line_error(capsys, f"--out {empty}", "expected a writable folder")
        assert main([*trace, "--out", str(empty / "sub")]) == 2
        _one_line_error(capsys, f"--out {empty / 'sub'}", "cannot create the folder")
    assert list(empty.iterdir()) == []
    with immutable(recorded):
        assert _explore(study, tmp_path / "out", "--resume", "--trials", "30") == 2
        _one_line_error(capsys, str(recorded), "expected a writable folder")
        assert main(["report", str(recorded), "--html", str(recorded / "r.html")]) == 2
        _one_line_error(capsys, "--html", "expected a writable folder")
        assert main(["report", str(recorded)]) == 0  # reading needs no writing
        capsys.readouterr()
    assert _snapshot(recorded) == before  # nothing recorded was lost or changed


def test_read_only_folder_by_failing_os_calls(
    recorded: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same checks with the OS calls made to fail (runs without chattr or root)."""
    import stage_explore.cli.paths as paths

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied")

    before = _snapshot(recorded)
    with monkeypatch.context() as patch:
        patch.setattr(paths.tempfile, "mkstemp", refuse)
        assert _explore(_study(tmp_path), tmp_path / "out", "--resume", "--trials", "30") == 2
        _one_line_error(capsys, "expected a writable folder", "Permission denied")
        assert main(["report", str(recorded), "--html", str(tmp_path / "r.html")]) == 2
        _one_line_error(capsys, "--html", "Permission denied")
    assert _snapshot(recorded) == before

    # the folder turns read-only after the checks, while the study runs: the part cannot be
    # renamed into place, the error says so in one line, the earlier parts are untouched
    spec = parse_study(support.study_text(trials=30), tmp_path / "study.toml")

    real_replace = os.replace

    def read_only_replace(source: str, target: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(target))

    monkeypatch.setattr("stage_explore.records.os.replace", read_only_replace)
    with pytest.raises(ConfigError, match=r"_study.json: cannot write the study definition"):
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=True)
    assert _snapshot(recorded) == before

    def parts_read_only(source: str, target: str) -> None:
        if str(target).endswith(".parquet"):
            read_only_replace(source, target)
        real_replace(source, target)

    monkeypatch.setattr("stage_explore.records.os.replace", parts_read_only)
    with pytest.raises(ConfigError, match=r"Read-only file system .*20 trials recorded before"):
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=True)
    monkeypatch.undo()
    assert {name: data for name, data in _snapshot(recorded).items() if name != STUDY_FILE} == {
        name: data for name, data in before.items() if name != STUDY_FILE
    }  # the parts are untouched (the definition was rewritten, unchanged in content)
    assert not list(recorded.glob(".*.tmp"))
    assert count_records(recorded) == 20


# ---------------------------------------------------------------- full disk


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_in_the_parquet_flush_keeps_earlier_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_study(support.study_text(trials=60, batch_size=8), tmp_path / "study.toml")
    monkeypatch.setattr(driver_module, "_FLUSH_ROWS", 10)  # a part every ten trials
    real_fsync = os.fsync
    calls = {"n": 0}

    def fsync_fills_the_disk(descriptor: int) -> None:
        calls["n"] += 1
        if calls["n"] > 2:  # two parts fit on the disk, the third does not
            _no_space()
        real_fsync(descriptor)

    monkeypatch.setattr("stage_explore.records.os.fsync", fsync_fills_the_disk)
    with pytest.raises(ConfigError, match=r"No space left on device \(the disk is full\)"):
        explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    monkeypatch.undo()
    folder = tmp_path / "out" / spec.name
    kept = read_records(folder)
    assert kept is not None and kept.column("trial").to_pylist() == list(range(kept.num_rows))
    assert kept.num_rows >= 20 and len(list(folder.glob("part-*.parquet"))) == 2
    assert not list(folder.glob(".*.tmp"))
    # once there is space again the study resumes where the records end
    summary = explore(
        spec, out=tmp_path / "out", executor_factory=support.InlineExecutor, resume=True
    )
    assert summary.resumed == kept.num_rows and summary.progress.done == 60
    assert load_results(folder)["trial"].tolist() == list(range(60))


def test_disk_full_is_one_line_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("stage_explore.records.os.fsync", lambda descriptor: _no_space())
    assert _explore(_study(tmp_path), tmp_path / "out") == 2
    _one_line_error(capsys, "part-00000.parquet", "the disk is full", "0 trials recorded before")


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (skipped where mounting is not permitted)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip() or made.returncode})")
    try:
        yield mount
    finally:
        _unmount(mount)


def _unmount(mount: Path) -> None:
    """Unmount ``mount``; a mount still busy a moment after the test (seen once in a full
    ``make test``: ``umount`` exit 32, free again seconds later, no process holding it) is
    retried after a garbage collection for up to two seconds, then detached lazily, so a
    transient holder cannot fail the run nor leave the tmpfs mounted."""
    for _ in range(20):
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
            return
        gc.collect()
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_real_full_disk_keeps_every_part_written_before(tiny_filesystem: Path) -> None:
    spec = parse_study(support.study_text(trials=10), tiny_filesystem / "unused.toml")
    from stage_explore.records import records_schema

    schema = records_schema("demo", spec.space)
    folder = tiny_filesystem / "demo"
    writer = RecordWriter(folder, schema)
    padding = "x" * 2000  # incompressible enough: each part takes a few pages
    rows_written = 0
    with pytest.raises(ConfigError, match="the disk is full") as failure:
        for part in range(1000):
            for index in range(4):
                trial = part * 4 + index
                writer.append(
                    {
                        "trial": trial,
                        "study": "demo",
                        "status": "ok",
                        "reason": padding + str(trial),
                    }
                )
            writer.flush()
            rows_written += 4
    assert f"the {rows_written} trials recorded before are intact" in str(failure.value)
    assert count_records(folder) == rows_written > 0
    table = read_records(folder)
    assert isinstance(table, pa.Table)
    assert table.column("trial").to_pylist() == list(range(rows_written))
    assert not list(folder.glob(".*.tmp"))  # the half-written part is gone


def test_study_definition_with_broken_objectives_is_one_line_under_report(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = recorded / STUDY_FILE
    meta.write_text('{"fingerprint": {}, "study": {"objectives": [{"metric": "step_time_s"}]}}')
    assert main(["report", str(recorded)]) == 2
    _one_line_error(capsys, str(meta), "pass --objectives to report without it")


def test_an_os_error_no_subcommand_foresaw_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import stage_explore.cli.redistribute as redistribute

    def full_disk(args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/somewhere/file")

    monkeypatch.setattr(redistribute, "run", full_disk)
    parser_args = ["redistribute", "x[B, S]", "[B, S]"]
    assert main(parser_args) == 2
    _one_line_error(capsys, "/somewhere/file: No space left on device (the disk is full)")

    def closed_pipe(args: object) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(redistribute, "run", closed_pipe)
    assert main(parser_args) == 0  # output piped into head: not an error


def test_a_failed_command_removes_only_the_empty_folders_it_created(tmp_path: Path) -> None:
    # s19 usertour: a refused --address left an empty --out folder behind
    from stage_explore.cli.paths import removed_if_failed, writable_folder

    fresh = tmp_path / "new" / "out"
    with pytest.raises(ConfigError), removed_if_failed(fresh / "study"):
        writable_folder(fresh, "--out")
        raise ConfigError("refused")
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError), removed_if_failed(fresh / "study"):
        writable_folder(fresh / "study", "--out")
        (fresh / "study" / "part-0.parquet").write_bytes(b"")
        raise ConfigError("interrupted after a record")
    assert (fresh / "study" / "part-0.parquet").exists()  # anything written stays, and above
    kept = tmp_path / "existing"
    kept.mkdir()
    with pytest.raises(KeyboardInterrupt), removed_if_failed(kept / "study"):
        writable_folder(kept / "study", "--out")
        raise KeyboardInterrupt
    assert kept.is_dir() and not (kept / "study").exists()  # the folder it found stays
