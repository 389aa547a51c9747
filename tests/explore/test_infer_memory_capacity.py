"""A ``gpu`` cell's stated memory that no preset of its part has is applied as the preset's
memory capacity only (s33 hbmcap): :func:`memory_override`, the ``memory_bytes`` system override
of :mod:`stage_explore.validation.setup_systems`, and an inferred case's system."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fields import Uninferable
from stage_explore.validation.infer_system import infer_system, memory_override
from stage_explore.validation.setup_systems import case_system, derive_system, derived_name
from stage_explore.validation.setups import data_dir

GIB = 2**30


@pytest.mark.parametrize(
    ("gpu", "gib"),
    [
        ("H100 96GB", 96), ("H100 SXM HBM2e (94GB memory, lower TDP)", 94),
        ("H100 (96GiB)", 96), ("A800-SXM4-40G", 40), ("GH200 96GB", 96),
    ],
)  # fmt: skip
def test_a_stated_memory_no_preset_has_is_the_capacity(gpu: str, gib: int) -> None:
    assert memory_override(gpu) == (("memory_bytes", float(gib * GIB)),)
    text = infer_system(gpu).assumption
    assert f"memory capacity set to {gib} GiB" in text
    assert "HBM bandwidth, clocks and peaks are the preset's" in text


@pytest.mark.parametrize(
    ("gpu", "preset"),
    [
        ("H100 80GB", "h100-80gb"), ("H100", "h100-80gb"), ("A100 40GB", "a100-40gb"),
        ("A100-SXM4-80GB", "a100-80gb"), ("H200 (141 GB)", "h200"),
        ("B200-SXM-180GB", "b200"), ("B300-SXM-270GB", "b300"), ("B300-SXM-288GB", "b300"),
        ("AMD Instinct MI300X 192GB", "mi300x"), ("MI325X 256GB", "mi325x"),
        ("p5.48xlarge", "h100-80gb"),
    ],
)  # fmt: skip
def test_a_memory_its_preset_has_is_not_overridden(gpu: str, preset: str) -> None:
    assert infer_system(gpu).value == preset
    assert memory_override(gpu) == ()
    assert "memory capacity set to" not in infer_system(gpu).assumption


@pytest.mark.parametrize("gpu", ["H100 800GB", "H100 8GB", "H100 0GB"])
def test_a_nonsense_capacity_is_refused_in_one_line(gpu: str) -> None:
    with pytest.raises(Uninferable) as refused:
        memory_override(gpu)
    message = str(refused.value)
    assert message.startswith(f"gpu {gpu!r}: a stated memory of ")
    assert "expected 40 to 160 GiB per GPU" in message and "\n" not in message


def test_the_override_sets_the_capacity_only() -> None:
    base = load_system("h100-80gb")
    derived = derive_system(base, (("memory_bytes", float(96 * GIB)),))
    assert derived.name == "h100-80gb+memory=96GiB"
    assert derived.accelerator.memory_bytes == 96 * GIB
    assert derived.accelerator.memory_bandwidth_bytes_per_s == (
        base.accelerator.memory_bandwidth_bytes_per_s
    )
    assert derived.accelerator.peak_flops_per_s == base.accelerator.peak_flops_per_s
    assert derived.network == base.network
    assert derived_name("h100-80gb", (("memory_bytes", 94.0 * GIB),)) == "h100-80gb+memory=94GiB"
    with pytest.raises(ConfigError, match="memory_bytes -1: expected a positive capacity"):
        derive_system(base, (("memory_bytes", -1.0),))


def test_an_inferred_case_runs_on_the_stated_capacity() -> None:
    data = data_dir()
    (row,) = [
        r for r in read_csv(data / "published_runs_no_setup.csv")
        if r["id"] == "TTQWEN3-32B-H100-FSDP8-LBS2-COMPILE"
    ]  # fmt: skip
    (case,) = row_cases(row, "published_runs_no_setup.csv", 1, data)
    assert not case.reason, case.reason
    assert case.system == "h100-80gb+memory=96GiB"
    assert case_system(case).accelerator.memory_bytes == 96 * GIB
    (plain,) = row_cases({**row, "gpu": "H100 80GB"}, "published_runs_no_setup.csv", 1, data)
    assert plain.system == "h100-80gb" and not plain.system_overrides
