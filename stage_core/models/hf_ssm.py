"""Hybrid Mamba-2 models from Hugging Face ``config.json`` files (``model_type`` ``nemotron_h``).

Contents: :func:`nemotron_h_spec` (called by :func:`stage_core.models.hf.load_hf_config`) and
:func:`hybrid_pattern` (a ``hybrid_override_pattern`` in STAGE's pattern language).

Mapping (the keys of transformers' ``NemotronHConfig``; Nemotron-H, arXiv 2504.03624):
``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP, each its own layer with
its pre-norm; or ``layers_block_type``: ``mamba``, ``attention``, ``mlp``) → ``layer_pattern``;
``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``,
``chunk_size`` → the ``ssm_*`` fields (``d_inner = mamba_num_heads·mamba_head_dim``, as the
modelling code computes it: ``expand`` is then unused, and Nemotron-H-4B's ``expand·hidden``
differs from it); ``hidden_size``, ``intermediate_size`` (MLP, ``mlp_hidden_act`` ``relu2``:
squared ReLU), ``num_hidden_layers`` (must equal the pattern's length),
``num_attention_heads``, ``num_key_value_heads``, ``attention_head_dim`` (or ``head_dim``),
``vocab_size``, ``max_position_embeddings`` (the pre-training sequence),
``tie_word_embeddings``, ``attention_bias``/``mlp_bias``/``use_bias`` (must agree),
``mamba_proj_bias`` (must be false: Megatron-Core's mixer has none), ``use_conv_bias`` (must be
true), ``mamba_hidden_act`` (``silu``), ``attention_dropout``/``hidden_dropout``. No position
encoding (the attention layers have no RoPE). MoE layers (``E``, Nemotron-H v2/Nemotron 3) are
refused, naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models.hf import flag, kv_heads, prefixed, probability
from stage_core.models.layers import parse_kind
from stage_core.models.spec import Activation, Family, ModelSpec, Norm, Position

#: ``hybrid_override_pattern`` characters and ``layers_block_type`` names → STAGE layer kinds.
_PATTERN_KINDS = {"M": "mamba", "*": "attn", "-": "mlp"}
_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-"}

#: Keys read by :func:`nemotron_h_spec`.
NEMOTRON_H_KEYS = frozenset(
    {
        "model_type", "hybrid_override_pattern", "layers_block_type", "hidden_size",
        "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "attention_head_dim", "head_dim", "vocab_size", "max_position_embeddings",
        "tie_word_embeddings", "attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias",
        "use_conv_bias", "mlp_hidden_act", "hidden_act", "mamba_hidden_act", "mamba_num_heads",
        "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size", "expand",
        "attention_dropout", "hidden_dropout", "rms_norm_eps", "layer_norm_epsilon",
        "n_routed_experts", "sliding_window",
    }
)  # fmt: skip
#: Keys that change no count: metadata, token ids, initialisation, numerics, inference options.
NEMOTRON_H_IGNORED = frozenset(
    {
        "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
        "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
        "use_cache", "num_logits_to_keep", "rescale_prenorm_residual", "residual_in_fp32",
        "use_mamba_kernels", "time_step_min", "time_step_max", "time_step_floor",
        "time_step_limit", "time_step_rank", "rope_theta", "tokenizer_class",
    }
)  # fmt: skip


def _fail(where: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{where}: cannot map key {key!r} (= {value!r}): {why}")


def _int(config: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: missing key {key!r}")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {key!r} must be an integer, but got {key}={value!r}")
    return value


def hybrid_pattern(pattern: str, where: str = "hybrid_override_pattern") -> str:
    """``"M-M*--"`` as STAGE's ``layer_pattern``, run lengths without an open repeat (so it
    lays out exactly ``len(pattern)`` layers): ``"mamba, mlp, mamba, attn, mlp*2"``."""
    unknown = sorted(set(pattern) - set(_PATTERN_KINDS))
    if unknown or not pattern:
        raise _fail(
            where, "hybrid_override_pattern", pattern,
            f"expected the layer characters {sorted(_PATTERN_KINDS)} (MoE 'E' is not mapped)",
        )  # fmt: skip
    runs: list[list[Any]] = []
    for char in pattern:
        if runs and runs[-1][0] == char:
            runs[-1][1] += 1
        else:
            runs.append([char, 1])
    kind = {c: parse_kind(token).token for c, token in _PATTERN_KINDS.items()}
    return ", ".join(kind[c] + (f"*{count}" if count > 1 else "") for c, count in runs)


def _pattern(config: Mapping[str, Any], where: str) -> str:
    pattern = config.get("hybrid_override_pattern")
    types = config.get("layers_block_type")
    if types is not None:
        if not isinstance(types, list) or any(t not in _BLOCK_TYPES for t in types):
            raise _fail(where, "layers_block_type", types, f"expected {sorted(_BLOCK_TYPES)}")
        from_types = "".join(_BLOCK_TYPES[t] for t in types)
        if pattern is not None and pattern != from_types:
            raise _fail(where, "layers_block_type", types, "differs from hybrid_override_pattern")
        pattern = from_types
    if isinstance(pattern, list):
        pattern = "".join(str(c) for c in pattern)
    if not isinstance(pattern, str):
        raise ConfigError(f"{where}: missing key 'hybrid_override_pattern'")
    return hybrid_pattern(pattern, where)


def _check(config: Mapping[str, Any], where: str) -> None:
    for key, value in config.items():
        if key not in NEMOTRON_H_KEYS and key not in NEMOTRON_H_IGNORED:
            raise _fail(where, key, value, "not a key of the nemotron_h architecture STAGE models")
    wanted = {"mlp_hidden_act": "relu2", "hidden_act": "relu2", "mamba_hidden_act": "silu"}
    for key, act in wanted.items():
        if config.get(key, act) != act:
            raise _fail(where, key, config[key], f"Nemotron-H uses {act!r}")
    musts = {"mamba_proj_bias": False, "use_conv_bias": True}
    for key, must in musts.items():
        if config.get(key, must) != must:
            raise _fail(where, key, config[key], f"Megatron-Core's Mamba mixer has {key}={must}")
    if config.get("n_routed_experts"):
        raise _fail(where, "n_routed_experts", config["n_routed_experts"], "MoE is not mapped")
    if config.get("sliding_window") is not None:
        raise _fail(where, "sliding_window", config["sliding_window"], "no sliding window")
    biases = {k: flag(config, k, where) for k in ("attention_bias", "mlp_bias", "use_bias")}
    if len(set(biases.values())) > 1:
        raise ConfigError(f"{where}: {', '.join(biases)} must agree, but got {biases}")


def nemotron_h_spec(config: Mapping[str, Any], where: str, name: str) -> ModelSpec:
    """A Nemotron-H hybrid from its ``config.json`` values (module docstring)."""
    _check(config, where)
    pattern = _pattern(config, where)
    heads = _int(config, "num_attention_heads", where)
    head_dim = config.get("attention_head_dim", config.get("head_dim")) or 0
    dropout = max(
        probability(config, "attention_dropout", where),
        probability(config, "hidden_dropout", where),
    )
    try:
        return ModelSpec(
            name=name,
            family=Family.NEMOTRON,
            layers=_int(config, "num_hidden_layers", where),
            hidden=_int(config, "hidden_size", where),
            ffn=_int(config, "intermediate_size", where),
            heads=heads,
            kv_heads=kv_heads(config, where, heads),
            head_dim=head_dim,
            vocab=_int(config, "vocab_size", where),
            seq_len=_int(config, "max_position_embeddings", where),
            norm=Norm.RMSNORM,
            activation=Activation.SQUARED_RELU,
            position=Position.NONE,
            dropout=dropout > 0.0,
            tied_embeddings=flag(config, "tie_word_embeddings", where),
            bias=flag(config, "use_bias", where),
            layer_pattern=pattern,
            ssm_heads=_int(config, "mamba_num_heads", where),
            ssm_head_dim=_int(config, "mamba_head_dim", where),
            ssm_state=_int(config, "ssm_state_size", where),
            ssm_groups=_int(config, "n_groups", where, 1),
            ssm_conv=_int(config, "conv_kernel", where, 4),
            ssm_chunk=_int(config, "chunk_size", where, 128),
        )
    except ConfigError as error:
        raise prefixed(error, where) from None
