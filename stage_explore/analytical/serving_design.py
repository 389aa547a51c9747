"""A serving deployment under a request load, evaluated into an explorer record.

Contents:
    :class:`ServingDesign`
        one design point of a serving study: the decode (or only) instance layout and how many
        instances, the running-sequence cap, chunked prefill, KV and weight precision, and for
        disaggregation the prefill instance layout and count; the load it serves.
    :func:`evaluate_design`
        the steps the queue model needs, evaluated with the analytical serving model
        (:mod:`~stage_explore.analytical.serving`), the steady state
        (:mod:`~stage_explore.analytical.serving_queue`), and the result as an
        :class:`~stage_explore.evaluation.Evaluation` whose ``extra`` carries the serving
        metrics (:data:`SERVING_METRICS`, which the records store as columns).

The running-sequence cap of an instance is the smaller of the design's ``max_running`` and the
largest batch whose KV cache at the load's mean decode context fits
(:func:`stage_core.serving.max_batch`). A point is infeasible, with the reason, when not one
sequence per data-parallel rank fits, when a prefill step does not fit, or when the arrival rate
reaches the capacity. ``step_time_s`` is the time per output token; its breakdown is the decode
iteration's (of the evaluated batch nearest above the running batch, scaled to it) plus, when
prefills interleave with decode, ``interleaved_prefill``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from stage_core.errors import ConfigError, InfeasibleError
from stage_core.models.spec import ModelSpec
from stage_core.serving import ServingConfig, kv_cache_bytes_per_token
from stage_core.serving.config import Phase
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.requests import RequestLoad
from stage_explore.analytical.serving import (
    DEFAULT_MEMORY_UTILIZATION,
    DEFAULT_PREFILL_TOKENS_PER_STEP,
    ServingEvaluation,
    evaluate_decode,
    evaluate_prefill,
    pool_placements,
)
from stage_explore.analytical.serving_queue import (
    PoolTimes,
    SteadyState,
    StepCurve,
    decode_batches,
    steady_state,
)
from stage_explore.evaluation import Evaluation
from stage_explore.system import System

#: Serving metrics an evaluation's ``extra`` carries (record columns of inference studies).
SERVING_METRICS: tuple[str, ...] = (
    "time_to_first_token_s",
    "time_per_output_token_s",
    "tokens_per_s",
    "requests_per_s",
    "capacity_requests_per_s",
    "running_sequences",
    "max_running_sequences",
    "decode_instances",
    "prefill_wait_s",
    "prefill_utilization",
    "kv_cache_bytes",
    "weight_bytes",
    "memory_bound_fraction",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingDesign:
    """A serving deployment (module docstring). ``decode`` is the layout and precisions of the
    decode (co-located: the only) instances; its ``batch`` is ignored (``max_running`` sets
    it). ``prefill`` is the prefill instances' layout when ``prefill_instances > 0``."""

    decode: ServingConfig
    decode_instances: int
    max_running: int
    load: RequestLoad
    chunk: int = 0
    prefill: ServingConfig | None = None
    prefill_instances: int = 0
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    prefill_tokens_per_step: int = DEFAULT_PREFILL_TOKENS_PER_STEP

    def __post_init__(self) -> None:
        for name in ("decode_instances", "max_running"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive int, but got {name}={value!r}")
        if self.prefill_instances < 0:
            raise ConfigError(f"`prefill_instances` must be ≥ 0, got {self.prefill_instances}")
        if self.prefill_instances and self.prefill is None:
            raise ConfigError("a disaggregated design needs the prefill instances' layout")
        step = self.decode.dp * self.decode.pp
        if self.max_running % step:
            raise ConfigError(
                "`batch` (running sequences per instance) must be a multiple of dp·pp (whole "
                f"sequences per data-parallel rank and micro-batch), but got "
                f"(batch={self.max_running}, dp·pp={step})"
            )

    @property
    def prefill_layout(self) -> ServingConfig:
        return self.prefill if self.prefill_instances and self.prefill else self.decode

    @property
    def num_gpus(self) -> int:
        prefill = self.prefill_instances * self.prefill_layout.gpus if self.prefill_instances else 0
        return self.decode_instances * self.decode.gpus + prefill

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "decode": self.decode.to_dict(),
            "decode_instances": self.decode_instances,
            "max_running": self.max_running,
            "chunk": self.chunk,
            "prefill": None if self.prefill is None else self.prefill.to_dict(),
            "prefill_instances": self.prefill_instances,
            "load": self.load.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class _Prefills:
    service_s: dict[int, float]
    latency_s: dict[int, float]
    transfer_s: dict[int, float]
    flops_per_prompt: dict[int, float]
    worst: ServingEvaluation


def _prefills(
    backend: AnalyticalBackend, model: ModelSpec, design: ServingDesign, system: System
) -> _Prefills:
    """Per prompt length: instance-seconds per prompt with prompts batched up to the token budget
    of a step (the chunk, else TensorRT-LLM's 8,192), the latency of the prompt's own prefill
    (one prompt per dp rank, chunked when longer than the chunk), and its KV transfer."""
    layout = design.prefill_layout
    cached = design.load.cached_prompt_len
    budget = design.chunk or design.prefill_tokens_per_step
    service, latency, transfer, flops = {}, {}, {}, {}
    worst: ServingEvaluation | None = None
    network = backend.achieved_network(system)
    last = network.network[-1] if network.network else None
    per_token = kv_cache_bytes_per_token(model, design.decode.kv_bytes)
    for length in design.load.prompt.lengths():
        chunk = design.chunk if 0 < design.chunk < length else 0
        alone = replace(
            layout, phase=Phase.PREFILL, batch=layout.dp, prompt_len=length, context_len=cached,
            chunk=chunk,
        )  # fmt: skip
        own = evaluate_prefill(backend, model, alone, system, design.memory_utilization)
        runs = [own]
        prompts = max(1, budget // length)
        if prompts > 1:
            batched = replace(alone, batch=layout.dp * prompts)
            runs.append(
                evaluate_prefill(backend, model, batched, system, design.memory_utilization)
            )
        assert own.time_to_first_token_s is not None
        latency[length] = own.time_to_first_token_s
        service[length] = length / runs[-1].tokens_per_s
        flops[length] = own.extra["flops"] * layout.tp  # per rank per stage → one prompt's
        transfer[length] = 0.0
        if design.prefill_instances and last is not None:
            cache_bytes = (cached + length) * per_token
            transfer[length] = cache_bytes / last.bandwidth_bytes_per_s + last.latency_s
        for run in runs:
            if worst is None or run.peak_memory_bytes > worst.peak_memory_bytes:
                worst = run
    assert worst is not None
    return _Prefills(service, latency, transfer, flops, worst)


def _decode_curve(
    backend: AnalyticalBackend, model: ModelSpec, design: ServingDesign, system: System
) -> tuple[dict[int, ServingEvaluation], int]:
    """Decode evaluations by running sequences per instance, and the cap (0: nothing fits)."""
    base = replace(
        design.decode, phase=Phase.DECODE, context_len=round(design.load.decode_context()),
        prompt_len=0, chunk=0,
    )  # fmt: skip
    pp, dp = base.pp, base.dp

    def run(running: int) -> ServingEvaluation:
        config = replace(base, batch=running // pp)
        return evaluate_decode(backend, model, config, system, design.memory_utilization)

    first = run(design.max_running)
    fitting = first.max_batch * pp  # running sequences whose KV cache fits
    cap = min(design.max_running, fitting)
    if cap < dp * pp:
        return {design.max_running: first}, 0
    curve = {design.max_running: first} if cap == design.max_running else {}
    for running in decode_batches(dp * pp, cap, dp * pp):
        if running not in curve:
            curve[running] = run(running)
    return {b: curve[b] for b in sorted(curve) if b <= cap}, cap


def _breakdown(
    curve: Mapping[int, ServingEvaluation], state: SteadyState, step_s: float
) -> dict[str, float]:
    """The decode iteration's breakdown at the running batch, plus interleaved prefill."""
    above = next((b for b in curve if b >= state.running_sequences), max(curve))
    evaluated = curve[above]
    total = math.fsum(evaluated.breakdown.values())
    scale = step_s / total if total > 0 else 0.0
    parts = {key: value * scale for key, value in evaluated.breakdown.items()}
    interleaved = state.time_per_output_token_s - step_s
    if interleaved > 0:
        parts["interleaved_prefill"] = interleaved
    return parts


@functools.lru_cache(maxsize=64)
def _steps(
    backend: AnalyticalBackend, model: ModelSpec, design: ServingDesign, system: System
) -> tuple[dict[int, ServingEvaluation], int, _Prefills | None]:
    """The decode curve, its cap and the prefills of a design (a memo of pure evaluations,
    per process, like the model and system loaders of :mod:`stage_explore.search.design`)."""
    curve, cap = _decode_curve(backend, model, design, system)
    if cap == 0:
        return curve, cap, None
    return curve, cap, _prefills(backend, model, design, system)


def evaluate_design(
    backend: AnalyticalBackend, model: ModelSpec, design: ServingDesign, system: System
) -> Evaluation:
    """The record of one serving design point (module docstring)."""
    gpus = design.num_gpus
    if gpus > system.max_gpus:
        raise InfeasibleError(f"{gpus} GPUs exceed the system's {system.max_gpus}")
    # the steps depend neither on how requests arrive nor on how many instances serve them:
    # designs that differ only there (a searched rate, a pool split) share them
    steps_design = replace(
        design, decode_instances=1, prefill_instances=min(1, design.prefill_instances),
        load=replace(design.load, arrival_rate_per_s=None, concurrency=None),
    )  # fmt: skip
    curve, cap, prefills = _steps(backend, model, steps_design, system)
    top = curve[max(curve)]
    if cap == 0:
        reason = (
            "KV cache does not fit: not one sequence per data-parallel rank fits at the mean "
            f"decode context of {round(design.load.decode_context())} tokens ({top.reason})"
        )
        return _infeasible(design, top, reason)
    assert prefills is not None
    decode = StepCurve(tuple((b, e.time_per_output_token_s or 0.0) for b, e in curve.items()))
    times = PoolTimes(
        decode=decode, max_running=cap, prefill_service_s=prefills.service_s,
        prefill_latency_s=prefills.latency_s, transfer_s=prefills.transfer_s,
        decode_instances=design.decode_instances, prefill_instances=design.prefill_instances,
    )  # fmt: skip
    state = steady_state(times, design.load)
    rate = state.requests_per_s
    load = design.load
    tokens_per_s = rate * load.output.mean()
    step_s = decode(state.running_sequences)
    accelerator = system.accelerator
    peak = accelerator.peak(accelerator.precision_dtype(design.decode.precision))
    decode_config = design.decode
    per_token = (
        top.extra["flops"] * decode_config.tp * decode_config.dp / (max(curve) // decode_config.pp)
    )
    flops_per_s = rate * (
        load.prompt.expect(prefills.flops_per_prompt) + max(0.0, load.output.mean() - 1) * per_token
    )
    utilization = flops_per_s / (gpus * peak)
    memory = max(top.peak_memory_bytes, prefills.worst.peak_memory_bytes)
    reason = ""
    if not prefills.worst.feasible:
        reason = f"prefill: {prefills.worst.reason}"
    elif not state.stable:
        reason = state.reason
    price = system.price_per_gpu_hour
    cost = None if price is None or tokens_per_s <= 0 else price * gpus / 3600 / tokens_per_s * 1e6
    extra: dict[str, Any] = {
        **state.to_dict(), "tokens_per_s": tokens_per_s, "max_running_sequences": cap,
        "decode_instances": design.decode_instances,
        "prefill_instances": design.prefill_instances,
        "kv_cache_bytes": top.kv_cache_bytes, "weight_bytes": top.weight_bytes,
        "memory_bound_fraction": top.memory_bound_fraction,
        "decode_context_tokens": load.decode_context(), "load": load.mode,
        **pool_placements(top, prefills.worst, design.prefill_instances > 0),
    }  # fmt: skip
    del extra["stable"], extra["reason"]
    return Evaluation(
        step_time_s=state.time_per_output_token_s, mfu=utilization, hfu=utilization,
        tokens_per_s_per_gpu=tokens_per_s / gpus, peak_memory_bytes=memory,
        feasible=not reason, reason=reason, breakdown=_breakdown(curve, state, step_s),
        memory_capacity_bytes=accelerator.memory_bytes, num_gpus=gpus,
        cost_per_million_tokens=cost, extra=extra,
    )  # fmt: skip


def _infeasible(design: ServingDesign, decode: ServingEvaluation, reason: str) -> Evaluation:
    return Evaluation(
        step_time_s=math.nan, mfu=0.0, hfu=0.0, tokens_per_s_per_gpu=0.0,
        peak_memory_bytes=decode.peak_memory_bytes, feasible=False, reason=reason,
        memory_capacity_bytes=decode.memory_capacity_bytes, num_gpus=design.num_gpus,
        extra={
            "max_running_sequences": 0, "decode_instances": design.decode_instances,
            "prefill_instances": design.prefill_instances,
            "kv_cache_bytes": decode.kv_cache_bytes, "weight_bytes": decode.weight_bytes,
        },
    )  # fmt: skip
