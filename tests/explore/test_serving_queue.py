"""The steady-state serving model: request length distributions, and the queueing formulas
against closed forms and a discrete-event simulation (written here, as the reference)."""

from __future__ import annotations

import math
import random

import pytest

from stage_core.errors import ConfigError
from stage_explore.analytical.requests import (
    QUANTILE_POINTS,
    LengthDistribution,
    RequestLoad,
    length_distribution,
)
from stage_explore.analytical.serving_queue import (
    PoolTimes,
    StepCurve,
    decode_batches,
    steady_state,
)


def _simulate_wait(
    rate: float, services: list[tuple[float, float]], vacation_s: float, seed: int = 7
) -> float:
    """Mean wait in queue of a single server with Poisson arrivals and service times drawn from
    ``services`` ((seconds, probability) pairs). With ``vacation_s > 0`` the server runs a
    vacation of that length whenever it finds the queue empty (multiple vacations, exhaustive
    service: the co-located server running a decode iteration); with 0 it idles until the next
    arrival (plain M/G/1)."""
    rng = random.Random(seed)
    values = [s for s, _ in services]
    weights = [p for _, p in services]
    count = 200_000
    arrivals = []
    clock = 0.0
    for _ in range(count):
        clock += rng.expovariate(rate)
        arrivals.append(clock)
    draws = rng.choices(values, weights, k=count)
    now, index, waited = 0.0, 0, 0.0
    while index < count:
        if arrivals[index] <= now:
            waited += now - arrivals[index]
            now += draws[index]
            index += 1
        elif vacation_s > 0:
            now += vacation_s
        else:
            now = arrivals[index]
    return waited / count


def _times(
    service: dict[int, float], curve: StepCurve, cap: int, *, prefill: int = 0, decode: int = 1
) -> PoolTimes:
    return PoolTimes(
        decode=curve, max_running=cap, prefill_service_s=service, prefill_latency_s=service,
        transfer_s=dict.fromkeys(service, 0.0), decode_instances=decode, prefill_instances=prefill,
    )  # fmt: skip


def test_colocated_prefill_wait_matches_a_vacation_queue_simulation() -> None:
    lengths = length_distribution([[500, 3], [4000, 1]], "prompt")
    service = {500: 0.02, 4000: 0.15}
    step = 0.03
    curve = StepCurve(((1, step), (512, step)))  # flat: the decode step does not grow here
    rate = 6.0
    load = RequestLoad(prompt=lengths, output=LengthDistribution.fixed(50), arrival_rate_per_s=rate)
    state = steady_state(_times(service, curve, 512), load)
    reference = _simulate_wait(rate, [(0.02, 0.75), (0.15, 0.25)], step)
    assert state.stable
    assert state.prefill_wait_s == pytest.approx(reference, rel=0.04)
    # the time to first token adds the prompt's own prefill latency
    assert state.time_to_first_token_s == pytest.approx(
        state.prefill_wait_s + 0.75 * 0.02 + 0.25 * 0.15
    )


def test_disaggregated_prefill_is_md1_and_pk_against_simulation() -> None:
    service_s, rate = 0.1, 7.0  # ρ = 0.7
    load = RequestLoad(
        prompt=LengthDistribution.fixed(2048), output=LengthDistribution.fixed(101),
        arrival_rate_per_s=rate,
    )  # fmt: skip
    curve = StepCurve(((1, 0.01), (1024, 0.05)))
    state = steady_state(_times({2048: service_s}, curve, 1024, prefill=1), load)
    rho = rate * service_s
    assert state.prefill_wait_s == pytest.approx(rho * service_s / (2 * (1 - rho)))  # M/D/1
    assert state.prefill_wait_s == pytest.approx(
        _simulate_wait(rate, [(service_s, 1.0)], 0.0), rel=0.04
    )


def test_decode_batch_is_littles_law_fixed_point_of_a_linear_step() -> None:
    # t(B) = a + b·B between the points; B = λ·D·t(B) → B = λ·D·a / (1 − λ·D·b)
    a, b = 0.02, 1e-4
    curve = StepCurve(((8, a + b * 8), (4096, a + b * 4096)))
    output, rate = 201, 10.0
    load = RequestLoad(
        prompt=LengthDistribution.fixed(100), output=LengthDistribution.fixed(output),
        arrival_rate_per_s=rate,
    )  # fmt: skip
    state = steady_state(_times({100: 1e-3}, curve, 4096, prefill=1), load)
    decode_steps = output - 1
    expected = rate * decode_steps * a / (1 - rate * decode_steps * b)
    assert state.running_sequences == pytest.approx(expected, rel=1e-6)
    assert state.time_per_output_token_s == pytest.approx(a + b * expected, rel=1e-6)


def test_capacity_saturation_and_overload() -> None:
    curve = StepCurve(((1, 0.01), (64, 0.02)))
    service = {1000: 0.05}
    prompt, output = LengthDistribution.fixed(1000), LengthDistribution.fixed(101)
    saturated = steady_state(_times(service, curve, 64), RequestLoad(prompt=prompt, output=output))
    # co-located capacity: cap / (D·t(cap) + cap·E[S])
    capacity = 64 / (100 * 0.02 + 64 * 0.05)
    assert saturated.requests_per_s == pytest.approx(capacity)
    assert saturated.running_sequences == pytest.approx(64, rel=1e-6)
    assert saturated.prefill_wait_s == 0
    over = steady_state(
        _times(service, curve, 64),
        RequestLoad(prompt=prompt, output=output, arrival_rate_per_s=capacity * 1.01),
    )
    assert not over.stable and "capacity" in over.reason
    # disaggregated: the slower pool sets the rate
    two = steady_state(
        _times(service, curve, 64, prefill=1, decode=4), RequestLoad(prompt=prompt, output=output)
    )
    assert two.bottleneck == "prefill" and two.requests_per_s == pytest.approx(1 / 0.05)


def test_concurrency_is_littles_law_over_the_request_latency() -> None:
    curve = StepCurve(((1, 0.01), (256, 0.04)))
    load = RequestLoad(
        prompt=LengthDistribution.fixed(512), output=LengthDistribution.fixed(129), concurrency=32
    )
    state = steady_state(_times({512: 0.004}, curve, 256), load)
    latency = state.time_to_first_token_s + 128 * state.time_per_output_token_s
    assert state.requests_per_s * latency == pytest.approx(32, rel=1e-6)
    many = steady_state(
        _times({512: 0.004}, curve, 256),
        RequestLoad(prompt=load.prompt, output=load.output, concurrency=100_000),
    )
    assert many.requests_per_s == pytest.approx(many.capacity_requests_per_s)
    assert many.time_to_first_token_s > 100  # the extra clients wait for admission


def test_step_curve_and_decode_batches() -> None:
    curve = StepCurve(((4, 1.0), (8, 2.0), (16, 2.5)))
    assert curve(1) == 1.0 and curve(6) == 1.5 and curve(12) == 2.25 and curve(16) == 2.5
    batches = decode_batches(8, 1024, 8)
    assert batches[0] == 8 and batches[-1] == 1024 and all(b % 8 == 0 for b in batches)
    assert decode_batches(8, 8, 8) == (8,)


def test_length_distributions() -> None:
    fixed = length_distribution(1000, "p")
    assert fixed.mean() == 1000 and fixed.size_biased_mean() == 1000
    pairs = length_distribution([[100, 1], [300, 3]], "p")
    assert pairs.mean() == pytest.approx(250)
    assert pairs.size_biased_mean() == pytest.approx((0.25 * 100**2 + 0.75 * 300**2) / 250)
    uniform = length_distribution({"distribution": "uniform", "min": 100, "max": 900}, "p")
    assert len(uniform.points) == QUANTILE_POINTS and uniform.mean() == pytest.approx(500, abs=1)
    lognormal = length_distribution({"distribution": "lognormal", "mean": 2000, "sigma": 0.5}, "p")
    assert lognormal.mean() == pytest.approx(2000, rel=0.05)
    exponential = length_distribution({"distribution": "exponential", "mean": 400}, "p")
    assert exponential.mean() == pytest.approx(400, rel=0.1)
    # decode context: E[P] + E[O²] / (2·E[O])
    load = RequestLoad(prompt=pairs, output=length_distribution([[10, 1], [30, 1]], "o"))
    assert load.decode_context() == pytest.approx(250 + (50 + 450) / 20 / 2)
    assert load.mode == "saturated" and math.isfinite(load.decode_context())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "lengths must be integers from 1"),
        ([[100, 0]], "weights must be numbers > 0"),
        ([[100]], "expected [length, weight] pairs"),
        ({"distribution": "pareto", "mean": 3}, "expected distribution = one of"),
        ({"distribution": "lognormal", "mean": 3}, "takes mean, sigma"),
        ({"distribution": "uniform", "min": 900, "max": 100}, "uniform needs 1 ≤ min ≤ max"),
        ("long", "expected a length, a list"),
    ],
)
def test_bad_lengths_are_one_line_errors(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        length_distribution(value, "[workload] prompt_len")
    text = str(raised.value)
    assert message in text and text.startswith("[workload] prompt_len") and "\n" not in text


def test_rate_and_concurrency_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="not both"):
        RequestLoad(
            prompt=LengthDistribution.fixed(1), output=LengthDistribution.fixed(1),
            arrival_rate_per_s=1.0, concurrency=2,
        )  # fmt: skip
