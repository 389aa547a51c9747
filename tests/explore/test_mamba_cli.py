"""A Mamba-2 hybrid (nemotron-h-8b) from the command line and in the analytical backend:
``stage eval``, ``memory --json``, ``trace`` and ``check --for astra-sim`` run; the SSD scan
is timed as the roofline of its tensor-core FLOPs and its HBM bytes; bad layouts exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.lower.bind import Instr
from stage_core.lower.flops import step_flops
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.cli import main
from stage_explore.system import load_system

ARGS = ("--model", "nemotron-h-8b", "--seq-len", "1024", "--tp", "2", "--pp", "2", "--dp", "2")
PARALLEL = ParallelConfig(tp=2, pp=2, dp=2, sp=True, global_batch=4)


def model_1k() -> object:
    return get_flavor("nemotron-h-8b").with_overrides(seq_len=1024)


def test_eval_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", *ARGS, "--sp", "--global-batch", "4", "--system", "h100-80gb", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["feasible"] is True
    # MFU counts the generator's model FLOPs: the matmuls and the SSD scans (forward, backward).
    model, _ = step_flops(lower(model_1k(), PARALLEL))  # type: ignore[arg-type]
    peak = load_system("h100-80gb").accelerator.peak("bf16")
    achieved = model / (document["step_time_s"] * 8 * peak)
    assert document["mfu"] == pytest.approx(achieved, rel=1e-9)


def test_memory_json_is_the_generators(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", *ARGS, "--sp", "--global-batch", "4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranks"]
    expected = memory_report(lower(model_1k(), PARALLEL))  # type: ignore[arg-type]
    assert [r["peak_bytes"] for r in rows] == [e.peak_bytes for e in expected]
    assert [r["activations_bytes"] for r in rows] == [e.activations_bytes for e in expected]


def test_trace_passes_the_checker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace"
    argv = ["trace", *ARGS, "--sp", "--global-batch", "4", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    assert main(["check", str(out), "--for", "astra-sim"]) == 0
    assert "sound: 8 ranks, no violations" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "16"], "`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"),
        (["--tp", "4", "--cp", "4"], "`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"),
    ],
)
def test_refused_layouts_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--model", "nemotron-h-8b", "--seq-len", "1024", "--global-batch", "4"]
    assert main(["memory", *base, *argv]) == 2
    assert message in capsys.readouterr().err


def test_ssd_scan_is_the_roofline_of_its_flops_and_bytes() -> None:
    system = load_system("h100-80gb")
    accelerator, kernels = system.accelerator, system.accelerator.kernels
    assert kernels is not None
    timer = KernelTimer(accelerator, kernels, "bf16", frozenset(), 1024, 128, True)
    rate = accelerator.peak("bf16") * kernels.gemm_efficiency["bf16"]
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    compute = Instr("ssm.scan", "fwd", "ssdscan", 10**12, 10**6, 10**6)
    memory = Instr("ssm.scan", "fwd", "ssdscan", 10**6, 10**10, 10**10)
    assert timer(compute) == pytest.approx(10**12 / rate)
    assert timer(memory) == pytest.approx(2 * 10**10 / bandwidth)
