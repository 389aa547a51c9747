"""Counts in the command line's words (s19 polish): one thing is singular, so ``stage trace``
never prints "1 files" or "1 rank classes", nor ``stage memory`` "1 GPUs"."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main
from stage_explore.wording import counted, plural


def test_counted_is_singular_for_one_only() -> None:
    assert [counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert counted(1, "rank class") == "1 rank class"
    assert counted(3, "rank class") == "3 rank classes"
    assert counted(2, "micro-batch") == "2 micro-batches"
    assert counted(2, "datum", "data") == "2 data"
    assert plural("GPU") == "GPUs"


GPT = ["--model", "megatron-gpt-1.7b", "--layers", "2", "--micro-batch", "1"]


def test_trace_and_memory_print_one_thing_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = [*GPT, "--dp", "1", "--global-batch", "1"]
    assert main(["trace", *one, "--format", "json", "--out", str(tmp_path / "j"), "--quiet"]) == 0
    assert ": 1 rank, 1 file, " in capsys.readouterr().out  # was "1 ranks, 1 files"
    two = [*GPT, "--dp", "2", "--global-batch", "2"]
    out = str(tmp_path / "s")
    assert main(["trace", *two, "--format", "symmetric", "--out", out, "--quiet"]) == 0
    assert ": 2 ranks, 1 file, " in (text := capsys.readouterr().out)
    assert "bytes (1 rank class) in" in text  # was "1 rank classes"
    assert main(["memory", *one]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "megatron-gpt-1.7b: 1 GPU, 1 micro-batch per step, one program per pipeline stage"
    )  # was "1 GPUs, 1 micro-batches"
