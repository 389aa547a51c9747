"""From a trial's parameters to the design point a backend evaluates.

Contents:
    :func:`build_design_point`
        ``(study, params) → (model, parallel config, system)`` with the model registry, the
        parallel config and the system presets (imported when called, so this module loads
        before they exist).
    :func:`replace_path`
        a copy of a frozen dataclass tree with the value at a dotted path replaced (how searched
        hardware parameters reach the system).
    :func:`model_is_moe`
        whether the study's model has experts (``ep`` has no effect on a dense model).

A backend may bring its own ``build_design_point(study, params)`` method; the workers use it
instead of this module's function (test and plug-in backends that take raw parameters do).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.study.space import derive_dp
from stage_explore.study.spec import PARALLEL_KNOBS, StudySpec


def replace_path(root: Any, path: str, value: Any) -> Any:
    """``root`` with the field at ``path`` (``a.b.0.c``) set to ``value``; the rest shared.

    Steps through dataclass fields, mapping keys and sequence indices.
    """
    return _replace(root, path.split("."), value, path)


def _replace(root: Any, steps: list[str], value: Any, path: str) -> Any:
    head, rest = steps[0], steps[1:]

    def inner(child: Any) -> Any:
        return _replace(child, rest, value, path) if rest else value

    where = f"[system.search] {path}"
    if dataclasses.is_dataclass(root) and not isinstance(root, type):
        names = sorted(field.name for field in dataclasses.fields(root))
        if head not in names:
            raise ConfigError(
                f"{where}: {type(root).__name__} has no field {head!r}; "
                f"fields are: {', '.join(names)}"
            )
        return dataclasses.replace(root, **{head: inner(getattr(root, head))})
    if isinstance(root, Mapping):
        if head not in root:
            raise ConfigError(f"{where}: no key {head!r}; keys are: {', '.join(map(str, root))}")
        return {**root, head: inner(root[head])}
    if isinstance(root, tuple | list) and head.isdigit() and int(head) < len(root):
        items = list(root)
        items[int(head)] = inner(items[int(head)])
        return type(root)(items)
    raise ConfigError(f"{where}: cannot step into {type(root).__name__} at {head!r}")


@functools.lru_cache(maxsize=64)
def _cached(loader: Any, argument: Any) -> Any:
    """Models and systems from names or files, loaded once per process (a memo of pure
    loaders: every candidate of a study shares them, and so do the backend's own memos)."""
    return loader(argument)


def _study_model(study: StudySpec) -> Any:
    from stage_core.models import load_model, model_from_mapping

    if study.model.dims is not None:
        return model_from_mapping(study.model.dims, f"{study.path} [model.dims]")
    return _cached(load_model, study.model.argument())


def model_is_moe(study: StudySpec) -> bool | None:
    """Whether the study's model has experts; ``None`` when it cannot be loaded here (the
    trials then say why, and ``ep`` is not pinned)."""
    try:
        return bool(_study_model(study).is_moe)
    except ConfigError:
        return None


def build_design_point(study: StudySpec, params: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """The (model, parallel config, system) of one trial; invalid combinations raise ConfigError.

    For an inference study the second item is a
    :class:`~stage_explore.analytical.serving_design.ServingDesign` instead.
    """
    from stage_core.parallel import ParallelConfig
    from stage_core.parallel.vocab import Fp8Recipe
    from stage_explore.system import load_system, system_from_mapping

    model = _study_model(study)
    if study.workload.requests is not None:  # an inference study: a serving deployment
        from stage_explore.study.serving_space import serving_design

        design = serving_design(params, study.workload.requests)
    if study.system.inline is not None:
        system = system_from_mapping(study.system.inline, source=f"{study.path} [system.inline]")
    else:
        system = _cached(load_system, study.system.argument())
    for param in study.space.hardware:
        system = replace_path(system, param.path, params[param.column])
    if study.workload.requests is not None:
        return model, design, system
    knobs = {name: params[name] for name in PARALLEL_KNOBS if name != "num_gpus"}
    dp = derive_dp(params)
    shard = knobs.pop("dp_shard")  # 0: all of dp; a group of dp or more, or no ZeRO: the same
    layers = knobs.pop("recompute_num_layers")  # 0: every layer; only under full recompute
    method = knobs.pop("recompute_method")  # which N layers (with N > 0 only)
    recipe = knobs.pop("fp8_recipe")  # how FP8 scales (under precision fp8 only)
    workload = study.workload
    parallel = ParallelConfig(
        dp=dp,
        dp_shard=shard if knobs["zero"] and 0 < shard < dp else None,
        recompute_num_layers=layers if layers and knobs["recompute"] == "full" else None,
        recompute_method=method if layers and knobs["recompute"] == "full" else "block",
        fp8_recipe=Fp8Recipe(recipe if knobs["precision"] == "fp8" else "delayed"),
        global_batch=workload.global_batch,
        seq_len=workload.sequence_length,
        **knobs,
    )
    parallel.validate(model)
    return model, parallel, system
