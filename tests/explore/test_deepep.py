"""DeepEP's deduplicated expert dispatch (framework option ``moe_deepep``): the scale-out share
against a brute-force count, the all-to-all time against its closed form, and the backend."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    deepep_scale_out_fraction,
)
from stage_explore.cli import main
from stage_explore.system import load_system


@pytest.mark.parametrize(("experts", "top_k", "nodes"), [(8, 2, 4), (12, 3, 3), (16, 4, 2)])
def test_scale_out_fraction_counts_distinct_nodes(experts: int, top_k: int, nodes: int) -> None:
    """Every top-k set equally likely, experts in contiguous blocks per node: DeepEP sends a
    token once per node it hits; NCCL once per (token, expert) pair."""
    per_node = experts // nodes
    sets = list(itertools.combinations(range(experts), top_k))
    distinct = sum(len({e // per_node for e in chosen}) for chosen in sets) / len(sets)
    assert deepep_scale_out_fraction(experts, top_k, nodes) == pytest.approx(distinct / top_k)


def test_one_node_or_uneven_placement_keeps_every_byte() -> None:
    assert deepep_scale_out_fraction(256, 8, 1) == 1.0
    assert deepep_scale_out_fraction(10, 2, 3) == 1.0


def test_only_the_scale_out_level_carries_the_fraction() -> None:
    system = load_system("h100-80gb")
    group = list(range(32))  # 4 nodes of 8 GPUs: NVSwitch then InfiniBand
    size, fraction = 64 * 2**20, 0.4
    full = alpha_beta_collective_s(system, CollectiveKind.ALL_TO_ALL, size, group)
    dedup = alpha_beta_collective_s(system, CollectiveKind.ALL_TO_ALL, size, group, fraction)
    outer = system.network[1]
    saved = 3 / 4 * size * (1 - fraction) / outer.bandwidth_bytes_per_s
    assert full - dedup == pytest.approx(saved, rel=1e-9)
    inside = list(range(8))  # one node: nothing crosses the scale-out network
    assert alpha_beta_collective_s(
        system, CollectiveKind.ALL_TO_ALL, size, inside, fraction
    ) == alpha_beta_collective_s(system, CollectiveKind.ALL_TO_ALL, size, inside)


def _step(parallel: ParallelConfig, deepep: bool) -> dict[str, float]:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=4, seq_len=1024)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"moe_deepep": deepep})
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    return {"step": result.step_time_s, **result.breakdown}


def test_the_backend_shrinks_expert_all_to_alls() -> None:
    across = ParallelConfig(dp=32, ep=32, micro_batch=1, global_batch=64)  # ep over 4 nodes
    off, on = _step(across, False), _step(across, True)
    assert on["exposed_all_to_all"] < off["exposed_all_to_all"]
    assert on["step"] < off["step"]
    within = ParallelConfig(dp=8, ep=8, micro_batch=1, global_batch=16)  # one node
    # inside a node DeepEP sends a token once per destination rank, not once per expert
    assert _step(within, True)["exposed_all_to_all"] < _step(within, False)["exposed_all_to_all"]
    assert math.isfinite(on["step"])


def test_stage_eval_moe_deepep(capsys: pytest.CaptureFixture[str]) -> None:
    """``stage eval --moe-deepep``: ep 32 over 4 nodes runs faster with it; another backend
    without --compare is refused with the one-line error (exit 2)."""

    base = ["eval", "--model", "qwen3-30b-a3b", "--layers", "2", "--seq-len", "1024",
            "--dp", "32", "--ep", "32", "--global-batch", "64", "--system", "h100-80gb",
            "--framework", "megatron-core", "--json"]  # fmt: skip
    steps = []
    for argv in (base, [*base, "--moe-deepep"]):
        assert main(argv) == 0
        steps.append(json.loads(capsys.readouterr().out)["step_time_s"])
    assert steps[1] < steps[0]
    assert main([*base[:-3], "--backend", "astra-sim", "--moe-deepep"]) == 2
    assert "--moe-deepep applies to the analytical backend" in capsys.readouterr().err
