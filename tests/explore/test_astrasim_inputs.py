"""The ASTRA-sim backend's input files, checked against the documented format.

Reference: ``tests/fixtures/astra-sim/README.md`` (keys that matter, network.yml, memory.json)
and ``docs/reference/chakra_et.md`` (trace files, comm_group.json).

- golden ``system.json`` / ``network.yml`` / ``memory.json`` for a 16-GPU job on a100-80gb
  (regenerate with ``make golden`` once :data:`GOLDEN_FILES` is registered);
- every documented requirement, one test per requirement (keys set, one implementation per
  network dim, direct all-to-all, npus product = ranks, bandwidth in GB/s with GB = 2^30);
- the trace set passes ``stage_core.chakra`` read + check;
- the files this backend writes are accepted by the exact ASTRA-sim-equivalent simulator
  (``stage_explore.analytical.tracesim``, which reproduces the reference run to the ns): every
  rank runs to completion. This is NOT evidence from the real binary; the real binary runs the
  same kind of files in test_astrasim_real.py and the conformance matrix
  (test_astrasim_conformance.py), skipped where it is not installed.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.groups import read_comm_groups
from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_core.trace import CollectiveKind, NodeKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.astrasim import (
    AstraSettings,
    AstraSimBackend,
    compute_dtype,
    step_flops,
    write_inputs,
)
from stage_explore.system import (
    CollectiveAlgorithm,
    CollectiveAlgorithms,
    System,
    astra_config_from_files,
    load_system,
)

GOLDEN = Path(__file__).parent / "golden"
A100 = load_system("a100-80gb")

#: Small STAGE workloads, one per kind of communication ASTRA-sim must run.
POINTS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # TP+SP collectives, PP sends/receives, DP gradient all-reduce; 16 ranks = 2 network dims
    "gpt-tp-sp-pp-dp": (
        "gpt3-125m", {"layers": 2, "seq_len": 256},
        {"dp": 2, "tp": 4, "pp": 2, "sp": True, "global_batch": 8},
    ),
    # expert all-to-all, ZeRO-1 reduce-scatter and parameter all-gather
    "mixtral-ep-zero1": (
        "mixtral-8x7b", {"layers": 2, "seq_len": 128},
        {"dp": 4, "ep": 2, "tp": 2, "zero": 1, "global_batch": 8},
    ),
    # ring attention: point-to-point K/V exchange between context-parallel ranks
    "llama-cp-ring": (
        "llama3-8b", {"layers": 2, "seq_len": 256},
        {"dp": 2, "cp": 2, "tp": 2, "cp_style": "ring", "global_batch": 4},
    ),
}  # fmt: skip
GOLDEN_POINT = "gpt-tp-sp-pp-dp"


def point(name: str) -> tuple[ModelSpec, ParallelConfig]:
    flavor, overrides, parallel = POINTS[name]
    return get_flavor(flavor).with_overrides(**overrides), ParallelConfig(**parallel)


def small_nodes(system: System, size: int = 4) -> System:
    """``system`` with nodes of ``size`` GPUs whose all-to-all is (unusually) ``ring``."""
    inner, *outer = system.network
    algorithms = CollectiveAlgorithms(all_to_all=CollectiveAlgorithm.RING)
    return replace(system, network=(replace(inner, size=size, algorithms=algorithms), *outer))


def written(name: str, directory: Path, system: System = A100) -> Path:
    model, parallel = point(name)
    AstraSimBackend().write_inputs(model, parallel, system, directory)
    return directory


# -- golden files -----------------------------------------------------------------------------


def golden_astrasim_file(file_name: str) -> str:
    """The text of ``file_name`` written for :data:`GOLDEN_POINT` on a100-80gb."""
    with tempfile.TemporaryDirectory() as directory:
        return (written(GOLDEN_POINT, Path(directory)) / file_name).read_text()


_GOLDEN_NAMES = ("memory.json", "network.yml", "system.json")
#: ``(path, render)`` pairs for ``tests/regenerate_golden.py`` (``GOLDEN += GOLDEN_FILES``).
GOLDEN_FILES: list[tuple[Path, Callable[[], str]]] = [
    (GOLDEN / f"astrasim_a100_16gpu_{name}", partial(golden_astrasim_file, name))
    for name in _GOLDEN_NAMES
]


@pytest.mark.parametrize("name", _GOLDEN_NAMES)
def test_golden_file(name: str, tmp_path: Path) -> None:
    expected = (GOLDEN / f"astrasim_a100_16gpu_{name}").read_text()
    assert (written(GOLDEN_POINT, tmp_path) / name).read_text() == expected


# -- system.json ------------------------------------------------------------------------------


def system_json(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "system.json").read_text())
    return data


def test_system_json_sets_every_key_the_reference_requires(tmp_path: Path) -> None:
    data = system_json(written(GOLDEN_POINT, tmp_path))
    assert data["scheduling-policy"] in ("LIFO", "FIFO", "EXPLICIT")  # else ASTRA-sim aborts
    assert data["collective-optimization"] in ("localBWAware", "baseline")  # else no results
    assert (
        isinstance(data["preferred-dataset-splits"], int) and data["preferred-dataset-splits"] >= 1
    )
    assert isinstance(data["active-chunks-per-dimension"], int)
    assert isinstance(data["endpoint-delay"], int)
    assert data["local-mem-bw"] > 0  # GB/s; must be > 0
    assert data["roofline-enabled"] == 1


@pytest.mark.parametrize("system", [A100, small_nodes(A100)], ids=["a100", "nodes-of-4-ring-a2a"])
def test_one_implementation_per_dim_and_direct_all_to_all(system: System, tmp_path: Path) -> None:
    data = system_json(written("mixtral-ep-zero1", tmp_path, system))
    dims = len(astra_config_from_files(tmp_path / "system.json", tmp_path / "network.yml").dims)
    assert dims == (1 if system is A100 else 2)
    for kind in CollectiveKind:
        key = f"{kind.value.replace('_', '-')}-implementation"
        assert len(data[key]) == dims, key  # a shorter list silently ignores dims
    assert data["all-to-all-implementation"] == ["direct"] * dims
    assert data["all-reduce-implementation"] == ["ring"] * dims  # the system's choice is kept


@pytest.mark.parametrize(
    ("system", "precision", "tflops"),
    [
        ("a100-80gb", "bf16", 312),
        ("h100-80gb", "fp8", 1979),
        ("h100-80gb", "fp16", 989),
    ],
)
def test_peak_perf_is_the_accelerators_peak_for_the_precision(
    system: str, precision: str, tflops: int, tmp_path: Path
) -> None:
    model, parallel = point(GOLDEN_POINT)
    parallel = replace(parallel, precision=Precision(precision))
    hardware = load_system(system)
    AstraSimBackend().write_inputs(model, parallel, hardware, tmp_path)
    data = system_json(tmp_path)
    assert data["peak-perf"] == tflops
    assert data["local-mem-bw"] == hardware.accelerator.memory_bandwidth_bytes_per_s / 1e9
    assert hardware.accelerator.peak(compute_dtype(parallel, hardware)) == tflops * 1e12


def test_a_precision_without_a_peak_is_a_config_error(tmp_path: Path) -> None:
    # No fp8 peak on A100: a one-line error, as in the analytical backend, never bf16 silently.
    model, parallel = point(GOLDEN_POINT)
    parallel = replace(parallel, precision=Precision("fp8"))
    with pytest.raises(ConfigError, match="precision 'fp8' needs a peak FLOP/s"):
        AstraSimBackend().write_inputs(model, parallel, load_system("a100-80gb"), tmp_path)


def test_settings_reach_system_json(tmp_path: Path) -> None:
    model, parallel = point(GOLDEN_POINT)
    backend = AstraSimBackend(
        preferred_dataset_splits=8, active_chunks_per_dimension=2, endpoint_delay_ns=20,
        collective_optimization="baseline",
    )  # fmt: skip
    backend.write_inputs(model, parallel, A100, tmp_path)
    data = system_json(tmp_path)
    assert (data["preferred-dataset-splits"], data["active-chunks-per-dimension"]) == (8, 2)
    assert (data["endpoint-delay"], data["collective-optimization"]) == (20, "baseline")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"preferred_dataset_splits": 0}, "preferred_dataset_splits` must be an integer >= 1"),
        ({"active_chunks_per_dimension": 1.5}, "active_chunks_per_dimension` must be an integer"),
        ({"collective_optimization": "fast"}, "collective_optimization` must be one of"),
        ({"variant": "congested"}, "`variant` must be one of 'unaware', 'aware'"),
        ({"timeout_s": 0}, "`timeout_s` must be a number > 0"),
        ({"simulate_infeasible": "yes"}, "`simulate_infeasible` must be true or false"),
    ],
)
def test_bad_options_are_config_errors_at_construction(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        AstraSimBackend(**options)


# -- network.yml and memory.json --------------------------------------------------------------


def network_yml(directory: Path) -> dict[str, list[str]]:
    rows = {}
    for line in (directory / "network.yml").read_text().splitlines():
        key, _, value = line.partition(":")
        rows[key] = [item.strip() for item in value.strip().strip("[]").split(",")]
    return rows


@pytest.mark.parametrize(
    ("gpus", "npus"),
    [(4, [4]), (8, [8]), (16, [8, 2]), (64, [8, 8])],  # 1 GPU: refused (the next test but one)
)
def test_network_dims_fold_to_the_world_size(gpus: int, npus: list[int], tmp_path: Path) -> None:
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=128)
    written_inputs = write_inputs(
        lower(model, ParallelConfig(dp=gpus)), A100, tmp_path, dtype="bf16"
    )
    rows = network_yml(tmp_path)
    assert set(rows) == {"topology", "npus_count", "bandwidth", "latency"}
    assert [int(n) for n in rows["npus_count"]] == npus
    assert math.prod(int(n) for n in rows["npus_count"]) == gpus == written_inputs.world_size
    assert len({len(values) for values in rows.values()}) == 1  # one entry per dim in every row
    expected_gbps = [dim.bandwidth_bytes_per_s / 2**30 for dim in A100.network[: len(npus)]]
    assert [float(b) for b in rows["bandwidth"]] == expected_gbps  # GB/s with GB = 2^30
    assert rows["topology"] == ["Switch"] * len(npus)


def test_a_world_size_that_splits_a_node_is_a_config_error(tmp_path: Path) -> None:
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=128)
    with pytest.raises(ConfigError, match="num_gpus=12 does not fill network dim 'nvswitch'"):
        write_inputs(lower(model, ParallelConfig(dp=12)), A100, tmp_path, dtype="bf16")
    assert not list(tmp_path.glob("*.et"))  # nothing half-written


def test_a_single_gpu_job_is_a_config_error_before_any_run(tmp_path: Path) -> None:
    """ASTRA-sim's analytical network exits 'npus_count (1) should be larger than 1' (s24
    review, the real binary): refused before the inputs are written or the binary runs."""
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=128)
    with pytest.raises(ConfigError, match=r"needs at least 2 NPUs .* but the job has 1 GPU"):
        write_inputs(lower(model, ParallelConfig()), A100, tmp_path, dtype="bf16")
    assert not list(tmp_path.iterdir())
    from stage_explore.astrasim import AstraSimBackend

    never = tmp_path / "astra"
    never.write_text("#!/bin/sh\ntouch ran\nexit 1\n")
    never.chmod(0o755)
    with pytest.raises(ConfigError, match=r"needs at least 2 NPUs"):
        AstraSimBackend(binary=str(never)).evaluate(model, ParallelConfig(), A100)
    assert not (tmp_path / "ran").exists()


def test_memory_json_is_no_memory_expansion(tmp_path: Path) -> None:
    data = json.loads((written(GOLDEN_POINT, tmp_path) / "memory.json").read_text())
    assert data == {"memory-type": "NO_MEMORY_EXPANSION"}


# -- traces and comm_group.json ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POINTS))
def test_trace_set_passes_the_chakra_check(name: str, tmp_path: Path) -> None:
    model, parallel = point(name)
    inputs = AstraSimBackend().write_inputs(model, parallel, A100, tmp_path)
    world = parallel.world_size
    assert sorted(p.name for p in tmp_path.glob("workload.*.et")) == sorted(
        f"workload.{rank}.et" for rank in range(world)
    )
    trace_set = read_trace_set(tmp_path, "workload")
    report = check_trace_set(trace_set)
    assert report.violations == ()
    assert trace_set.world_size == world == inputs.world_size
    groups = read_comm_groups(tmp_path / "comm_group.json")
    assert groups == inputs.groups and all(int(key) > 0 for key in groups)
    used = {node.group for nodes in trace_set.ranks.values() for node in nodes
            if node.kind is NodeKind.COLL and node.group is not None}  # fmt: skip
    assert used <= set(groups.values())


# -- accepted by the exact ASTRA-sim-equivalent simulator --------------------------------------


@pytest.mark.parametrize(
    ("name", "system"),
    [(name, "a100") for name in sorted(POINTS)] + [("mixtral-ep-zero1", "nodes-of-4")],
)
def test_written_inputs_run_to_completion_in_the_astra_equivalent_simulator(
    name: str, system: str, tmp_path: Path
) -> None:
    """Decode the .et files and read system.json/network.yml exactly as written, then simulate
    them with ASTRA-sim's execution semantics and timing: every rank must finish (no stalled
    collective, no unmatched receive) with work on every rank. A stand-in for the real binary."""
    hardware = A100 if system == "a100" else small_nodes(A100)
    written(name, tmp_path, hardware)
    config = astra_config_from_files(tmp_path / "system.json", tmp_path / "network.yml")
    trace_set = read_trace_set(tmp_path, "workload")
    result = simulate(trace_set.ranks, AstraTimingModel(config))
    assert sorted(result.ranks) == list(range(trace_set.world_size))
    for timing in result.ranks.values():
        assert 0 < timing.compute <= timing.finish
        assert timing.finish == timing.compute + timing.exposed_communication
    assert config.total_npus == trace_set.world_size


# -- the same accounting as the analytical backend --------------------------------------------


@pytest.mark.parametrize("name", sorted(POINTS))
def test_flops_and_memory_match_the_analytical_backend(name: str) -> None:
    model, parallel = point(name)
    programs = lower(model, parallel)
    analytical = AnalyticalBackend().evaluate(model, parallel, A100)
    assert step_flops(programs) == (
        analytical.model_flops_per_step,
        analytical.hardware_flops_per_step,
    )
    peak = max(breakdown.peak_bytes for breakdown in memory_report(programs))
    assert peak == analytical.peak_memory_bytes


def test_default_settings_are_the_reference_run_settings() -> None:
    settings = AstraSettings()
    assert (settings.endpoint_delay_ns, settings.preferred_dataset_splits) == (10, 4)
    assert settings.active_chunks_per_dimension == 1
    assert settings.collective_optimization == "localBWAware"


def test_scheduling_policy_is_written_and_checked(tmp_path: Path) -> None:
    model, parallel = point(GOLDEN_POINT)
    backend = AstraSimBackend(scheduling_policy="FIFO")
    inputs = backend.write_inputs(model, parallel, A100, tmp_path)
    assert json.loads(inputs.system_json.read_text())["scheduling-policy"] == "FIFO"
    assert astra_config_from_files(inputs.system_json, inputs.network_yml).scheduling_policy == (
        "FIFO"
    )
    with pytest.raises(ConfigError, match=r"`scheduling_policy` must be one of .*'RR'"):
        AstraSimBackend(scheduling_policy="RR")
