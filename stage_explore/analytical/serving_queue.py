"""Steady-state serving under a request load: a mean-value queueing model of continuous batching.

Contents:
    :class:`StepCurve`
        seconds of one decode iteration against the running sequences of an instance,
        interpolated piecewise-linearly between evaluated batches.
    :class:`PoolTimes`
        what the model needs from the evaluated steps: the decode curve and its cap, and per
        prompt length the prefill's instance-seconds (batched), its latency and the KV transfer.
    :class:`SteadyState`, :func:`steady_state`
        time to first token, time per output token, the running batch and the request rate for
        a :class:`~stage_explore.analytical.requests.RequestLoad`.

The model (``docs/serving.md``, "Serving under a load"). Requests arrive as a Poisson process
and are spread evenly over the instances. Each request needs a prefill of its prompt (service
time ``S``: the instance-seconds of its share of a batched prefill step) and ``D = E[O] − 1``
decode iterations (the prefill samples the first token).

- *Co-located* (prefill first, as vLLM and SGLang schedule by default): an instance serves the
  waiting prefills exhaustively between decode iterations, so the prefill queue is an M/G/1
  queue whose server takes *vacations* (the decode iterations, of length ``t_d``): the mean wait
  is ``λ·E[S²] / (2(1 − ρ)) + t_d / 2`` with ``ρ = λ·E[S]`` (the decomposition of M/G/1 queues
  with multiple vacations, Fuhrmann & Cooper, Oper. Res. 33(5), 1985). The decode batch
  advances only outside prefills: a running sequence gets a token every ``t_d / (1 − ρ)``.
- *Disaggregated*: prefill instances are M/G/1 queues (Pollaczek–Khinchine mean wait
  ``λ·E[S²] / (2(1 − ρ))``), each prompt's KV cache then crosses to a decode instance, whose
  iterations run back to back: a token every ``t_d``.
- The running batch ``B`` of a decode instance follows from Little's law, ``B = λ_d·D·τ(B)``
  (``τ``: time per output token, itself growing with ``B``): the smallest root is found by
  bisection. The load is stable when ``ρ < 1`` and the root stays within the instance's cap
  (the batch limit, or the largest batch whose KV cache fits).
- *Concurrency* ``N`` (closed loop, no think time): the rate ``λ`` with ``λ·R(λ) = N``, ``R``
  the mean request latency ``TTFT + D·TPOT`` (Little's law again); past the capacity the extra
  clients wait for admission and the rate stays at the capacity.
- *Saturated*: the rate is the capacity and the time to first token is the prefill's own
  latency (plus the KV transfer), without queueing, as an offline benchmark measures it.

Assumptions: mean values only (no tail latencies); decode iterations run continuously (a batch
that empties would let a prefill start at once: at very light load the co-located wait is
overestimated by at most ``t_d / 2``); prompt and output lengths are independent; the KV cache
of a running sequence is its mean (length-biased) context.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stage_explore.analytical.requests import RequestLoad

_BISECTIONS = 100


@dataclass(frozen=True, slots=True)
class StepCurve:
    """``(running sequences, seconds)`` points, batches ascending; below the first point the
    first point's time (an iteration never gets cheaper than reading the weights)."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        batches = [b for b, _ in self.points]
        assert batches and batches == sorted(set(batches)), "distinct ascending batches"

    def __call__(self, running: float) -> float:
        batches = [b for b, _ in self.points]
        if running <= batches[0] or len(batches) == 1:
            return self.points[0][1]
        index = min(bisect.bisect_left(batches, running), len(batches) - 1)
        (b0, t0), (b1, t1) = self.points[index - 1], self.points[index]
        return t0 + (t1 - t0) * (running - b0) / (b1 - b0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolTimes:
    """The evaluated steps the queue model runs on (module docstring).

    ``prefill_service_s``: instance-seconds per prompt of each length when prompts are batched
    (what loads the prefill server); ``prefill_latency_s``: the latency of the prompt's own
    prefill; ``transfer_s``: its KV cache's transfer to a decode instance (0 co-located).
    ``prefill_instances`` is 0 when prefill and decode share the instances.
    """

    decode: StepCurve
    max_running: int
    prefill_service_s: Mapping[int, float]
    prefill_latency_s: Mapping[int, float]
    transfer_s: Mapping[int, float]
    decode_instances: int
    prefill_instances: int = 0

    @property
    def disaggregated(self) -> bool:
        return self.prefill_instances > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SteadyState:
    """The serving state under a load; ``stable`` false (with ``reason``) when the load exceeds
    the capacity (the other numbers then describe the server at its capacity)."""

    stable: bool
    reason: str
    requests_per_s: float
    capacity_requests_per_s: float
    bottleneck: str
    running_sequences: float
    time_to_first_token_s: float
    time_per_output_token_s: float
    prefill_wait_s: float
    prefill_utilization: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "stable": self.stable,
            "reason": self.reason,
            "requests_per_s": self.requests_per_s,
            "capacity_requests_per_s": self.capacity_requests_per_s,
            "bottleneck": self.bottleneck,
            "running_sequences": self.running_sequences,
            "time_to_first_token_s": self.time_to_first_token_s,
            "time_per_output_token_s": self.time_per_output_token_s,
            "prefill_wait_s": self.prefill_wait_s,
            "prefill_utilization": self.prefill_utilization,
        }


@dataclass(frozen=True, slots=True)
class _Moments:
    service: float  # E[S]
    service2: float  # E[S²]
    latency: float  # E[prefill latency]
    transfer: float  # E[KV transfer]
    decode_steps: float  # D = E[O] − 1


def _moments(times: PoolTimes, load: RequestLoad) -> _Moments:
    prompt = load.prompt
    squares = {length: s * s for length, s in times.prefill_service_s.items()}
    return _Moments(
        service=prompt.expect(times.prefill_service_s),
        service2=prompt.expect(squares),
        latency=prompt.expect(times.prefill_latency_s),
        transfer=prompt.expect(times.transfer_s),
        decode_steps=max(0.0, load.output.mean() - 1.0),
    )


def _capacity(times: PoolTimes, m: _Moments) -> tuple[float, str]:
    """Requests per second the deployment sustains, and what limits it."""
    cap, t_cap = times.max_running, times.decode(times.max_running)
    if times.disaggregated:
        prefill = times.prefill_instances / m.service
        decode = (
            times.decode_instances * cap / (m.decode_steps * t_cap) if m.decode_steps else math.inf
        )
        return (prefill, "prefill") if prefill < decode else (decode, "decode")
    per_instance = cap / (m.decode_steps * t_cap + cap * m.service)
    return times.decode_instances * per_instance, "co-located"


def _running(curve: StepCurve, rate: float, decode_steps: float, stretch: float, cap: int) -> float:
    """The smallest ``B`` in ``[0, cap]`` with ``B = rate·D·curve(B)·stretch`` (Little's law)."""

    def excess(running: float) -> float:
        return rate * decode_steps * curve(running) * stretch - running

    if excess(0.0) <= 0:
        return 0.0
    low, high = 0.0, float(cap)
    if excess(high) > 1e-9 * cap:
        return math.inf
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) > 0 else (low, middle)
    return high


def _at_rate(times: PoolTimes, m: _Moments, rate: float, *, queueing: bool) -> SteadyState:
    """The state at ``rate`` requests per second (below the capacity)."""
    capacity, bottleneck = _capacity(times, m)
    cap = times.max_running
    if times.disaggregated:
        prefill_rate = rate / times.prefill_instances
        rho = prefill_rate * m.service
        wait = prefill_rate * m.service2 / (2 * (1 - rho)) if queueing and rho < 1 else 0.0
        running = _running(times.decode, rate / times.decode_instances, m.decode_steps, 1.0, cap)
        step = times.decode(min(running, cap))
        tpot = step
    else:
        per_instance = rate / times.decode_instances
        rho = per_instance * m.service
        stretch = 1 / (1 - rho) if rho < 1 else math.inf
        running = _running(times.decode, per_instance, m.decode_steps, stretch, cap)
        step = times.decode(min(running, cap))
        tpot = step * stretch
        wait = 0.0
        if queueing and rho < 1:
            wait = per_instance * m.service2 / (2 * (1 - rho)) + step / 2
    return SteadyState(
        stable=True, reason="", requests_per_s=rate, capacity_requests_per_s=capacity,
        bottleneck=bottleneck, running_sequences=min(running, float(cap)),
        time_to_first_token_s=wait + m.latency + m.transfer, time_per_output_token_s=tpot,
        prefill_wait_s=wait, prefill_utilization=min(rho, 1.0),
    )  # fmt: skip


def steady_state(times: PoolTimes, load: RequestLoad) -> SteadyState:
    """The serving state of ``times`` under ``load`` (module docstring)."""
    m = _moments(times, load)
    capacity, bottleneck = _capacity(times, m)
    if load.mode == "saturated":
        return _at_rate(times, m, capacity, queueing=False)
    if load.mode == "rate":
        rate = float(load.arrival_rate_per_s or 0.0)
        if rate >= capacity:
            at_capacity = _at_rate(times, m, capacity, queueing=False)
            reason = (
                f"arrival rate {rate:.4g} requests/s reaches the capacity of "
                f"{capacity:.4g} requests/s ({bottleneck}-bound): the queue grows without bound"
            )
            return _replace(at_capacity, stable=False, reason=reason)
        return _at_rate(times, m, rate, queueing=True)
    clients = float(load.concurrency or 0)

    def latency(rate: float) -> float:
        state = _at_rate(times, m, rate, queueing=True)
        return state.time_to_first_token_s + m.decode_steps * state.time_per_output_token_s

    near = capacity * (1 - 1e-9)
    if near * latency(near) <= clients:  # more clients than the capacity serves: they queue
        state = _at_rate(times, m, capacity, queueing=False)
        decoding = m.decode_steps * state.time_per_output_token_s
        ttft = clients / capacity - decoding
        return _replace(
            state, time_to_first_token_s=ttft, prefill_wait_s=ttft - m.latency - m.transfer
        )
    low, high = 0.0, near
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if middle * latency(middle) < clients else (low, middle)
    return _at_rate(times, m, (low + high) / 2, queueing=True)


def _replace(state: SteadyState, **changes: Any) -> SteadyState:
    values = state.to_dict()
    values.update(changes)
    return SteadyState(**values)


def decode_batches(first: int, cap: int, step: int, count: int = 4) -> Sequence[int]:
    """Up to ``count`` batches from ``first`` to ``cap`` (multiples of ``step``), spaced
    geometrically, where the decode curve is evaluated."""
    if cap <= first:
        return (cap,)
    ratio = (cap / first) ** (1 / (count - 1))
    batches = {first, cap}
    for k in range(1, count - 1):
        batches.add(max(step, round(first * ratio**k / step) * step))
    return tuple(sorted(b for b in batches if first <= b <= cap))
