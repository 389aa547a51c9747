"""Models described in files rather than in code.

Contents:

- :func:`model_from_mapping`: a :class:`ModelSpec` from a mapping of field names (a TOML table),
  rejecting unknown keys with their name and source.
- :func:`load_model_toml`: a model file, e.g. ``family = "llama"`` plus its dims; the optional
  key ``base = "llama3-8b"`` starts from a flavor and overrides the keys given.
- :func:`load_hf_config` (from :mod:`~stage_core.models.hf`): a Hugging Face ``config.json``
  (Llama, Mistral, Mixtral, Qwen3, Qwen3-MoE, Nemotron).
- :func:`load_model`: a flavor name, a ``.toml`` path or a ``.json`` path.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.models.hf import load_hf_config
from stage_core.models.spec import ModelSpec
from stage_core.text_files import read_text_file

_FIELDS = MappingProxyType({field.name: field for field in dataclasses.fields(ModelSpec)})
_INT_FIELDS = frozenset(name for name, field in _FIELDS.items() if field.type == "int")
_BOOL_FIELDS = frozenset(name for name, field in _FIELDS.items() if field.type == "bool")
_STR_FIELDS = frozenset(
    {"family", "norm", "activation", "position"}
    | {name for name, field in _FIELDS.items() if field.type == "str"}
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


def load_model_toml(path: str | Path) -> ModelSpec:
    """A model from a TOML file whose top-level keys are :class:`ModelSpec` fields (or ``base``)."""
    path = Path(path)
    text = read_text_file(path, "model file", "a TOML file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return model_from_mapping(data, str(path), text=text)


def load_model(flavor_or_path: str | Path) -> ModelSpec:
    """A flavor name (see :func:`~stage_core.models.flavors.list_flavors`) or a model file.

    A :class:`~pathlib.Path`, or a string ending in ``.toml`` or ``.json``, is read as a file;
    a string with a path separator is a file too (one of another kind is an error naming it, not
    an unknown flavor); any other string is a flavor name.
    """
    expect(flavor_or_path, (str, Path), "model", "a flavor name or a model file's path")
    suffix = Path(flavor_or_path).suffix.lower()
    if suffix == ".toml":
        return load_model_toml(flavor_or_path)
    if suffix == ".json":
        return load_hf_config(flavor_or_path)
    if isinstance(flavor_or_path, Path) or any(sep in flavor_or_path for sep in "/\\"):
        raise ConfigError(
            f"model file {str(flavor_or_path)!r} must end in .toml or .json, but got "
            f"{suffix or 'no extension'!r}"
        )
    return get_flavor(flavor_or_path)
