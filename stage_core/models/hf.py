"""Models from Hugging Face ``config.json`` files.

Contents:

- :func:`load_hf_config`: a :class:`ModelSpec` from the config of a Llama, Mistral, Mixtral,
  Qwen3, Qwen3-MoE, Nemotron, DeepSeek-V2 or DeepSeek-V3 model, or a Nemotron-H hybrid
  (:mod:`stage_core.models.hf_ssm`); every key is mapped, known to
  be irrelevant to cost
  (:data:`IGNORED_KEYS`), or a one-line :class:`ConfigError` naming it.

Mapping (all types): ``hidden_size``, ``intermediate_size`` (the dense FFN; Mixtral's experts),
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (absent or null: MHA),
``head_dim`` (optional), ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``
(default false), ``attention_bias``/``mlp_bias`` (must agree), ``attention_dropout``,
``hidden_act`` (``silu`` for the gated SwiGLU types, ``relu2`` — squared ReLU, not gated — for
Nemotron); the norm by ``model_type`` (Nemotron's LayerNorm, RMSNorm for the others, with or
without ``rms_norm_eps``: only its epsilon, which the modelling code defaults). The
training sequence is ``rope_scaling.original_max_position_embeddings`` when the context was
extended after pre-training, else ``max_position_embeddings``. MoE: ``num_local_experts``
(Mixtral) or ``num_experts`` (Qwen3-MoE), ``num_experts_per_tok``, ``moe_intermediate_size``
(Qwen3-MoE expert width), ``decoder_sparse_step`` (must be 1: every layer MoE) and
``mlp_only_layers`` (a prefix ``[0, …, k−1]`` of dense layers → ``first_k_dense = k``).
Qwen3 and Qwen3-MoE always have QK-norm (``q_norm``/``k_norm`` in their modelling code; no key).
Sliding-window attention: ``sliding_window`` on the layers ``layer_types`` marks
``sliding_attention`` (without it every layer, or Qwen's layers from ``max_window_layers`` on;
none when ``use_sliding_window`` is false). A true/false key must be JSON ``true`` or ``false``
and a dropout a number from 0 to 1 (:func:`flag`, :func:`probability`).
DeepSeek-V2/V3 (multi-head latent attention, DeepSeek MoE): ``q_lora_rank`` (null: no query
latent), ``kv_lora_rank``, ``qk_nope_head_dim`` (the model's ``head_dim``),
``qk_rope_head_dim``, ``v_head_dim``, ``n_routed_experts``, ``n_shared_experts``,
``first_k_dense_replace``, ``moe_layer_freq``, ``n_group`` / ``topk_group`` (group-limited
routing, ``router_groups`` / ``router_group_topk``, when ``topk_group`` < ``n_group``); the
routing rule's numerics (``topk_method``, ``scoring_func``, ``routed_scaling_factor``,
``aux_loss_alpha``, ``seq_aux``) and the checkpoint's ``quantization_config`` and ``ep_size``
change no count.
Approximated: Nemotron's ``partial_rotary_factor`` (RoPE's element-wise cost is counted over
the whole head). DeepSeek-V3's ``num_nextn_predict_layers`` maps to ``mtp_layers`` (its
multi-token-prediction modules).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models.layers import Ffn, LayerKind, Mixer, compress_kinds
from stage_core.models.spec import Activation, Family, ModelSpec, Norm, Position
from stage_core.text_files import read_text_file

#: ``model_type`` → family.
HF_FAMILIES: Mapping[str, Family] = MappingProxyType(
    {
        "llama": Family.LLAMA,
        "mistral": Family.LLAMA,
        "mixtral": Family.MIXTRAL,
        "qwen3": Family.QWEN3,
        "qwen3_moe": Family.QWEN3,
        "nemotron": Family.NEMOTRON,
        "deepseek_v2": Family.DEEPSEEK_MOE,
        "deepseek_v3": Family.DEEPSEEK_MOE,
        "gpt_oss": Family.GPT_OSS,
    }
)
_DEEPSEEK_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})
#: ``model_type`` → the ``hidden_act`` its MLP must use, and the activation that means.
_ACTIVATIONS: Mapping[str, tuple[str, Activation]] = MappingProxyType(
    {
        **{name: ("silu", Activation.SWIGLU) for name in HF_FAMILIES if name != "nemotron"},
        "nemotron": ("relu2", Activation.SQUARED_RELU),
    }
)
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe"})
#: Types whose blocks use LayerNorm (Nemotron's ``NemotronLayerNorm1P``, epsilon ``norm_eps``);
#: the others' modelling code uses RMSNorm whether or not the config states ``rms_norm_eps``
#: (its epsilon; the config class defaults it). Before s25 a config without that key was read
#: as LayerNorm (s25 review).
_LAYERNORM_TYPES = frozenset({"nemotron"})
#: Types with a learned attention sink per head (GPT-OSS; ``sinks`` in its modelling code).
_SINK_TYPES = frozenset({"gpt_oss"})
#: GPT-OSS keys: ``experts_per_token`` (= ``num_experts_per_tok``); the clamp of its SwiGLU
#: (``swiglu_limit``), the RoPE's ``initial_context_length`` (= rope_scaling's original
#: length) and the checkpoint's MXFP4 ``quantization_config`` change no count.
GPT_OSS_KEYS = frozenset(
    {"experts_per_token", "swiglu_limit", "initial_context_length", "quantization_config"}
)
#: ``layer_types`` entries and the mixer each means.
_LAYER_TYPES: Mapping[str, Mixer] = MappingProxyType(
    {"full_attention": Mixer.ATTENTION, "sliding_attention": Mixer.SLIDING}
)

#: Keys read by :func:`load_hf_config`.
MAPPED_KEYS = frozenset(
    {
        "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
        "max_position_embeddings", "rope_scaling", "rms_norm_eps", "norm_eps",
        "tie_word_embeddings", "attention_bias", "mlp_bias", "attention_dropout", "hidden_act",
        "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "decoder_sparse_step", "mlp_only_layers", "sliding_window", "use_sliding_window",
        "max_window_layers", "layer_types", "partial_rotary_factor",
        "experts_per_token",
    }
)  # fmt: skip
#: Keys that change no FLOP, byte or parameter count: metadata, token ids, initialisation,
#: numerics (eps, RoPE base), inference caching and router loss coefficients.
IGNORED_KEYS = frozenset(
    {
        "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
        "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
        "rope_theta", "pretraining_tp", "output_router_logits", "router_aux_loss_coef",
        "router_jitter_noise", "norm_topk_prob", "auto_map", "tokenizer_class",
    }
)  # fmt: skip
#: Keys of DeepSeek-V2/V3 configs only: mapped (latent attention, DeepSeek MoE) or, for the
#: routing numerics and the checkpoint's quantization, changing no count; the MTP modules.
DEEPSEEK_KEYS = frozenset(
    {
        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
        "num_nextn_predict_layers", "topk_method", "n_group", "topk_group", "scoring_func",
        "routed_scaling_factor", "aux_loss_alpha", "seq_aux", "quantization_config", "ep_size",
    }
)  # fmt: skip


def _read(path: Path) -> dict[str, Any]:
    text = read_text_file(path, "model file", "a Hugging Face config.json")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object, but got {type(config).__name__}")
    return config


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, with a list's or object's length, so
    an error quoting a per-layer list or a nested config stays one readable line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} entries)" if isinstance(value, (list, dict)) else ""
    return f"{text[:limit]}…{size}"


def _int(config: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: missing key {key!r}")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {key!r} must be an integer, but got {key}={shown(value)}")
    return value


def flag(config: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    """A true/false key (JSON ``true``/``false``; absent or null: ``default``); any other value
    is a one-line :class:`ConfigError` (s22 review: ``"tie_word_embeddings": "false"`` was read
    as tied, Python's ``bool("false")``)."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {key!r} must be true or false, but got {key}={value!r}")
    return value


def probability(config: Mapping[str, Any], key: str, where: str) -> float:
    """A dropout probability: a number from 0 to 1 (absent or null: 0); any other value is a
    one-line :class:`ConfigError` (s22 review: ``"attention_dropout": "abc"`` was a
    ``ValueError`` traceback)."""
    value = config.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: {key!r} must be a number from 0 to 1, but got {key}={value!r}")
    return float(value)


def kv_heads(config: Mapping[str, Any], where: str, heads: int) -> int:
    """``num_key_value_heads``: absent or null, ``heads`` (multi-head attention, as the Hugging
    Face config classes read ``None``: LlamaConfig's "if num_key_value_heads is None:
    num_key_value_heads = num_attention_heads"); else an integer >= 1. Before s25 a null was
    "missing key" and a 0 silently became ``heads`` (ModelSpec's "derive when 0"; s25 review)."""
    value = config.get("num_key_value_heads")
    if value is None:
        return heads
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{where}: 'num_key_value_heads' must be an integer >= 1 (or null: one per attention "
            f"head), but got num_key_value_heads={value!r}"
        )
    return value


def prefixed(error: ConfigError, where: str) -> ConfigError:
    """``error`` with ``where`` in front, once (a key reader's error already names it)."""
    text = str(error)
    return ConfigError(text if text.startswith(f"{where}:") else f"{where}: {text}")


def _unmappable(where: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{where}: cannot map key {key!r} (= {shown(value)}): {why}")


def _text_config_hint(config: Mapping[str, Any]) -> str:
    """For a multimodal config (LLaVA, Mllama, Gemma 3, Qwen2.5-VL …) whose language model is
    its ``text_config`` object: what to do, since STAGE models the language model alone and
    reading that part silently would leave the vision tower out of every count."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        return ""
    inner = text.get("model_type")
    if inner in HF_FAMILIES or inner == "nemotron_h":
        return (
            f" (a multimodal config: its language model is the `text_config` object, model_type "
            f"{inner!r}; to model that model alone, save that object as its own config.json)"
        )
    return f" (a multimodal config whose `text_config` has model_type {inner!r}, not modelled)"


def _check_keys(config: Mapping[str, Any], where: str, model_type: str) -> None:
    extra = DEEPSEEK_KEYS if model_type in _DEEPSEEK_TYPES else frozenset()
    extra = GPT_OSS_KEYS if model_type in _SINK_TYPES else extra
    for key, value in config.items():
        if key not in MAPPED_KEYS and key not in IGNORED_KEYS and key not in extra:
            raise _unmappable(
                where, key, value, f"not a key of the {model_type} architectures STAGE models"
            )
    wanted, _ = _ACTIVATIONS[model_type]
    act = config.get("hidden_act", wanted)
    if act != wanted:
        raise _unmappable(where, "hidden_act", act, f"a {model_type} MLP uses {wanted!r}")
    types = config.get("layer_types")
    if types is not None and (not isinstance(types, list) or set(types) - set(_LAYER_TYPES)):
        why = f"a list of {sorted(_LAYER_TYPES)}, one per layer"
        raise _unmappable(where, "layer_types", types, why)
    top_k = config.get("num_experts_per_tok")
    alias = config.get("experts_per_token", top_k)
    if top_k is not None and alias != top_k:
        raise _unmappable(where, "experts_per_token", alias, f"num_experts_per_tok is {top_k}")
    step = config.get("decoder_sparse_step", 1)
    if step != 1:
        raise _unmappable(where, "decoder_sparse_step", step, "every layer must be MoE (1)")


def _window_fields(config: Mapping[str, Any], where: str, layers: int) -> dict[str, Any]:
    """Sliding-window attention: ``sliding_window`` (null or ``use_sliding_window`` false:
    none) on the layers ``layer_types`` marks ``sliding_attention``; without ``layer_types``,
    every layer (Mistral) or, with ``max_window_layers`` (Qwen), the layers from that index on."""
    window = config.get("sliding_window")
    types = config.get("layer_types")
    if types is not None and len(types) != layers:
        why = f"one entry per layer (num_hidden_layers={layers})"
        raise _unmappable(where, "layer_types", f"{len(types)} entries", why)
    if window is None or not flag(config, "use_sliding_window", where, True):
        if types is not None and "sliding_attention" in types:
            raise _unmappable(where, "layer_types", "sliding_attention", "no sliding_window")
        return {}
    window = _int(config, "sliding_window", where)
    if types is not None:
        mixers = [_LAYER_TYPES[t] for t in types]
    else:
        first = _int(config, "max_window_layers", where, 0)
        mixers = [Mixer.SLIDING if i >= first else Mixer.ATTENTION for i in range(layers)]
    if Mixer.SLIDING not in mixers:
        return {}
    return {"sliding_window": window, "layer_mixers": mixers}


def _first_k_dense(config: Mapping[str, Any], where: str) -> int:
    dense = config.get("mlp_only_layers") or []
    if not isinstance(dense, list) or dense != list(range(len(dense))):
        raise _unmappable(where, "mlp_only_layers", dense, "only a prefix [0, …, k−1] of layers")
    return len(dense)


def _deepseek_fields(config: Mapping[str, Any], where: str, ffn: int) -> dict[str, Any]:
    """Latent attention and DeepSeek MoE (module docstring)."""
    if _int(config, "v_head_dim", where) < 1:  # ModelSpec's 0 is "head_dim" (s25 review)
        raise _unmappable(where, "v_head_dim", config["v_head_dim"], "a value head width: >= 1")
    query = config.get("q_lora_rank")  # null: the queries have no latent (DeepSeek-V2-Lite)
    fields: dict[str, Any] = {
        "q_lora_rank": 0 if query is None else _int(config, "q_lora_rank", where),
        "kv_lora_rank": _int(config, "kv_lora_rank", where),
        "qk_rope_head_dim": _int(config, "qk_rope_head_dim", where),
        "v_head_dim": _int(config, "v_head_dim", where),
        "mtp_layers": _int(config, "num_nextn_predict_layers", where, 0),
    }
    experts = _int(config, "n_routed_experts", where, 0)
    if experts:
        fields.update(
            num_experts=experts,
            top_k=_int(config, "num_experts_per_tok", where),
            expert_ffn=_int(config, "moe_intermediate_size", where, ffn),
            num_shared_experts=_int(config, "n_shared_experts", where, 0),
            first_k_dense=_int(config, "first_k_dense_replace", where, 0),
            moe_layer_interval=_int(config, "moe_layer_freq", where, 1),
        )
        limits = {k: config[k] for k in ("n_group", "topk_group") if config.get(k) is not None}
        groups, group_topk = _int(limits, "n_group", where, 1), _int(limits, "topk_group", where, 1)
        if 0 < group_topk < groups:  # DeepSeek-V3's 8 / 4; Kimi K2's 1 / 1 limits nothing
            fields.update(router_groups=groups, router_group_topk=group_topk)
    return fields


def _moe_fields(config: Mapping[str, Any], where: str, ffn: int) -> dict[str, Any]:
    experts_key = "num_experts" if "num_experts" in config else "num_local_experts"
    num_experts = _int(config, experts_key, where, 0)
    if not num_experts:
        return {}
    return {
        "num_experts": num_experts,
        "top_k": _int(config, "num_experts_per_tok", where),
        "expert_ffn": _int(config, "moe_intermediate_size", where, ffn),
        "first_k_dense": _first_k_dense(config, where),
    }


def load_hf_config(path: str | Path) -> ModelSpec:
    """A model from a Hugging Face ``config.json`` (see the module docstring for the mapping).

    The name is the enclosing folder's for a file called ``config.json``, else the file stem.
    """
    path = Path(path)
    where = str(path)
    config = _read(path)
    model_type = config.get("model_type")
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    if model_type == "nemotron_h":  # hybrid Mamba-2 stacks: stage_core/models/hf_ssm.py
        from stage_core.models.hf_ssm import nemotron_h_spec

        return nemotron_h_spec(config, where, name or "hf-model")
    family = HF_FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None or not isinstance(model_type, str):
        supported = ", ".join((*HF_FAMILIES, "nemotron_h"))
        if model_type is None:  # "unsupported model_type None" read as a bug of STAGE's
            raise ConfigError(
                f"{where}: no `model_type` key; expected a Hugging Face config.json whose "
                f"model_type is one of: {supported}"
            )
        raise ConfigError(
            f"{where}: unsupported model_type {model_type!r}{_text_config_hint(config)}; "
            f"supported: {supported}"
        )
    _check_keys(config, where, model_type)
    attention_bias = flag(config, "attention_bias", where)
    if flag(config, "mlp_bias", where, attention_bias) != attention_bias:
        raise ConfigError(f"{where}: `attention_bias` and `mlp_bias` must agree, but they differ")
    heads = _int(config, "num_attention_heads", where)
    max_position = _int(config, "max_position_embeddings", where)
    rope_scaling = config.get("rope_scaling")
    seq_len = max_position
    if isinstance(rope_scaling, dict) and "original_max_position_embeddings" in rope_scaling:
        seq_len = _int(rope_scaling, "original_max_position_embeddings", f"{where} rope_scaling")
    ffn = _int(config, "intermediate_size", where)
    layers = _int(config, "num_hidden_layers", where)
    moe = (
        _deepseek_fields(config, where, ffn)
        if model_type in _DEEPSEEK_TYPES
        else _moe_fields(config, where, ffn)
    )
    windows = _window_fields(config, where, layers)
    if windows:  # a per-layer pattern: each layer's mixer, the FFN by the MoE rule
        mixers = windows.pop("layer_mixers")
        first, interval = moe.pop("first_k_dense", 0), moe.pop("moe_layer_interval", 1)
        expert = moe.get("num_experts", 0) > 0
        kinds = tuple(
            LayerKind(mixer, Ffn.MOE if expert and i >= first and i % interval == 0 else Ffn.DENSE)
            for i, mixer in enumerate(mixers)
        )
        windows["layer_pattern"] = compress_kinds(kinds)
    try:
        return ModelSpec(
            name=name or "hf-model",
            family=family,
            layers=layers,
            hidden=_int(config, "hidden_size", where),
            ffn=ffn,
            heads=heads,
            kv_heads=kv_heads(config, where, heads),
            head_dim=(
                _int(config, "qk_nope_head_dim", where)
                if model_type in _DEEPSEEK_TYPES
                else config.get("head_dim") or 0
            ),
            vocab=_int(config, "vocab_size", where),
            seq_len=seq_len,
            max_position=max_position,
            norm=Norm.LAYERNORM if model_type in _LAYERNORM_TYPES else Norm.RMSNORM,
            activation=_ACTIVATIONS[model_type][1],
            position=Position.ROTARY,
            dropout=probability(config, "attention_dropout", where) > 0.0,
            tied_embeddings=flag(config, "tie_word_embeddings", where),
            bias=attention_bias,
            qk_norm=model_type in _QK_NORM_TYPES,
            attention_sinks=model_type in _SINK_TYPES,
            **moe,
            **windows,
        )
    except ConfigError as error:
        raise prefixed(error, where) from None
