"""A network dim's bus bandwidth falling with the ranks a ring spans (``bus_efficiency_scaling``):
the factor is interpolated in log2(ranks) between the listed points, 1 below the first and held
at the last beyond it; the α–β time of an all-reduce / reduce-scatter / all-gather over n ranks
of the dim uses it (an all-to-all does not); the loader reads it and rejects bad tables; the
analytical backend's memos see it; the InfiniBand NDR presets carry NVIDIA/nccl#1229's curve."""

from __future__ import annotations

import dataclasses
import math

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s, call_overhead_s
from stage_explore.analytical.overlap import flat_ring_s
from stage_explore.system import load_system
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import NetworkDim, System

AR, RS, AG, A2A = (
    CollectiveKind.ALL_REDUCE,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_GATHER,
    CollectiveKind.ALL_TO_ALL,
)
POINTS = ((4, 1.0), (16, 0.8))
S = 64 * 2**20


def cluster(points: tuple[tuple[int, float], ...] = POINTS) -> System:
    """The h100-80gb preset (8-GPU nodes) with the scale-out dim's scaling under test."""
    preset = load_system("h100-80gb")
    nvswitch, fabric = preset.network
    return dataclasses.replace(
        preset, network=(nvswitch, dataclasses.replace(fabric, bus_efficiency_scaling=points))
    )


def fabric(system: System) -> NetworkDim:
    return system.network[1]


def one_per_node(nodes: int) -> list[int]:
    """Rank 0 of each of ``nodes`` nodes: a group on the scale-out dim alone."""
    return [8 * node for node in range(nodes)]


def ring_s(kind: CollectiveKind, ranks: int, dim: NetworkDim, factor: float) -> float:
    """One ring level (collectives.py, α–β mode): overhead + steps·α + (n−1)/n · S / (β · f);
    the all-reduce twice the steps and the volume; ``dim`` carries the achieved β."""
    steps = 2 * (ranks - 1) if kind is AR else ranks - 1
    volume = (ranks - 1) / ranks * S * (2 if kind is AR else 1)
    return (
        dim.collective_overhead_s
        + steps * dim.latency_s
        + volume / (dim.bandwidth_bytes_per_s * factor)
    )


def test_the_factor_is_log_linear_between_points_and_flat_outside() -> None:
    dim = fabric(cluster())
    assert dim.scaling_factor(2) == 1.0  # below the first point
    assert dim.scaling_factor(4) == 1.0
    assert dim.scaling_factor(8) == pytest.approx(0.9)  # log2 8 is halfway from 4 to 16
    share = math.log2(12 / 4) / math.log2(16 / 4)
    assert dim.scaling_factor(12) == pytest.approx(1.0 - 0.2 * share)
    assert dim.scaling_factor(16) == pytest.approx(0.8)
    assert dim.scaling_factor(1024) == pytest.approx(0.8)  # held, not extrapolated
    assert fabric(cluster(())).scaling_factor(1024) == 1.0


@pytest.mark.parametrize("kind", [AR, RS, AG])
@pytest.mark.parametrize("nodes", [2, 8, 16, 64])
def test_ring_collectives_over_n_nodes_run_at_the_factor(kind: CollectiveKind, nodes: int) -> None:
    achieved = AnalyticalBackend().achieved_network(cluster())
    dim = fabric(achieved)
    factor = {2: 1.0, 8: 0.9, 16: 0.8, 64: 0.8}[nodes]
    size = S // nodes if kind is AG else S  # an all-gather's size is the per-rank shard
    seconds = alpha_beta_collective_s(achieved, kind, size, one_per_node(nodes))
    assert seconds == pytest.approx(ring_s(kind, nodes, dim, factor))


def test_an_all_to_all_does_not_scale() -> None:
    scaled = AnalyticalBackend().achieved_network(cluster())
    plain = AnalyticalBackend().achieved_network(cluster(()))
    group = one_per_node(16)
    assert alpha_beta_collective_s(scaled, A2A, S, group) == pytest.approx(
        alpha_beta_collective_s(plain, A2A, S, group)
    )


def test_a_hierarchical_group_scales_only_its_scale_out_level() -> None:
    """16 nodes x 8 GPUs: the NVLink reduce-scatter level keeps its bandwidth, the 16-node
    level (carrying 1/8 of the buffer) runs at 0.8."""
    scaled = AnalyticalBackend().achieved_network(cluster())
    plain = AnalyticalBackend().achieved_network(cluster(()))
    group = list(range(128))
    dim = fabric(plain)
    slower = alpha_beta_collective_s(scaled, RS, S, group) - alpha_beta_collective_s(
        plain, RS, S, group
    )
    volume = 15 / 16 * (S / 8)
    assert slower == pytest.approx(
        volume / (dim.bandwidth_bytes_per_s * 0.8) - volume / (dim.bandwidth_bytes_per_s)
    )


def test_a_flat_ring_scales_by_the_nodes_it_crosses() -> None:
    """zero3_flat_ring: 64 ranks on 8 nodes, one ring at the slowest dim: the factor of 8
    nodes (0.9), not of 64 ranks (0.8); one NCCL call over both dims, so the larger of their
    fixed costs."""
    achieved = AnalyticalBackend().achieved_network(cluster())
    dim = fabric(achieved)
    seconds = flat_ring_s(achieved, RS, S, list(range(64)))
    once = call_overhead_s(achieved.network, [0, 1]) - dim.collective_overhead_s
    assert seconds == pytest.approx(ring_s(RS, 64, dim, 0.9) + once)


def test_the_backend_memo_keys_see_the_scaling() -> None:
    """Two systems differing only in the scaling give different step times (data parallel
    across 2 nodes, ZeRO-3 gathers and scatters on the scale-out dim)."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=16, tp=1, pp=1, micro_batch=1, global_batch=16, zero=3)
    backend = AnalyticalBackend(framework="deepspeed")
    plain = backend.evaluate(model, parallel, cluster(()))
    slow = backend.evaluate(model, parallel, cluster(((2, 0.5),)))
    assert slow.step_time_s > plain.step_time_s


def mapping(extra: dict[str, object]) -> dict[str, object]:
    data = cluster(()).to_dict()
    network = data["network"]
    assert isinstance(network, list)
    network[1] = {**network[1], **extra}
    return data


def test_the_loader_reads_and_round_trips_the_scaling() -> None:
    system = system_from_mapping(mapping({"bus_efficiency_scaling": {"16": 0.8, "4": 1.0}}))
    assert fabric(system).bus_efficiency_scaling == POINTS
    assert system_from_mapping(system.to_dict()) == system


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"many": 0.7}, "must be a rank count"),
        ({"1": 0.7}, "increasing rank counts >= 2"),
        ({"4": 1.5}, "must be <= 1"),
        ({"4": "fast"}, "must be a number"),
    ],
)
def test_bad_tables_are_one_line_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        system_from_mapping(mapping({"bus_efficiency_scaling": table}))


@pytest.mark.parametrize("preset", ["h100-80gb", "h200", "h800", "b200", "gb200-nvl72"])
def test_ndr_presets_carry_the_nccl_1229_curve(preset: str) -> None:
    """Reduce-scatter busbw 360 / 345 / 320 / 300 / 280 / 260 GB/s at 4 ... 128 nodes
    (NVIDIA/nccl#1229), relative to 4 nodes."""
    busbw = {4: 360, 8: 345, 16: 320, 32: 300, 64: 280, 128: 260}
    dim = load_system(preset).network[-1]
    assert dim.name == "infiniband-ndr"
    listed = dict(dim.bus_efficiency_scaling)
    assert listed.keys() == busbw.keys()
    for nodes, value in busbw.items():
        assert listed[nodes] == pytest.approx(value / 360, abs=5e-4)
