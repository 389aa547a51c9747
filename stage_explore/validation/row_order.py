"""Are ``validate``'s predictions independent of the order its rows are evaluated in?

The analytical backend memoises parts of a prediction (per backend instance, and the generator's
process-wide ``functools.lru_cache`` memos); a memo whose key leaves out an input its value
depends on answers a row with another row's part, so the row's prediction depends on which rows
were evaluated before it (s30 memo: the BigScience 181B rows, docs/analytical.md "Memo keys and
the step's micro-batches"). :func:`order_rows` evaluates every row of ``validate``'s data set
(:func:`~stage_explore.validation.suite.data_cases`) in one order, with one backend factory, and
returns each row's full ``validate --json`` record; :func:`compare` names the rows whose records
differ between two orders. Each order is meant to run in a fresh process (the process-wide memos
empty): ``benchmarks/row_order.py`` runs them so.
"""

from __future__ import annotations

import math
import multiprocessing
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from stage_core.errors import ConfigError
from stage_explore.validation.run import analytical_factory, evaluate_cases
from stage_explore.validation.setups import Case
from stage_explore.validation.suite import data_cases

T = TypeVar("T")

#: The orders :func:`ordered` knows.
ORDERS = ("order", "reversed", "shuffled", "alone")


def ordered(cases: Sequence[T], order: str, seed: int = 0) -> list[T]:
    """``cases`` in ``order``: as read, reversed, or shuffled with ``random.Random(seed)``
    (``alone`` keeps the order read: each row then gets a fresh backend)."""
    if order not in ORDERS:
        raise ConfigError(f"row order {order!r}: expected one of {', '.join(ORDERS)}")
    if order == "reversed":
        return list(reversed(cases))
    if order == "shuffled":
        shuffled = list(cases)
        random.Random(seed).shuffle(shuffled)
        return shuffled
    return list(cases)


def order_rows(order: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Every ``validate`` row evaluated in ``order`` (:func:`ordered`), row → its full
    ``validate --json`` record (:meth:`~stage_explore.validation.run.RowResult.to_dict`), by
    :func:`row_name`. One
    analytical factory serves all rows, as ``validate`` does; under ``alone`` every row gets
    its own (the backend's memos empty; the process-wide ones are not cleared)."""
    read = data_cases().cases
    names = {id(case): row_name(case, index) for index, case in enumerate(read)}
    cases = ordered(read, order, seed)
    if order == "alone":
        results = [evaluate_cases([case], analytical_factory())[0] for case in cases]
    else:
        results = evaluate_cases(cases, analytical_factory())
    return {names[id(result.case)]: result.to_dict() for result in results}


def row_name(case: Case, index: int) -> str:
    """A row's name in :func:`order_rows`: its id, where it was read (a row id may repeat: the
    same run in a configured and an inferred source) and its position in the read order."""
    where = f"{case.file}:{case.line}" if case.file else "setups"
    return f"{case.id} ({where}, #{index})"


def run_orders(
    orders: Sequence[str], seed: int = 0, jobs: int = 1
) -> list[tuple[str, dict[str, dict[str, Any]], float]]:
    """Each of ``orders`` (:func:`order_rows`) in a fresh process of its own (spawned, one
    order each: the process-wide memos start empty), ``jobs`` at a time: (order, rows, wall
    seconds) for each, in the order given."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(max(1, jobs), maxtasksperchild=1) as pool:
        return pool.map(_timed_rows, [(order, seed) for order in orders], chunksize=1)


def _timed_rows(args: tuple[str, int]) -> tuple[str, dict[str, dict[str, Any]], float]:
    """:func:`order_rows` of ``(order, seed)`` in a worker: its order, rows and wall seconds."""
    order, seed = args
    start = time.perf_counter()
    rows = order_rows(order, seed)
    return order, rows, time.perf_counter() - start


def compare(
    reference: Mapping[str, Mapping[str, Any]], other: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One line per row whose record differs between ``reference`` and ``other`` (every field,
    floats to the last bit; a row present in only one is named too); [] when they agree."""
    lines = []
    for row in sorted(reference.keys() | other.keys()):
        a, b = reference.get(row), other.get(row)
        if a is None or b is None:
            lines.append(f"{row}: only in the {'second' if a is None else 'first'}")
            continue
        fields = [n for n in sorted(a.keys() | b.keys()) if not _same(a.get(n), b.get(n))]
        if fields:
            moved = ", ".join(f"{n} {a.get(n)!r} -> {b.get(n)!r}" for n in fields)
            lines.append(f"{row}: {moved}")
    return lines


def _same(a: object, b: object) -> bool:
    """Equal, or both NaN (a row not evaluated may carry a NaN measured value)."""
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b or both_nan
