"""``stage trace --phase prefill|decode``: every rank's trace of a serving step, checked sound."""

from __future__ import annotations

import json
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


def test_memory_of_a_decode_step(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["memory", "--model", "llama3-8b", "--phase", "decode", "--tp", "2", "--batch", "8"]
    assert main([*args, "--context-len", "1023", "--kv-precision", "fp8", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    per_token = payload["kv_cache_bytes_per_token"]
    assert per_token == 2 * 32 * 8 * 128 * 1  # layers, kv heads, head dim, one byte (fp8)
    (stage,) = payload["stages"]
    assert stage["kv_cache_bytes"] * 2 == 8 * 1024 * per_token  # split over tp 2
    assert stage["peak_bytes"] == sum(
        stage[k] for k in ("weight_bytes", "kv_cache_bytes", "activation_bytes")
    )
