"""Model descriptions: what is trained, independent of how it is parallelized.

Contents:

- :mod:`~stage_core.models.spec`: :class:`ModelSpec` and its vocabularies (:class:`Family`,
  :class:`Norm`, :class:`Activation`, :class:`Position`).
- :mod:`~stage_core.models.flavors`: named flavors with published dims (:func:`get_flavor`,
  :func:`list_flavors`).
- :mod:`~stage_core.models.files`: models from TOML files (:func:`load_model`,
  :func:`load_model_toml`, :func:`model_from_mapping`).
- :mod:`~stage_core.models.hf`: models from Hugging Face ``config.json`` (:func:`load_hf_config`:
  Llama, Mistral, Mixtral, Qwen3, Qwen3-MoE, Nemotron, DeepSeek, GPT-OSS; Nemotron-H hybrids
  through :mod:`~stage_core.models.hf_ssm`; unmappable keys are named).
- :mod:`~stage_core.models.layers`: per-layer kinds (attention, sliding window, Mamba-2; MLP,
  MoE) and the ``layer_pattern`` language.
"""

from __future__ import annotations

from stage_core.models.files import load_model, load_model_toml, model_from_mapping
from stage_core.models.flavors import get_flavor, list_flavors
from stage_core.models.hf import load_hf_config
from stage_core.models.spec import Activation, Family, ModelSpec, Norm, Position

__all__ = [
    "Activation",
    "Family",
    "ModelSpec",
    "Norm",
    "Position",
    "get_flavor",
    "list_flavors",
    "load_hf_config",
    "load_model",
    "load_model_toml",
    "model_from_mapping",
]
