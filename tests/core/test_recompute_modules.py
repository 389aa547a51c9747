"""Selective recompute by module (Megatron-Core ``--recompute-modules``,
stage_core/recompute.py): the saved bytes of each module choice against closed forms of the
tensors it frees, the re-run ops in the backward, and the config's checks."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.program import bind_all, make_workload
from stage_core.models.flavors import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig, Recompute

BF16 = 2


def _block(model: ModelSpec, kind: str, **parallel: object) -> BoundBlock:
    settings: dict[str, object] = {"dp": 1, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 1}
    settings.update(parallel)
    return bind_all(make_workload(model, ParallelConfig(**settings)))[kind]  # type: ignore[arg-type]


def _selective(model: ModelSpec, kind: str, *modules: str) -> BoundBlock:
    return _block(model, kind, recompute="selective", recompute_modules=modules)


def _recomputed(block: BoundBlock) -> set[str]:
    return {instr.name for instr in block.bwd if instr.phase == "recompute"}


def test_default_modules_are_the_attention_core() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    default = _block(model, "layer", recompute="selective")
    assert _selective(model, "layer", "core_attn") == default
    assert _recomputed(default) == {"attn.core"}


def test_moe_act_and_layernorm_free_their_outputs() -> None:
    """Qwen3-MoE layer: moe_act frees the experts' activation output (top-k x expert_ffn per
    token), layernorm the pre-MLP norm's output (hidden per token, kept by the router before);
    both re-run in the backward."""
    model = get_flavor("qwen3-235b-a22b").with_overrides(layers=2, seq_len=512)
    s, h, k, f = model.seq_len, model.hidden, model.top_k, model.expert_ffn
    none = _block(model, "moe_layer").saved_bytes
    act = _selective(model, "moe_layer", "moe_act")
    norm = _selective(model, "moe_layer", "layernorm")
    both = _selective(model, "moe_layer", "layernorm", "moe_act")
    assert act.saved_bytes == none - s * k * f * BF16
    assert norm.saved_bytes == none - s * h * BF16
    assert both.saved_bytes == none - s * k * f * BF16 - s * h * BF16
    assert _recomputed(both) == {"ln2", "experts.act"}


def test_layernorm_of_a_fused_norm_recomputes_nothing() -> None:
    """A dense Llama layer's norms are fused into their TE linears (no separate module)."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    block = _selective(model, "layer", "layernorm")
    assert block.saved_bytes == _block(model, "layer").saved_bytes
    assert _recomputed(block) == set()


def test_mlp_checkpoints_the_dense_mlp() -> None:
    """Dense MLP recompute keeps only its input: the norm output, gate, up and act are freed."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    s, h, f = model.seq_len, model.hidden, model.ffn
    block = _selective(model, "layer", "mlp")
    assert block.saved_bytes == _block(model, "layer").saved_bytes - (s * h + 3 * s * f) * BF16
    assert _recomputed(block) == {"ln2", "mlp.gate", "mlp.up", "mlp.act", "mlp.fc2"}


def test_mla_up_proj_keeps_the_latents_only() -> None:
    """DeepSeek-V3 layer: the up-projection part frees the normed latents and the attention's
    queries, keys and values, and keeps the two latents and the RoPE key it starts from."""
    model = get_flavor("deepseek-v3").with_overrides(layers=4, seq_len=256, mtp_layers=0)
    s, n = model.seq_len, model.heads
    q_rank, kv_rank, rope = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
    qk, v = model.head_dim + rope, model.v_head_dim
    freed = s * (q_rank + kv_rank) + 2 * s * n * qk + s * n * v  # norms, q, k, v
    block = _selective(model, "moe_layer", "mla_up_proj")
    none = _block(model, "moe_layer").saved_bytes
    assert block.saved_bytes == none - freed * BF16 + s * rope * BF16  # + k.pe
    assert {"q.nope", "k.nope", "v", "q", "k"} <= _recomputed(block)
    assert "attn.core" not in _recomputed(block)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"recompute": "selective", "recompute_modules": ("attn",)}, "recompute_modules"),
        ({"recompute": "selective", "recompute_modules": ("mlp", "mlp")}, "once each"),
        ({"recompute": "full", "recompute_modules": ("mlp",)}, "needs recompute='selective'"),
    ],
)
def test_bad_modules_are_one_line_errors(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(**settings)  # type: ignore[arg-type]


def test_to_dict_lists_modules_only_when_set() -> None:
    selective = Recompute.SELECTIVE
    assert "recompute_modules" not in ParallelConfig(recompute=selective).to_dict()
    listed = ParallelConfig(recompute=selective, recompute_modules=("moe_act",)).to_dict()
    assert listed["recompute_modules"] == ["moe_act"]
