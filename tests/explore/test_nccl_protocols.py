"""NCCL's two protocols on the network dims (collectives module docstring, "NCCL's protocols"):
an NCCL all-reduce, all-gather or reduce-scatter takes the faster of the Simple protocol
(``collective_overhead_s``, the link's bus bandwidth) and the LL protocol
(``small_message_overhead_s``, a quarter to a third of it), as NCCL's tuner does
(src/graph/tuning.cc). Checked against the public nccl-tests all-reduce tables the presets'
figures come from (Azure/AI-benchmarking-guide), on the smallest and the largest sizes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import (
    LL_BUS_SHARE_ALL_REDUCE,
    LL_BUS_SHARE_ONE_NODE,
    alpha_beta_collective_s,
    latency_bound_all_reduce_s,
    low_latency_overhead_s,
)
from stage_explore.analytical.overlap import flat_ring_s
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim, System

AR = CollectiveKind.ALL_REDUCE
AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER
A2A = CollectiveKind.ALL_TO_ALL

#: Azure/AI-benchmarking-guide nccl-tests all_reduce_perf, in-place bus bandwidth (GB/s) at
#: 1 KiB and 256 MiB, and the GPUs of the run: ND A100 v4, ND H100 v5, ND H200 v5 (8 GPUs),
#: ND GB200 v6 (4 GPUs).
AZURE = {
    "a100-80gb": (8, 0.04, 213.87),
    "h100-80gb": (8, 0.07, 423.38),
    "h200": (8, 0.06, 432.24),
    "gb200-nvl72": (4, 0.10, 593.53),
}


def _achieved(name: str) -> System:
    """The preset as the analytical backend times it (each dim at its bus bandwidth)."""
    return AnalyticalBackend(framework="megatron-core").achieved_network(load_system(name))


def _simple_only(system: System) -> System:
    dims = tuple(replace(dim, small_message_overhead_s=None) for dim in system.network)
    return replace(system, network=dims)


def _measured_s(ranks: int, size_bytes: int, bus_gb_s: float) -> float:
    """nccl-tests' all-reduce time from its bus bandwidth: busbw = S / t · 2(n−1)/n."""
    return size_bytes * 2 * (ranks - 1) / ranks / (bus_gb_s * 1e9)


@pytest.mark.parametrize("name", sorted(AZURE))
def test_a_1_kib_all_reduce_is_within_10_percent_of_nccl_tests(name: str) -> None:
    ranks, small_bus, _ = AZURE[name]
    system = _achieved(name)
    measured = _measured_s(ranks, 1024, small_bus)
    predicted = alpha_beta_collective_s(system, AR, 1024, list(range(ranks)))
    assert predicted == pytest.approx(measured, rel=0.10)
    simple = alpha_beta_collective_s(_simple_only(system), AR, 1024, list(range(ranks)))
    assert simple / measured - 1 > 0.15  # the Simple protocol's fixed cost alone over-charged it


@pytest.mark.parametrize("name", sorted(AZURE))
def test_large_messages_keep_the_simple_protocol(name: str) -> None:
    ranks, _, large_bus = AZURE[name]
    system = _achieved(name)
    group = list(range(ranks))
    for kind in (AR, AG, RS):
        for size in (16 * 2**20, 256 * 2**20):
            assert alpha_beta_collective_s(system, kind, size, group) == alpha_beta_collective_s(
                _simple_only(system), kind, size, group
            )
    predicted = alpha_beta_collective_s(system, AR, 256 * 2**20, group)
    assert predicted == pytest.approx(_measured_s(ranks, 256 * 2**20, large_bus), rel=0.25)


def test_a_small_call_is_timed_with_the_ll_protocol() -> None:
    system = _achieved("h100-80gb")
    nvlink = system.network[0]
    assert nvlink.small_message_overhead_s is not None
    size = 64 * 1024
    for kind, share in ((AR, LL_BUS_SHARE_ALL_REDUCE), (RS, LL_BUS_SHARE_ONE_NODE)):
        steps = 2 * 7 if kind is AR else 7
        volume = (2 if kind is AR else 1) * 7 / 8 * size / (nvlink.bandwidth_bytes_per_s * share)
        expected = nvlink.small_message_overhead_s + steps * nvlink.latency_s + volume
        assert alpha_beta_collective_s(system, kind, size, list(range(8))) == pytest.approx(
            expected, rel=1e-12
        )
    # a group over NVLink and InfiniBand: the larger of the spanned dims' LL fixed costs (the
    # InfiniBand dim has none: its collective_overhead_s) and a quarter of every level's bandwidth
    infiniband = system.network[1]
    assert low_latency_overhead_s(system.network, [0, 1]) == max(
        nvlink.small_message_overhead_s, infiniband.collective_overhead_s
    )
    assert low_latency_overhead_s(system.network, [0], nccl=False) is None
    assert low_latency_overhead_s(_simple_only(system).network, [0, 1]) is None


def test_collectives_outside_nccl_and_all_to_all_are_unaffected() -> None:
    system = _achieved("gb200-nvl72")
    simple = _simple_only(system)
    group = list(range(4))
    for size in (1024, 2**20, 64 * 2**20):
        for kind in (AR, AG, RS, A2A):
            assert alpha_beta_collective_s(
                system, kind, size, group, nccl=False
            ) == alpha_beta_collective_s(simple, kind, size, group, nccl=False)
        assert alpha_beta_collective_s(system, A2A, size, group) == alpha_beta_collective_s(
            simple, A2A, size, group
        )


def test_the_fp8_amax_reduction_and_the_flat_ring_take_the_faster_protocol() -> None:
    system = _achieved("gb200-nvl72")
    simple = _simple_only(system)
    group = list(range(8))
    fast = latency_bound_all_reduce_s(system, 4096, group)
    slow = latency_bound_all_reduce_s(simple, 4096, group)
    assert fast < slow
    assert slow - fast == pytest.approx(
        system.network[0].collective_overhead_s - system.network[0].small_message_overhead_s,
        rel=0.05,
    )
    across = list(range(0, 144, 9))  # 16 ranks over two racks: a flat ring on InfiniBand
    assert flat_ring_s(system, AR, 4096, across) < flat_ring_s(simple, AR, 4096, across)
    large = 256 * 2**20
    assert flat_ring_s(system, AR, large, across) == flat_ring_s(simple, AR, large, across)


def test_the_field_round_trips_and_is_checked() -> None:
    nvlink = load_system("h200").network[0]  # read from the preset's TOML
    assert nvlink.to_dict()["small_message_overhead_s"] == nvlink.small_message_overhead_s
    assert (
        "small_message_overhead_s" not in replace(nvlink, small_message_overhead_s=None).to_dict()
    )
    with pytest.raises(ConfigError, match="small_message_overhead_s"):
        NetworkDim(
            size=8,
            topology="switch",
            bandwidth_bytes_per_s=1e9,
            latency_s=0.0,
            small_message_overhead_s=-1.0,
        )


@pytest.mark.parametrize(
    "name",
    ["a100-80gb", "h100-80gb", "h200", "h800", "b200", "b300", "gb200-nvl72", "gb300-nvl72"],
)
def test_every_preset_nvlink_dim_has_a_smaller_ll_fixed_cost(name: str) -> None:
    nvlink = load_system(name).network[0]
    assert nvlink.small_message_overhead_s is not None
    assert 0 < nvlink.small_message_overhead_s < nvlink.collective_overhead_s
