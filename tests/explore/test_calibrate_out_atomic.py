"""`stage calibrate --out` writes the fitted system file whole or not at all: through a
temporary file beside it and a rename (s35, a review8 lead: a kill or a full disk during the
write left a truncated file in place of the user's previous one)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.cli import main
from stage_explore.records import write_text_atomic

HEADER = (
    "id,model,layers,hidden,ffn,heads,vocab,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,sp,"
    "vpp,recompute,precision,iter_time_s"
)
RUN = "a,megatron-gpt-1.7b,2,2048,8192,16,51200,2048,64,2,1,1,16,no,1,none,bf16,0.2"


def _failing_replace(source: object, target: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fitted.toml"
    path.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr("stage_explore.records.os.replace", _failing_replace)
    with pytest.raises(ConfigError, match=r"fitted\.toml: cannot write the file: .*disk is full"):
        write_text_atomic(path, "new\n", "the file")
    assert path.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.toml"]


def test_a_successful_write_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fitted.toml"
    path.write_text("old\n", encoding="utf-8")
    write_text_atomic(path, "new\n", "the file")
    assert path.read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.toml"]


def test_calibrate_out_is_written_through_a_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{HEADER}\n{RUN}\n", encoding="utf-8")
    out = tmp_path / "fitted.toml"
    out.write_text("the user's previous file\n", encoding="utf-8")
    monkeypatch.setattr("stage_explore.records.os.replace", _failing_replace)
    argv = ["calibrate", "--runs", str(runs), "--system", "a100-80gb", "--no-loo",
            "--fit", "gemm_efficiency.bf16", "--out", str(out)]  # fmt: skip
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "cannot write the calibrated system file" in err and err.count("\n") == 1
    assert out.read_text(encoding="utf-8") == "the user's previous file\n"
    assert not (tmp_path / ".fitted.toml.tmp").exists()
