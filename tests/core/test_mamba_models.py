"""Hybrid Mamba-2 models: the nemotron-h-8b flavor and the Hugging Face ``nemotron_h`` import.

The parameter count is checked against the checkpoint's tensor shapes (transformers'
``NemotronHForCausalLM``: ``backbone.embeddings``, per layer ``norm`` and ``mixer.*``,
``norm_f``, ``lm_head``) and the public total, 8,100,852,736 (Nemotron-H-8B, "8B" in the paper,
arXiv 2504.03624); the import must give the flavor, and name every key it cannot map.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models import get_flavor, load_hf_config, load_model
from stage_core.models.hf_ssm import hybrid_pattern
from stage_core.models.layers import expand_pattern
from stage_core.parallel import ParallelConfig

PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"

#: nvidia/Nemotron-H-8B-Base-8K config.json (as Megatron-Bridge's unit tests carry it).
CONFIG: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attention_head_dim": 128,
    "bos_token_id": 1,
    "chunk_size": 128,
    "conv_kernel": 4,
    "eos_token_id": 2,
    "expand": 2,
    "hidden_act": "relu2",
    "hidden_dropout": 0.0,
    "hidden_size": 4096,
    "hybrid_override_pattern": PATTERN,
    "initializer_range": 0.02,
    "intermediate_size": 21504,
    "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 64,
    "mamba_hidden_act": "silu",
    "mamba_num_heads": 128,
    "mamba_proj_bias": False,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "mlp_hidden_act": "relu2",
    "model_type": "nemotron_h",
    "n_groups": 8,
    "num_attention_heads": 32,
    "num_hidden_layers": 52,
    "num_key_value_heads": 8,
    "num_logits_to_keep": 1,
    "pad_token_id": 0,
    "rescale_prenorm_residual": True,
    "residual_in_fp32": False,
    "rms_norm_eps": 1e-05,
    "sliding_window": None,
    "ssm_state_size": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.48.0.dev0",
    "use_bias": False,
    "use_cache": True,
    "use_conv_bias": True,
    "use_mamba_kernels": True,
    "vocab_size": 131072,
}


def checkpoint_params(config: dict[str, Any]) -> int:
    """The sum of the checkpoint's tensor sizes, layer by layer from the override pattern."""
    h, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    m, p, n = config["mamba_num_heads"], config["mamba_head_dim"], config["ssm_state_size"]
    g, w = config["n_groups"], config["conv_kernel"]
    q = config["num_attention_heads"] * config["attention_head_dim"]
    kv = config["num_key_value_heads"] * config["attention_head_dim"]
    per_layer = {
        # in_proj, conv1d weight [conv_dim, 1, W] and bias, A_log, D, dt_bias, norm, out_proj
        "M": sum((h * (2 * m * p + 2 * g * n + m), (m * p + 2 * g * n) * (w + 1), 3 * m))
        + m * p * (1 + h),
        "*": h * q + 2 * h * kv + q * h,  # q_proj, k_proj, v_proj, o_proj
        "-": 2 * h * f,  # up_proj, down_proj
    }
    layers = sum(per_layer[c] + h for c in config["hybrid_override_pattern"])  # + layer norm
    return int(v * h + layers + h + v * h)  # embeddings, layers, norm_f, lm_head


def test_nemotron_h_8b_parameters() -> None:
    model = get_flavor("nemotron-h-8b")
    assert model.params() == checkpoint_params(CONFIG) == 8_100_852_736
    assert model.params() / 1e9 == pytest.approx(8.1, abs=0.05)  # the paper's "8B"
    kinds = model.layer_kinds()
    assert [str(k.mixer) for k in kinds].count("mamba") == 24
    assert [k.token for k in kinds].count("attn") == 4
    assert [k.token for k in kinds].count("mlp") == 24


def test_pattern_is_the_hf_override_pattern() -> None:
    model = get_flavor("nemotron-h-8b")
    assert expand_pattern(hybrid_pattern(PATTERN), 52) == model.layer_kinds()
    assert hybrid_pattern("M-M*--") == "mamba, mlp, mamba, attn, mlp*2"


def write(tmp_path: Path, config: dict[str, Any]) -> Path:
    folder = tmp_path / "Nemotron-H-8B-Base-8K"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_hf_import_gives_the_flavor(tmp_path: Path) -> None:
    imported = load_hf_config(write(tmp_path, CONFIG))
    assert imported.name == "Nemotron-H-8B-Base-8K"
    flavor = get_flavor("nemotron-h-8b")
    same = {"name": flavor.name, "layer_pattern": ""}
    assert {**imported.to_dict(), **same} == {**flavor.to_dict(), **same}
    assert imported.layer_kinds() == flavor.layer_kinds()
    assert imported.params() == flavor.params()


def test_hf_import_reads_layers_block_type(tmp_path: Path) -> None:
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    config = {k: v for k, v in CONFIG.items() if k != "hybrid_override_pattern"}
    config["layers_block_type"] = [names[c] for c in PATTERN]
    assert load_hf_config(write(tmp_path, config)).params() == 8_100_852_736


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"moe_intermediate_size": 1856}, "cannot map key 'moe_intermediate_size'"),
        ({"hybrid_override_pattern": PATTERN[:-1] + "E"}, "key 'hybrid_override_pattern'"),
        ({"mamba_proj_bias": True}, "key 'mamba_proj_bias'"),
        ({"use_conv_bias": False}, "key 'use_conv_bias'"),
        ({"mlp_hidden_act": "silu"}, "key 'mlp_hidden_act'"),
        ({"n_routed_experts": 64}, "key 'n_routed_experts'"),
        ({"num_hidden_layers": 50}, "lays out 52 layers"),
        ({"num_hidden_layers": 60}, "lays out 52 layers"),
        ({"n_groups": 3}, "`ssm_groups` must divide `ssm_heads`"),
        ({"layers_block_type": ["mamba"] * 52}, "differs from hybrid_override_pattern"),
        ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false"),
        ({"hidden_dropout": "0.1"}, "'hidden_dropout' must be a number from 0 to 1"),
    ],
)
def test_hf_import_names_what_it_cannot_map(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        load_hf_config(write(tmp_path, {**CONFIG, **changes}))
    assert "\n" not in str(error.value)


def test_a_model_file_can_describe_a_hybrid(tmp_path: Path) -> None:
    text = "\n".join(
        [
            'base = "nemotron-h-8b"',
            'name = "nemotron-h-small"',
            "layers = 4",
            'layer_pattern = "mamba, mlp, attn, mlp"',
            "ssm_groups = 4",
        ]
    )
    path = tmp_path / "small.toml"
    path.write_text(text)
    model = load_model(path)
    base = get_flavor("nemotron-h-8b")
    assert (model.ssm_heads, model.ssm_groups, model.ssm_chunk) == (128, 4, base.ssm_chunk)
    attention = base.attention_params() + base.hidden
    mlp = base.mlp_params(base.ffn) + base.hidden
    assert model.params() == model.mamba_params() + base.hidden + attention + 2 * mlp + (
        base.embedding_params() + base.output_params()
    )


def test_mamba2_2_7b_is_a_pure_mamba_stack() -> None:
    """state-spaces/mamba2-2.7b: 64 Mamba-2 layers of d_model 2560 (80 heads of 64, state 128,
    one group), tied embeddings over the padded 50288-token vocabulary."""
    model = get_flavor("mamba2-2.7b")
    h, v, inner, conv_dim, heads = 2560, 50288, 5120, 5120 + 2 * 128, 80
    assert 2 * inner + 2 * 128 + heads == 10576  # the checkpoint's in_proj rows
    layer = 10576 * h + conv_dim * 4 + conv_dim + 3 * heads + inner + h * inner + h
    assert model.params() == v * h + 64 * layer + h == 2_702_599_680
    assert model.params() / 1e9 == pytest.approx(2.7, abs=0.05)
    assert {k.token for k in model.layer_kinds()} == {"mamba"}
    assert model.with_overrides(layers=4).layer_kinds() == model.layer_kinds()[:4]


def test_mamba2_2_7b_lowers_and_refuses_what_megatron_refuses() -> None:
    model = get_flavor("mamba2-2.7b").with_overrides(layers=2, seq_len=512)
    programs = lower(model, ParallelConfig(dp=2, global_batch=2))
    assert set(programs.blocks) == {"embedding", "layer_mamba_none", "head"}
    with pytest.raises(ConfigError, match="`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"):
        lower(model, ParallelConfig(tp=2, global_batch=2))  # one group: Megatron needs tp | 1


#: Megatron-Bridge's Nemotron-H providers (NVIDIA-NeMo/Megatron-Bridge 160ccccb,
#: nemotron_h_provider.py NemotronHModelProvider4B / 47B / 56B): hybrid_layer_pattern,
#: hidden_size, ffn_hidden_size, num_attention_heads, mamba_num_heads, mamba_state_dim; the base
#: provider's 8 KV heads, 8 groups and Mamba head dim 64 for every size; and the paper's counts
#: (arXiv 2504.03624: 56B = 54 Mamba-2, 54 MLP, 10 attention) for the 56B.
PROVIDERS = {
    "nemotron-h-4b": (PATTERN, 3072, 12288, 32, 112, 128, (24, 24, 4)),
    "nemotron-h-47b": (
        "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*"
        "-M-M-M-M-M-",
        8192, 30720, 64, 256, 256, (45, 48, 5),
    ),
    "nemotron-h-56b": (
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-"
        "M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        8192, 32768, 64, 256, 256, (54, 54, 10),
    ),
}  # fmt: skip


def _provider_config(name: str) -> dict[str, Any]:
    """The provider's values in the Hugging Face keys (the 8B's config otherwise)."""
    pattern, hidden, ffn, heads, mamba_heads, state, _ = PROVIDERS[name]
    return {
        **CONFIG,
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern),
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_attention_heads": heads,
        "mamba_num_heads": mamba_heads,
        "ssm_state_size": state,
    }


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_published_nemotron_h_sizes(name: str, tmp_path: Path) -> None:
    """Each published size as its provider states it: the layer mix, the parameter count of
    its tensors (about the size it is named after), and the Hugging Face import of the same
    values gives the flavor."""
    model = get_flavor(name)
    config = _provider_config(name)
    kinds = [k.token for k in model.layer_kinds()]
    assert (kinds.count("mamba"), kinds.count("mlp"), kinds.count("attn")) == PROVIDERS[name][-1]
    assert model.params() == checkpoint_params(config)
    size = float(name.rsplit("-", 1)[1].removesuffix("b"))
    assert model.params() / 1e9 == pytest.approx(size, rel=0.13)  # 4.49, 46.8, 56.3 B
    imported = load_hf_config(write(tmp_path, config))
    assert imported.layer_kinds() == model.layer_kinds()
    same = {"name": model.name, "layer_pattern": ""}
    assert {**imported.to_dict(), **same} == {**model.to_dict(), **same}


def test_published_sizes_lower_at_the_dgx_cloud_layout() -> None:
    """The 56B at the DGX Cloud recipe's TP 8 (tp divides the 256 Mamba heads and 8 groups);
    TP 16 would split a group, which Megatron-Core's MambaMixer refuses."""
    model = get_flavor("nemotron-h-56b").with_overrides(layers=2, layer_pattern="mamba, attn")
    programs = lower(model, ParallelConfig(tp=8, global_batch=1))
    assert set(programs.blocks) == {"embedding", "layer_mamba_none", "layer_attn_none", "head"}
    with pytest.raises(ConfigError, match="`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"):
        lower(model, ParallelConfig(tp=16, global_batch=1))


def test_nemotron_3_nano_4b_is_its_recipes_architecture(tmp_path: Path) -> None:
    """Megatron-Bridge's nemotron_3_nano_4b recipe (9cb11608 ``_model_config``) in the Hugging
    Face keys: the flavor's layer mix, its tensors' total (the verification card's round trip
    states 3,973,556,832 parameters) and the import of the same values."""
    pattern = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"
    config = {
        **CONFIG, "hybrid_override_pattern": pattern, "num_hidden_layers": 42,
        "hidden_size": 3136, "intermediate_size": 12544, "num_attention_heads": 40,
        "mamba_num_heads": 96, "mamba_head_dim": 80, "chunk_size": 256,
        "max_position_embeddings": 4096,
    }  # fmt: skip
    model = get_flavor("nemotron-3-nano-4b")
    kinds = [k.token for k in model.layer_kinds()]
    assert (kinds.count("mamba"), kinds.count("mlp"), kinds.count("attn")) == (21, 17, 4)
    assert model.params() == checkpoint_params(config) == 3_973_556_832
    imported = load_hf_config(write(tmp_path, config))
    same = {"name": model.name, "layer_pattern": ""}
    assert {**imported.to_dict(), **same} == {**model.to_dict(), **same}
