"""FP8 saved activations: a linear layer keeps its input's FP8 copy for the weight-gradient GEMM
(stage_core.lower.fp8.with_fp8_saved), checked against closed forms of the saved tensors."""

from __future__ import annotations

import math

import pytest

from stage_core.lower.bind import BoundBlock
from stage_core.lower.program import bind_all, make_workload
from stage_core.models.flavors import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig

FP8 = {"precision": "fp8"}


def _layer(model: ModelSpec, kind: str, **parallel: object) -> BoundBlock:
    settings: dict[str, object] = {"dp": 1, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 1}
    settings.update(parallel)
    return bind_all(make_workload(model, ParallelConfig(**settings)))[kind]  # type: ignore[arg-type]


def _scales(elements: int, recipe: str) -> int:
    """Activation scale bytes of one FP8 copy (DeepSeek-V3 1x128 FP32 blocks; MX 1 byte/32)."""
    if recipe == "blockwise":
        return math.ceil(elements / 128) * 4
    if recipe == "mxfp8":
        return math.ceil(elements / 32)
    return 0


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", "blockwise", "mxfp8"])
def test_dense_layer_keeps_fp8_copies_of_its_linear_inputs(recipe: str) -> None:
    """Llama layer: the QKV input (ln1), the MLP input (ln2) and the fc2 input (act) are kept
    only as FP8 copies; the attention output is kept 16-bit (attention's backward) and as the
    output projection's FP8 copy; the rest is unchanged."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    bf16 = _layer(model, "layer")
    fp8 = _layer(model, "layer", fp8_recipe=recipe, **FP8)
    s, h, ffn, q = model.seq_len, model.hidden, model.ffn, model.heads * model.head_dim
    only_fp8 = [s * h, s * h, s * ffn]  # ln1, ln2, mlp.act
    both = [s * q]  # attn.core
    expected = (
        bf16.saved_bytes
        - sum(2 * n - n - _scales(n, recipe) for n in only_fp8)
        + sum(n + _scales(n, recipe) for n in both)
    )
    assert fp8.saved_bytes == expected
    assert fp8.saved_bytes < bf16.saved_bytes


def test_moe_layer_router_input_stays_16_bit() -> None:
    """Qwen3-MoE layer: the experts' inputs and the fc2 input become FP8 copies; the router's
    input (ln2) is a torch GEMM outside TE and stays 16-bit; top-k routed copies per token."""
    model = get_flavor("qwen3-235b-a22b").with_overrides(layers=2, seq_len=512)
    bf16 = _layer(model, "moe_layer")
    fp8 = _layer(model, "moe_layer", fp8_recipe="tensorwise", **FP8)
    s, h, k, f = model.seq_len, model.hidden, model.top_k, model.expert_ffn
    q = model.heads * model.head_dim
    only_fp8 = s * h + s * k * h + s * k * f  # ln1, dispatched tokens, experts' act
    assert fp8.saved_bytes == bf16.saved_bytes - only_fp8 + s * q  # + attn.core FP8 copy


@pytest.mark.parametrize(
    "parallel",
    [
        {"fp8_gemms": ("fprop", "dgrad")},  # wgrad in 16 bit: TE keeps the 16-bit input
        {"recompute": "full"},  # only the layer's 16-bit input is kept
        {"precision": "bf16"},
    ],
)
def test_unchanged_when_no_fp8_weight_gradient(parallel: dict[str, object]) -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    settings = {**FP8, **parallel}
    base = {k: v for k, v in settings.items() if k != "precision" and k != "fp8_gemms"}
    assert (
        _layer(model, "layer", **settings).saved_bytes == _layer(model, "layer", **base).saved_bytes
    )


def test_selective_recompute_keeps_attention_inputs_16_bit() -> None:
    """Under selective recompute the attention core re-runs in the backward from its 16-bit
    inputs (kept as they are) and keeps nothing itself, so its output is held only as the
    output projection's FP8 copy; ln1, ln2 and act become FP8 copies as without recompute."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    bf16 = _layer(model, "layer", recompute="selective")
    fp8 = _layer(model, "layer", recompute="selective", **FP8)
    s, h, ffn, q = model.seq_len, model.hidden, model.ffn, model.heads * model.head_dim
    assert fp8.saved_bytes == bf16.saved_bytes - (2 * s * h + s * ffn) - s * q
