"""``validate``'s predictions do not depend on the order its rows are evaluated in
(:mod:`stage_explore.validation.row_order`; the whole data set, in order, reversed and
shuffled, each in a fresh process: ``slow``, run by ``make validate``), and the comparison
itself names a row that moved."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_explore.validation.row_order import compare, ordered, run_orders


@pytest.mark.slow
def test_every_row_predicts_the_same_in_any_order() -> None:
    """Full ``validate --json`` records equal to the last bit across the three orders."""
    runs = run_orders(("order", "reversed", "shuffled"), seed=0, jobs=2)
    reference = runs[0][1]
    assert len(reference) > 1000
    for order, rows, _ in runs[1:]:
        assert compare(reference, rows) == [], order


def test_compare_names_a_moved_row_and_a_missing_one() -> None:
    """A prediction one bit apart, a note changed and a row missing are each named; NaN
    measured values (rows not evaluated) compare equal."""
    a = {"r1": {"predicted": 1.0, "note": ""}, "r2": {"predicted": None, "measured": float("nan")}}
    b = {"r1": {"predicted": 1.0000000000000002, "note": ""}, "r2": dict(a["r2"])}
    assert compare(a, b) == ["r1: predicted 1.0 -> 1.0000000000000002"]
    assert compare(a, {"r2": a["r2"]}) == ["r1: only in the first"]
    c = {"r1": {"predicted": 1.0, "note": "x"}, "r2": a["r2"]}
    assert compare(a, c) == ["r1: note '' -> 'x'"]


def test_orders_are_permutations_and_an_unknown_order_is_refused() -> None:
    """Reversed and shuffled (seeded: the same twice) orders hold every case once."""
    cases = list(range(50))
    assert ordered(cases, "reversed") == cases[::-1]
    shuffled = ordered(cases, "shuffled", seed=3)
    assert sorted(shuffled) == cases and shuffled != cases
    assert shuffled == ordered(cases, "shuffled", seed=3)
    with pytest.raises(ConfigError, match="row order 'sideways'"):
        ordered(cases, "sideways")
