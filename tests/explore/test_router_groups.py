"""Group-limited routing (DeepSeek-V3's node-limited routing; s27 mbvrest): the destinations a
token reaches under Megatron-Core's ``group_limited_topk`` after forced-balance random logits,
DeepEP / HybridEP's per-node share of the bytes, the model field, its Hugging Face key and the
time it takes off a DeepSeek-V3 HybridEP all-to-all across nodes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor, load_hf_config
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.deepep import deepep_destinations, deepep_level_fractions
from stage_explore.analytical.router_groups import group_limited_destinations
from stage_explore.system import load_system
from stage_explore.validation.infer_architectures import ARCHITECTURES


def _random(experts: int, top_k: int, units: int) -> float:
    per = experts // units
    return units * (1 - math.comb(experts - per, top_k) / math.comb(experts, top_k))


@pytest.mark.parametrize("units", [4, 8, 32, 64])
def test_keeping_every_group_is_unrestricted_random_routing(units: int) -> None:
    """All 8 groups kept: the sampled count is the closed form's within sampling error."""
    sampled = group_limited_destinations(256, 8, 8, 8, units)
    assert sampled == pytest.approx(_random(256, 8, units), abs=0.02)


def test_node_limited_routing_reaches_at_most_the_kept_groups() -> None:
    """DeepSeek-V3's 8 groups, 4 kept, on 8 nodes (one group a node): at most 4 nodes, and
    nearly always 4 (a kept group holds its best two experts), against ~5.29 unrestricted."""
    nodes = group_limited_destinations(256, 8, 8, 4, 8)
    assert 3.8 < nodes <= 4.0
    assert nodes < _random(256, 8, 8) - 1.2
    ranks = group_limited_destinations(256, 8, 8, 4, 64)  # 4 experts a rank: barely limited
    assert _random(256, 8, 64) - 0.4 < ranks < _random(256, 8, 64)
    group_limited_destinations.cache_clear()
    assert group_limited_destinations(256, 8, 8, 4, 8) == nodes  # a fixed stream: the same


@pytest.mark.parametrize(
    ("args", "message"),
    [((256, 8, 8, 9, 8), "group_topk <= groups"), ((256, 8, 7, 4, 8), "groups dividing"),
     ((256, 8, 8, 4, 7), "must divide the 256 experts")],
)  # fmt: skip
def test_bad_grouping_is_a_one_line_error(args: tuple[int, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        group_limited_destinations(*args)


def test_deepep_shares_follow_the_model_grouping() -> None:
    """A 64-rank group over 8 nodes: the scale-out level carries ~4 of 8 copies with the
    grouping, ~5.29 without; the round-robin gate ignores it."""
    plain = deepep_level_fractions(256, 8, (8, 8))
    grouped = deepep_level_fractions(256, 8, (8, 8), groups=(8, 4))
    assert plain[1] == pytest.approx(_random(256, 8, 8) / 8)
    assert grouped[1] == pytest.approx(group_limited_destinations(256, 8, 8, 4, 8) / 8)
    assert grouped[0] < plain[0] and grouped[1] < plain[1] - 0.15
    robin = deepep_destinations(256, 8, 8, "round_robin", (8, 4))
    assert robin == deepep_destinations(256, 8, 8, "round_robin")


def test_the_model_field_and_its_sources(tmp_path: Path) -> None:
    v3 = get_flavor("deepseek-v3")
    assert (v3.router_groups, v3.router_group_topk) == (8, 4)
    kimi = dict(next(fields for pattern, _, fields, _ in ARCHITECTURES if "kimi" in pattern))
    assert (kimi["router_groups"], kimi["router_group_topk"]) == (0, 0)  # n_group 1
    config = {"n_group": 8, "topk_group": 4}
    base = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000,
        "max_position_embeddings": 4096, "hidden_act": "silu", "kv_lora_rank": 64,
        "q_lora_rank": None, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
        "n_routed_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 256,
    }  # fmt: skip
    for extra, expected in ((config, (8, 4)), ({"n_group": 1, "topk_group": 1}, (0, 0))):
        path = tmp_path / f"{expected[0]}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**base, **extra}))
        model = load_hf_config(path)
        assert (model.router_groups, model.router_group_topk) == expected
    with pytest.raises(ConfigError, match="router_groups=8, router_group_topk=9"):
        v3.with_overrides(router_group_topk=9)
    small = v3.with_overrides(num_experts=8, top_k=2)  # a shrunk copy keeps the fields, and
    assert deepep_destinations(8, 2, 8, "random", (8, 4)) == pytest.approx(  # its 4 > top_k
        _random(8, 2, 8)  # falls back to unrestricted routing
    )
    assert small.router_groups == 8


def test_grouping_shortens_a_hybridep_all_to_all_across_nodes() -> None:
    """DeepSeek-V3 (4 layers) with EP 64 over 8 H100 nodes on HybridEP: the exposed expert
    all-to-all falls by about the scale-out share (~4 / 5.29 of the nodes' bytes)."""
    v3 = get_flavor("deepseek-v3").with_overrides(layers=4, first_k_dense=1, mtp_layers=0)
    parallel = ParallelConfig(dp=64, ep=64, micro_batch=1, global_batch=64)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"moe_hybridep": True})
    system = load_system("h100-80gb")
    grouped = backend.evaluate(v3, parallel, system).breakdown["exposed_all_to_all"]
    free = v3.with_overrides(router_groups=0, router_group_topk=0)
    plain = backend.evaluate(free, parallel, system).breakdown["exposed_all_to_all"]
    assert 0.6 * plain < grouped < 0.85 * plain
