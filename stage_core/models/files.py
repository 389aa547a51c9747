"""Models described in files rather than in code.

Contents:

- :func:`model_from_mapping`: a :class:`ModelSpec` from a mapping of field names (a TOML table),
  rejecting unknown keys with their name and source.
- :func:`load_model_toml`: a model file, e.g. ``family = "llama"`` plus its dims; the optional
  key ``base = "llama3-8b"`` starts from a flavor and overrides the keys given.
- :func:`load_hf_config`: a Hugging Face ``config.json`` of the Llama / Mistral / Mixtral kind.
- :func:`load_model`: a flavor name, a ``.toml`` path or a ``.json`` path.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.models.spec import Activation, Family, ModelSpec, Norm, Position

_FIELDS = MappingProxyType({field.name: field for field in dataclasses.fields(ModelSpec)})
_INT_FIELDS = frozenset(name for name, field in _FIELDS.items() if field.type == "int")
_BOOL_FIELDS = frozenset(name for name, field in _FIELDS.items() if field.type == "bool")
_STR_FIELDS = frozenset({"name", "family", "norm", "activation", "position"})

#: ``model_type`` values of Hugging Face configs with a Llama-style block, and their family.
_HF_FAMILIES: Mapping[str, Family] = MappingProxyType(
    {"llama": Family.LLAMA, "mistral": Family.LLAMA, "mixtral": Family.MIXTRAL}
)


def _line_of(text: str, key: str) -> str:
    """`` (line N)`` where ``key = …`` first appears in ``text``, else empty."""
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=", re.MULTILINE)
    match = pattern.search(text)
    return f" (line {text.count(chr(10), 0, match.start()) + 1})" if match else ""


def _check_type(key: str, value: Any, where: str) -> None:
    if key in _INT_FIELDS:
        ok = isinstance(value, int) and not isinstance(value, bool)
        wanted = "an integer"
    elif key in _BOOL_FIELDS:
        ok, wanted = isinstance(value, bool), "true or false"
    elif key in _STR_FIELDS:
        ok, wanted = isinstance(value, str), "a string"
    else:  # capacity_factor
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        wanted = "a number (omit it for dropless routing)"
    if not ok:
        raise ConfigError(f"{where}: `{key}` must be {wanted}, but got {key}={value!r}")


def model_from_mapping(data: Mapping[str, Any], source: str, *, text: str = "") -> ModelSpec:
    """A :class:`ModelSpec` from ``data``; ``source`` (and ``text`` for line numbers) name it.

    Keys are :class:`ModelSpec` field names; ``base`` names a flavor to start from, in which
    case only the keys to change are needed. ``name`` defaults to ``source``'s file stem.
    """
    for key in data:
        if key != "base" and key not in _FIELDS:
            raise ConfigError(
                f"{source}{_line_of(text, key)}: unknown model key {key!r}; "
                f"known keys are base, {', '.join(_FIELDS)}"
            )
    for key, value in data.items():
        if key != "base":
            _check_type(key, value, f"{source}{_line_of(text, key)}")
    values = {key: value for key, value in data.items() if key != "base"}
    if "base" in data:
        base = data["base"]
        if not isinstance(base, str):
            raise ConfigError(f"{source}: `base` must be a flavor name, but got base={base!r}")
        try:
            return get_flavor(base).with_overrides(**values)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error}") from None
    values.setdefault("name", Path(source).stem)
    missing = [
        name
        for name, field in _FIELDS.items()
        if name not in values
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f'{source}: missing model keys {missing} (or give `base = "<flavor>"`)')
    try:
        return ModelSpec(**values)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"model file {str(path)!r} does not exist") from None
    except OSError as error:
        raise ConfigError(f"cannot read model file {str(path)!r}: {error.strerror}") from None


def load_model_toml(path: str | Path) -> ModelSpec:
    """A model from a TOML file whose top-level keys are :class:`ModelSpec` fields (or ``base``)."""
    path = Path(path)
    text = _read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return model_from_mapping(data, str(path), text=text)


def _hf_int(config: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: missing key {key!r}")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {key!r} must be an integer, but got {key}={value!r}")
    return value


def load_hf_config(path: str | Path) -> ModelSpec:
    """A model from a Hugging Face ``config.json`` with a Llama-style block.

    ``model_type`` must be ``llama``, ``mistral`` or ``mixtral``. Mapping: ``hidden_size``,
    ``intermediate_size`` (the FFN, or each expert's FFN), ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads`` (default: MHA), ``head_dim`` (optional),
    ``vocab_size``, ``max_position_embeddings``, ``num_local_experts`` and
    ``num_experts_per_tok`` (MoE), ``tie_word_embeddings`` (default false), ``attention_bias``
    / ``mlp_bias``, ``attention_dropout``. An ``rms_norm_eps`` key means RMSNorm, else LayerNorm.
    The gated MLP is SwiGLU and positions are rotary. The training sequence length is
    ``rope_scaling.original_max_position_embeddings`` when the context was extended after
    pre-training, else ``max_position_embeddings``. The name is the enclosing folder's for a
    file called ``config.json``, else the file stem.
    """
    path = Path(path)
    where = str(path)
    try:
        config = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object, but got {type(config).__name__}")
    model_type = config.get("model_type")
    family = _HF_FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise ConfigError(
            f"{where}: unsupported model_type {model_type!r}; supported: {', '.join(_HF_FAMILIES)}"
        )
    attention_bias = bool(config.get("attention_bias", False))
    if bool(config.get("mlp_bias", attention_bias)) != attention_bias:
        raise ConfigError(f"{where}: `attention_bias` and `mlp_bias` must agree, but they differ")
    heads = _hf_int(config, "num_attention_heads", where)
    max_position = _hf_int(config, "max_position_embeddings", where)
    rope_scaling = config.get("rope_scaling")
    seq_len = max_position
    if isinstance(rope_scaling, dict) and "original_max_position_embeddings" in rope_scaling:
        seq_len = _hf_int(rope_scaling, "original_max_position_embeddings", f"{where} rope_scaling")
    num_experts = _hf_int(config, "num_local_experts", where, 0)
    ffn = _hf_int(config, "intermediate_size", where)
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    try:
        return ModelSpec(
            name=name or "hf-model",
            family=family,
            layers=_hf_int(config, "num_hidden_layers", where),
            hidden=_hf_int(config, "hidden_size", where),
            ffn=ffn,
            heads=heads,
            kv_heads=_hf_int(config, "num_key_value_heads", where, heads),
            head_dim=config.get("head_dim") or 0,
            vocab=_hf_int(config, "vocab_size", where),
            seq_len=seq_len,
            max_position=max_position,
            norm=Norm.RMSNORM if "rms_norm_eps" in config else Norm.LAYERNORM,
            activation=Activation.SWIGLU,
            position=Position.ROTARY,
            dropout=float(config.get("attention_dropout", 0.0) or 0.0) > 0.0,
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            bias=attention_bias,
            num_experts=num_experts,
            top_k=_hf_int(config, "num_experts_per_tok", where, 0) if num_experts else 0,
            expert_ffn=ffn if num_experts else 0,
        )
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def load_model(flavor_or_path: str | Path) -> ModelSpec:
    """A flavor name (see :func:`~stage_core.models.flavors.list_flavors`) or a model file.

    A :class:`~pathlib.Path`, or a string ending in ``.toml`` or ``.json``, is read as a file;
    any other string is a flavor name.
    """
    suffix = Path(flavor_or_path).suffix.lower()
    if suffix == ".toml":
        return load_model_toml(flavor_or_path)
    if suffix == ".json":
        return load_hf_config(flavor_or_path)
    if isinstance(flavor_or_path, Path):
        raise ConfigError(
            f"model file {str(flavor_or_path)!r} must end in .toml or .json, but got {suffix!r}"
        )
    return get_flavor(flavor_or_path)
