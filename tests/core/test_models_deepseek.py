"""DeepSeek-V2/V3 ``config.json`` import (latent attention, DeepSeek MoE): the published configs
(deepseek-ai/DeepSeek-V3 and deepseek-ai/DeepSeek-V2-Lite on the Hugging Face hub, copied below
key for key) map to the flavors, and keys it cannot map are named in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor, load_hf_config

DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.46.3", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 129280,
}  # fmt: skip
DEEPSEEK_V2_LITE: dict[str, Any] = {
    **{k: v for k, v in DEEPSEEK_V3.items() if k not in ("quantization_config",
                                                        "num_nextn_predict_layers")},
    "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
    "first_k_dense_replace": 1, "hidden_size": 2048, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
    "num_key_value_heads": 16, "q_lora_rank": None, "routed_scaling_factor": 1.0,
    "scoring_func": "softmax", "topk_group": 1, "topk_method": "greedy", "vocab_size": 102400,
}  # fmt: skip


def write(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    ("flavor", "config"), [("deepseek-v3", DEEPSEEK_V3), ("deepseek-v2-lite", DEEPSEEK_V2_LITE)]
)
def test_published_configs_map_to_the_flavors(
    flavor: str, config: dict[str, Any], tmp_path: Path
) -> None:
    model = load_hf_config(write(tmp_path / flavor, config))
    expected = get_flavor(flavor)
    mine, theirs = model.to_dict(), expected.to_dict()
    differ = {key for key in mine if mine[key] != theirs[key]}
    assert differ == {"max_position"}  # the flavor keeps the pre-training context
    assert model.name == flavor and model.seq_len == 4096
    assert model.params() == expected.params()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"use_mla_v4": True}, "cannot map key 'use_mla_v4'"),
        ({"kv_lora_rank": "512"}, "'kv_lora_rank' must be an integer"),
        ({"qk_rope_head_dim": 0}, "needs `qk_rope_head_dim` > 0"),
    ],
)
def test_unmappable_deepseek_keys_are_one_line_errors(
    changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        load_hf_config(write(tmp_path, {**DEEPSEEK_V3, **changes}))
    assert "\n" not in str(error.value)
