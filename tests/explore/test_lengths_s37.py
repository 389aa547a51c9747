"""Named length distributions keep their stated mean (7 Dec 2026, s37 lengths; docs/serving.md,
"Serving length distributions keep their stated mean").

Until s37 a named distribution was discretised at the midpoint quantiles of 8 equal-probability
bins, which understates a heavy tail: a lognormal of mean 2,048 was evaluated at a mean of 1,559
at sigma 1.5. Each bin is now evaluated at its conditional mean; the closed forms are checked
here against numerical integration of the density over each bin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import pytest

from stage_explore.analytical.requests import (
    QUANTILE_POINTS,
    _bin_means,
    length_distribution,
)


def _simpson(f: Callable[[float], float], low: float, high: float, steps: int = 20_000) -> float:
    """∫ f over [low, high] by Simpson's rule (``steps`` even)."""
    h = (high - low) / steps
    inner = math.fsum((4 if k % 2 else 2) * f(low + k * h) for k in range(1, steps))
    return h / 3 * (f(low) + inner + f(high))


def _numeric_lognormal(mean: float, sigma: float) -> list[float]:
    """n · ∫ exp(mu + sigma·z) φ(z) dz over each bin's z range (tails cut at |z| = 12 + sigma)."""
    n, standard = QUANTILE_POINTS, NormalDist()
    mu = math.log(mean) - sigma * sigma / 2
    edges = [-12.0 - sigma, *(standard.inv_cdf(i / n) for i in range(1, n)), 12.0 + sigma]
    return [
        n * _simpson(lambda z: math.exp(mu + sigma * z) * standard.pdf(z), edges[i], edges[i + 1])
        for i in range(n)
    ]


def _numeric_exponential(mean: float) -> list[float]:
    """n · ∫ x e^(−x/m) / m dx over each bin's x range (the last cut at 60 means)."""
    n = QUANTILE_POINTS
    edges = [-mean * math.log1p(-i / n) for i in range(n)] + [60 * mean]
    return [
        n * _simpson(lambda x: x * math.exp(-x / mean) / mean, edges[i], edges[i + 1])
        for i in range(n)
    ]


def _numeric_uniform(low: float, high: float) -> list[float]:
    n = QUANTILE_POINTS
    edges = [low + i / n * (high - low) for i in range(n + 1)]
    return [n * _simpson(lambda x: x / (high - low), edges[i], edges[i + 1], 200) for i in range(n)]


@pytest.mark.parametrize("sigma", [0.3, 0.8, 1.5, 2.0])
def test_lognormal_bin_means_match_integration(sigma: float) -> None:
    closed = _bin_means("lognormal", {"mean": 2048.0, "sigma": sigma}, "p")
    numeric = _numeric_lognormal(2048.0, sigma)
    assert closed == pytest.approx(numeric, rel=1e-6)
    assert math.fsum(closed) / QUANTILE_POINTS == pytest.approx(2048.0, rel=1e-12)


@pytest.mark.parametrize("mean", [1.0, 256.0, 4096.0])
def test_exponential_bin_means_match_integration(mean: float) -> None:
    closed = _bin_means("exponential", {"mean": mean}, "p")
    assert closed == pytest.approx(_numeric_exponential(mean), rel=1e-6)
    assert math.fsum(closed) / QUANTILE_POINTS == pytest.approx(mean, rel=1e-12)


def test_uniform_bin_means_match_integration() -> None:
    closed = _bin_means("uniform", {"min": 100.0, "max": 900.0}, "p")
    assert closed == pytest.approx(_numeric_uniform(100.0, 900.0), rel=1e-9)


@pytest.mark.parametrize(
    "value",
    [
        {"distribution": "lognormal", "mean": 2048, "sigma": 0.8},
        {"distribution": "lognormal", "mean": 2048, "sigma": 1.5},
        {"distribution": "lognormal", "mean": 2048, "sigma": 2},
        {"distribution": "lognormal", "mean": 256, "sigma": 0.8},
        {"distribution": "exponential", "mean": 2048},
        {"distribution": "uniform", "min": 1, "max": 4000},
    ],
)
def test_discretised_mean_is_the_stated_one(value: dict[str, object]) -> None:
    """Fails on the midpoint quantiles: sigma 1.5 evaluated mean 1,559 for 2,048 (−24 %)."""
    lengths = length_distribution(value, "prompt_len")
    stated = value["mean"] if "mean" in value else (value["min"] + value["max"]) / 2  # type: ignore[operator]
    assert isinstance(stated, int | float)
    assert lengths.mean() == pytest.approx(stated, rel=0.01)
    # each bin keeps its probability: 8 distinct points of 1/8 each
    assert [p for _, p in lengths.points] == pytest.approx([1 / QUANTILE_POINTS] * QUANTILE_POINTS)


def test_lognormal_sigma_0_is_its_mean() -> None:
    lengths = length_distribution({"distribution": "lognormal", "mean": 700, "sigma": 0}, "o")
    assert lengths.points == ((700, 1.0),)


def test_far_tail_bin_does_not_cancel() -> None:
    """The top bin of a wide lognormal holds most of the mean; its Φ difference is taken in
    the upper tail (Φ(−x) is an erfc) so it does not round to a difference of ones."""
    closed = _bin_means("lognormal", {"mean": 2048.0, "sigma": 6.0}, "p")
    assert math.fsum(closed) / QUANTILE_POINTS == pytest.approx(2048.0, rel=1e-9)
    assert closed[0] > 0 and closed == sorted(closed)
