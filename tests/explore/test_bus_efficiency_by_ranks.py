"""A network dim's bus efficiency per group size (``bus_efficiency_by_ranks``): the α–β time of
a collective over n ranks of the dim uses the listed fraction instead of ``bus_efficiency``;
the loader reads it, rejects bad tables, and the analytical backend's memos see it. vTrain's
system carries the bus bandwidths its own nccl-tests tables measure over 2 / 4 / 8 GPUs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.calibrate import apply
from stage_explore.system import load_system
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import NetworkDim, System, Topology

AR = CollectiveKind.ALL_REDUCE
DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data"
LINK, ALPHA, OVERHEAD, BASE = 300e9, 1e-6, 50e-6, 0.69
BY_RANKS = ((2, 0.637), (8, 0.752))
S = 96 * 2**20


def node(by_ranks: tuple[tuple[int, float], ...] = BY_RANKS) -> System:
    """A100-like 8-GPU switch node with the per-size fractions under test."""
    system = load_system(str(DATA / "systems" / "vtrain-a100.toml"))
    dim = NetworkDim(
        name="nvswitch",
        size=8,
        topology=Topology.SWITCH,
        bandwidth_bytes_per_s=LINK,
        latency_s=ALPHA,
        bus_efficiency=BASE,
        collective_overhead_s=OVERHEAD,
        bus_efficiency_by_ranks=by_ranks,
    )
    return dataclasses.replace(system, network=(dim,))


def closed_form(ranks: int, fraction: float) -> float:
    """Ring all-reduce on one switch dim: overhead + 2(n-1)α + 2(n-1)/n · S / (link · f)."""
    return OVERHEAD + 2 * (ranks - 1) * ALPHA + 2 * (ranks - 1) / ranks * S / (LINK * fraction)


def test_alpha_beta_uses_the_fraction_of_the_group_size() -> None:
    achieved = AnalyticalBackend().achieved_network(node())
    assert alpha_beta_collective_s(achieved, AR, S, list(range(8))) == pytest.approx(
        closed_form(8, 0.752)
    )
    assert alpha_beta_collective_s(achieved, AR, S, [0, 1]) == pytest.approx(closed_form(2, 0.637))
    # 4 ranks are not listed: the dim's bus_efficiency
    assert alpha_beta_collective_s(achieved, AR, S, [0, 1, 2, 3]) == pytest.approx(
        closed_form(4, BASE)
    )


def test_without_the_table_every_size_runs_at_bus_efficiency() -> None:
    achieved = AnalyticalBackend().achieved_network(node(()))
    for ranks in (2, 4, 8):
        assert alpha_beta_collective_s(achieved, AR, S, list(range(ranks))) == pytest.approx(
            closed_form(ranks, BASE)
        )


def test_the_backend_memo_keys_see_the_table() -> None:
    """Two systems differing only in the per-size fractions give different step times."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=1, tp=8, pp=1, micro_batch=1, global_batch=8)
    backend = AnalyticalBackend(framework="deepspeed")
    fast = backend.evaluate(model, parallel, node(((8, 0.9),)))
    slow = backend.evaluate(model, parallel, node(((8, 0.5),)))
    plain = backend.evaluate(model, parallel, node(()))
    assert slow.step_time_s > plain.step_time_s > fast.step_time_s
    assert fast.breakdown["exposed_all_reduce"] < plain.breakdown["exposed_all_reduce"]


def dim_table(**extra: object) -> dict[str, object]:
    return {
        "name": "nvswitch",
        "size": 8,
        "topology": "switch",
        "bandwidth_bytes_per_s": LINK,
        "latency_s": ALPHA,
        "bus_efficiency": BASE,
        **extra,
    }


def mapping(dim: dict[str, object]) -> dict[str, object]:
    data = node().to_dict()
    data["network"] = [dim]
    return data


def test_the_loader_reads_and_round_trips_the_table() -> None:
    table = {"8": 0.752, "2": 0.637}
    system = system_from_mapping(mapping(dim_table(bus_efficiency_by_ranks=table)))
    assert system.network[0].bus_efficiency_by_ranks == ((2, 0.637), (8, 0.752))
    again = system_from_mapping(system.to_dict())
    assert again.network[0] == system.network[0]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"eight": 0.7}, "must be a rank count"),
        ({"16": 0.7}, "rank counts from 2 to the dim's size 8"),
        ({"1": 0.7}, "rank counts from 2"),
        ({"4": 1.5}, "must be <= 1"),
        ({"4": "fast"}, "must be a number"),
    ],
)
def test_bad_tables_are_one_line_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        system_from_mapping(mapping(dim_table(bus_efficiency_by_ranks=table)))


def test_the_table_needs_a_bus_efficiency() -> None:
    dim = dim_table(bus_efficiency_by_ranks={"8": 0.75})
    del dim["bus_efficiency"]
    with pytest.raises(ConfigError, match="needs `bus_efficiency`"):
        system_from_mapping(mapping(dim))


def test_vtrain_system_reads_its_source_tables() -> None:
    """AR_GPU{2,4,8}_1M_1024M_LUT (VIA-Research/vTrain trace/a100), mean of the in-place and
    out-of-place times at 48 and 192 MiB: the bus bandwidth between them over 300 GB/s."""
    times_us = {2: (313.35, 1104.05), 4: (395.65, 1443.5), 8: (438.65, 1609.3)}
    dim = load_system(str(DATA / "systems" / "vtrain-a100.toml")).network[0]
    listed = dict(dim.bus_efficiency_by_ranks)
    for ranks, (small, large) in times_us.items():
        algbw = (192 - 48) * 2**20 / ((large - small) * 1e-6)
        busbw = algbw * 2 * (ranks - 1) / ranks
        assert listed[ranks] == pytest.approx(busbw / LINK, abs=1e-3)


def test_calibrating_the_dim_scales_its_per_size_fractions() -> None:
    """A fitted bus efficiency moves the listed group sizes by the same ratio (capped at 1)."""
    fitted = apply(node(((2, 0.6), (8, 0.9))), {"network.nvswitch": BASE * 1.2})
    dim = fitted.network[0]
    assert dim.bus_efficiency == pytest.approx(BASE * 1.2)
    (two, two_fraction), (eight, eight_fraction) = dim.bus_efficiency_by_ranks
    assert (two, eight) == (2, 8)
    assert two_fraction == pytest.approx(0.6 * 1.2)
    assert eight_fraction == 1.0  # 0.9 x 1.2 capped
    unchanged = apply(node(), {"network.nvswitch": BASE})
    assert unchanged.network[0] == node().network[0]


def test_a100_preset_takes_the_source_table_per_group_size() -> None:
    """a100-80gb: vTrain's nccl-tests all-reduce bus bandwidths on one A100 NVSwitch node, 191.0
    / 216.1 / 225.7 of 300 GB/s over 2 / 4 / 8 GPUs (the 8-GPU figure, the dim's own, the median
    of the three 8-GPU measurements the preset cites; s37 tidy, was #178's 2-GPU 0.69)."""
    preset = load_system("a100-80gb")
    nvswitch = preset.network[0]
    table = dict(nvswitch.bus_efficiency_by_ranks)
    eight = nvswitch.bus_efficiency
    assert eight is not None and 8 not in table
    assert eight == pytest.approx(225.7 / 300, abs=5e-4)
    assert table[2] == pytest.approx(191.0 / 300, abs=5e-4)
    assert table[4] == pytest.approx(216.1 / 300, abs=5e-4)
    achieved = AnalyticalBackend().achieved_network(preset)
    link, alpha = nvswitch.bandwidth_bytes_per_s, nvswitch.latency_s
    for ranks in (2, 4, 8):
        fraction = table.get(ranks, eight)
        expected = nvswitch.collective_overhead_s + 2 * (ranks - 1) * alpha
        expected += 2 * (ranks - 1) / ranks * S / (link * fraction)
        seconds = alpha_beta_collective_s(achieved, AR, S, list(range(ranks)))
        assert seconds == pytest.approx(expected)
