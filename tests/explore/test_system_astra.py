"""ASTRA-sim's view of a system: reading system.json/network.yml, writing them, from a System."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system import (
    AstraAlgorithm,
    AstraDim,
    AstraTopology,
    astra_config_from_files,
    astra_config_from_system,
    astra_dims_from_system,
    load_system,
)
from tests.fixtures import SAMPLE_RUN

# The reference run's inputs are embedded below; a test checks that the embedded copy is the
# same as the fixture's files.
SAMPLE = SAMPLE_RUN

SYSTEM_JSON = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring", "ring"],
    "all-gather-implementation": ["ring", "ring"],
    "reduce-scatter-implementation": ["ring", "ring"],
    "all-to-all-implementation": ["direct", "direct"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 3350,
    "roofline-enabled": 1,
    "peak-perf": 989,
}
NETWORK_YML = """\
topology: [ Ring, Switch ]     # per dimension
npus_count: [ 2, 2 ]
bandwidth: [ 450.0, 50.0 ]
latency: [ 500.0, 2000.0 ]
"""


def write_pair(tmp_path: Path, system: dict[str, object], network: str) -> tuple[Path, Path]:
    system_path, network_path = tmp_path / "system.json", tmp_path / "network.yml"
    system_path.write_text(json.dumps(system))
    network_path.write_text(network)
    return system_path, network_path


def test_reads_system_json_and_network_yml(tmp_path: Path) -> None:
    config = astra_config_from_files(*write_pair(tmp_path, SYSTEM_JSON, NETWORK_YML))
    assert config.dims == (
        AstraDim(topology=AstraTopology.RING, npus=2, bandwidth_gbps=450.0, latency_ns=500.0),
        AstraDim(topology=AstraTopology.SWITCH, npus=2, bandwidth_gbps=50.0, latency_ns=2000.0),
    )
    assert config.total_npus == 4
    assert config.preferred_dataset_splits == 4 and config.endpoint_delay_ns == 10
    assert config.implementations(CollectiveKind.ALL_TO_ALL) == (AstraAlgorithm.DIRECT,) * 2
    assert config.local_mem_bw_gbps == 3350 and config.peak_perf_tflops == 989


def test_embedded_inputs_are_the_reference_sample_run(tmp_path: Path) -> None:
    reference = astra_config_from_files(SAMPLE / "system.json", SAMPLE / "network.yml")
    assert reference == astra_config_from_files(*write_pair(tmp_path, SYSTEM_JSON, NETWORK_YML))


def test_block_style_yaml_lists_are_read(tmp_path: Path) -> None:
    network = "topology:\n  - Ring\nnpus_count:\n  - 8\nbandwidth:\n  - 50\nlatency:\n  - 500\n"
    config = astra_config_from_files(*write_pair(tmp_path, SYSTEM_JSON, network))
    assert config.dims == (
        AstraDim(topology=AstraTopology.RING, npus=8, bandwidth_gbps=50.0, latency_ns=500.0),
    )


def test_written_files_read_back_to_the_same_config(tmp_path: Path) -> None:
    config = astra_config_from_system(load_system("a100-80gb"), num_gpus=32)
    system_path, network_path = write_pair(tmp_path, config.system_json(), config.network_yml())
    assert astra_config_from_files(system_path, network_path) == config


@pytest.mark.parametrize(
    ("system_edit", "network", "pattern"),
    [
        ({"colour": 1}, NETWORK_YML, r"system.json: unknown key `colour`"),
        ({"preferred-dataset-splits": None}, NETWORK_YML, r"missing key `preferred-dataset-split"),
        ({"endpoint-delay": 1.5}, NETWORK_YML, r"key `endpoint-delay` must be an integer"),
        ({"all-reduce-implementation": ["oneRing"]}, NETWORK_YML, r"unsupported algorithm"),
        ({"model-shared-bus": 1}, NETWORK_YML, r"`model-shared-bus` must be 0"),
        ({}, NETWORK_YML + "links: [ 1 ]\n", r"network.yml:5: unknown key `links`"),
        ({}, NETWORK_YML.replace("Switch", "Torus"), r"`topology` entry 'Torus' is not one of"),
        ({}, NETWORK_YML.replace("[ 2, 2 ]", "[ 2 ]"), r"the lists must have the same length"),
        ({}, NETWORK_YML.replace("450.0", "fast"), r"key `bandwidth` must hold numbers"),
    ],
)
def test_bad_astra_files_give_one_line_errors_naming_file_and_key(
    tmp_path: Path, system_edit: dict[str, object], network: str, pattern: str
) -> None:
    system = {**SYSTEM_JSON, **system_edit}
    system = {key: value for key, value in system.items() if value is not None}
    with pytest.raises(ConfigError, match=pattern) as caught:
        astra_config_from_files(*write_pair(tmp_path, system, network))
    assert "\n" not in str(caught.value)


def test_dims_from_a_system_use_gib_per_second_and_ns_per_link() -> None:
    dims = astra_dims_from_system(load_system("a100-80gb"), num_gpus=16)
    assert [dim.npus for dim in dims] == [8, 2]
    assert dims[0].topology is AstraTopology.SWITCH
    assert dims[0].bandwidth_gbps * 2**30 == pytest.approx(300e9)
    assert dims[1].bandwidth_gbps * 2**30 == pytest.approx(25e9)
    # a switch message crosses two links: half the end-to-end latency each
    assert dims[0].latency_ns == pytest.approx(500.0)
    assert dims[1].latency_ns == pytest.approx(2500.0)
    # the message time over the switch is then the system's α + m/β
    assert dims[0].message_ns(300_000, hops=2) == int(1000 + 300_000 / 300)


@pytest.mark.parametrize(
    ("num_gpus", "sizes"), [(1, [1]), (4, [4]), (8, [8]), (24, [8, 3]), (None, [8, 16384])]
)
def test_dims_fill_from_the_scale_up_domain_outwards(
    num_gpus: int | None, sizes: list[int]
) -> None:
    dims = astra_dims_from_system(load_system("h100-80gb"), num_gpus)
    assert [dim.npus for dim in dims] == sizes


@pytest.mark.parametrize("num_gpus", [12, 0, 8 * 16384 + 1])
def test_gpu_counts_that_do_not_fill_the_dims_are_rejected(num_gpus: int) -> None:
    with pytest.raises(ConfigError, match="num_gpus"):
        astra_dims_from_system(load_system("h100-80gb"), num_gpus)


def test_config_from_system_carries_peak_memory_bandwidth_and_algorithms() -> None:
    config = astra_config_from_system(load_system("tpu-v4-like"), num_gpus=64, dtype="bf16")
    assert config.peak_perf_tflops == pytest.approx(275)
    assert config.local_mem_bw_gbps == pytest.approx(1200)
    assert [dim.topology for dim in config.dims] == [AstraTopology.RING] * 3
    assert config.implementations(CollectiveKind.ALL_REDUCE) == (AstraAlgorithm.RING,) * 3
    with pytest.raises(ConfigError, match="no peak FLOP/s for dtype 'fp8'"):
        astra_config_from_system(load_system("tpu-v4-like"), dtype="fp8")


@pytest.mark.parametrize(
    ("topology", "npus", "pairs"),
    [
        (AstraTopology.RING, 8, [((0, 1), 1), ((0, 7), 1), ((0, 4), 4), ((2, 5), 3)]),
        (AstraTopology.SWITCH, 8, [((0, 1), 2), ((0, 4), 2)]),
        (AstraTopology.FULLY_CONNECTED, 8, [((0, 1), 1), ((0, 4), 1)]),
    ],
)
def test_hops_follow_the_topology(
    topology: AstraTopology, npus: int, pairs: list[tuple[tuple[int, int], int]]
) -> None:
    dim = AstraDim(topology=topology, npus=npus, bandwidth_gbps=1.0, latency_ns=1.0)
    assert [dim.hops(*pair) for pair, _ in pairs] == [hops for _, hops in pairs]
