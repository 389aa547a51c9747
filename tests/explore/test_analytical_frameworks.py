"""Framework profiles: the registry, option validation and overrides, selection by the
analytical backend (keyword, pickling, study options, ``stage eval --framework``), and what each
profile changes in an evaluation."""

from __future__ import annotations

import json
import pickle

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import (
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    OPTION_FLAGS,
    get_framework,
)
from stage_explore.cli import main
from stage_explore.search.backends import create_backend, resolve_backend
from stage_explore.system import load_system

MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
PARALLEL = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16, sp=True, recompute="selective")


def test_the_registry_holds_the_four_frameworks_the_validation_maps_rows_to() -> None:
    assert {"megatron-lm-2021", "megatron-core", "deepspeed", "fsdp"} <= set(FRAMEWORKS)
    assert DEFAULT_FRAMEWORK in FRAMEWORKS
    for name, profile in FRAMEWORKS.items():
        assert profile.name == name and profile.source.startswith("https://")
        assert set(OPTION_FLAGS) <= set(profile.to_dict())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tp_comm_overlap": 1}, "`tp_comm_overlap`"),
        ({"zero3_gathers": 4}, "`zero3_gathers` must be 2 or 3"),
        ({"allocator_overhead": -0.1}, "`allocator_overhead`"),
        ({"runtime_reserved_bytes": 1.5}, "`runtime_reserved_bytes`"),
        ({"overlap_everything": True}, "unknown framework option 'overlap_everything'"),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        get_framework("megatron-core").with_overrides(overrides)
    with pytest.raises(ConfigError, match=message):
        AnalyticalBackend(framework="megatron-core", overrides=overrides)


def test_an_unknown_framework_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown framework 'megatron'; known: deepspeed"):
        AnalyticalBackend(framework="megatron")


def test_overrides_replace_one_option_and_survive_pickling() -> None:
    backend = AnalyticalBackend(framework="megatron-core", overrides={"tp_comm_overlap": False})
    assert backend.framework.name == "megatron-core"
    assert backend.framework.tp_comm_overlap is False
    assert get_framework("megatron-core").tp_comm_overlap is True
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.framework == backend.framework


def test_study_backend_options_select_the_framework() -> None:
    backend = create_backend(resolve_backend("analytical"), {"framework": "fsdp"})
    assert isinstance(backend, AnalyticalBackend) and backend.framework.name == "fsdp"


def test_process_memory_adds_the_runtime_and_the_allocator_reserve() -> None:
    system = load_system("h100-80gb")
    base = AnalyticalBackend(
        framework="megatron-core",
        overrides={"runtime_reserved_bytes": 0, "allocator_overhead": 0.0},
    ).evaluate(MODEL, PARALLEL, system)
    profile = get_framework("megatron-core")
    held = AnalyticalBackend(framework="megatron-core").evaluate(MODEL, PARALLEL, system)
    expected = (
        base.peak_memory_bytes
        + int(base.peak_memory_bytes * profile.allocator_overhead)
        + profile.runtime_reserved_bytes
    )
    assert held.peak_memory_bytes == expected


def test_eval_framework_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "eval", "--model", "megatron-gpt-1.7b", "--layers", "4", "--tp", "2", "--pp", "2",
        "--dp", "2", "--global-batch", "16", "--sp", "--recompute", "selective",
        "--system", "h100-80gb", "--json",
    ]  # fmt: skip
    assert main([*argv, "--framework", "megatron-core"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = AnalyticalBackend(framework="megatron-core").evaluate(
        MODEL, PARALLEL, load_system("h100-80gb")
    )
    assert data["peak_memory_bytes"] == expected.peak_memory_bytes
    assert data["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)
    assert main([*argv, "--framework", "nope"]) == 2
    assert "unknown framework 'nope'" in capsys.readouterr().err
