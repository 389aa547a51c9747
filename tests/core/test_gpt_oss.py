"""GPT-OSS (OpenAI gpt-oss-120b / gpt-oss-20b): parameter counts against the model card's
breakdown, the alternating sliding/full pattern, and the Hugging Face config import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor, load_hf_config
from stage_core.models.layers import Ffn, Mixer


def card_breakdown(layers: int, experts: int) -> dict[str, int]:
    """The model card's (arXiv 2508.10925, Table 1) components in closed form: h = 2880,
    64 query and 8 KV heads of 64, biases on every projection, one sink per head, SwiGLU
    experts of width 2880 with biases, an unbiased router, RMSNorm scales."""
    h, d, q, kv, f, v = 2880, 64, 64, 8, 2880, 201088
    attention = h * q * d + 2 * h * kv * d + q * d * h + (q * d + 2 * kv * d + h) + q + h
    expert = 3 * h * f + 2 * f + h
    mlp = experts * expert + h * experts + h
    return {
        "attention": layers * attention,
        "mlp": layers * mlp,
        "embedding": v * h,
        "unembedding": v * h + h,
        "active_mlp": layers * (4 * expert + h * experts + h),
    }


@pytest.mark.parametrize(
    ("name", "layers", "experts", "total_b", "active_b", "mlp_b", "attention_b"),
    [
        ("gpt-oss-120b", 36, 128, 116.83, 5.13, 114.71, 0.96),
        ("gpt-oss-20b", 24, 32, 20.91, 3.61, 19.12, 0.64),
    ],
)
def test_params_equal_the_model_card(
    name: str, layers: int, experts: int, total_b: float, active_b: float, mlp_b: float,
    attention_b: float,
) -> None:  # fmt: skip
    model = get_flavor(name)
    parts = card_breakdown(layers, experts)
    total = parts["attention"] + parts["mlp"] + parts["embedding"] + parts["unembedding"]
    assert model.params() == total
    assert round(total / 1e9, 2) == total_b
    assert round(parts["mlp"] / 1e9, 2) == mlp_b
    assert round(parts["attention"] / 1e9, 2) == attention_b
    # the card's active count leaves the input embedding out (a lookup, not a matmul)
    active = model.active_params() - parts["embedding"]
    assert active == parts["attention"] + parts["active_mlp"] + parts["unembedding"]
    assert round(active / 1e9, 2) == active_b


def test_layers_alternate_sliding_and_full_attention() -> None:
    model = get_flavor("gpt-oss-120b")
    kinds = model.layer_kinds()
    assert [k.mixer for k in kinds] == [Mixer.SLIDING, Mixer.ATTENTION] * 18
    assert all(k.ffn is Ffn.MOE for k in kinds)
    assert (model.sliding_window, model.attention_sinks) == (128, True)


def hf_config(**changes: Any) -> dict[str, Any]:
    """openai/gpt-oss-20b's config.json (its keys and values)."""
    config: dict[str, Any] = {
        "architectures": ["GptOssForCausalLM"], "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4,
        "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
        "initializer_range": 0.02, "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
        "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
        "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
        "quantization_config": {"quant_method": "mxfp4"}, "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
            "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False,
        },
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
        "swiglu_limit": 7.0, "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0",
        "use_cache": True, "vocab_size": 201088,
    }  # fmt: skip
    config.update(changes)
    return config


def write(tmp_path: Path, config: dict[str, Any]) -> Path:
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_hf_config_imports_as_the_flavor(tmp_path: Path) -> None:
    model = load_hf_config(write(tmp_path, hf_config()))
    assert model == get_flavor("gpt-oss-20b")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"experts_per_token": 2}, "cannot map key 'experts_per_token'"),
        ({"layer_types": ["sliding_attention"] * 23}, "one entry per layer"),
        ({"layer_types": ["chunked_attention"] * 24}, "cannot map key 'layer_types'"),
        ({"sliding_window": None}, "no sliding_window"),
        ({"router_bias": True}, "cannot map key 'router_bias'"),
    ],
)
def test_hf_keys_it_cannot_map_are_named(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        load_hf_config(write(tmp_path, hf_config(**changes)))
    assert "\n" not in str(error.value)


def test_mistral_style_windows_cover_every_layer(tmp_path: Path) -> None:
    config = {
        "model_type": "mistral", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "sliding_window": 1024,
    }  # fmt: skip
    model = load_hf_config(write(tmp_path, config))
    assert model.sliding_window == 1024
    assert model.layer_blocks() == ("layer_swa_mlp",) * 4
    off = load_hf_config(write(tmp_path, {**config, "sliding_window": None}))
    assert (off.sliding_window, off.layer_blocks()) == (0, ("layer",) * 4)
