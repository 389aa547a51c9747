"""Transformer Engine's userbuffers "pipeline" and "bulk" kernels on CUDA multicast
(``ub_multicast``, :mod:`stage_explore.analytical.ub_multicast`): on a dim with NVLink SHARP
(``nvls_efficiency``) a reduce-scatter sends its whole input and an all-gather receives the
whole gathered tensor at the multicast rate, where a ring moves ``(n-1)/n`` of it at the bus
rate; ring exchanges and NCCL's collectives are unchanged."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import overlap_rule
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.analytical.ub_multicast import (
    nvls_collective_s,
    pipelined_fprop_scatter,
    ub_multicast_collective,
    with_fp8_buffer_scatters,
)
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim

MIB = 1 << 20


def _collective(kind: CollectiveKind, tensor: str, phase: str) -> Instr:
    prefix = "reduce_scatter" if kind is CollectiveKind.REDUCE_SCATTER else "all_gather"
    return Instr(
        f"{prefix}:{tensor}", phase, "comm", collective=kind, axes=("tp",), comm_bytes=MIB,
        inputs=((tensor, 1),), outputs=((tensor, 1),),
    )  # fmt: skip


def test_multicast_moves_the_whole_tensor_at_the_nvls_rate() -> None:
    system = AnalyticalBackend().achieved_network(load_system("h100-80gb"))
    dim = system.network[0]
    line = load_system("h100-80gb").network[0].bandwidth_bytes_per_s
    assert dim.nvls_efficiency is not None
    rate = line * dim.nvls_efficiency  # 450 GB/s x 0.687 = 309 GB/s per direction
    group = list(range(8))
    size = 64 * MIB
    scatter = nvls_collective_s(system, CollectiveKind.REDUCE_SCATTER, size, group)
    gather = nvls_collective_s(system, CollectiveKind.ALL_GATHER, size // 8, group)
    assert scatter == pytest.approx(dim.latency_s + size / rate)  # sends S
    assert gather == pytest.approx(dim.latency_s + size / rate)  # receives S
    # a ring moves (n-1)/n of S at the bus rate: multicast is slower per byte on the wire
    ring_s = 7 / 8 * size / dim.bandwidth_bytes_per_s
    assert scatter is not None and scatter > ring_s


def test_no_multicast_without_a_figure_or_across_dims() -> None:
    a100 = AnalyticalBackend().achieved_network(load_system("a100-80gb"))
    assert nvls_collective_s(a100, CollectiveKind.REDUCE_SCATTER, MIB, list(range(8))) is None
    h100 = AnalyticalBackend().achieved_network(load_system("h100-80gb"))
    two_nodes = [0, 1, 8, 9]
    assert nvls_collective_s(h100, CollectiveKind.REDUCE_SCATTER, MIB, two_nodes) is None
    assert nvls_collective_s(h100, CollectiveKind.ALL_REDUCE, MIB, list(range(8))) is None


def test_the_pipeline_and_bulk_kernels_are_multicast_the_ring_exchanges_are_not() -> None:
    policy = TimingPolicy.from_profile(get_framework("megatron-core"))
    rule = overlap_rule(policy, tp=8, sp=True)
    ring_rule = overlap_rule(policy, tp=8, sp=True, ring_exchange=frozenset({"fc2"}))
    assert rule is not None and ring_rule is not None
    scatter = CollectiveKind.REDUCE_SCATTER
    gather = CollectiveKind.ALL_GATHER
    assert ub_multicast_collective(_collective(scatter, "mlp.fc2", "fwd"), rule)  # pipeline
    assert not ub_multicast_collective(_collective(scatter, "mlp.fc2", "fwd"), ring_rule)
    assert ub_multicast_collective(_collective(scatter, "d.ln1", "bwd"), rule)  # bulk
    assert ub_multicast_collective(_collective(gather, "ln1", "bwd"), rule)  # bulk all-gather
    assert not ub_multicast_collective(_collective(gather, "ln1", "fwd"), rule)  # ring exchange
    assert not ub_multicast_collective(_collective(gather, "d.mlp.fc2", "bwd"), rule)


def _step_s(system: str, tp: int, multicast: bool) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=tp, dp=1, sp=tp > 1, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"ub_multicast": multicast})
    return backend.evaluate(model, parallel, load_system(system)).step_time_s


def test_the_option_times_the_userbuffers_kernels_as_multicast() -> None:
    assert get_framework("megatron-core").ub_multicast  # TE's default (no UB_SKIPMC)
    assert _step_s("h100-80gb", 4, True) > _step_s("h100-80gb", 4, False)
    # no multicast on A100 (compute capability 8.0) and no userbuffers without tp
    assert _step_s("a100-80gb", 4, True) == _step_s("a100-80gb", 4, False)
    assert _step_s("h100-80gb", 1, True) == _step_s("h100-80gb", 1, False)


def test_nvls_efficiency_is_a_fraction_beside_a_bus_efficiency() -> None:
    base = {"size": 8, "topology": "switch", "bandwidth_bytes_per_s": 450e9, "latency_s": 1e-6}
    with pytest.raises(ConfigError, match="needs `bus_efficiency`"):
        NetworkDim(**base, nvls_efficiency=0.6)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="nvls_efficiency"):
        NetworkDim(**base, bus_efficiency=0.8, nvls_efficiency=1.2)  # type: ignore[arg-type]
    dim = NetworkDim(**base, bus_efficiency=0.8, nvls_efficiency=0.6)  # type: ignore[arg-type]
    assert dim.multicast_factor() == pytest.approx(0.75)


def test_fp8_buffer_scatters_are_pipelined_forward_reduce_scatters_only() -> None:
    policy = TimingPolicy.from_profile(get_framework("megatron-core"))
    rule = overlap_rule(policy, tp=8, sp=True)
    ring_rule = overlap_rule(policy, tp=8, sp=True, ring_exchange=frozenset({"fc2"}))
    assert rule is not None and ring_rule is not None
    fc2 = _collective(CollectiveKind.REDUCE_SCATTER, "mlp.fc2", "fwd")
    proj = _collective(CollectiveKind.REDUCE_SCATTER, "attn.proj", "fwd")
    bulk = _collective(CollectiveKind.REDUCE_SCATTER, "d.ln1", "bwd")
    assert pipelined_fprop_scatter(fc2, rule, {"fc2"})
    assert not pipelined_fprop_scatter(proj, rule, {"fc2"})  # per userbuffers name
    assert not pipelined_fprop_scatter(fc2, ring_rule, {"fc2"})  # fp8_buf: pipeline only
    assert not pipelined_fprop_scatter(bulk, rule, {"proj", "fc2"})
    rewritten = with_fp8_buffer_scatters((fc2, proj, bulk), rule, {"fc2"})
    assert rewritten[0].comm_bytes == MIB // 2  # one byte per 16-bit element
    assert rewritten[1:] == (proj, bulk)


def _fp8_step_s(options: dict[str, bool]) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(
        tp=8, dp=1, sp=True, global_batch=1, micro_batch=1, precision=Precision.FP8
    )
    backend = AnalyticalBackend(framework="megatron-core", overrides=dict(options))
    return backend.evaluate(model, parallel, load_system("h100-80gb")).step_time_s


def test_fp8_buffers_and_atomic_gemms_take_the_scatters_off_multicast() -> None:
    profile = get_framework("megatron-core")
    assert not profile.ub_proj_fprop_fp8_buf and not profile.ub_fc2_fprop_atomic_gemm
    both = {"ub_proj_fprop_fp8_buf": True, "ub_fc2_fprop_fp8_buf": True}
    multicast = _fp8_step_s({})
    # a ring of half the bytes is faster than S at the multicast rate
    assert _fp8_step_s(both) < multicast
    # an atomic GEMM's reduce-scatter keeps its 16-bit bytes but leaves multicast (a ring,
    # faster per byte at tp 8); the backward bulk kernels stay multicast
    atomic = {"ub_proj_fprop_atomic_gemm": True, "ub_fc2_fprop_atomic_gemm": True}
    assert _fp8_step_s({"ub_multicast": False}) < _fp8_step_s(atomic) < multicast
    assert _fp8_step_s(both) < _fp8_step_s(atomic)  # the FP8 buffer also halves the bytes
    # without multicast the FP8 buffer still halves the forward reduce-scatters' bytes
    assert _fp8_step_s({**both, "ub_multicast": False}) < _fp8_step_s({"ub_multicast": False})


def test_gb200_multicast_rate_is_its_own_rack_measurement() -> None:
    """GB200's NVLink SHARP rate is the NVL72 rack's own NCCL NVLS all-reduce (72 ranks, 8 GiB,
    busbw 846.8 GB/s in place, coreweave/nccl-tests README), not HGX B200's 8-GPU figure: the
    algbw busbw x n / (2 (n-1)) times (1 + 1/n) per direction, over the 900 GB/s line."""
    ranks, busbw = 72, 846.82e9
    algbw = busbw * ranks / (2 * (ranks - 1))
    gb200 = load_system("gb200-nvl72").network[0]
    b200 = load_system("b200").network[0]
    assert gb200.nvls_efficiency is not None and b200.nvls_efficiency is not None
    per_direction = algbw * (1 + 1 / ranks)
    assert gb200.nvls_efficiency == pytest.approx(
        per_direction / gb200.bandwidth_bytes_per_s, abs=1e-3
    )
    assert gb200.nvls_efficiency < b200.nvls_efficiency  # the rack multicasts slower than HGX B200
