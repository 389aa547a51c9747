"""Hugging Face config.json files of unusual shape (s25 review): each a correct reading or a
one-line error that says what to do, never a silent misreading."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import load_hf_config
from stage_core.models.spec import Norm

files = importlib.import_module(
    f"{__package__}.test_models_files" if __package__ else "test_models_files"
)
LLAMA: dict[str, Any] = files.LLAMA3_8B_CONFIG


def load(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_hf_config(path)


def test_a_null_num_key_value_heads_is_one_per_head(tmp_path: Path) -> None:
    # LlamaConfig: "if num_key_value_heads is None: num_key_value_heads = num_attention_heads";
    # it was "missing key 'num_key_value_heads'"
    model = load(tmp_path, {**LLAMA, "num_key_value_heads": None})
    assert model.kv_heads == model.heads == 32


@pytest.mark.parametrize("value", [0, -8, 8.0, "8", True])
def test_a_num_key_value_heads_that_is_not_a_count_is_refused(tmp_path: Path, value: Any) -> None:
    # 0 was read as ModelSpec's "derive": 32 KV heads, without a word
    message = "'num_key_value_heads' must be an integer >= 1 (or null: one per attention head), "
    message += f"but got num_key_value_heads={value!r}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, {**LLAMA, "num_key_value_heads": value})


def test_nemotron_h_reads_num_key_value_heads_alike(tmp_path: Path) -> None:
    mamba = importlib.import_module(
        f"{__package__}.test_mamba_models" if __package__ else "test_mamba_models"
    )
    with pytest.raises(ConfigError, match="'num_key_value_heads' must be an integer >= 1"):
        load(tmp_path, {**mamba.CONFIG, "num_key_value_heads": 0})
    assert load(tmp_path, {**mamba.CONFIG, "num_key_value_heads": None}).kv_heads == 32


def test_the_norm_follows_the_model_type_not_the_epsilon_key(tmp_path: Path) -> None:
    bare = {key: value for key, value in LLAMA.items() if key != "rms_norm_eps"}
    assert load(tmp_path, bare).norm is Norm.RMSNORM
    for model_type in ("mistral", "qwen3"):
        assert load(tmp_path, {**bare, "model_type": model_type}).norm is Norm.RMSNORM


@pytest.mark.parametrize(
    ("outer", "inner", "message"),
    [
        ("llava", "llama", "its language model is the `text_config` object, model_type 'llama'; "
         "to model that model alone, save that object as its own config.json"),
        ("gemma3", "gemma3_text", "`text_config` has model_type 'gemma3_text', not modelled"),
    ],
)  # fmt: skip
def test_a_multimodal_config_says_where_its_language_model_is(
    tmp_path: Path, outer: str, inner: str, message: str
) -> None:
    config = {"model_type": outer, "text_config": {**LLAMA, "model_type": inner},
              "vision_config": {"hidden_size": 1024}}  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        load(tmp_path, config)
    assert f"unsupported model_type {outer!r}" in str(error.value)


def test_a_per_layer_list_is_quoted_short(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load(tmp_path, {**LLAMA, "intermediate_size": [14336] * 32})
    text = str(error.value)
    assert "'intermediate_size' must be an integer" in text and "(32 entries)" in text
    assert len(text) < 200 + len(str(tmp_path))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # a 0 was ModelSpec's "derive": v_head_dim 0 became head_dim (128) without a word
        ({"v_head_dim": 0}, "cannot map key 'v_head_dim' (= 0): a value head width: >= 1"),
        ({"v_head_dim": -2}, "cannot map key 'v_head_dim' (= -2): a value head width: >= 1"),
        # false was read as "no query latent" (false or 0)
        ({"q_lora_rank": False}, "'q_lora_rank' must be an integer, but got q_lora_rank=False"),
    ],
)
def test_latent_attention_widths_are_counts(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    deepseek = {
        **LLAMA, "model_type": "deepseek_v3", "num_key_value_heads": 32, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    }  # fmt: skip
    assert load(tmp_path, deepseek).v_head_dim == 128
    assert load(tmp_path, {**deepseek, "q_lora_rank": None}).q_lora_rank == 0
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, {**deepseek, **changes})
