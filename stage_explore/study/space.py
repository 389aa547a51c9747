"""The search space: parsing each knob's values, structural checks, dp, grid enumeration.

Contents:
    :func:`parse_space`
        the ``[space]`` table and ``[system.search]`` → :class:`~.spec.SearchSpace`.
    :func:`derive_dp`, :func:`structural_reason`
        dp from the other degrees, and why a point cannot exist at all (``None`` if it can).
    :func:`canonical_params`, :func:`canonical_key`
        a point with every knob that has no effect in it pinned to its neutral value, so that
        configurations that are the same workload are one point.
    :func:`grid_points`
        every structurally possible canonical point of the space, in a fixed order, lazily.

Knobs without effect (see ``docs/explore.md``): ``sp`` when tp = 1 (Megatron's sequence
parallelism is a no-op there), ``vpp`` unless the schedule is interleaved, ``zero`` when
dp·cp = 1 (ZeRO shards over the dp×cp ranks), ``ep`` for a dense model, ``pp_split`` when
pp = 1 (``pp_split = "auto"`` is STAGE's default split, not "every policy"), ``dp_shard`` without
ZeRO or at dp or more, ``recompute_num_layers`` unless ``recompute = "full"``,
``recompute_method`` unless ``recompute = "full"`` with ``recompute_num_layers`` > 0,
``fp8_recipe`` unless ``precision = "fp8"`` (Megatron-Core reads ``--fp8-recipe`` only with
``--fp8-format``; an FP4 run has its own recipe). A pinned knob takes its neutral value (False, 1,
0, 1, "auto", 0, "block", "delayed") when the study lists it, else the first value it lists.

``precision`` (bf16, fp16, fp8, fp4) is never pinned. A point the system cannot run at its
precision (fp8 without an FP8 peak, fp4 without a grounded NVFP4 GEMM rate, mxfp8 off Blackwell)
is not structural: the backend raises a one-line ConfigError and the trial is recorded infeasible
with it (:mod:`stage_explore.search.worker`).

A knob is written as a value (fixed), a list of values, a range table
``{ min = 1, max = 8, step = 1 }`` or ``{ min = 1, max = 64, scale = "pow2" }``, or ``"auto"``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from stage_core.parallel.split import PipelineSplit
from stage_core.parallel.vocab import RECOMPUTE_METHODS, Fp8Recipe, Precision
from stage_explore.study._reader import Table, choices_text, describe
from stage_explore.study.serving_space import canonical_serving, serving_reason
from stage_explore.study.spec import (
    PARALLEL_KNOBS,
    Constraints,
    HardwareParam,
    Knob,
    SearchSpace,
    WorkloadSpec,
)

#: Closed vocabularies of the string knobs.
RECOMPUTE_CHOICES: tuple[str, ...] = ("none", "selective", "full")
SCHEDULE_CHOICES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved", "zb", "dualpipe")
#: Pipeline split policies (:class:`stage_core.parallel.PipelineSplit`); ``"auto"`` is STAGE's
#: default split (even when it divides, else lighter end stages), also as the knob's "auto".
PP_SPLIT_CHOICES: tuple[str, ...] = tuple(policy.value for policy in PipelineSplit)
#: How ``recompute_num_layers`` N picks the recomputed layers
#: (:data:`stage_core.parallel.vocab.RECOMPUTE_METHODS`: block, every, uniform, spread).
RECOMPUTE_METHOD_CHOICES: tuple[str, ...] = RECOMPUTE_METHODS
#: Compute precisions (:class:`stage_core.parallel.vocab.Precision`: bf16, fp16, fp8, fp4).
PRECISION_CHOICES: tuple[str, ...] = tuple(precision.value for precision in Precision)
#: FP8 scaling recipes (:class:`stage_core.parallel.vocab.Fp8Recipe`: delayed, tensorwise,
#: blockwise, mxfp8, rowwise — torchtitan only, an infeasible trial elsewhere); read under
#: ``precision = "fp8"`` only.
FP8_RECIPE_CHOICES: tuple[str, ...] = tuple(recipe.value for recipe in Fp8Recipe)

#: The value a knob takes when ``[space]`` does not mention it.
KNOB_DEFAULTS: Mapping[str, Any] = {
    "tp": 1,
    "pp": 1,
    "cp": 1,
    "ep": 1,
    "sp": False,
    "zero": 0,
    "recompute": "none",
    "schedule": "1f1b",
    "vpp": 1,
    "micro_batch": 1,
    "pp_split": "auto",
    "dp_shard": 0,
    "recompute_num_layers": 0,
    "recompute_method": "block",
    "precision": "bf16",
    "fp8_recipe": "delayed",
}

_DEGREES = ("tp", "pp", "cp", "ep")
_RANGE_KEYS = frozenset({"min", "max", "step", "scale"})


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(high.bit_length()) if low <= 1 << k <= high)


def _auto_values(name: str, max_gpus: int, workload: WorkloadSpec) -> tuple[Any, ...]:
    if name in _DEGREES:
        return _powers_of_two(1, max_gpus)
    if name == "micro_batch":
        return _powers_of_two(1, workload.global_batch)
    if name == "dp_shard":  # all of dp, or shard groups of a power of two
        return (0, *_powers_of_two(1, max_gpus))
    return {
        "sp": (False, True),
        "zero": (0, 1, 2, 3),
        "recompute": RECOMPUTE_CHOICES,
        "schedule": SCHEDULE_CHOICES,
        "vpp": (1, 2, 4),
        "pp_split": ("auto",),
        "recompute_method": RECOMPUTE_METHOD_CHOICES,
        "precision": PRECISION_CHOICES,
        "fp8_recipe": FP8_RECIPE_CHOICES,
    }[name]


def _range_values(table: Table, key: str, spec: Mapping[str, Any], numbers: str) -> tuple[Any, ...]:
    expected = (
        'a range table { min = …, max = …, step = … } or { min = …, max = …, scale = "pow2" }'
    )
    unknown = set(spec) - _RANGE_KEYS
    if unknown or "min" not in spec or "max" not in spec:
        raise table.error(key, f"expected {expected}, got keys {', '.join(sorted(spec))}")
    low, high, step = spec["min"], spec["max"], spec.get("step", 1)
    allowed: tuple[type, ...] = (int,) if numbers == "int" else (int, float)
    for value in (low, high, step):
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise table.error(
                key, f"expected {expected} with {numbers} bounds, got {describe(value)}"
            )
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "pow2"):
        raise table.error(key, f'expected scale "linear" or "pow2", got {describe(scale)}')
    if scale == "pow2":
        if "step" in spec or not isinstance(low, int) or not isinstance(high, int) or low < 1:
            raise table.error(key, 'expected integer bounds >= 1 and no step with scale = "pow2"')
        values: tuple[Any, ...] = _powers_of_two(low, high)
    else:
        if not step > 0:
            raise table.error(key, f"expected a positive step, got {describe(step)}")
        count = int((high - low) / step + 1e-9) + 1 if high >= low else 0
        values = tuple(low + k * step for k in range(count))
        if any(isinstance(v, float) for v in (low, high, step)):
            values = tuple(round(float(v), 12) for v in values)
    if not values:
        raise table.error(key, f"expected a non-empty range, got min = {low}, max = {high}")
    return values


#: Public name of the range parser (inference spaces parse their ranges with it too).
range_values = _range_values


def _check_value(table: Table, key: str, value: Any, kind: str) -> None:
    if kind == "bool":
        ok = isinstance(value, bool)
        expected = "true or false"
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        expected = "integers >= 1"
    elif kind == "zero":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3
        expected = "ZeRO stages 0, 1, 2 or 3"
    elif kind == "shard":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        expected = "integers >= 0 (0: shard over all of dp)"
    elif kind == "layers":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        expected = "integers >= 0 (0: every layer recomputed)"
    else:
        choices = {
            "recompute": RECOMPUTE_CHOICES,
            "pp_split": PP_SPLIT_CHOICES,
            "recompute_method": RECOMPUTE_METHOD_CHOICES,
            "precision": PRECISION_CHOICES,
            "fp8_recipe": FP8_RECIPE_CHOICES,
        }.get(key, SCHEDULE_CHOICES)
        ok = isinstance(value, str) and value in choices
        expected = choices_text(choices)
    if not ok:
        raise table.error(key, f"expected {expected}, got {describe(value)}")


def _knob_kind(name: str) -> str:
    if name == "sp":
        return "bool"
    if name == "zero":
        return "zero"
    if name == "dp_shard":
        return "shard"
    if name == "recompute_num_layers":
        return "layers"
    if name in ("recompute", "schedule", "pp_split", "recompute_method", "precision", "fp8_recipe"):
        return "str"
    return "int"


def _knob_values(table: Table, name: str, max_gpus: int, workload: WorkloadSpec) -> tuple[Any, ...]:
    kind = _knob_kind(name)
    raw = table.data.get(name, KNOB_DEFAULTS.get(name))
    if raw == "auto" and kind == "layers":  # its useful values depend on the layers per chunk
        raise table.error(name, 'expected integers >= 0 (0: every layer recomputed), got "auto"')
    if raw == "auto" and name != "num_gpus":
        return _auto_values(name, max_gpus, workload)
    if isinstance(raw, dict):
        if kind not in ("int", "zero", "shard", "layers"):
            raise table.error(
                name,
                f"expected a value or a list (a range needs an integer knob), got {describe(raw)}",
            )
        values = _range_values(table, name, raw, "int")
    elif isinstance(raw, list):
        if not raw:
            raise table.error(name, "expected a non-empty list, got []")
        values = tuple(raw)
    else:
        values = (raw,)
    for value in values:
        _check_value(table, name, value, kind)
    if len(set(values)) != len(values):
        raise table.error(name, f"expected distinct values, got {describe(list(values))}")
    return values


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and not {"min", "max"} & set(value):
            yield from _flatten(value, path + ".")
        else:
            yield path, value


def _value_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    return "number" if isinstance(value, int | float) else "other"


def _hardware(table: Table) -> tuple[HardwareParam, ...]:
    params: list[HardwareParam] = []
    columns: dict[str, str] = {}
    for path, raw in _flatten(table.data):
        if isinstance(raw, dict):
            values = _range_values(table, path, raw, "numeric")
        elif isinstance(raw, list) and raw:
            values = tuple(raw)
        else:
            raise table.error(
                path, f"expected a non-empty list of values or a range table, got {describe(raw)}"
            )
        kinds = {_value_kind(value) for value in values}
        if len(kinds) != 1 or "other" in kinds or len(set(values)) != len(values):
            raise table.error(
                path,
                "expected distinct values, all numbers, all strings or all "
                f"booleans, got {describe(list(values))}",
            )
        if kinds == {"number"} and any(isinstance(v, float) for v in values):
            values = tuple(float(v) for v in values)
        column = "hw_" + re.sub(r"[^0-9A-Za-z]+", "_", path).strip("_").lower()
        if column in columns:
            raise table.error(
                path,
                f'expected a distinct parameter, but its column "{column}" is also that of '
                f'"{columns[column]}"',
            )
        columns[column] = path
        params.append(HardwareParam(path=path, column=column, values=values))
    return tuple(params)


def parse_space(space: Table, hardware: Table | None, workload: WorkloadSpec) -> SearchSpace:
    """Validate ``[space]`` (and ``[system.search]``) into a :class:`SearchSpace`."""
    space.reject_unknown(PARALLEL_KNOBS)
    if "num_gpus" not in space.data:
        raise space.error(None, 'missing key "num_gpus" (an integer or a list of integers)')
    num_gpus = _knob_values(space, "num_gpus", 1, workload)
    knobs = [Knob(name="num_gpus", values=num_gpus)]
    knobs += [
        Knob(name=name, values=_knob_values(space, name, max(num_gpus), workload))
        for name in PARALLEL_KNOBS[1:]
    ]
    return SearchSpace(knobs=tuple(knobs), hardware=() if hardware is None else _hardware(hardware))


def derive_dp(params: Mapping[str, Any]) -> int:
    """The data-parallel degree: ``num_gpus / (tp·pp·cp)``, 0 when that does not divide
    (an inference point searches ``dp`` itself: its value)."""
    if "cp" not in params:
        return int(params["dp"])
    model_parallel = params["tp"] * params["pp"] * params["cp"]
    quotient, remainder = divmod(params["num_gpus"], model_parallel)
    return quotient if remainder == 0 else 0


def structural_reason(
    params: Mapping[str, Any], workload: WorkloadSpec, constraints: Constraints
) -> str | None:
    """Why a point cannot exist whatever the model and system (``None`` if it can)."""
    if workload.kind == "inference":
        return serving_reason(params, constraints)
    num_gpus = params["num_gpus"]
    if constraints.max_gpus is not None and num_gpus > constraints.max_gpus:
        return f"num_gpus={num_gpus} exceeds the constraint max_gpus={constraints.max_gpus}"
    model_parallel = params["tp"] * params["pp"] * params["cp"]
    if num_gpus % model_parallel:
        return f"tp·pp·cp={model_parallel} does not divide num_gpus={num_gpus}"
    per_step = derive_dp(params) * params["micro_batch"]
    if workload.global_batch % per_step:
        return f"dp·micro_batch={per_step} does not divide global_batch={workload.global_batch}"
    reason = _hybrid_shard_reason(params)
    if reason is not None:
        return reason
    schedule, pp, vpp = params.get("schedule", "1f1b"), params["pp"], params.get("vpp", 1)
    if schedule == "dualpipe":  # stage_core.lower.schedule.check_dualpipe
        micro_batches = workload.global_batch // per_step
        if pp % 2 or micro_batches % 2 or micro_batches < 2 * pp:
            return (
                f"schedule dualpipe needs an even pp and an even number of micro-batches "
                f"of at least 2·pp, got pp={pp} and {micro_batches} micro-batches"
            )
    if schedule != "interleaved":
        return f"vpp={vpp} needs schedule interleaved, got {schedule}" if vpp > 1 else None
    if pp == 1:
        return "schedule interleaved needs pp > 1, got pp=1"
    micro_batches = workload.global_batch // per_step
    if micro_batches % pp:
        return (
            f"schedule interleaved needs pp={pp} to divide the {micro_batches} micro-batches "
            f"(global_batch/(dp·micro_batch))"
        )
    return None


def _hybrid_shard(params: Mapping[str, Any]) -> bool:
    """Whether a point shards ZeRO in groups smaller than dp (HSDP): ``0 < dp_shard < dp``
    with ZeRO on (without ZeRO nothing is sharded and ``dp_shard`` has no effect)."""
    shard = params.get("dp_shard", 0)
    return bool(params.get("zero", 0)) and 0 < shard < derive_dp(params)


def _hybrid_shard_reason(params: Mapping[str, Any]) -> str | None:
    if not _hybrid_shard(params):
        return None
    shard, dp = params["dp_shard"], derive_dp(params)
    if dp % shard:
        return f"dp_shard={shard} does not divide dp={dp}"
    return None


#: The value a knob takes in a point where it has no effect.
NEUTRAL_VALUES: Mapping[str, Any] = {
    "sp": False,
    "vpp": 1,
    "zero": 0,
    "ep": 1,
    "pp_split": "auto",
    "dp_shard": 0,
    "recompute_num_layers": 0,
    "recompute_method": "block",
    "fp8_recipe": "delayed",
}


def _pinned(name: str, choices: Mapping[str, tuple[Any, ...]]) -> Any:
    neutral = NEUTRAL_VALUES[name]
    values = choices.get(name, (neutral,))
    # `False == 0` in Python: compare types too, so sp's False never matches zero's 0
    if any(type(value) is type(neutral) and value == neutral for value in values):
        return neutral
    return values[0]


def canonical_params(
    params: Mapping[str, Any], choices: Mapping[str, tuple[Any, ...]], *, moe: bool | None
) -> dict[str, Any]:
    """``params`` with each knob that has no effect in this point pinned (see the module doc).

    ``choices`` are the space's values (a pinned knob keeps a value the study lists); ``moe``
    says whether the model has experts (``None``: unknown, ``ep`` is left as it is).
    Idempotent: the knobs that decide a pin (tp, schedule, num_gpus, pp, cp, precision) are never
    pinned.
    """
    if "cp" not in params:  # an inference point
        return canonical_serving(params, choices, moe=moe)
    result = dict(params)
    if result["tp"] == 1:
        result["sp"] = _pinned("sp", choices)
    if result["schedule"] != "interleaved":
        result["vpp"] = _pinned("vpp", choices)
    if derive_dp(result) * result["cp"] == 1:
        result["zero"] = _pinned("zero", choices)
    if moe is False:
        result["ep"] = _pinned("ep", choices)
    if result["pp"] == 1 and "pp_split" in result:
        result["pp_split"] = _pinned("pp_split", choices)
    if "dp_shard" in result and not _hybrid_shard(result):
        result["dp_shard"] = _pinned_shard(derive_dp(result), choices)
    if result.get("recompute") != "full" and "recompute_num_layers" in result:
        result["recompute_num_layers"] = _pinned("recompute_num_layers", choices)
    if "recompute_method" in result and not (
        result.get("recompute") == "full" and result.get("recompute_num_layers")
    ):  # the method picks which N layers: nothing to pick without N (0: every layer)
        result["recompute_method"] = _pinned("recompute_method", choices)
    if "fp8_recipe" in result and result.get("precision", "bf16") != "fp8":
        result["fp8_recipe"] = _pinned("fp8_recipe", choices)  # scales nothing outside FP8
    return result


def _pinned_shard(dp: int, choices: Mapping[str, tuple[Any, ...]]) -> Any:
    """``dp_shard`` where it has no effect (ZeRO off, or groups of all of dp): 0 when the study
    lists it, else the first listed value of at least ``dp`` (the same workload), else the
    first listed value."""
    values = choices.get("dp_shard", (0,))
    if 0 in values:
        return 0
    return next((value for value in values if value >= dp), values[0])


def canonical_key(params: Mapping[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The identity of a (canonical) point: its values in ``names`` order."""
    return tuple(params[name] for name in names)


def has_possible_point(
    space: SearchSpace, workload: WorkloadSpec, constraints: Constraints
) -> bool:
    """Whether at least one point of the space passes :func:`structural_reason`."""
    if space.serving:
        return any(True for _ in grid_points(space, workload, constraints))
    return impossibility(space, workload, constraints) is None


def impossibility(
    space: SearchSpace, workload: WorkloadSpec, constraints: Constraints
) -> str | None:
    """``None`` when a training space has a point passing :func:`structural_reason`, else the
    first point of the product (the values in the order written) and why it cannot exist:
    ``num_gpus=3 tp=1 pp=1 cp=1 micro_batch=1: dp·micro_batch=3 does not divide
    global_batch=512`` (7 Dec 2026, s29 review: the error named no value)."""
    choices = space.choices()
    names = ("num_gpus", "tp", "pp", "cp", "micro_batch", "schedule", "vpp")
    first = ""
    for combination in itertools.product(*(choices[name] for name in names)):
        params = dict(zip(names, combination, strict=True))
        reason = structural_reason(params, workload, constraints)
        if reason is None:
            return None
        if not first:
            shown = " ".join(f"{k}={v}" for k, v in params.items() if len(choices[k]) > 1
                             or k in ("num_gpus", "tp", "pp", "cp", "micro_batch"))  # fmt: skip
            first = f"{shown}: {reason}"
    return first


def grid_points(
    space: SearchSpace,
    workload: WorkloadSpec,
    constraints: Constraints,
    *,
    moe: bool | None = None,
) -> Iterator[dict[str, Any]]:
    """Every structurally possible canonical point once, in the Cartesian product's order.

    A point of the product whose canonical form differs from it is the same workload as that
    canonical point (also in the product), so it is skipped; nothing needs remembering.
    """
    choices = space.choices()
    names = tuple(choices)
    for combination in itertools.product(*choices.values()):
        params = dict(zip(names, combination, strict=True))
        if structural_reason(params, workload, constraints) is not None:
            continue
        if canonical_params(params, choices, moe=moe) == params:
            yield params
