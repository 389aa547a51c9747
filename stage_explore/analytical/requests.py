"""A serving load: prompt and output length distributions and how requests arrive.

Contents:
    :class:`LengthDistribution`
        token lengths as a discrete distribution (support points and their probabilities):
        a fixed length, a list of ``(length, weight)`` pairs, or a named distribution
        (``uniform``, ``lognormal``, ``exponential``) discretised into :data:`QUANTILE_POINTS`
        equal-probability bins, each at its conditional mean; its mean, second moment and
        size-biased mean.
    :class:`RequestLoad`
        the request mix (prompt and output lengths, independent) and the load: an arrival
        rate (open loop, Poisson arrivals), a concurrency (closed loop: that many clients each
        sending its next request when the previous one finishes), or neither (saturated: the
        server always has work, as offline benchmarks run it).
    :func:`length_distribution`
        a distribution from what a study file or a caller gives (an int, a list of pairs, or a
        table with ``distribution = "…"`` and its parameters); one-line errors naming the value.

Named distributions are discretised into ``n`` equal-probability bins (between the quantiles
``i / n`` and ``(i + 1) / n``), each evaluated at its conditional mean ``E[X | bin]`` (closed
forms in :func:`_bin_means`), rounded to whole tokens; equal points merge. The discretised
mean is the stated one within rounding (until s37 the bins' midpoint quantiles ``(i + 0.5) / n``
were used, which understated a heavy tail: a lognormal of mean 2,048 had mean 1,933 at sigma
0.8 and 1,559 at sigma 1.5). A bin mean that rounds below 1 or above 2^24 tokens is refused
(it was clamped until s37: a lognormal of sigma 50 served 1-token prompts whatever its mean).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from stage_core.errors import ConfigError
from stage_core.serving.config import MAX_CONTEXT

#: Support points a named distribution is discretised at (equal-probability bins, each at
#: its conditional mean).
QUANTILE_POINTS = 8

_STANDARD = NormalDist()
_PHI = _STANDARD.cdf

#: Named distributions and their parameters.
NAMED_DISTRIBUTIONS: Mapping[str, tuple[str, ...]] = {
    "uniform": ("min", "max"),
    "lognormal": ("mean", "sigma"),
    "exponential": ("mean",),
}


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """Token lengths: ``points`` are ``(length, probability)`` pairs, lengths ascending and
    distinct, probabilities summing to 1."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ConfigError("a length distribution needs at least one length, got none")
        total = math.fsum(p for _, p in self.points)
        if abs(total - 1.0) > 1e-9:
            raise ConfigError(f"length probabilities must sum to 1, but got {total!r}")

    @classmethod
    def fixed(cls, length: int) -> LengthDistribution:
        """Every request has ``length`` tokens."""
        _check_length(length, "length")
        return cls(((length, 1.0),))

    @classmethod
    def from_weights(cls, pairs: list[tuple[int, float]], what: str) -> LengthDistribution:
        """Lengths with (unnormalised, positive) weights; equal lengths add their weights."""
        merged: dict[int, float] = {}
        for length, weight in pairs:
            _check_length(length, what)
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
                raise ConfigError(f"{what}: weights must be numbers > 0, but got {weight!r}")
            merged[length] = merged.get(length, 0.0) + float(weight)
        if not merged:
            raise ConfigError(f"{what}: expected at least one (length, weight) pair, got none")
        total = math.fsum(merged.values())
        points = tuple((length, merged[length] / total) for length in sorted(merged))
        # the normalised weights may miss 1 by an ulp; put the rest on the last point
        rest = 1.0 - math.fsum(p for _, p in points[:-1])
        return cls((*points[:-1], (points[-1][0], rest)))

    def mean(self) -> float:
        """E[L]."""
        return math.fsum(length * p for length, p in self.points)

    def second_moment(self) -> float:
        """E[L²]."""
        return math.fsum(length * length * p for length, p in self.points)

    def size_biased_mean(self) -> float:
        """E[L²] / E[L]: the mean length of the request a random *token* belongs to."""
        return self.second_moment() / self.mean()

    def expect(self, values: Mapping[int, float]) -> float:
        """E[f(L)] for ``values[length] = f(length)``."""
        return math.fsum(values[length] * p for length, p in self.points)

    def lengths(self) -> tuple[int, ...]:
        return tuple(length for length, _ in self.points)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"points": [[length, p] for length, p in self.points], "mean": self.mean()}


def _check_length(length: Any, what: str) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= MAX_CONTEXT:
        raise ConfigError(
            f"{what}: lengths must be integers from 1 to {MAX_CONTEXT}, but got {length!r}"
        )


def _upper_tail_gap(low: float, high: float) -> float:
    """``Φ(high) − Φ(low)`` for the standard normal ``Φ``, ``low ≤ high`` (either may be
    infinite), taken in the tail where it does not cancel (``Φ(−x)`` is an ``erfc``)."""
    if low > 0:
        return _PHI(-low) - _PHI(-high)
    return _PHI(high) - _PHI(low)


def _bin_means(name: str, params: Mapping[str, float], what: str) -> list[float]:
    """The conditional mean of each of :data:`QUANTILE_POINTS` equal-probability bins
    ``[F⁻¹(i/n), F⁻¹((i+1)/n))``: ``E[X | bin i] = n · ∫ x dF`` over the bin, so the bins'
    means average to the distribution's mean exactly (before rounding)."""
    n = QUANTILE_POINTS
    edges = [i / n for i in range(n + 1)]
    if name == "uniform":
        low, high = params["min"], params["max"]
        if not 1 <= low <= high:
            raise ConfigError(f"{what}: uniform needs 1 ≤ min ≤ max, but got ({low=}, {high=})")
        # the density is flat: a bin's mean is its midpoint
        return [low + (i + 0.5) / n * (high - low) for i in range(n)]
    if name == "exponential":
        # x = −m·ln(1−q); ∫ x λe^(−λx) dx = [−(x + m)·e^(−x/m)] and e^(−x/m) = 1 − q, so
        # E[X | bin] = m + n·(x_a·(1 − q_a) − x_b·(1 − q_b)), the last bin's x_b·0 being 0.
        m = params["mean"]

        def tail_product(q: float) -> float:
            return 0.0 if q >= 1 else -m * math.log1p(-q) * (1 - q)

        return [m + n * (tail_product(edges[i]) - tail_product(edges[i + 1])) for i in range(n)]
    # lognormal with the given mean and log-space standard deviation sigma, mean =
    # exp(mu + sigma²/2): E[X; z_a < (ln X − mu)/sigma < z_b] = mean·(Φ(z_b − sigma) −
    # Φ(z_a − sigma)) with z = Φ⁻¹(q), so E[X | bin] = n·mean·(Φ(z_b − σ) − Φ(z_a − σ)).
    mean, sigma = params["mean"], params["sigma"]
    if sigma == 0:
        return [mean] * n
    z = [-math.inf, *(_STANDARD.inv_cdf(q) for q in edges[1:-1]), math.inf]
    return [n * mean * _upper_tail_gap(z[i] - sigma, z[i + 1] - sigma) for i in range(n)]


def length_distribution(value: Any, what: str) -> LengthDistribution:
    """The distribution ``value`` describes (see the module docstring); ``what`` names it in
    errors (``[workload] prompt_len``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        _check_length(value, what)
        return LengthDistribution.fixed(value)
    if isinstance(value, list):
        pairs = []
        for item in value:
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise ConfigError(
                    f"{what}: expected [length, weight] pairs such as [[512, 3], [4096, 1]], "
                    f"but got {item!r}"
                )
            pairs.append((item[0], item[1]))
        return LengthDistribution.from_weights(pairs, what)
    if isinstance(value, Mapping):
        name = value.get("distribution")
        if not isinstance(name, str) or name not in NAMED_DISTRIBUTIONS:
            known = ", ".join(repr(n) for n in NAMED_DISTRIBUTIONS)
            raise ConfigError(f"{what}: expected distribution = one of {known}, but got {name!r}")
        wanted = NAMED_DISTRIBUTIONS[name]
        unknown = sorted(set(value) - {"distribution", *wanted})
        missing = [key for key in wanted if key not in value]
        if unknown or missing:
            raise ConfigError(
                f"{what}: distribution {name!r} takes {', '.join(wanted)}, but got "
                f"keys {', '.join(sorted(value))}"
            )
        params: dict[str, float] = {}
        for key in wanted:
            number = value[key]
            bad = isinstance(number, bool) or not isinstance(number, int | float)
            if bad or not (number >= 0 if key == "sigma" else number > 0):
                raise ConfigError(f"{what}: {name} {key} must be a number > 0, but got {number!r}")
            params[key] = float(number)
        means = _bin_means(name, params, what)
        for rank, x in enumerate(means, start=1):  # clamped before s37: sigma 50 was 1 token
            if not 1 <= round(x) <= MAX_CONTEXT:
                given = ", ".join(f"{k} {v!r}" for k, v in value.items())
                raise ConfigError(
                    f"{what}: {given} puts the mean of bin {rank} of {QUANTILE_POINTS} at "
                    f"{x:.4g} tokens, outside 1 to {MAX_CONTEXT}; expected a distribution "
                    "whose points are whole lengths in that range (a smaller sigma or max, a "
                    "larger mean, or [length, weight] pairs)"
                )
        points = [round(x) for x in means]
        return LengthDistribution.from_weights([(p, 1.0) for p in points], what)
    raise ConfigError(
        f"{what}: expected a length, a list of [length, weight] pairs or a table "
        f'{{ distribution = "lognormal", mean = …, sigma = … }}, but got {value!r}'
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLoad:
    """Requests and how they arrive (module docstring). At most one of ``arrival_rate_per_s``
    (requests per second over the whole deployment) and ``concurrency`` (clients)."""

    prompt: LengthDistribution
    output: LengthDistribution
    arrival_rate_per_s: float | None = None
    concurrency: int | None = None
    #: Tokens of every prompt already in a prefix cache (their KV is reused, not computed):
    #: the prefill computes ``prompt`` new tokens over them and decode attends to them too.
    cached_prompt_len: int = 0

    def __post_init__(self) -> None:
        cached = self.cached_prompt_len
        if isinstance(cached, bool) or not isinstance(cached, int) or not 0 <= cached < MAX_CONTEXT:
            raise ConfigError(
                f"`cached_prompt_len` must be an int from 0 to {MAX_CONTEXT - 1}, "
                f"but got {cached!r}"
            )
        rate, clients = self.arrival_rate_per_s, self.concurrency
        if rate is not None and clients is not None:
            raise ConfigError(
                "give an arrival rate or a concurrency, not both, but got "
                f"(arrival_rate_per_s={rate!r}, concurrency={clients!r})"
            )
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf
        ):
            raise ConfigError(f"`arrival_rate_per_s` must be a finite number > 0, but got {rate!r}")
        if clients is not None and (
            isinstance(clients, bool) or not isinstance(clients, int) or clients < 1
        ):
            raise ConfigError(f"`concurrency` must be an integer ≥ 1, but got {clients!r}")
        longest = cached + max(self.prompt.lengths()) + max(self.output.lengths())
        if longest > MAX_CONTEXT:  # each trial's `context_len` refused before s37
            raise ConfigError(
                f"`cached_prompt_len` + the longest `prompt_len` + the longest `output_len` "
                f"must be at most {MAX_CONTEXT} = 2^24 tokens (a request's cache at its last "
                f"token), but got {cached} + {max(self.prompt.lengths())} + "
                f"{max(self.output.lengths())} = {longest}"
            )

    @property
    def mode(self) -> str:
        """``rate``, ``concurrency`` or ``saturated``."""
        if self.arrival_rate_per_s is not None:
            return "rate"
        return "concurrency" if self.concurrency is not None else "saturated"

    def decode_context(self) -> float:
        """Mean tokens cached per running sequence during decode.

        A request of prompt ``P`` and output ``O`` runs ``O`` decode iterations with ``P + i``
        tokens cached at the ``i``-th, so a running sequence picked at random (the decode batch)
        has ``P`` plus half its own output, its output being length-biased by the time it runs:
        ``E[P] + E[O²] / (2·E[O])`` for independent ``P`` and ``O`` (plus the cached prefix).
        """
        return self.cached_prompt_len + self.prompt.mean() + self.output.size_biased_mean() / 2

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "prompt": self.prompt.to_dict(),
            "output": self.output.to_dict(),
            "arrival_rate_per_s": self.arrival_rate_per_s,
            "concurrency": self.concurrency,
            "cached_prompt_len": self.cached_prompt_len,
        }
