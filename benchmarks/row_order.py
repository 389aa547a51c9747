"""Does ``validate`` predict every row the same whatever order the rows are evaluated in?

Evaluates all of ``validate``'s rows (:mod:`stage_explore.validation.row_order`) in the order
read, reversed, and shuffled with a fixed seed, each order in a fresh process (so the
generator's process-wide ``lru_cache`` memos start empty, as the backend's per-instance memos
do), and compares every row's full ``validate --json`` record with the in-order run's, floats to
the last bit. ``--alone`` adds a fourth run where every row gets a fresh backend (slower: no
memo is shared between rows). Prints the rows that differ; exits 1 if any does.

Run: ``python benchmarks/row_order.py [--seed N] [--alone] [--jobs N]`` (each order takes
about as long as ``validate``; ``--jobs 2`` runs two orders at a time). ``make validate`` runs
the same check (``tests/explore/test_row_order_slow.py``, marked ``slow``).
"""

from __future__ import annotations

import argparse
import sys

from stage_explore.validation.row_order import compare, run_orders


def main(argv: list[str] | None = None) -> int:
    """Run the orders, print each one's count of rows differing from the in-order run and
    those rows; 1 if any differs, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the shuffled order's seed")
    parser.add_argument("--alone", action="store_true", help="also each row with a fresh backend")
    parser.add_argument("--jobs", type=int, default=1, help="orders run at a time")
    args = parser.parse_args(argv)
    orders = ["order", "reversed", "shuffled"] + (["alone"] if args.alone else [])
    runs = run_orders(orders, args.seed, args.jobs)
    reference = runs[0][1]
    failed = False
    for order, rows, seconds in runs:
        lines = compare(reference, rows) if order != "order" else []
        print(f"{order:>8}: {len(rows)} rows, {seconds:.0f} s, {len(lines)} differ from in order")
        for line in lines:
            print(f"    {line}")
        failed |= bool(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
