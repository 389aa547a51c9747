"""Finding backends (registry, ``module:Class``) and mapping searched hardware parameters
onto a system (``replace_path``)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.search import (
    BUILTIN_BACKENDS,
    create_backend,
    explore,
    register_backend,
    replace_path,
    resolve_backend,
)
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def test_module_reference_and_registered_name_resolve_to_the_factory(tmp_path: Path) -> None:
    assert resolve_backend(support.BACKEND) is support.SyntheticBackend
    register_backend("synthetic-test", support.SyntheticBackend)
    register_backend("synthetic-test", support.SyntheticBackend)  # the same factory again is fine
    assert resolve_backend("synthetic-test") is support.SyntheticBackend
    text = support.study_text(trials=10).replace(support.BACKEND, "synthetic-test")
    summary = explore(
        parse_study(text, tmp_path / "s.toml"),
        out=tmp_path / "out",
        executor_factory=support.InlineExecutor,
    )
    assert set(load_results(summary.directory)["backend"]) <= {"synthetic", "synthetic-test"}


def _needs_a_command(command: str) -> None:
    """A callable that is no backend factory (as ``os:system`` would be named)."""


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: register_backend("analytical", support.SyntheticBackend),
            "reserved for the built-in",
        ),
        (lambda: register_backend("synthetic-test", support.ExitingBackend), "already registered"),
        (lambda: register_backend("a:b", support.SyntheticBackend), "without ':'"),
        (lambda: resolve_backend("nowhere"), "unknown backend 'nowhere'; expected one of"),
        (
            lambda: resolve_backend("no_such_module_x:Backend"),
            "cannot import module 'no_such_module_x'",
        ),
        (
            lambda: resolve_backend("stage_explore.records:NoSuchClass"),
            "has no attribute 'NoSuchClass'",
        ),
        (lambda: create_backend(support.SyntheticBackend, {"speed": 1}), "[backend] options: "),
        (
            lambda: resolve_backend("collections:OrderedDict"),
            "class 'collections:OrderedDict' has no evaluate(); expected a backend class",
        ),
        (
            lambda: create_backend(_needs_a_command, {}),
            "test_search_backends:_needs_a_command called with the options none; expected a "
            "backend class or factory taking them as keywords",
        ),
    ],
)
def test_backend_errors_are_one_line_config_errors(call: object, message: str) -> None:
    register_backend("synthetic-test", support.SyntheticBackend)
    with pytest.raises(ConfigError) as caught:
        call()  # type: ignore[operator]
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_builtin_names_are_reserved_and_lazy() -> None:
    assert set(BUILTIN_BACKENDS) == {"analytical", "astra-sim"}
    assert all(":" in reference for reference in BUILTIN_BACKENDS.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Dim:
    name: str
    bandwidth_gbps: float


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    network: tuple[Dim, ...]
    accelerator: dict[str, float]


SYSTEM = System(
    network=(Dim(name="nvlink", bandwidth_gbps=900.0), Dim(name="ib", bandwidth_gbps=400.0)),
    accelerator={"memory_gib": 80.0},
)


def test_replace_path_steps_through_fields_indices_and_keys() -> None:
    changed = replace_path(SYSTEM, "network.1.bandwidth_gbps", 800.0)
    assert changed.network[1] == Dim(name="ib", bandwidth_gbps=800.0)
    assert changed.network[0] is SYSTEM.network[0] and SYSTEM.network[1].bandwidth_gbps == 400.0
    assert replace_path(SYSTEM, "accelerator.memory_gib", 141.0).accelerator == {
        "memory_gib": 141.0
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "network.1.bandwidth",
            "[system.search] network.1.bandwidth: Dim has no field 'bandwidth'",
        ),
        ("network.7.bandwidth_gbps", "cannot step into tuple at '7'"),
        ("accelerator.hbm", "no key 'hbm'; keys are: memory_gib"),
        ("fabric", "System has no field 'fabric'; fields are: accelerator, network"),
    ],
)
def test_replace_path_errors_name_the_path(path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        replace_path(SYSTEM, path, 1.0)
    assert message in str(caught.value)
