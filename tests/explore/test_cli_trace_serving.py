"""``stage trace --phase prefill|decode``: every rank's trace of a serving step, checked sound."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main


@pytest.mark.parametrize(
    "phase",
    [
        ["--phase", "decode", "--context-len", "100"],
        ["--phase", "prefill", "--prompt-len", "256", "--chunk", "128"],
    ],
)
def test_serving_step_traces_are_sound(
    phase: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace"
    common = ["--model", "llama3-8b", "--layers", "2", "--tp", "2", "--pp", "2", "--batch", "4"]
    assert main(["trace", *common, *phase, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("workload.*.et")) == [
        f"workload.{rank}.et" for rank in range(4)
    ]
    assert main(["check", str(out)]) == 0
    assert "no violations" in capsys.readouterr().out


def test_training_options_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "trace", "--model", "llama3-8b", "--phase", "decode", "--recompute", "full",
        "--out", str(tmp_path),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--recompute is a training option" in err and err.count("\n") == 1
