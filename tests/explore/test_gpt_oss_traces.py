"""A small GPT-OSS-like model (alternating sliding/full attention with sinks, MoE) from a TOML
model file: its traces pass ``stage check --for astra-sim``, ``stage eval`` and ``stage memory``
run, and the real ASTRA-sim runs them (skipped without the binary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.models import load_model
from stage_explore.astrasim import AstraSimBackend
from stage_explore.cli import main
from stage_explore.system import load_system
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()

MODEL_TOML = """\
base = "gpt-oss-20b"
name = "tiny-gpt-oss"
layers = 4
hidden = 256
ffn = 128
heads = 8
kv_heads = 2
head_dim = 32
vocab = 1024
seq_len = 256
num_experts = 8
expert_ffn = 128
sliding_window = 64
"""
PARALLEL = ["--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2", "--sp", "--global-batch", "8"]


@pytest.fixture()
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-gpt-oss.toml"
    path.write_text(MODEL_TOML)
    return path


def test_the_toml_model_keeps_the_pattern_window_and_sinks(model_file: Path) -> None:
    model = load_model(model_file)
    assert model.layer_blocks() == ("layer_swa_moe", "moe_layer") * 2
    assert (model.sliding_window, model.attention_sinks) == (64, True)


def test_traces_pass_the_check_and_eval_and_memory_run(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "traces"
    assert main(["trace", "--model", str(model_file), *PARALLEL, "--out", str(out)]) == 0
    assert main(["check", str(out), "--for", "astra-sim", "--json"]) == 0
    capsys.readouterr()
    system = ["--system", "h100-80gb"]
    assert main(["eval", "--model", str(model_file), *PARALLEL, *system, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["feasible"] and result["step_time_s"] > 0
    assert main(["memory", "--model", str(model_file), *PARALLEL, "--json"]) == 0


@pytest.mark.skipif(BINARY is None, reason=WHY)
def test_the_real_astra_sim_runs_it(model_file: Path, tmp_path: Path) -> None:
    from stage_core.parallel import ParallelConfig

    model = load_model(model_file)
    parallel = ParallelConfig(tp=2, pp=2, dp=2, ep=2, sp=True, global_batch=8, micro_batch=1)
    backend = AstraSimBackend(binary=str(BINARY), keep_dir=tmp_path, timeout_s=300)
    evaluation = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert evaluation.feasible and evaluation.step_time_s > 0
    assert evaluation.num_gpus == 8
