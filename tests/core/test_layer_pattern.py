"""Per-layer patterns: the pattern language, the default (DeepSeek's MoE rule), and the layers a
pattern lays out through the lowering, the memory and the analytical backend's runs."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.compact import chunk_runs, layout_key
from stage_core.lower.program import bind_all, chunk_blocks, lower, make_workload, tie_embeddings
from stage_core.models import Activation, Family, ModelSpec, Norm, Position, get_flavor
from stage_core.models.layers import (
    Ffn,
    LayerKind,
    Mixer,
    compress_kinds,
    expand_pattern,
    is_layer_block,
    layer_kind_of_block,
    parse_kind,
)
from stage_core.parallel import ParallelConfig

A, S = LayerKind(Mixer.ATTENTION, Ffn.MOE), LayerKind(Mixer.SLIDING, Ffn.MOE)
D = LayerKind(Mixer.ATTENTION, Ffn.DENSE)


def tiny(**changes: Any) -> ModelSpec:
    base = ModelSpec(
        name="tiny-pattern", family=Family.LLAMA, layers=6, hidden=64, ffn=128, heads=4,
        kv_heads=2, vocab=256, seq_len=64, norm=Norm.RMSNORM, activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=4, top_k=2, expert_ffn=32, layer_pattern="attn+mlp*2, attn+moe*",
    )  # fmt: skip
    return base.with_overrides(**changes)


@pytest.mark.parametrize(
    ("pattern", "layers", "expected"),
    [
        ("attn+moe*", 3, (A, A, A)),
        ("(swa+moe, attn+moe)*", 5, (S, A, S, A, S)),  # cut off after the last layer
        ("attn+mlp*2, attn+moe*", 4, (D, D, A, A)),
        ("attn+mlp, (swa+moe*2, attn+moe)*2", 7, (D, S, S, A, S, S, A)),
        ("moe+swa, attn + moe", 2, (S, A)),  # parts in any order, spaces ignored
        ("attn+mlp*2, attn+moe*", 2, (D, D)),  # the open repeat may be empty
    ],
)
def test_patterns_expand(pattern: str, layers: int, expected: tuple[LayerKind, ...]) -> None:
    assert expand_pattern(pattern, layers) == expected


@pytest.mark.parametrize(
    ("pattern", "layers", "message"),
    [
        ("attn+moe*3", 4, "lays out 3 layers, but the model has layers=4"),
        ("attn+mlp*5, attn+moe*", 4, "lays out 5 layers before its open repeat"),
        ("attn+moe*, swa+moe*", 4, "at most one open repeat"),
        ("(attn+moe*)*2", 4, "must not be nested"),
        ("(attn+moe", 4, "unclosed '('"),
        ("attn+rnn", 4, "but got 'rnn'"),
        ("attn+swa", 4, "but got 'swa'"),
        ("attn+moe*0", 4, "must be >= 1"),
        ("attn+moe,,", 4, "expected a kind"),
        ("attn+moe; swa", 4, "unexpected text"),
    ],
)
def test_bad_patterns_name_the_pattern(pattern: str, layers: int, message: str) -> None:
    with pytest.raises(ConfigError, match=r"layer") as error:
        expand_pattern(pattern, layers)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ((D,), "attn+mlp*"),
        ((S, A) * 18, "(swa+moe, attn+moe)*"),
        ((S, A) * 3 + (S,), "(swa+moe, attn+moe)*"),
        ((D,) * 3 + (A,) * 58, "attn+mlp*3, attn+moe*"),
        ((D, A, A, S, D), "attn+mlp, attn+moe*2, swa+moe, attn+mlp*"),
    ],
)
def test_compress_inverts_expand(kinds: tuple[LayerKind, ...], expected: str) -> None:
    pattern = compress_kinds(kinds)
    assert pattern == expected
    assert expand_pattern(pattern, len(kinds)) == kinds


def test_kind_tokens_and_block_names() -> None:
    for token, block in [
        ("attn+mlp", "layer"), ("attn+moe", "moe_layer"), ("swa+moe", "layer_swa_moe"),
        ("attn", "layer_attn_none"), ("mlp", "layer_none_mlp"), ("swa+mlp", "layer_swa_mlp"),
    ]:  # fmt: skip
        kind = parse_kind(token)
        assert (kind.token, kind.block) == (token, block)
        assert layer_kind_of_block(block) == kind and is_layer_block(block)
    assert not any(is_layer_block(b) for b in ("embedding", "head", "serving_head"))


def test_default_pattern_is_deepseeks_moe_rule() -> None:
    model = get_flavor("deepseek-v3")
    kinds = model.layer_kinds()
    assert [k.ffn is Ffn.MOE for k in kinds] == [i >= 3 for i in range(61)]
    explicit = model.with_overrides(first_k_dense=0, layer_pattern="attn+mlp*3, attn+moe*")
    assert explicit.layer_kinds() == kinds
    assert explicit.params() == model.params()
    assert explicit.active_params() == model.active_params()
    assert get_flavor("llama3-8b").layer_blocks() == ("layer",) * 32


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layer_pattern": "attn+moe*", "num_experts": 0, "top_k": 0, "expert_ffn": 0},
         "has MoE layers but num_experts=0"),
        ({"layer_pattern": "swa+mlp*"}, "need `sliding_window` > 0"),
        ({"layer_pattern": "attn+mlp*", "sliding_window": 16}, "need `sliding_window` > 0"),
        ({"layer_pattern": "attn+mlp*"}, "no layer is MoE"),
        ({"layer_pattern": "attn+moe*", "first_k_dense": 1}, "give either `layer_pattern`"),
        ({"layer_pattern": 3}, "`layer_pattern` must be a string"),
    ],
)  # fmt: skip
def test_inconsistent_patterns_are_rejected(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny(**changes)


def test_layer_params_follow_the_kinds() -> None:
    model = tiny(layer_pattern="attn, mlp, attn+moe, moe*")  # Nemotron-H style halves
    norm, attention = model.hidden, model.attention_params()
    mlp, expert = model.mlp_params(model.ffn), model.mlp_params(model.expert_ffn)
    moe = norm + model.hidden * 4 + 4 * expert
    expected = [norm + attention, norm + mlp, norm + attention + moe, moe, moe, moe]
    assert [model.layer_params(i) for i in range(6)] == expected


@pytest.mark.parametrize(
    "pattern", ["attn+mlp*2, attn+moe*", "(attn+moe, attn+mlp)*", "mlp, attn+moe*"]
)
def test_lowering_follows_the_pattern(pattern: str) -> None:
    model = tiny(layer_pattern=pattern)
    parallel = ParallelConfig(pp=2, dp=2, ep=2, tp=2, sp=True, global_batch=8, micro_batch=1)
    programs = lower(model, parallel)
    layers = [b for stage in programs.stages for c in stage.chunks for b in c.blocks]
    assert [b.kind for b in layers if is_layer_block(b.kind)] == list(model.layer_blocks())
    # the analytical backend's runs are the lowering's blocks, grouped
    workload = make_workload(model, parallel)
    blocks = tie_embeddings(workload, bind_all(workload))
    for stage, runs in enumerate(chunk_runs(*layout_key(workload))):
        kinds = [kind for kind, count in runs for _ in range(count)]
        assert kinds == [b.kind for b in chunk_blocks(workload, blocks, stage).blocks]
        assert all(a[0] != b[0] for a, b in zip(runs, runs[1:], strict=False))
    whole = lower(model, ParallelConfig(pp=2, global_batch=2, micro_batch=1))
    elements = sum(
        w.elements for stage in whole.stages for c in stage.chunks for b in c.blocks
        for w in b.weights
    )  # fmt: skip
    assert elements == model.params()


def test_uneven_splits_follow_the_pattern_and_keep_the_flops() -> None:
    model = tiny(
        layers=7, layer_pattern="(swa+moe, attn+moe)*", sliding_window=16, attention_sinks=True
    )
    uneven = ParallelConfig(pp=2, pp_layers=(3, 4), global_batch=4, micro_batch=1)
    programs = lower(model, uneven)
    layers = [b.kind for s in programs.stages for c in s.chunks for b in c.blocks]
    assert [k for k in layers if is_layer_block(k)] == list(model.layer_blocks())
    assert [len(c.layers) for s in programs.stages for c in s.chunks] == [3, 4]
    workload = make_workload(model, uneven)
    blocks = tie_embeddings(workload, bind_all(workload))
    for stage, runs in enumerate(chunk_runs(*layout_key(workload))):
        kinds = [kind for kind, count in runs for _ in range(count)]
        assert kinds == [b.kind for b in chunk_blocks(workload, blocks, stage).blocks]

    def flops(config: ParallelConfig) -> int:
        return sum(
            i.flops for s in lower(model, config).stages for c in s.chunks for b in c.blocks
            for i in (*b.fwd, *b.bwd)
        )  # fmt: skip

    assert flops(uneven) == flops(ParallelConfig(global_batch=4, micro_batch=1))
