"""DeepEP's deduplicated dispatch level by level (:mod:`stage_explore.analytical.deepep`): the
distinct ranks and nodes a token reaches under random balanced routing and under NeMo
AutoModel's FakeBalancedGate, against brute-force counts; the all-to-all time per level; the
backend's option ``moe_fake_balanced_gate``."""

from __future__ import annotations

import itertools
import math

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.deepep import deepep_destinations, deepep_level_fractions
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim

A2A = CollectiveKind.ALL_TO_ALL


@pytest.mark.parametrize(
    ("experts", "top_k", "units"), [(8, 2, 4), (12, 3, 3), (16, 4, 8), (32, 4, 8), (64, 6, 16)]
)
def test_round_robin_routing_against_the_gate_itself(experts: int, top_k: int, units: int) -> None:
    """AutoModel's FakeBalancedGate: indices = arange(T·k).view(T, k) % E on every rank; a
    token reaches the units (contiguous blocks of E/units experts) its k experts lie on."""
    tokens = 10 * experts  # whole periods of the gate
    indices = [[(top_k * t + j) % experts for j in range(top_k)] for t in range(tokens)]
    per_unit = experts // units
    mean = sum(len({e // per_unit for e in row}) for row in indices) / tokens
    assert deepep_destinations(experts, top_k, units, "round_robin") == pytest.approx(mean)


@pytest.mark.parametrize(("experts", "top_k", "units"), [(8, 2, 4), (12, 3, 3), (16, 4, 8)])
def test_random_routing_against_every_top_k_set(experts: int, top_k: int, units: int) -> None:
    per_unit = experts // units
    sets = list(itertools.combinations(range(experts), top_k))
    mean = sum(len({e // per_unit for e in chosen}) for chosen in sets) / len(sets)
    assert deepep_destinations(experts, top_k, units) == pytest.approx(mean)


def test_one_unit_uneven_placement_and_bad_input() -> None:
    assert deepep_destinations(256, 8, 1) == 1.0
    assert deepep_destinations(10, 2, 3) == 2.0  # uneven: no deduplication assumed
    with pytest.raises(ConfigError, match="routing"):
        deepep_destinations(8, 2, 4, "greedy")
    with pytest.raises(ConfigError, match="top_k"):
        deepep_destinations(8, 9, 4)


def test_level_fractions_count_ranks_then_nodes() -> None:
    """DeepSeek-V3 on ep 64 = 8 nodes of 8 ranks, 4 experts per rank: the gate's 8 consecutive
    experts (aligned on 8) lie on 2 ranks of one node; random routing reaches ~7.5 ranks and
    ~5.3 nodes."""
    experts, top_k = 256, 8
    ranks, nodes = deepep_level_fractions(experts, top_k, (8, 8), "round_robin")
    assert (ranks, nodes) == pytest.approx((2 / top_k, 1 / top_k))
    random_ranks, random_nodes = deepep_level_fractions(experts, top_k, (8, 8))
    miss_rank = math.comb(experts - 4, top_k) / math.comb(experts, top_k)
    miss_node = math.comb(experts - 32, top_k) / math.comb(experts, top_k)
    assert random_ranks == pytest.approx(64 * (1 - miss_rank) / top_k)
    assert random_nodes == pytest.approx(8 * (1 - miss_node) / top_k)
    (single,) = deepep_level_fractions(32, 4, (8,), "round_robin")  # GPT-OSS-20B on ep 8
    assert single == pytest.approx(1 / 4)


def _level_s(dim: NetworkDim, ranks: int, size: float) -> float:
    """α–β all-to-all on one dim: (n−1)α + (n−1)/n·S/β (collectives docstring), NCCL's per-call
    cost aside (paid once per call: ``call_overhead_s``)."""
    steps = (ranks - 1) * dim.latency_s
    volume = (ranks - 1) / ranks * size / dim.bandwidth_bytes_per_s
    return steps + volume


def test_each_level_carries_its_own_share() -> None:
    system = load_system("h100-80gb")
    size, group = 64 * 2**20, list(range(32))  # 4 nodes of 8
    inner = _level_s(system.network[0], 8, size * 0.25)
    outer = _level_s(system.network[1], 4, size * 0.125)
    timed = alpha_beta_collective_s(
        system, A2A, size, group, level_fractions=(0.25, 0.125), nccl=False
    )
    assert timed == pytest.approx(inner + outer, rel=1e-12)
    one_node = alpha_beta_collective_s(
        system, A2A, size, group[:8], level_fractions=(0.5,), nccl=False
    )
    assert one_node == pytest.approx(_level_s(system.network[0], 8, size * 0.5), rel=1e-12)
    with pytest.raises(ConfigError, match="one share per level"):
        alpha_beta_collective_s(system, A2A, size, group, level_fractions=(0.5,))


def _exposed_all_to_all(parallel: ParallelConfig, **options: bool) -> float:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)
    backend = AnalyticalBackend(framework="automodel", overrides=options)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    return result.breakdown["exposed_all_to_all"]


def test_the_gate_changes_deepep_traffic_and_nothing_else() -> None:
    """Qwen3-30B (128 experts, top-8) on ep 8 in one node: DeepEP sends a token once per
    destination rank (5.3 of 8 under random routing, 1 under the gate, whose 8 consecutive
    experts lie on one rank of 16); NCCL's all-to-all sends all 8 copies either way."""
    within = ParallelConfig(dp=8, ep=8, micro_batch=1, global_batch=16)
    nccl = _exposed_all_to_all(within, moe_deepep=False)
    assert _exposed_all_to_all(within, moe_deepep=False, moe_fake_balanced_gate=True) == nccl
    random = _exposed_all_to_all(within, moe_deepep=True)
    gate = _exposed_all_to_all(within, moe_deepep=True, moe_fake_balanced_gate=True)
    assert gate < random < nccl
