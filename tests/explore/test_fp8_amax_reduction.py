"""Transformer Engine's delayed-scaling amax all-reduce per chunk, forward and backward, per
micro-batch (``fp8_amax_reduction``; Megatron-Core's amax reduction group), and the
latency-bound all-reduce it is timed with, against closed forms computed here."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Fp8Recipe, Precision
from stage_core.trace import CollectiveKind
from stage_explore.analytical.amax_costing import (
    AMAX_BACKWARD_ENTRIES,
    AMAX_BYTES,
    AMAX_FORWARD_ENTRIES,
)
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import (
    LL_BUS_SHARE_ALL_REDUCE,
    alpha_beta_collective_s,
    latency_bound_all_reduce_s,
)
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
LABEL = "exposed_fp8_amax_reduction"


def _parallel(**changes: object) -> ParallelConfig:
    settings: dict[str, object] = {
        "tp": 4, "dp": 8, "sp": True, "zero": 1, "global_batch": 16, "precision": Precision.FP8,
    }  # fmt: skip
    settings.update(changes)
    return ParallelConfig(**settings)  # type: ignore[arg-type]


def _breakdown(parallel: ParallelConfig, mode: str) -> tuple[float, dict[str, float]]:
    backend = AnalyticalBackend(framework="megatron-core", overrides={"fp8_amax_reduction": mode})
    result = backend.evaluate(LLAMA, parallel, load_system("h100-80gb"))
    return result.step_time_s, dict(result.breakdown)


def _expected(parallel: ParallelConfig, group: list[int]) -> float:
    """Per step: every micro-batch's forward and backward amax all-reduce of the FP8 layers."""
    blocks = lower(LLAMA, parallel).blocks
    linears = sum(
        (LLAMA.layers if kind == "layer" else 1) * len(linear_weights(block))
        for kind, block in blocks.items()
        if fp8_block(kind)
    )
    network = AnalyticalBackend(framework="megatron-core").achieved_network(
        load_system("h100-80gb")
    )
    forward, backward = (
        latency_bound_all_reduce_s(network, AMAX_BYTES * entries * linears, group)
        for entries in (AMAX_FORWARD_ENTRIES, AMAX_BACKWARD_ENTRIES)
    )
    micro_batches = 16 // 8
    return micro_batches * (forward + backward)


def test_delayed_scaling_reduces_over_the_tp_dp_group() -> None:
    parallel = _parallel()
    on_s, on = _breakdown(parallel, "tp_dp_cp")
    off_s, off = _breakdown(parallel, "off")
    expected = _expected(parallel, list(range(32)))  # pp 1: every rank, 4 DGX nodes
    assert on[LABEL] == pytest.approx(expected)
    assert LABEL not in off
    assert 0.0 < on_s - off_s <= expected * (1 + 1e-9)


def test_tp_only_amax_red_reduces_inside_the_node() -> None:
    parallel = _parallel()
    _, tp_cp = _breakdown(parallel, "tp_cp")
    _, tp_dp_cp = _breakdown(parallel, "tp_dp_cp")
    # Megatron's rank order puts tp fastest: the tp group is ranks 0-3 of one NVSwitch node
    assert tp_cp[LABEL] == pytest.approx(_expected(parallel, [0, 1, 2, 3]))
    assert tp_cp[LABEL] < tp_dp_cp[LABEL]


@pytest.mark.parametrize(
    "parallel",
    [_parallel(precision=Precision.BF16), _parallel(fp8_recipe=Fp8Recipe.TENSORWISE)],
    ids=["bf16", "current-scaling"],
)
def test_only_delayed_fp8_reduces_amaxes_per_chunk(parallel: ParallelConfig) -> None:
    """Current scaling's own per-operand reductions (test_fp8_current_scaling) are off here."""
    backend = AnalyticalBackend(
        framework="megatron-core",
        overrides={"fp8_amax_reduction": "tp_dp_cp", "te_current_scaling": False},
    )
    result = backend.evaluate(LLAMA, parallel, load_system("h100-80gb"))
    assert LABEL not in dict(result.breakdown)


def test_latency_bound_all_reduce_takes_the_log_depth_algorithm_across_nodes() -> None:
    network = AnalyticalBackend(framework="megatron-core").achieved_network(
        load_system("h100-80gb")
    )
    nvswitch, infiniband = network.network[0], network.network[1]
    group = list(range(256))  # 32 DGX nodes of 8
    size = 400
    ring = alpha_beta_collective_s(network, CollectiveKind.ALL_REDUCE, size, group)
    tree = latency_bound_all_reduce_s(network, size, group)
    # halving-doubling: reduce-scatter and all-gather over the node's 8 GPUs (3 steps each),
    # an all-reduce over the 32 nodes (2 x 5 steps)
    # NCCL's LL protocol (a few hundred bytes): its fixed cost, a quarter of each bandwidth
    share = LL_BUS_SHARE_ALL_REDUCE
    inside = size * 7 / 8 / (nvswitch.bandwidth_bytes_per_s * share)
    scale_out = infiniband.bandwidth_bytes_per_s * infiniband.scaling_factor(32) * share
    across = 2 * (size / 8) * 31 / 32 / scale_out
    # one NCCL call: the larger LL fixed cost (the InfiniBand dim has none: its Simple one)
    assert nvswitch.small_message_overhead_s is not None
    once = max(nvswitch.small_message_overhead_s, infiniband.collective_overhead_s)
    closed = (
        once + 2 * (3 * nvswitch.latency_s + inside) + 10 * infiniband.latency_s + across
    )  # fmt: skip
    assert tree == pytest.approx(closed, rel=1e-3)
    assert tree < ring / 4  # the ring's 2 x 31 inter-node steps
    # two ranks: one step either way
    assert latency_bound_all_reduce_s(network, size, [0, 1]) == pytest.approx(
        alpha_beta_collective_s(network, CollectiveKind.ALL_REDUCE, size, [0, 1])
    )


def test_the_option_is_megatron_cores_and_checked() -> None:
    reducing = {n: p.fp8_amax_reduction for n, p in FRAMEWORKS.items()}
    assert {n: mode for n, mode in reducing.items() if mode != "off"} == {
        "megatron-core": "tp_dp_cp"
    }
    with pytest.raises(ConfigError, match="fp8_amax_reduction"):
        FRAMEWORKS["megatron-core"].with_overrides({"fp8_amax_reduction": "dp"})


def test_latency_bound_all_reduce_on_a_rack_of_72() -> None:
    """NCCL's tree takes any rank count: an NVL72 rack's 72 GPUs in ⌈log2 72⌉ = 7 steps each
    way (the dim itself may not run halving-doubling, which needs a power of two)."""
    network = AnalyticalBackend(framework="megatron-core").achieved_network(
        load_system("gb200-nvl72")
    )
    rack = network.network[0]
    assert rack.size == 72
    size = 400
    tree = latency_bound_all_reduce_s(network, size, list(range(72)))
    volume = 2 * size * 71 / 72 / (rack.bandwidth_bytes_per_s * rack.bandwidth_factor(72))
    volume /= rack.scaling_factor(72) * LL_BUS_SHARE_ALL_REDUCE  # NCCL's LL protocol
    assert rack.small_message_overhead_s is not None
    assert tree == pytest.approx(rack.small_message_overhead_s + 14 * rack.latency_s + volume)
    ring = alpha_beta_collective_s(network, CollectiveKind.ALL_REDUCE, size, list(range(72)))
    assert tree < ring
