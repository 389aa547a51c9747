"""Study files: a full example loads into the expected spec; every broken file of the corpus
fails with its one-line message naming the file, the line, the table and the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.study import (
    Direction,
    ExecutorKind,
    SamplerKind,
    derive_dp,
    grid_points,
    load_study,
    parse_study,
    structural_reason,
)
from stage_explore.study.spec import Constraints, WorkloadKind, WorkloadSpec

CORPUS = Path(__file__).resolve().parent / "study_errors"
PRESET = (
    Path(__file__).resolve().parents[2] / "stage_explore" / "system" / "presets" / "h100-80gb.toml"
)
BROKEN = sorted(CORPUS.glob("*.toml"))

FULL = """\
[study]
name = "llama3-8b.h100"
seed = 11

[model]
flavor = "llama3-8b"

[workload]
kind = "training"
global_batch = 256
sequence_length = 8192

[system]
preset = "h100-80gb"

[system.search]
network.1.bandwidth_bytes_per_s = [25e9, 50e9]
"accelerator.memory_bandwidth_bytes_per_s" = { min = 2.0e12, max = 3.0e12, step = 0.5e12 }

[space]
num_gpus = [64, 128]
tp = { min = 1, max = 8, scale = "pow2" }
pp = { min = 1, max = 3 }
cp = 1
sp = "auto"
zero = [0, 1]
recompute = "auto"
micro_batch = "auto"

[objectives]
step_time_s = "min"
tokens_per_s_per_gpu = "max"

[constraints]
max_memory_gib = 80
max_gpus = 96

[sampler]
kind = "nsga2"
trials = 500
time_limit_s = 600
batch_size = 32

[backend]
name = "analytical"
options = { overlap = true }

[executor]
kind = "ray"
address = "ray://head:10001"
chunk_size = 4
"""


def test_full_example_loads_every_section(tmp_path: Path) -> None:
    spec = parse_study(FULL, tmp_path / "study.toml")
    assert spec.name == "llama3-8b.h100" and spec.seed == 11
    assert spec.model.argument() == "llama3-8b"
    assert spec.workload == WorkloadSpec(
        kind=WorkloadKind.TRAINING, global_batch=256, sequence_length=8192
    )
    assert spec.system.argument() == "h100-80gb"
    choices = spec.space.choices()
    assert choices["num_gpus"] == (64, 128)
    assert choices["tp"] == (1, 2, 4, 8)
    assert choices["pp"] == (1, 2, 3)
    assert choices["cp"] == (1,) and choices["ep"] == (1,)
    assert choices["sp"] == (False, True)
    assert choices["recompute"] == ("none", "selective", "full")
    assert choices["schedule"] == ("1f1b",) and choices["vpp"] == (1,)
    assert choices["micro_batch"] == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert choices["hw_network_1_bandwidth_bytes_per_s"] == (25e9, 50e9)
    assert choices["hw_accelerator_memory_bandwidth_bytes_per_s"] == (2.0e12, 2.5e12, 3.0e12)
    assert [param.path for param in spec.space.hardware] == [
        "network.1.bandwidth_bytes_per_s",
        "accelerator.memory_bandwidth_bytes_per_s",
    ]
    assert [(o.metric, o.direction) for o in spec.objectives] == [
        ("step_time_s", Direction.MIN),
        ("tokens_per_s_per_gpu", Direction.MAX),
    ]
    assert spec.constraints == Constraints(max_memory_bytes=80 << 30, max_gpus=96)
    assert spec.sampler.kind is SamplerKind.NSGA2 and spec.sampler.trials == 500
    assert spec.sampler.time_limit_s == 600.0 and spec.sampler.batch_size == 32
    assert spec.backend.name == "analytical" and spec.backend.options == {"overlap": True}
    assert spec.executor.kind is ExecutorKind.RAY and spec.executor.address == "ray://head:10001"
    assert spec.executor.chunk_size == 4 and spec.executor.workers is None
    assert spec.to_dict()["space"]["knobs"]["tp"] == [1, 2, 4, 8]
    assert set(spec.fingerprint()) == {
        "name",
        "model",
        "workload",
        "system",
        "space",
        "objectives",
        "constraints",
        "backend",
    }


def test_defaults_fill_unsearched_knobs_and_optional_sections(tmp_path: Path) -> None:
    text = FULL.split("[constraints]")[0].replace('kind = "training"\n', "")
    spec = parse_study(text + '[sampler]\nkind = "grid"\n', tmp_path / "s.toml")
    assert spec.workload.kind is WorkloadKind.TRAINING
    assert spec.sampler.trials is None and spec.sampler.batch_size == 64
    assert spec.backend.name == "analytical" and spec.executor.kind is ExecutorKind.RAY
    assert spec.constraints == Constraints()


def test_model_and_system_files_resolve_relative_to_the_study(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.toml").write_text('base = "llama3-8b"\nlayers = 2\n')
    (tmp_path / "sys.toml").write_text(PRESET.read_text())
    text = FULL.replace('flavor = "llama3-8b"', 'file = "models/tiny.toml"').replace(
        'preset = "h100-80gb"', 'file = "sys.toml"'
    )
    spec = load_study(_write(tmp_path / "study.toml", text))
    assert spec.model.file == (tmp_path / "models" / "tiny.toml").resolve()
    assert spec.system.file == (tmp_path / "sys.toml").resolve()


def test_inline_model_dims_and_inline_system(tmp_path: Path) -> None:
    inline = tomllib.loads(PRESET.read_text())
    text = FULL.replace(
        'flavor = "llama3-8b"', 'dims = { base = "llama3-8b", layers = 32 }'
    ).replace('preset = "h100-80gb"', "inline = " + _inline_toml(inline))
    spec = parse_study(text, tmp_path / "s.toml")
    assert spec.model.argument() == {"base": "llama3-8b", "layers": 32}
    assert spec.system.argument() == inline


def _inline_toml(value: object) -> str:
    """``value`` as a one-line TOML inline value."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_inline_toml(v)}' for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_inline_toml(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_study_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: study file not found$"):
        load_study(tmp_path / "nope.toml")


def test_the_corpus_covers_every_section() -> None:
    names = {path.stem.split("_")[0] for path in BROKEN}
    assert {
        "study",
        "model",
        "workload",
        "system",
        "hardware",
        "space",
        "objectives",
        "constraints",
        "sampler",
        "backend",
        "executor",
        "invalid",
        "unknown",
        "missing",
    } <= names
    assert len(BROKEN) >= 40


@pytest.mark.parametrize("path", BROKEN, ids=[path.stem for path in BROKEN])
def test_broken_study_file_gives_its_one_line_message(path: Path) -> None:
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# expect: ")
    expected = first_line.removeprefix("# expect: ")
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}{expected}"), message


def _params(**overrides: object) -> dict[str, object]:
    params: dict[str, object] = {"num_gpus": 16, "tp": 2, "pp": 2, "cp": 1, "micro_batch": 1}
    params.update(overrides)
    return params


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        (_params(), None),
        (_params(tp=3), "tp·pp·cp=6 does not divide num_gpus=16"),
        (_params(num_gpus=128, tp=1, pp=1), "num_gpus=128 exceeds the constraint max_gpus=64"),
        (_params(micro_batch=3), "dp·micro_batch=12 does not divide global_batch=64"),
    ],
)
def test_structural_reason(params: dict[str, object], reason: str | None) -> None:
    workload = WorkloadSpec(kind=WorkloadKind.TRAINING, global_batch=64, sequence_length=128)
    assert structural_reason(params, workload, Constraints(max_gpus=64)) == reason


GRID = """\
[study]
name = "grid"
[model]
flavor = "llama3-8b"
[workload]
global_batch = 32
sequence_length = 1024
[system]
preset = "h100-80gb"
[space]
num_gpus = [8, 12]
tp = [1, 2, 4, 8]
pp = [1, 3]
zero = [0, 1]
micro_batch = [1, 4]
[objectives]
step_time_s = "min"
[constraints]
max_gpus = 8
[sampler]
kind = "grid"
"""


def test_dp_is_derived_and_the_grid_holds_exactly_the_possible_points(tmp_path: Path) -> None:
    assert derive_dp(_params()) == 4 and derive_dp(_params(tp=3)) == 0
    spec = parse_study(GRID, tmp_path / "s.toml")
    points = list(grid_points(spec.space, spec.workload, spec.constraints))
    expected = [
        (gpus, tp, pp, zero, mb)
        for gpus in (8, 12)
        for tp in (1, 2, 4, 8)
        for pp in (1, 3)
        for zero in (0, 1)
        for mb in (1, 4)
        if gpus <= 8
        and gpus % (tp * pp) == 0
        and 32 % (gpus // (tp * pp) * mb) == 0
        and not (gpus == tp * pp and zero == 1)  # ZeRO has no effect at dp = 1: pinned to 0
    ]
    assert [
        (p["num_gpus"], p["tp"], p["pp"], p["zero"], p["micro_batch"]) for p in points
    ] == expected
    assert spec.space.size() == 64 and len(points) == 14
