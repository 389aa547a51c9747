"""Routing under expert parallelism (6 Dec 2026, s27 moeimbal): Primus's deterministic forced
balance ("even", AMD-AGI/Primus#875: token t's k-th slot to expert (t*topk + k) mod E) read as
the round-robin router the model has for AutoModel's FakeBalancedGate and torchtitan's
forced balance (``moe_fake_balanced_gate``), not as Megatron's random logits; and a case's
fractional framework option (``moe_load_imbalance=1.2``) read back from its backend key as the
number it is."""

from __future__ import annotations

import dataclasses

import pytest

from stage_explore.validation.infer_defaults import recipe_defaults
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import parse_backend_key
from tests.explore.package_cases import package_cases

PRIMUS = "AMD-AGI/Primus agent/workspace (Primus Megatron backend, Qwen3-30B-A3B FP8 on 8x MI355X)"


@pytest.mark.parametrize(
    "row",
    [
        {"source": PRIMUS, "notes": "Turbo DeepEP dispatcher, even routing; peak memory 277 GB"},
        {"source": "Megatron on MI355X", "notes": "moe_router_force_load_balancing_type: even"},
        {"source": PRIMUS, "notes": 'moe_router_force_load_balancing_type="even"'},
    ],
)
def test_primus_even_routing_is_the_round_robin_router(row: dict[str, str]) -> None:
    defaults = recipe_defaults(row, "megatron-core", "fp8", "qwen3-30b-a3b", {}, {})
    assert defaults.options.get("moe_fake_balanced_gate") is True
    assert any("Primus's forced 'even' load balance" in n for n in defaults.notes)


@pytest.mark.parametrize(
    ("row", "framework"),
    [
        ({"source": PRIMUS, "notes": "moe_router_force_load_balancing_type: uniform"},
         "megatron-core"),
        ({"source": PRIMUS, "notes": "uneven routing across the experts"}, "megatron-core"),
        ({"source": "NeMo 25.09 on 8 H100", "notes": "even routing"}, "megatron-core"),
        ({"source": PRIMUS, "notes": "even routing"}, "fsdp"),
    ],
)  # fmt: skip
def test_random_or_unnamed_routing_stays_random(row: dict[str, str], framework: str) -> None:
    defaults = recipe_defaults(row, framework, "fp8", "qwen3-30b-a3b", {}, {})
    assert "moe_fake_balanced_gate" not in defaults.options


def test_the_primus_qwen3_row_routes_round_robin() -> None:
    """The campaign's baseline ran 'even routing' (its README's end-to-end table and prompt.md,
    AMD-AGI/Primus 31c71fa8 / fb0603b6 agent/workspace/qwen3_fp8_tw_gfx950_20261010)."""
    case = {c.id: c for c in package_cases()}["PRIMUS-QWEN3-30B-A3B-MI355X-FP8-TW-BASE"]
    assert dict(case.framework_options).get("moe_fake_balanced_gate") is True
    assert dict(case.framework_options).get("moe_deepep") is True


def test_a_fractional_option_round_trips_through_the_backend_key() -> None:
    case = {c.id: c for c in package_cases()}["PRIMUS-QWEN3-30B-A3B-MI355X-FP8-TW-BASE"]
    options = {**dict(case.framework_options), "moe_load_imbalance": 1.2}
    skewed = dataclasses.replace(case, framework_options=tuple(sorted(options.items())))
    framework, parsed = parse_backend_key(skewed.backend_key)
    assert framework == "megatron-core" and parsed["moe_load_imbalance"] == 1.2
    assert parsed["moe_deepep"] is True
    balanced, busiest = evaluate_cases([case, skewed])
    assert busiest.predicted < balanced.predicted  # tokens/s: the busiest rank is slower
    assert parse_backend_key("fsdp+attention_kernel=cudnn-9.17")[1] == {
        "attention_kernel": "cudnn-9.17"
    }
