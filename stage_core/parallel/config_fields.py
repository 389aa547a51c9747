"""The field checks of :class:`~stage_core.parallel.config.ParallelConfig` on construction:
each field's type and range, one line per problem naming the field, what it must be and the value;
the vocabularies' strings read as their enums, ``zero='fsdp'`` as 3, ``schedule`` aliases and
lists as tuples, in place on the frozen config. Moved out of :mod:`stage_core.parallel.config`
(s18 split6), which checks the fields' combinations and against a model."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeGuard

from stage_core.parallel.split import PipelineSplit
from stage_core.parallel.vocab import (
    FP8_GEMMS,
    RECOMPUTE_METHODS,
    RECOMPUTE_MODULES,
    SCHEDULE_ALIASES,
    CpStyle,
    Fp4Recipe,
    Fp8Recipe,
    MoeDispatcher,
    Precision,
    Recompute,
    Schedule,
)

if TYPE_CHECKING:
    from stage_core.parallel.config import ParallelConfig

#: Default rank order, outermost first.
DEFAULT_AXIS_ORDER: tuple[str, ...] = ("pp", "dp", "ep", "cp", "tp")

_ZERO_ALIASES: Mapping[str, int] = MappingProxyType({"fsdp": 3})
_POSITIVE = ("dp", "tp", "cp", "pp", "ep", "vpp", "micro_batch", "grad_bucket_bytes")
#: Fields that are a positive int or None, and what None means (said in the problem).
_POSITIVE_OR_NONE: Mapping[str, str] = MappingProxyType({
    "etp": " (= tp)",
    "dp_shard": " (= dp)",
    "seq_len": "",
    "recompute_num_layers": "",
    "microbatch_group_size_per_vp_stage": "",
})  # fmt: skip


def _is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int and not a bool (``True`` is no degree)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_or_none(name: str, value: object, meaning: str) -> str | None:
    """The problem of a field that must be a positive int or None (``meaning``: what None
    stands for, e.g. `` (= tp)``), or None when ``value`` is one."""
    if value is None or (_is_int(value) and value >= 1):
        return None
    return f"`{name}` must be a positive int or None{meaning}, but got {name}={value!r}"


def field_problems(config: ParallelConfig) -> list[str]:
    """Every field's type and range problem, one line each; the vocabularies' strings (and
    ``zero='fsdp'``, ``schedule`` aliases, lists) are normalised in place on ``config``."""
    problems: list[str] = []
    for name, kind in (
        ("cp_style", CpStyle),
        ("moe_dispatcher", MoeDispatcher),
        ("schedule", Schedule),
        ("recompute", Recompute),
        ("precision", Precision),
        ("fp8_recipe", Fp8Recipe),
        ("fp4_recipe", Fp4Recipe),
        ("pp_split", PipelineSplit),
    ):
        value = getattr(config, name)
        if name == "schedule" and isinstance(value, str):
            value = SCHEDULE_ALIASES.get(value, value)
        if isinstance(value, str) and value in {member.value for member in kind}:
            object.__setattr__(config, name, kind(value))
        else:
            allowed = ", ".join(repr(member.value) for member in kind)
            problems.append(f"`{name}` must be one of {allowed}, but got {name}={value!r}")
    for name in (*_POSITIVE, "vocab_divisible_by"):
        value = getattr(config, name)
        if not _is_int(value) or value < 1:
            problems.append(f"`{name}` must be a positive int, but got {name}={value!r}")
    global_batch = config.global_batch
    if not _is_int(global_batch) or global_batch < 0:
        problems.append(
            f"`global_batch` must be a positive int (0 = dp·micro_batch), but got {global_batch=}"
        )
    for name, meaning in _POSITIVE_OR_NONE.items():
        problem = _positive_or_none(name, getattr(config, name), meaning)
        if problem:
            problems.append(problem)
    for listed_field, members, empty_ok in (
        ("fp8_gemms", FP8_GEMMS, False),
        ("recompute_modules", RECOMPUTE_MODULES, True),
    ):
        problem = _named_once(config, listed_field, members, empty_ok)
        if problem:
            problems.append(problem)
    if config.recompute_method not in RECOMPUTE_METHODS:
        problems.append(
            f"`recompute_method` must be one of {', '.join(RECOMPUTE_METHODS)}, "
            f"but got recompute_method={config.recompute_method!r}"
        )
    for name in ("sp", "master_weights_fp32", "grad_fp32", "tp_embedding_replicated"):
        if not isinstance(getattr(config, name), bool):
            problems.append(f"`{name}` must be a bool, but got {name}={getattr(config, name)!r}")
    if config.dropout is not None and not isinstance(config.dropout, bool):
        problems.append(f"`dropout` must be a bool or None, but got dropout={config.dropout!r}")
    zero: object = config.zero
    if isinstance(zero, str):
        zero = _ZERO_ALIASES.get(zero.lower(), zero)
    if isinstance(zero, int) and not isinstance(zero, bool) and 0 <= zero <= 3:
        object.__setattr__(config, "zero", zero)
    else:
        problems.append(f"`zero` must be 0, 1, 2, 3 or 'fsdp', but got zero={config.zero!r}")
    problems += _split_problems(config)
    order: object = config.axis_order
    names = tuple(order) if isinstance(order, tuple | list) else ()
    if all(isinstance(name, str) for name in names):
        object.__setattr__(config, "axis_order", names)
    ep = config.ep
    folds = not _is_int(ep) or ep > 1  # an expert-parallel group refolds the dp×cp ranks
    if not axis_order_ok(names, folds):
        problems.append(
            f"`axis_order` must order {DEFAULT_AXIS_ORDER} once each"
            + (", with dp, ep and cp adjacent and ep right after dp (`ep` > 1)" if folds else "")
            + f", but got axis_order={order!r}"
        )
    return problems


def _split_problems(config: ParallelConfig) -> list[str]:
    """The pipeline split's field problems (``pp_layers``, ``pp_first_layers``,
    ``pp_last_layers``, ``pp_layout``); a valid ``pp_layers`` list is stored as a tuple."""
    problems: list[str] = []
    listed: object = config.pp_layers
    counts = tuple(listed) if isinstance(listed, tuple | list) else None
    if counts is None or not all(_is_int(c) and c >= 0 for c in counts):
        problems.append(
            f"`pp_layers` must be a list of non-negative ints, but got pp_layers={listed!r}"
        )
    else:
        object.__setattr__(config, "pp_layers", counts)
    for name in ("pp_first_layers", "pp_last_layers"):
        value = getattr(config, name)
        if value is not None and (not _is_int(value) or value < 0):
            problems.append(f"`{name}` must be a non-negative int or None, but got {value!r}")
    layout: object = config.pp_layout
    if not isinstance(layout, str):
        problems.append(f"`pp_layout` must be a layout string or '', but got {layout!r}")
    return problems


def axis_order_ok(names: tuple[object, ...], folds_experts: bool = True) -> bool:
    """Whether ``names`` orders :data:`DEFAULT_AXIS_ORDER`'s axes once each and, when
    ``folds_experts`` (an expert-parallel group: MoE parallel folding refolds the dp×cp ranks,
    :meth:`~stage_core.parallel.config.ParallelConfig.expert_mesh`), with dp, ep and cp adjacent
    and ep right after dp. A dense model's mesh drops ep and admits any order of the other four,
    as Megatron-Core's rank generator builds its groups from any order (NeMo 2.0's
    ``use_tp_pp_dp_mapping``: ``order="tp-cp-ep-pp-dp"``, the dp×cp group split by pp;
    NVIDIA/NeMo ``nemo/lightning/_strategy_lib.py`` 00fdee33 ``init_model_parallel``)."""
    if not all(isinstance(name, str) for name in names):
        return False
    if sorted(map(str, names)) != sorted(DEFAULT_AXIS_ORDER) or len(names) != len(set(names)):
        return False
    if not folds_experts:
        return True
    data_positions = sorted(names.index(name) for name in ("dp", "ep", "cp"))
    return data_positions[2] - data_positions[0] == 2 and (
        names.index("ep") == names.index("dp") + 1
    )


def _named_once(
    config: ParallelConfig, name: str, allowed: tuple[str, ...], empty_ok: bool
) -> str | None:
    """The problem of a field that must name some of ``allowed`` once each (``empty_ok``: or
    none), or None after storing it as a tuple on ``config``."""
    listed: object = getattr(config, name)
    names = tuple(listed) if isinstance(listed, tuple | list) else None
    if (
        names is None
        or (not names and not empty_ok)
        or len(set(names)) != len(names)
        or any(n not in allowed for n in names)
    ):
        choices = ", ".join(allowed)
        return f"`{name}` must name some of {choices} once each, but got {name}={listed!r}"
    object.__setattr__(config, name, names)
    return None
