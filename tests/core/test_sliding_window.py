"""Sliding-window attention and attention sinks: FLOPs equal a brute-force count of the (query,
key) pairs inside the window, sinks add one parameter per head and their exact FLOPs, local and
global layers alternate through the layer pattern, and the KV cache of a sliding layer is bound
by its window."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.flops import block_flops
from stage_core.lower.program import bind_all, lower, make_workload
from stage_core.models import Activation, Family, ModelSpec, Norm, Position
from stage_core.ops import window_pairs
from stage_core.parallel import ParallelConfig
from stage_core.serving import ServingConfig, ServingStep, lower_step
from stage_core.serving.program import cache_bytes


def brute_pairs(positions: int, window: int, first: int = 0) -> int:
    """Pairs (q, k) with k <= q < positions, q - k < window, for queries q >= first."""
    return sum(
        1 for q in range(first, positions) for k in range(positions) if k <= q and q - k < window
    )


@pytest.mark.parametrize("positions", [1, 2, 5, 16, 17, 40])
@pytest.mark.parametrize("window", [1, 3, 16, 64])
def test_window_pairs_equal_a_brute_force_count(positions: int, window: int) -> None:
    assert window_pairs(positions, window) == brute_pairs(positions, window)
    if positions >= window:  # a window as wide as the sequence is full causal attention
        assert window_pairs(positions, positions) == positions * (positions + 1) // 2


def tiny(**changes: Any) -> ModelSpec:
    base = ModelSpec(
        name="tiny-swa", family=Family.LLAMA, layers=4, hidden=64, ffn=128, heads=4, kv_heads=2,
        vocab=256, seq_len=64, norm=Norm.RMSNORM, activation=Activation.SWIGLU,
        position=Position.ROTARY, sliding_window=16, layer_pattern="(swa+mlp, attn+mlp)*",
    )  # fmt: skip
    return base.with_overrides(**changes)


def attention_flops(model: ModelSpec, parallel: ParallelConfig, kind: str) -> tuple[int, int]:
    workload = make_workload(model, parallel)
    block = bind_all(workload)[kind]
    fwd = sum(i.flops for i in block.fwd if i.name == "attn.core")
    bwd = sum(i.flops for i in block.bwd if i.name.startswith("attn.core"))
    return fwd, bwd


@pytest.mark.parametrize("window", [1, 16, 63, 64, 200])
@pytest.mark.parametrize("tp", [1, 2])
def test_sliding_attention_flops_count_the_pairs_in_the_window(window: int, tp: int) -> None:
    model = tiny(sliding_window=window)
    parallel = ParallelConfig(tp=tp, global_batch=2, micro_batch=2)
    b, s, d, heads = 2, model.seq_len, model.head_dim, model.heads // tp
    fwd, bwd = attention_flops(model, parallel, "layer_swa_mlp")
    assert fwd == 2 * b * brute_pairs(s, window) * heads * 2 * d  # Q·Kᵀ and P·V
    assert bwd == 2 * fwd
    full_fwd, _ = attention_flops(model, parallel, "layer")  # the global layers: causal half
    assert full_fwd == 2 * b * s * s * heads * 2 * d // 2


def test_context_parallel_ranks_share_the_window_pairs() -> None:
    model = tiny(sliding_window=16)
    whole, _ = attention_flops(
        model, ParallelConfig(global_batch=2, micro_batch=2), "layer_swa_mlp"
    )
    split, _ = attention_flops(
        model, ParallelConfig(cp=2, global_batch=2, micro_batch=2), "layer_swa_mlp"
    )
    assert split == whole // 2


def test_sinks_add_one_parameter_per_head_and_their_flops() -> None:
    plain, sinks = tiny(), tiny(attention_sinks=True)
    assert sinks.params() - plain.params() == sinks.layers * sinks.heads
    for tp in (1, 2):
        parallel = ParallelConfig(tp=tp, global_batch=2, micro_batch=2)
        for kind in ("layer", "layer_swa_mlp"):
            with_sinks = bind_all(make_workload(sinks, parallel))[kind]
            weights = {w.name: w.elements for w in with_sinks.weights}
            assert weights["attn.sinks"] == sinks.heads // tp
            fwd, _ = attention_flops(sinks, parallel, kind)
            base, _ = attention_flops(plain, parallel, kind)
            assert fwd - base == 2 * 2 * sinks.seq_len * sinks.heads // tp  # exp + add per row
    programs = lower(sinks, ParallelConfig(pp=2, global_batch=2, micro_batch=1))
    elements = sum(
        w.elements for stage in programs.stages for c in stage.chunks for blk in c.blocks
        for w in blk.weights
    )  # fmt: skip
    assert elements == sinks.params()


def test_sliding_windows_shorten_the_model_flops() -> None:
    parallel = ParallelConfig(global_batch=2, micro_batch=2)
    narrow = sum(block_flops(b)[0] for b in bind_all(make_workload(tiny(), parallel)).values())
    wide = tiny(sliding_window=64)
    full = sum(block_flops(b)[0] for b in bind_all(make_workload(wide, parallel)).values())
    assert narrow < full


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sliding_window": 0}, "need `sliding_window` > 0"),
        ({"sliding_window": -4}, "`sliding_window` must be a non-negative int"),
        ({"attention_sinks": 1}, "`attention_sinks` must be a bool"),
    ],
)
def test_bad_window_fields_are_rejected(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny(**changes)


def test_unfused_attention_refuses_a_window() -> None:
    model = tiny(family=Family.GPT)
    with pytest.raises(ConfigError, match="sliding-window attention needs a fused"):
        make_workload(model, ParallelConfig(global_batch=2, micro_batch=2))


@pytest.mark.parametrize(("context", "new_tokens"), [(10, 1), (300, 1), (300, 40), (40, 40)])
def test_a_sliding_layers_kv_cache_is_bound_by_its_window(context: int, new_tokens: int) -> None:
    model = tiny(seq_len=512)
    window = model.sliding_window
    phase = "decode" if new_tokens == 1 else "prefill"
    config = ServingConfig(phase=phase, batch=2, prompt_len=context, chunk=new_tokens)  # type: ignore[arg-type]
    program = lower_step(model, config, ServingStep(new_tokens, context))
    blocks = {block.kind: block for block in program.stages[0].blocks}
    per_token = 2 * model.kv_heads * model.head_dim * 2 * 2  # k and v, bf16, batch 2
    assert cache_bytes(blocks["layer"]) == context * per_token
    kept = min(context, window + new_tokens - 1)
    assert cache_bytes(blocks["layer_swa_mlp"]) == kept * per_token
    swa = [i for i in blocks["layer_swa_mlp"].fwd if i.kind == "attention"][0]
    visible = brute_pairs(context, window, first=context - new_tokens)
    assert swa.flops == 2 * 2 * visible * model.heads * 2 * model.head_dim
