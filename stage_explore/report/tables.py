"""Plain-text tables for the terminal.

Contents:
    :func:`format_value`   one cell: integers grouped, floats to 4 significant digits.
    :func:`format_table`   rows × columns as an aligned text table with a header rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def format_value(value: Any) -> str:
    """A compact, readable rendering of one cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, float | np.floating):
        number = float(value)
        if number != 0 and (abs(number) >= 1e6 or abs(number) < 1e-3):
            return f"{number:.3e}"
        return f"{number:.4g}"
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned table: numbers right-aligned, text left-aligned."""
    cells = [[format_value(value) for value in row] for row in rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(columns)]
    numeric = [
        all(
            isinstance(row[i], int | float | np.number) and not isinstance(row[i], bool)
            for row in rows
        )
        if rows
        else False
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(list(columns)), rule, *(line(row) for row in cells)])
