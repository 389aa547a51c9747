"""Compute slowed by the SMs and HBM overlapped NCCL collectives take
(:mod:`stage_explore.analytical.contention`), against closed forms computed here: the channel
count and HBM share of a group's outermost dim, the kernel model on what is left (many waves:
the SM ratio; one exact wave: a second wave; a memory-bound kernel: the HBM share), the wall
time of a block beside a collective, ZeRO-3 chunks, the gradient buckets, the system files'
``nccl_channels`` and the memo key (two systems differing only in it)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.async_tp import NCCL_ALL_REDUCE_SMS, nccl_sm_share_s
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import (
    CONTENTION,
    BlockCost,
    BlockTiming,
    chunk_timing,
    hidden_sync_s,
)
from stage_explore.analytical.contention import (
    RING_HBM_BYTES,
    NcclLoad,
    contended_s,
    contended_share,
    nccl_channels,
    nccl_load,
    on_fewer_sms,
)
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from stage_explore.system import load_system
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import NetworkDim
from tests.explore.gemm_helpers import bf16_gemm, h100_timer

H100 = load_system("h100-80gb")


def test_channels_are_the_outermost_spanned_dims() -> None:
    nvswitch, infiniband = (dim.nccl_channels for dim in H100.network)
    assert (nvswitch, infiniband) == (24, 16)
    assert nccl_channels(H100, (8, 1)) == nvswitch  # inside a node
    assert nccl_channels(H100, (8, 4)) == infiniband  # a ring across nodes
    assert nccl_channels(H100, (1, 4)) == infiniband
    assert nccl_channels(H100, (1, 1)) == 0  # one rank: no collective
    unknown = replace(H100, network=(H100.network[0], replace(H100.network[1], nccl_channels=None)))
    assert nccl_channels(unknown, (8, 4)) == 0  # no figure, no SMs taken


@pytest.mark.parametrize(
    "kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE]
)
def test_the_ring_s_hbm_traffic_is_paced_by_the_outermost_dim(kind: CollectiveKind) -> None:
    """On the backend's achieved network (what an evaluation passes: each dim's bandwidth
    already at its bus_efficiency) the ring moves RING_HBM_BYTES per byte of that bandwidth —
    bus_efficiency applied once, not again."""
    hbm = H100.accelerator.memory_bandwidth_bytes_per_s
    achieved = AnalyticalBackend().achieved_network(H100)
    for counts, dim in (((8, 1), H100.network[0]), ((8, 4), H100.network[1])):
        assert dim.bus_efficiency is not None
        rate = dim.bandwidth_bytes_per_s * dim.bus_efficiency
        load = nccl_load(achieved, counts, kind)
        assert load.channels == dim.nccl_channels
        assert load.hbm_share == pytest.approx(RING_HBM_BYTES[kind] * rate / hbm, rel=1e-12)
    # an NVLink all-gather moves 2 x 0.82 x 450 GB/s through HBM: 22 % of 3.35 TB/s
    nvlink = nccl_load(achieved, (8, 1), CollectiveKind.ALL_GATHER).hbm_share
    assert nvlink == pytest.approx(2 * 0.82 * 450e9 / 3.35e12)
    assert nccl_load(achieved, (1, 1), kind) == NcclLoad()
    unknown = replace(H100, network=(H100.network[0], replace(H100.network[1], nccl_channels=None)))
    assert nccl_load(unknown, (8, 4), kind) == NcclLoad()  # no figure: outside the model
    assert not nccl_load(H100, (8, 4), CollectiveKind.ALL_TO_ALL).hbm_share


def test_many_waves_lose_the_sm_ratio_and_one_exact_wave_doubles() -> None:
    timer, sms, held = h100_timer(), 132, 24
    fewer = on_fewer_sms(timer, NcclLoad(held))
    assert fewer is not None and fewer.kernels.sm_count == sms - held
    tm, tn = timer.kernels.gemm_tile
    # lcm(132, 108) = 1188 tiles (99 x 12): whole waves on both, only the SM count differs;
    # K = 448 leaves no split-K choice (gemm_tiles.MIN_SPLIT_K)
    many = bf16_gemm(tm * 99, tn * 12, 448)
    assert fewer(many) / timer(many) == pytest.approx(sms / (sms - held), rel=1e-12)
    # exactly 132 tiles (11 x 12): one wave alone, two on 108 SMs (the tail effect)
    one = bf16_gemm(tm * 11, tn * 12, 448)
    waves = -(-132 // (sms - held))
    expected = sms / (sms - held) * waves * (sms - held) / 132
    assert fewer(one) / timer(one) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(2.0)
    copy = replace(many, flops=0)  # memory-bound: HBM, not SMs
    assert fewer(copy) == timer(copy)
    assert on_fewer_sms(timer, NcclLoad()) is None
    assert on_fewer_sms(timer, NcclLoad(sms)) is None
    assert on_fewer_sms(timer, NcclLoad(0, 1.0)) is None


def test_a_memory_bound_kernel_loses_the_hbm_share() -> None:
    timer = h100_timer()
    fewer = on_fewer_sms(timer, NcclLoad(24, 0.25))
    assert fewer is not None
    copy = replace(bf16_gemm(128 * 99, 256 * 12, 448), flops=0)
    assert fewer(copy) / timer(copy) == pytest.approx(1 / (1 - 0.25), rel=1e-12)
    tm, tn = timer.kernels.gemm_tile
    many = bf16_gemm(tm * 99, tn * 12, 448)  # compute-bound even at 3/4 of the HBM bandwidth
    assert fewer(many) / timer(many) == pytest.approx(132 / 108, rel=1e-12)


def test_contended_share_weighs_theh100_kernels() -> None:
    timer = h100_timer()
    fewer = on_fewer_sms(timer, NcclLoad(24))
    assert fewer is not None
    many = bf16_gemm(128 * 99, 256 * 12, 448)
    copy = replace(many, flops=0, bytes_read=many.bytes_read * 50)
    alone = timer(many) + timer(copy)
    beside = fewer(many) + fewer(copy)
    share = contended_share((many, copy), alone, fewer)
    assert share == pytest.approx(1 - alone / beside)
    assert 0 < share < 24 / 132
    assert contended_share((copy,), timer(copy), fewer) == 0.0


@pytest.mark.parametrize(
    ("comm_s", "expected_s"),
    [
        (0.5, 1.0 + 0.2 * 0.5),  # all of the collective beside compute
        (1.1, 1.0 + 0.2 * 1.1),  # compute outlasts it at 0.8 of its rate until 1.1
        (1.25, 1.25),  # 1.0 of work at 0.8 fills exactly 1.25
        (2.0, 2.0),  # the collective is the path
        (0.0, 1.0),
    ],
)
def test_contended_s_closed_form(comm_s: float, expected_s: float) -> None:
    got = contended_s(1.0, 1.0, comm_s, ((comm_s, 0.2),))
    assert got == pytest.approx(expected_s)


def test_zero3_chunk_slows_the_overlapped_compute() -> None:
    block = BlockTiming(1.0, 1.0, {}, 0)
    plain = BlockCost(block, replace(block, duration_s=2.0, compute_s=2.0), 0.5, 0.4)
    held = replace(plain, zero_share=(0.2, 0.1))
    base = chunk_timing((("layer", 3),), {"layer": plain}, zero=3)
    slow = chunk_timing((("layer", 3),), {"layer": held}, zero=3)
    assert slow.forward_s == pytest.approx(3 * (1.0 + 0.2 * 0.5))
    assert slow.backward_s == pytest.approx(3 * (2.0 + 0.1 * 0.9))
    assert slow.compute_s == base.compute_s  # the kernels' own time; the loss has a label
    lost = dict(slow.exposed_s).pop(CONTENTION)
    assert lost == pytest.approx(3 * (0.2 * 0.5 + 0.1 * 0.9))
    assert {k: v for k, v in slow.exposed_s if k != CONTENTION} == dict(base.exposed_s)
    zero2 = chunk_timing((("layer", 3),), {"layer": held}, zero=2)
    assert zero2.backward_s == pytest.approx(3 * (2.0 + 0.1 * 0.4))


def test_hidden_sync_s_counts_the_reductions_beside_the_backward() -> None:
    # blocks end at 1, 2, 3; a 0.5 s reduction after block 0 runs [1, 1.5], a 2 s one after
    # block 1 runs [2, 4]: 0.5 + (3 - 2) of them beside the backward
    runs = ((1.0, 3),)
    assert hidden_sync_s(((0.5, 0, 1, 1), (2.0, 1, 1, 1)), runs) == pytest.approx(1.5)
    assert hidden_sync_s(((0.5, 2, 1, 1),), runs) == 0.0  # after the last block: none
    assert hidden_sync_s((), runs) == 0.0
    # 1 s after blocks 0 and 1: [1, 2], [2, 3]; after blocks 0 and 2: [1, 2], then [3, 4]
    assert hidden_sync_s(((1.0, 0, 1, 2),), runs) == pytest.approx(2.0)
    assert hidden_sync_s(((1.0, 0, 2, 2),), runs) == pytest.approx(1.0)
    # 1.5 s after block 0 delays the one after block 1: [1, 2.5], [2.5, 3.5] -> 1.5 + 0.5
    assert hidden_sync_s(((1.5, 0, 1, 1), (1.0, 1, 1, 1)), runs) == pytest.approx(2.0)


def test_lost_seconds_extend_the_schedule_and_the_breakdown_adds_up() -> None:
    # one rank, two micro-batches of f = 1, b = 2: the pipeline ends at 6, the reductions at
    # max(0 + 1, 4 + 1) = 5; 0.3 s of the last backward lost to their SMs
    sync = SyncCost(total_s=1.0, latest_s=1.0, gather_s=0.0, lost_s=0.3)
    cls = StageClass(
        forward_s=(1.0,), backward_s=(2.0,), sync=(sync,), saved_bytes=(100,), compute_s=3.0,
        exposed_s=(), states_bytes=1000, buffers_bytes=0, optimizer_s=0.5,
    )  # fmt: skip
    step = assemble_step(StepPlan((0,), (cls,), 0.0, 7), "1f1b", 2, 1)
    assert step.step_time_s == pytest.approx(6.0 + 0.3 + 0.5)
    breakdown = dict(step.breakdown)
    assert breakdown["compute"] == pytest.approx(6.0)
    assert breakdown["exposed_nccl_contention"] == pytest.approx(0.3)
    assert sum(breakdown.values()) == pytest.approx(step.step_time_s, rel=1e-12)


def test_nccl_channels_loads_round_trips_and_is_checked() -> None:
    data = H100.to_dict()
    assert data["network"][1]["nccl_channels"] == 16
    assert system_from_mapping(data) == H100
    data["network"][1]["nccl_channels"] = 0
    with pytest.raises(ConfigError, match="nccl_channels"):
        system_from_mapping(data)
    with pytest.raises(ConfigError, match="nccl_channels"):
        replace(H100.network[0], nccl_channels=True)
    assert isinstance(H100.network[0], NetworkDim)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (((2, 0),), "`nccl_channels_by_ranks`.2 must be an integer >= 1, but got 0"),
        (((2, 2.5),), "`nccl_channels_by_ranks`.2 must be an integer >= 1, but got 2.5"),
        (((9, 8),), "keys must be rank counts from 2 to the dim's size 8, but got 9"),
        (((1, 8),), "keys must be rank counts from 2 to the dim's size 8, but got 1"),
        (((2, 8), (2, 4)), "lists 2 ranks twice"),
    ],
)
def test_nccl_channels_by_ranks_is_checked(
    value: tuple[tuple[int, int], ...], message: str
) -> None:
    """Bad per-group-size channels are one-line errors naming the value and what was expected."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        replace(H100.network[0], nccl_channels_by_ranks=value)


def test_nccl_channels_by_ranks_needs_nccl_channels_loads_and_round_trips() -> None:
    with pytest.raises(ConfigError, match="`nccl_channels_by_ranks` needs `nccl_channels`"):
        replace(H100.network[0], nccl_channels=None, nccl_channels_by_ranks=((2, 4),))
    data = H100.to_dict()
    data["network"][0]["nccl_channels_by_ranks"] = {"4": 12, "2": 6}
    system = system_from_mapping(data)
    assert system.network[0].nccl_channels_by_ranks == ((2, 6), (4, 12))
    assert system_from_mapping(system.to_dict()) == system
    # the group's size picks the entry on its outermost dim; others keep nccl_channels
    nvswitch, infiniband = (dim.nccl_channels for dim in H100.network)
    assert [nccl_channels(system, (n, 1)) for n in (2, 4, 8)] == [6, 12, nvswitch]
    assert nccl_channels(system, (2, 2)) == infiniband  # outermost: the scale-out dim
    assert nccl_load(system, (4, 1), CollectiveKind.ALL_GATHER).channels == 12
    data["network"][0]["nccl_channels_by_ranks"] = {"2": "many"}
    with pytest.raises(ConfigError, match="must be an integer, but got 'many'"):
        system_from_mapping(data)


MODEL = get_flavor("llama2-7b").with_overrides(layers=4, seq_len=2048)


def test_nccl_channels_are_in_the_memo_keys() -> None:
    """Two systems differing only in the inter-node dim's channels give different FSDP step
    times, in one backend as in fresh ones (a memo keyed without them would not)."""
    config = ParallelConfig(dp=32, zero=3, micro_batch=1, grad_fp32=False)
    fewer = replace(H100, network=(H100.network[0], replace(H100.network[1], nccl_channels=2)))
    # (the HBM share, the same in both, follows the bandwidth, itself in the keys)
    shared = AnalyticalBackend(framework="fsdp")
    times = []
    for system in (H100, fewer, H100, fewer):
        got = shared.evaluate(MODEL, config, system)
        fresh = AnalyticalBackend(framework="fsdp").evaluate(MODEL, config, system)
        assert got.step_time_s == fresh.step_time_s
        times.append(got.step_time_s)
    assert times[0] > times[1]  # 16 SMs held beside the layers cost more than 2


def test_overlapped_gradient_reductions_are_in_the_memo_keys() -> None:
    """Megatron-Core's overlapped gradient reduce-scatter and parameter all-gather across
    nodes: fewer inter-node channels, a shorter step (the last backward and the first forward
    lose fewer SMs), in one backend as in fresh ones."""
    config = ParallelConfig(dp=16, zero=1, micro_batch=1, grad_fp32=False)
    fewer = replace(H100, network=(H100.network[0], replace(H100.network[1], nccl_channels=2)))
    shared = AnalyticalBackend(framework="megatron-core")
    times = []
    for system in (H100, fewer, H100, fewer):
        got = shared.evaluate(MODEL, config, system)
        fresh = AnalyticalBackend(framework="megatron-core").evaluate(MODEL, config, system)
        assert got.step_time_s == fresh.step_time_s
        times.append(got.step_time_s)
    assert times[0] > times[1]


def test_async_tp_all_reduce_takes_the_tp_dims_channels() -> None:
    """Megatron's asynchronous tp all-reduce beside the weight gradients holds the tp group's
    dim's channels (24 on an A100 node, the constant it had); a dim without a figure keeps
    NCCL_ALL_REDUCE_SMS; fewer channels, less compute lost."""
    assert nccl_sm_share_s(2.0, 1.0, 132, 32) == pytest.approx(1.0 * 32 / 132)
    assert nccl_sm_share_s(2.0, 1.0, 132) == pytest.approx(1.0 * NCCL_ALL_REDUCE_SMS / 132)
    a100 = load_system("a100-80gb")
    config = ParallelConfig(tp=8, sp=False, micro_batch=1, global_batch=1)
    overrides = {"tp_async_grad_allreduce": True}

    def with_channels(channels: int | None) -> float:
        nvswitch = replace(a100.network[0], nccl_channels=channels)
        system = replace(a100, network=(nvswitch, *a100.network[1:]))
        backend = AnalyticalBackend(framework="megatron-lm-2021", overrides=overrides)
        return backend.evaluate(MODEL, config, system).step_time_s

    assert with_channels(24) == with_channels(None)  # the preset's figure is the old constant
    assert with_channels(12) < with_channels(24)
    shared = AnalyticalBackend(framework="megatron-lm-2021", overrides=overrides)
    for channels in (12, 24, 12):  # the figure is in the memo key
        nvswitch = replace(a100.network[0], nccl_channels=channels)
        system = replace(a100, network=(nvswitch, *a100.network[1:]))
        assert shared.evaluate(MODEL, config, system).step_time_s == with_channels(channels)
