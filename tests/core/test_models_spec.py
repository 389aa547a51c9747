"""ModelSpec: validation on construction, derived fields, exact parameter counts, overrides."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import Activation, Family, ModelSpec, Norm, Position


def tiny_gpt(**changes: Any) -> ModelSpec:
    values: dict[str, Any] = dict(
        name="tiny-gpt",
        family=Family.GPT,
        layers=2,
        hidden=8,
        ffn=32,
        heads=2,
        vocab=10,
        seq_len=4,
        bias=True,
        dropout=True,
        tied_embeddings=True,
    )
    values.update(changes)
    return ModelSpec(**values)


def tiny_moe(**changes: Any) -> ModelSpec:
    values: dict[str, Any] = dict(
        name="tiny-moe",
        family=Family.DEEPSEEK_MOE,
        layers=4,
        hidden=8,
        ffn=16,
        heads=4,
        kv_heads=2,
        vocab=10,
        seq_len=4,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=4,
        top_k=2,
        expert_ffn=6,
        num_shared_experts=1,
        first_k_dense=1,
    )
    values.update(changes)
    return ModelSpec(**values)


def reference_params(model: ModelSpec, *, active: bool = False) -> int:
    """Sum of the shapes of a state dict written out by hand, tensor by tensor."""
    h, d = model.hidden, model.head_dim
    shapes: list[tuple[int, ...]] = [(model.vocab, h)]
    if model.position is Position.LEARNED:
        shapes.append((model.max_position, h))
    norm = [(h,), (h,)] if model.norm is Norm.LAYERNORM and model.bias else [(h,)]

    def mlp(width: int) -> list[tuple[int, ...]]:
        gated = model.activation is Activation.SWIGLU
        mats = [(h, width), (h, width), (width, h)] if gated else [(h, width), (width, h)]
        biases = [(width,), (width,), (h,)] if gated else [(width,), (h,)]
        return mats + (biases if model.bias else [])

    for index in range(model.layers):
        shapes += norm + norm
        shapes += [(h, model.heads * d), (h, model.kv_heads * d), (h, model.kv_heads * d)]
        shapes += [(model.heads * d, h)]
        if model.bias:
            shapes += [(model.heads * d,), (model.kv_heads * d,), (model.kv_heads * d,), (h,)]
        moe = model.num_experts and index >= model.first_k_dense
        moe = moe and index % model.moe_layer_interval == 0
        if not moe:
            shapes += mlp(model.ffn)
            continue
        shapes.append((h, model.num_experts))
        routed = model.top_k if active else model.num_experts
        for _ in range(routed + model.num_shared_experts):
            shapes += mlp(model.expert_ffn)
    shapes += norm
    if not model.tied_embeddings:
        shapes.append((h, model.vocab))
    return sum(math.prod(shape) for shape in shapes)


def test_gpt_params_match_narayanan_formula_plus_final_norm() -> None:
    model = tiny_gpt()
    L, h, V, s = model.layers, model.hidden, model.vocab, model.seq_len  # noqa: N806
    assert model.params() == 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h == 1872


@pytest.mark.parametrize(
    "model",
    [
        tiny_gpt(),
        tiny_gpt(tied_embeddings=False, bias=False, head_dim=6),
        tiny_gpt(norm=Norm.RMSNORM, activation=Activation.SWIGLU, position=Position.ROTARY),
        tiny_moe(),
        tiny_moe(bias=True, norm=Norm.LAYERNORM, activation=Activation.GELU, kv_heads=1),
        tiny_moe(first_k_dense=0, moe_layer_interval=2, num_shared_experts=0, top_k=4),
    ],
    ids=["gpt", "untied-nobias-headdim", "llama-style", "moe", "moe-bias-gelu-mqa", "moe-interval"],
)
def test_params_match_a_state_dict_count(model: ModelSpec) -> None:
    assert model.params() == reference_params(model)
    assert model.active_params() == reference_params(model, active=True)


def test_dense_active_params_equal_total_and_moe_active_is_smaller() -> None:
    assert tiny_gpt().active_params() == tiny_gpt().params()
    assert tiny_moe().active_params() < tiny_moe().params()


def test_moe_layer_placement() -> None:
    model = tiny_moe(layers=6, first_k_dense=1, moe_layer_interval=2)
    assert [model.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]
    assert (model.num_moe_layers, model.num_dense_layers) == (2, 4)
    with pytest.raises(ConfigError, match=r"layer index must be in 0\.\.5, but got 6"):
        model.is_moe_layer(6)


def test_derived_fields_resolve() -> None:
    model = tiny_gpt()
    assert (model.kv_heads, model.head_dim, model.max_position) == (2, 4, 4)
    assert tiny_moe(expert_ffn=0).expert_ffn == 16
    assert tiny_gpt().expert_ffn == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layers": 0}, "`layers` must be a positive int, but got layers=0"),
        ({"hidden": -8}, "`hidden` must be a positive int, but got hidden=-8"),
        ({"vocab": 10.0}, "`vocab` must be a positive int, but got vocab=10.0"),
        ({"seq_len": True}, "`seq_len` must be a positive int, but got seq_len=True"),
        ({"kv_heads": -1}, "`kv_heads` must be a non-negative int (0 = default)"),
        ({"name": ""}, "model `name` must be a non-empty string"),
        ({"family": "bert"}, "`family` must be one of 'gpt', 'llama'"),
        ({"norm": "batchnorm"}, "`norm` must be one of 'layernorm', 'rmsnorm'"),
        ({"activation": "relu"}, "`activation` must be one of 'gelu', 'swiglu'"),
        ({"position": "alibi"}, "`position` must be one of 'learned', 'rotary'"),
        ({"dropout": 1}, "`dropout` must be a bool, but got dropout=1"),
        ({"hidden": 9}, "`heads` must divide `hidden` when `head_dim` is not given"),
        (
            {"kv_heads": 3, "heads": 4},
            "`kv_heads` must divide `heads`, but got (heads=4, kv_heads=3)",
        ),
        ({"kv_heads": 4}, "`kv_heads` must divide `heads`, but got (heads=2, kv_heads=4)"),
        ({"max_position": 2}, "learned positions need `seq_len` <= `max_position`"),
        ({"top_k": 2}, "MoE fields need `num_experts` > 0, but got num_experts=0 with top_k=2"),
        ({"capacity_factor": 1.25}, "MoE fields need `num_experts` > 0"),
    ],
)
def test_invalid_dense_models_are_rejected(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_gpt(**changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"top_k": 0}, "`top_k` must be in 1..`num_experts`, but got (top_k=0, num_experts=4)"),
        ({"top_k": 5}, "`top_k` must be in 1..`num_experts`, but got (top_k=5, num_experts=4)"),
        (
            {"capacity_factor": 0.0},
            "`capacity_factor` must be a finite number > 0 (omit it for dropless routing), but "
            "got capacity_factor=0.0",
        ),
        # s36 review9: inf passed and ended in an OverflowError where capacity is rounded up
        ({"capacity_factor": math.inf}, "must be a finite number > 0 (omit it for dropless"),
        ({"capacity_factor": math.nan}, "must be a finite number > 0 (omit it for dropless"),
        ({"capacity_factor": "1"}, "`capacity_factor` must be a number or None"),
        ({"first_k_dense": 4}, "`first_k_dense` must be < `layers`"),
        ({"moe_layer_interval": 0}, "`moe_layer_interval` must be a positive int"),
        ({"layers": 3, "moe_layer_interval": 4}, "no layer is MoE with (layers=3, first_k_dense=1"),
        ({"num_shared_experts": -1}, "`num_shared_experts` must be a non-negative int"),
    ],
)
def test_invalid_moe_models_are_rejected(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_moe(**changes)


def test_rotary_models_may_exceed_max_position() -> None:
    model = tiny_moe(max_position=2)
    assert (model.seq_len, model.max_position) == (4, 2)


def test_capacity_factor_is_stored_as_float() -> None:
    assert tiny_moe(capacity_factor=2).capacity_factor == 2.0
    assert tiny_moe().capacity_factor is None


def test_strings_are_coerced_to_enums() -> None:
    model = tiny_gpt(family="llama", norm="rmsnorm", activation="swiglu", position="rotary")
    assert model.family is Family.LLAMA and model.norm is Norm.RMSNORM
    assert model.activation is Activation.SWIGLU and model.position is Position.ROTARY


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"layers": 6}, {"layers": 6, "head_dim": 4, "max_position": 4}),
        ({"seq_len": 16}, {"seq_len": 16, "max_position": 16}),
        ({"hidden": 16}, {"hidden": 16, "head_dim": 8}),
        ({"heads": 4}, {"heads": 4, "kv_heads": 4, "head_dim": 2}),
        ({"heads": 4, "kv_heads": 1}, {"heads": 4, "kv_heads": 1}),
    ],
)
def test_with_overrides_moves_defaulted_derived_fields(
    changes: dict[str, Any], expected: dict[str, int]
) -> None:
    model = tiny_gpt().with_overrides(**changes)
    assert {key: getattr(model, key) for key in expected} == expected


def test_with_overrides_keeps_explicit_derived_fields() -> None:
    model = tiny_gpt(head_dim=6, max_position=32)
    changed = model.with_overrides(hidden=16, seq_len=8)
    assert (changed.head_dim, changed.max_position) == (6, 32)
    assert tiny_moe(expert_ffn=6).with_overrides(ffn=32).expert_ffn == 6
    assert tiny_moe(expert_ffn=16).with_overrides(ffn=32).expert_ffn == 32


def test_with_overrides_validates_and_rejects_unknown_fields() -> None:
    with pytest.raises(ConfigError, match=r"cannot override unknown fields \['depth'\]"):
        tiny_gpt().with_overrides(depth=3)
    with pytest.raises(ConfigError, match="`layers` must be a positive int"):
        tiny_gpt().with_overrides(layers=0)


def test_to_dict_is_plain_and_round_trips() -> None:
    model = tiny_moe(capacity_factor=1.0)
    values = model.to_dict()
    assert values["family"] == "deepseek-moe" and type(values["family"]) is str
    assert list(values)[:3] == ["name", "family", "layers"]
    assert ModelSpec(**values) == model


def test_model_is_frozen() -> None:
    with pytest.raises(AttributeError):
        tiny_gpt().layers = 3  # type: ignore[misc]
