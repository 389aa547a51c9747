"""Frontier flavors (Llama 3.1 405B, Mixtral 8x22B, Nemotron-4 340B, Qwen3 MoE), their new block
options (QK-norm, squared ReLU) and their Hugging Face ``config.json`` import.

Parameter counts equal the closed form restated from each architecture's paper and config (the
published totals are checked in ``test_models_flavors.py``); one layer's forward matmul and
attention FLOPs equal ``2·tokens·(active matmul parameters) + 4·b·s²·(a·d)/2`` (causal).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models import Activation, Family, ModelSpec, get_flavor, load_hf_config
from stage_core.parallel import ParallelConfig


def closed_form_params(m: ModelSpec) -> int:
    """Untied embedding and output ``2·V·h``, final norm ``h``; per layer: Q, K, V, O
    projections, QK-norm ``2·d``, two norms ``2·h``, and an MLP (``m·h·f``, m = 2 non-gated,
    3 gated) or a router ``h·E`` and ``E`` experts."""
    h, d = m.hidden, m.head_dim
    gated = 3 if m.activation is Activation.SWIGLU else 2
    attention = 2 * h * m.heads * d + 2 * h * m.kv_heads * d + (2 * d if m.qk_norm else 0)
    if m.is_moe:
        mlp = h * m.num_experts + m.num_experts * gated * h * m.expert_ffn
    else:
        mlp = gated * h * m.ffn
    return 2 * m.vocab * h + h + m.layers * (attention + 2 * h + mlp)


@pytest.mark.parametrize(
    ("flavor", "dims"),
    [
        # Llama 3 paper Table 3 and the Llama-3.1-405B config.json
        ("llama3.1-405b", dict(layers=126, hidden=16384, ffn=53248, heads=128, kv_heads=8)),
        # Mixtral-8x22B-v0.1 config.json
        ("mixtral-8x22b", dict(layers=56, hidden=6144, expert_ffn=16384, heads=48, kv_heads=8)),
        # Nemotron-4 340B report Table 1; ffn = 4·hidden (Nemotron-4 15B report)
        ("nemotron-4-340b", dict(layers=96, hidden=18432, ffn=73728, heads=96, kv_heads=8)),
        # Qwen3 report Table 2 and config.json
        ("qwen3-30b-a3b", dict(layers=48, hidden=2048, heads=32, kv_heads=4, expert_ffn=768)),
        ("qwen3-235b-a22b", dict(layers=94, hidden=4096, heads=64, kv_heads=4, expert_ffn=1536)),
    ],
)
def test_frontier_flavor_dims_and_closed_form_params(flavor: str, dims: dict[str, int]) -> None:
    model = get_flavor(flavor)
    assert {key: getattr(model, key) for key in dims} == dims
    assert model.params() == closed_form_params(model)


def test_qwen3_moe_and_nemotron_block_options() -> None:
    qwen = get_flavor("qwen3-235b-a22b")
    assert qwen.qk_norm and qwen.num_experts == 128 and qwen.top_k == 8 and qwen.head_dim == 128
    assert qwen.num_shared_experts == 0 and qwen.num_moe_layers == 94
    nemotron = get_flavor("nemotron-4-340b")
    assert nemotron.activation is Activation.SQUARED_RELU and not nemotron.tied_embeddings


@pytest.mark.parametrize("flavor", ["qwen3-30b-a3b", "nemotron-4-340b", "mixtral-8x22b"])
def test_one_layer_forward_flops_are_the_closed_form(flavor: str) -> None:
    model = get_flavor(flavor).with_overrides(layers=1, seq_len=1024)
    b, s = 2, model.seq_len
    programs = lower(model, ParallelConfig(micro_batch=b))
    block = programs.blocks["moe_layer" if model.is_moe else "layer"]
    h, d = model.hidden, model.head_dim
    gated = 3 if model.activation is Activation.SWIGLU else 2
    projections = 2 * h * model.heads * d + 2 * h * model.kv_heads * d
    if model.is_moe:
        # dropless: exactly top_k·tokens/E slots per expert when E divides top_k·tokens
        assert (model.top_k * b * s) % model.num_experts == 0
        mlp = h * model.num_experts + model.top_k * gated * h * model.expert_ffn
    else:
        mlp = gated * h * model.ffn
    tokens = b * s
    attention = 4 * b * s * s * model.heads * d // 2
    matmul = sum(i.flops for i in block.fwd if i.kind in ("einsum", "attention"))
    assert matmul == 2 * tokens * (projections + mlp) + attention


def test_qk_norm_ops_and_their_gradient_reduction_over_tp() -> None:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=1, seq_len=512)
    programs = lower(model, ParallelConfig(tp=2, dp=2, global_batch=2))
    block = programs.blocks["moe_layer"]
    norms = {w.name: w for w in block.weights if w.name.endswith("norm.scale")}
    assert set(norms) == {"q.norm.scale", "k.norm.scale"}
    assert all(w.elements == model.head_dim for w in norms.values())
    # each tp rank normalises its own heads: the scale's gradient sums over tp and dp
    assert all({"dp", "tp"} <= set(w.grad_axes) for w in norms.values())
    q_norm = next(i for i in block.fwd if i.name == "q.norm")
    local_q = 512 * (model.heads // 2) * model.head_dim  # b = 1 per rank, heads over tp
    assert q_norm.flops == 3 * local_q  # RMSNorm: 3 ops per element
    without = lower(model.with_overrides(qk_norm=False), ParallelConfig(tp=2, dp=2, global_batch=2))
    assert model.params() - model.with_overrides(qk_norm=False).params() == 2 * 128
    assert len(block.fwd) > len(without.blocks["moe_layer"].fwd)


def test_squared_relu_costs_two_ops_forward_three_backward() -> None:
    model = get_flavor("nemotron-4-340b").with_overrides(layers=1, seq_len=256)
    block = lower(model, ParallelConfig(tp=8)).blocks["layer"]
    elements = 256 * model.ffn // 8
    (act,) = [i for i in block.fwd if i.name == "mlp.act"]
    assert act.flops == 2 * elements
    (backward,) = [i for i in block.bwd if i.name == "mlp.act.backward"]
    assert backward.flops == 3 * elements


# ------------------------------------------------------------------ Hugging Face import

QWEN3_30B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48,
    "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
    "output_router_logits": False, "router_aux_loss_coef": 0.001, "torch_dtype": "bfloat16",
    "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.02,
    "use_cache": True, "transformers_version": "4.51.0",
}  # fmt: skip

NEMOTRON_4_340B: dict[str, Any] = {
    "architectures": ["NemotronForCausalLM"], "model_type": "nemotron",
    "hidden_size": 18432, "intermediate_size": 73728, "num_hidden_layers": 96,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 192,
    "vocab_size": 256000, "max_position_embeddings": 4096, "hidden_act": "relu2",
    "norm_eps": 1e-05, "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "attention_dropout": 0.0, "torch_dtype": "bfloat16",
}  # fmt: skip

LLAMA31_405B: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
    "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "hidden_act": "silu", "mlp_bias": False, "attention_bias": False, "pretraining_tp": 1,
    "tie_word_embeddings": False,
}  # fmt: skip

MIXTRAL_8X22B: dict[str, Any] = {
    "model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384,
    "num_hidden_layers": 56, "num_attention_heads": 48, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 65536, "num_local_experts": 8,
    "num_experts_per_tok": 2, "rms_norm_eps": 1e-05, "sliding_window": None,
    "hidden_act": "silu", "router_aux_loss_coef": 0.001, "output_router_logits": False,
}  # fmt: skip


def write_config(folder: Path, name: str, config: dict[str, Any]) -> Path:
    (folder / name).mkdir()
    path = folder / name / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("config", "flavor", "changes"),
    [
        (QWEN3_30B_A3B, "qwen3-30b-a3b", {"seq_len": 40960}),
        # the config declares head_dim 192 = 18432/96, as derived; LayerNorm without the shift
        (NEMOTRON_4_340B, "nemotron-4-340b", {}),
        (LLAMA31_405B, "llama3.1-405b", {}),
        (MIXTRAL_8X22B, "mixtral-8x22b", {}),
    ],
)
def test_hf_configs_map_to_the_flavors(
    tmp_path: Path, config: dict[str, Any], flavor: str, changes: dict[str, Any]
) -> None:
    model = load_hf_config(write_config(tmp_path, flavor, config))
    expected = get_flavor(flavor).with_overrides(name=flavor, **changes)
    assert model == expected
    assert model.params() == expected.params()


def test_hf_qwen3_dense_has_qk_norm_and_a_dense_prefix_maps_to_first_k_dense(
    tmp_path: Path,
) -> None:
    dense = {k: v for k, v in QWEN3_30B_A3B.items() if "expert" not in k and "moe" not in k}
    dense = {k: v for k, v in dense.items() if k not in ("decoder_sparse_step", "mlp_only_layers")}
    model = load_hf_config(write_config(tmp_path, "q", {**dense, "model_type": "qwen3"}))
    assert model.qk_norm and not model.is_moe and model.family is Family.QWEN3
    prefix = {**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]}
    assert load_hf_config(write_config(tmp_path, "p", prefix)).first_k_dense == 2


@pytest.mark.parametrize(
    ("base", "changes", "message"),
    [
        ("qwen", {"q_lora_rank": 1536}, "cannot map key 'q_lora_rank' (= 1536): not a key of"),
        ("qwen", {"decoder_sparse_step": 2}, "cannot map key 'decoder_sparse_step' (= 2)"),
        ("qwen", {"mlp_only_layers": [3]}, "cannot map key 'mlp_only_layers' (= [3])"),
        ("qwen", {"use_sliding_window": True, "layer_types": ["full_attention"]}, "one entry"),
        ("qwen", {"layer_types": ["sliding_attention"]}, "cannot map key 'layer_types'"),
        ("llama", {"hidden_act": "gelu"}, "cannot map key 'hidden_act' (= 'gelu'): a llama MLP"),
        ("llama", {"quantization_config": {"quant_method": "fp8"}}, "'quantization_config'"),
        ("nemotron", {"hidden_act": "silu"}, "a nemotron MLP uses 'relu2'"),
        ("mixtral", {"sliding_window": 4096, "layer_types": ["local"] * 56}, "'layer_types'"),
    ],
)
def test_hf_keys_that_cannot_be_mapped_are_named_in_one_line(
    tmp_path: Path, base: str, changes: dict[str, Any], message: str
) -> None:
    configs = {
        "qwen": QWEN3_30B_A3B, "llama": LLAMA31_405B, "nemotron": NEMOTRON_4_340B,
        "mixtral": MIXTRAL_8X22B,
    }  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        load_hf_config(write_config(tmp_path, "m", {**configs[base], **changes}))
    assert "\n" not in str(caught.value)
