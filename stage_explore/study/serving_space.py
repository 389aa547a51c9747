"""Inference studies: the request load of ``[workload]`` and the serving search space.

Contents:
    :data:`SERVING_KNOBS`, :data:`SERVING_DEFAULTS`
        the knobs of a serving ``[space]`` in record-column order, and their defaults.
    :func:`parse_requests`
        ``[workload] kind = "inference"``: prompt and output lengths (a length, a list of
        ``[length, weight]`` pairs or a named distribution), and ``arrival_rate`` (requests/s
        over the deployment) or ``concurrency`` (clients), or neither (saturated).
    :func:`request_load`
        the :class:`~stage_explore.analytical.requests.RequestLoad` of a parsed workload.
    :func:`parse_serving_space`
        the serving ``[space]`` → :class:`~.spec.SearchSpace`.
    :func:`decode_instances`, :func:`serving_reason`, :func:`canonical_serving`
        the derived number of decode instances, why a point cannot exist, and the canonical
        form (the prefill layout pinned when prefill is co-located, ``ep`` on a dense model).

A serving point is ``num_gpus`` GPUs: ``prefill_instances`` prefill instances of
``prefill_tp·prefill_dp`` GPUs (0: prefill and decode share the instances), and the rest as
decode instances of ``tp·pp·dp`` GPUs each (their number is derived, like dp in training
studies). ``dp`` is the data-parallel attention degree and ``ep`` the expert-parallel degree
carved out of it (DeepSeek's serving layout); ``batch`` caps the running sequences per decode
instance (the KV cache may cap it lower); ``chunk`` is the chunked-prefill token budget per step
(0: whole prompts, batched up to 8,192 tokens); ``arrival_rate``, when searched, replaces the
workload's load by that many requests per second (the highest rate that meets latency bounds
is then what a study finds); ``two_batch_overlap`` runs every step as two overlapped
micro-batches (:class:`stage_core.serving.ServingConfig`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stage_core.errors import ConfigError
from stage_explore.study._reader import Table, choices_text, describe

if TYPE_CHECKING:
    from stage_explore.analytical.requests import RequestLoad
    from stage_explore.study.spec import Constraints, SearchSpace

SERVING_KNOBS: tuple[str, ...] = (
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "ep",
    "batch",
    "chunk",
    "kv_precision",
    "precision",
    "prefill_instances",
    "prefill_tp",
    "prefill_dp",
    "prefill_ep",
    "arrival_rate",
    "two_batch_overlap",
)

SERVING_DEFAULTS: Mapping[str, Any] = {
    "tp": 1,
    "pp": 1,
    "dp": 1,
    "ep": 1,
    "chunk": 0,
    "kv_precision": "bf16",
    "precision": "bf16",
    "prefill_instances": 0,
    "prefill_tp": 1,
    "prefill_dp": 1,
    "prefill_ep": 1,
    "arrival_rate": None,
    "two_batch_overlap": False,
}

PRECISION_CHOICES: tuple[str, ...] = ("bf16", "fp8")
_AT_LEAST_ZERO = ("chunk", "prefill_instances")
_WORKLOAD_KEYS = (
    "kind", "prompt_len", "output_len", "cached_prompt_len", "arrival_rate", "concurrency",
)  # fmt: skip
#: The largest batch "auto" proposes (running sequences per instance).
_AUTO_BATCH_MAX = 16384


def parse_requests(table: Table) -> dict[str, Any]:
    """The request load of an inference ``[workload]``, checked, as a JSON-ready dict."""
    table.reject_unknown(_WORKLOAD_KEYS)
    result: dict[str, Any] = {}
    for key in ("prompt_len", "output_len"):
        if key not in table.data:
            raise table.error(
                None,
                f'missing key "{key}" (a length, [[length, weight], …] or '
                '{ distribution = "lognormal", mean = …, sigma = … })',
            )
        result[key] = table.data[key]
    if "arrival_rate" in table.data:
        result["arrival_rate"] = table.number("arrival_rate")
    if "concurrency" in table.data:
        result["concurrency"] = table.integer("concurrency")
    if "cached_prompt_len" in table.data:
        result["cached_prompt_len"] = table.integer("cached_prompt_len", minimum=0)
    try:
        request_load(result)
    except ConfigError as error:
        message = str(error)  # "prompt_len: …" or "`cached_prompt_len` must …" (s37: the
        # latter was reported under arrival_rate); a limit on several keys: the table's
        api = {"arrival_rate": "arrival_rate_per_s"}  # RequestLoad's name of a study key
        keys = [k for k in result if message.startswith((f"{k}:", f"`{api.get(k, k)}` "))]
        named = keys[0] if keys else None
        raise table.error(named, message.removeprefix(f"{named}: ")) from None
    return result


def request_load(requests: Mapping[str, Any]) -> RequestLoad:
    """The load a parsed ``[workload]`` describes."""
    from stage_explore.analytical.requests import RequestLoad, length_distribution

    return RequestLoad(
        prompt=length_distribution(requests["prompt_len"], "prompt_len"),
        output=length_distribution(requests["output_len"], "output_len"),
        arrival_rate_per_s=requests.get("arrival_rate"),
        concurrency=requests.get("concurrency"),
        cached_prompt_len=requests.get("cached_prompt_len", 0),
    )


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(high.bit_length()) if low <= 1 << k <= high)


def _values(table: Table, name: str, max_gpus: int) -> tuple[Any, ...]:
    from stage_explore.study.space import range_values

    raw = table.data.get(name, SERVING_DEFAULTS.get(name))
    if name == "arrival_rate":
        return _rates(table, raw)
    if name == "two_batch_overlap":
        values = (False, True) if raw == "auto" else tuple(raw) if isinstance(raw, list) else (raw,)
        if not values or any(not isinstance(value, bool) for value in values):
            raise table.error(name, f"expected true or false, got {describe(raw)}")
        return values
    if name in ("kv_precision", "precision"):
        if raw == "auto":
            return PRECISION_CHOICES
        values = tuple(raw) if isinstance(raw, list) else (raw,)
        for value in values:
            if value not in PRECISION_CHOICES:
                raise table.error(
                    name, f"expected {choices_text(PRECISION_CHOICES)}, got {describe(value)}"
                )
        return values
    minimum = 0 if name in _AT_LEAST_ZERO else 1
    if raw == "auto" and name not in ("num_gpus", "chunk", "prefill_instances"):
        return _powers_of_two(1, _AUTO_BATCH_MAX if name == "batch" else max_gpus)
    if isinstance(raw, dict):
        values = range_values(table, name, raw, "int")
    elif isinstance(raw, list) and raw:
        values = tuple(raw)
    elif isinstance(raw, list):
        raise table.error(name, "expected a non-empty list, got []")
    else:
        values = (raw,)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise table.error(name, f"expected integers >= {minimum}, got {describe(value)}")
    if len(set(values)) != len(values):
        raise table.error(name, f"expected distinct values, got {describe(list(values))}")
    return values


def _rates(table: Table, raw: Any) -> tuple[Any, ...]:
    """Searched arrival rates (requests/s over the deployment); ``(None,)``: the workload's."""
    if raw is None:
        return (None,)
    values = tuple(raw) if isinstance(raw, list) else (raw,)
    for value in values:
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        if bad or not 0 < value < math.inf:  # inf was taken, every trial refused (s37)
            raise table.error("arrival_rate", f"expected finite numbers > 0, got {describe(value)}")
    if not values or len(set(values)) != len(values):
        raise table.error("arrival_rate", f"expected distinct numbers > 0, got {describe(raw)}")
    return tuple(float(value) for value in values)


def parse_serving_space(table: Table) -> SearchSpace:
    """Validate an inference ``[space]`` into a :class:`SearchSpace` (module docstring)."""
    from stage_explore.study.spec import Knob, SearchSpace

    training = ("cp", "sp", "zero", "recompute", "schedule", "vpp", "micro_batch", "pp_split")
    for key in (*training, "fp8_recipe"):
        if key in table.data:
            raise table.error(
                key, "a training knob; inference studies search " + ", ".join(SERVING_KNOBS)
            )
    table.reject_unknown(SERVING_KNOBS)
    for key in ("num_gpus", "batch"):
        if key not in table.data:
            raise table.error(None, f'missing key "{key}" (an integer or a list of integers)')
    num_gpus = _values(table, "num_gpus", 1)
    knobs = [Knob(name="num_gpus", values=num_gpus)]
    knobs += [
        Knob(name=name, values=_values(table, name, max(num_gpus))) for name in SERVING_KNOBS[1:]
    ]
    return SearchSpace(knobs=tuple(knobs), serving=True)


def decode_instances(params: Mapping[str, Any]) -> int:
    """Decode instances of a point: the GPUs left by the prefill pool over ``tp·pp·dp``
    (0 when that does not divide or leaves none)."""
    prefill = params["prefill_instances"] * params["prefill_tp"] * params["prefill_dp"]
    rest = params["num_gpus"] - prefill
    size = params["tp"] * params["pp"] * params["dp"]
    return rest // size if rest > 0 and rest % size == 0 else 0


def serving_reason(params: Mapping[str, Any], constraints: Constraints) -> str | None:
    """Why a serving point cannot exist whatever the model and system (``None`` if it can)."""
    num_gpus = params["num_gpus"]
    if constraints.max_gpus is not None and num_gpus > constraints.max_gpus:
        return f"num_gpus={num_gpus} exceeds the constraint max_gpus={constraints.max_gpus}"
    for ep, dp in (("ep", "dp"), ("prefill_ep", "prefill_dp")):
        if params[dp] % params[ep]:
            return (
                f"{ep}={params[ep]} does not divide {dp}={params[dp]} "
                "(experts are spread over the attention dp ranks)"
            )
    step = params["dp"] * params["pp"]
    if params["batch"] % step:
        return f"dp·pp={step} does not divide batch={params['batch']} (whole sequences per rank)"
    if not decode_instances(params):
        prefill = params["prefill_instances"] * params["prefill_tp"] * params["prefill_dp"]
        size = params["tp"] * params["pp"] * params["dp"]
        return (
            f"num_gpus={num_gpus} minus the prefill pool's {prefill} GPUs is not a positive "
            f"multiple of a decode instance's tp·pp·dp={size} GPUs"
        )
    return None


#: The knobs :func:`serving_reason` reads.
_STRUCTURAL = (
    "num_gpus", "tp", "pp", "dp", "ep", "batch",
    "prefill_instances", "prefill_tp", "prefill_dp", "prefill_ep",
)  # fmt: skip


def serving_impossibility(space: SearchSpace, constraints: Constraints) -> str | None:
    """``None`` when an inference space has a point passing :func:`serving_reason`, else the
    first point of the product of :data:`_STRUCTURAL` (the values in the order written) and
    why it cannot exist (7 Dec 2026, s37 review10: the error named no value, as training's
    did before s29)."""
    choices = space.choices()
    first = ""
    for combination in itertools.product(*(choices[name] for name in _STRUCTURAL)):
        params = dict(zip(_STRUCTURAL, combination, strict=True))
        reason = serving_reason(params, constraints)
        if reason is None:
            return None
        if not first:
            shown = " ".join(
                f"{k}={v}" for k, v in params.items()
                if len(choices[k]) > 1 or k in ("num_gpus", "tp", "pp", "dp", "batch")
            )  # fmt: skip
            first = f"{shown}: {reason}"
    return first


def canonical_serving(
    params: Mapping[str, Any], choices: Mapping[str, tuple[Any, ...]], *, moe: bool | None
) -> dict[str, Any]:
    """``params`` with knobs that have no effect pinned: the prefill layout when prefill is
    co-located, ``ep`` and ``prefill_ep`` on a dense model (neutral 1 when listed, else the
    first listed value)."""
    result = dict(params)

    def pin(name: str) -> Any:
        values = choices.get(name, (1,))
        return 1 if 1 in values else values[0]

    if result["prefill_instances"] == 0:
        for name in ("prefill_tp", "prefill_dp", "prefill_ep"):
            result[name] = pin(name)
    if moe is False:
        result["ep"] = pin("ep")
        result["prefill_ep"] = pin("prefill_ep")
    return result


def serving_design(params: Mapping[str, Any], requests: Mapping[str, Any]) -> Any:
    """The :class:`~stage_explore.analytical.serving_design.ServingDesign` of a point
    (invalid combinations raise :class:`ConfigError`)."""
    from stage_core.serving import Phase, ServingConfig
    from stage_explore.analytical.serving_design import ServingDesign

    precisions = {
        "kv_precision": params["kv_precision"], "precision": params["precision"],
        "two_batch_overlap": params.get("two_batch_overlap", False),
    }  # fmt: skip
    decode = ServingConfig(
        phase=Phase.DECODE, batch=params["dp"], tp=params["tp"], pp=params["pp"], dp=params["dp"],
        ep=params["ep"], **precisions,
    )  # fmt: skip
    prefill = None
    if params["prefill_instances"]:
        prefill = ServingConfig(
            phase=Phase.PREFILL, batch=params["prefill_dp"], prompt_len=1, tp=params["prefill_tp"],
            dp=params["prefill_dp"], ep=params["prefill_ep"], **precisions,
        )  # fmt: skip
    instances = decode_instances(params)
    if not instances:
        raise ConfigError(f"no decode instance fits: {serving_reason(params, _no_limits())}")
    load = request_load(requests)
    if params.get("arrival_rate") is not None:  # searched: it replaces the workload's load
        load = replace(load, arrival_rate_per_s=params["arrival_rate"], concurrency=None)
    return ServingDesign(
        decode=decode, decode_instances=instances, max_running=params["batch"],
        load=load, chunk=params["chunk"], prefill=prefill,
        prefill_instances=params["prefill_instances"],
    )  # fmt: skip


def _no_limits() -> Constraints:
    from stage_explore.study.spec import Constraints

    return Constraints()
