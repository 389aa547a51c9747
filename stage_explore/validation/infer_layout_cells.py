"""A layout cell that names several axes, as papers print a layout (7 Dec 2026, s29 readers2):
``TP=2, PP=4`` in the tp column, ``TP 8 / PP 16 / DP 8``, ``tp2 pp4 cp2``.

Before, such a cell was refused as "not an integer" (only a cell naming its own axis, ``TP=8``,
was read: :data:`~stage_explore.validation.infer_spelling.AXIS_NAMES`). :func:`layout_lists`
now reads each named degree into its own column when that column is empty (a dash too) or
says the same number, and the cell's column must be among the axes it names. A cell naming an
axis twice with two values, a column saying another value than the list, or a list that does
not name its own column's axis is ambiguous: :class:`~stage_explore.validation.infer_errors.
Uninferable` naming the cell and the value, in one line.
"""

from __future__ import annotations

import re

from stage_explore.validation.csv_cells import DASHES, DEGREE_COLUMNS, int_cell
from stage_explore.validation.infer_errors import Uninferable

#: The names a degree may carry in a layout list (lower-cased) → its column.
AXES = {column: column for column in DEGREE_COLUMNS} | {"vp": "vpp"}
_NAME = "|".join(sorted(AXES, key=len, reverse=True))
#: One ``name[=:]N`` item of a list.
_ITEM = rf"\b({_NAME})\s*[=:]?\s*(\d+)\b"
#: Two items or more, separated by commas, semicolons, slashes, "x" or spaces.
_LIST = re.compile(rf"{_ITEM}(?:\s*(?:[,;/×x]|\s)\s*{_ITEM})+", re.IGNORECASE)


def _degrees(cell: str, column: str) -> dict[str, int]:
    """The degrees a layout-list ``cell`` of ``column`` names, by column; Uninferable when it
    names an axis twice with two values or does not name ``column``'s own axis."""
    degrees: dict[str, int] = {}
    for found in re.finditer(_ITEM, cell, re.IGNORECASE):
        axis, value = AXES[found.group(1).lower()], int(found.group(2))
        if degrees.get(axis, value) != value:
            raise Uninferable(
                f"the {column} cell {cell!r} names {axis} twice ({degrees[axis]} and {value}): "
                "expected one degree per axis"
            )
        degrees[axis] = value
    if column not in degrees:
        raise Uninferable(
            f"the {column} cell {cell!r} is a layout naming {', '.join(degrees)} but not "
            f"{column}: expected the {column} degree in the {column} column"
        )
    return degrees


def layout_lists(row: dict[str, str], strict: bool) -> tuple[dict[str, str], list[str]]:
    """``row`` with each degree column holding a layout list (``TP=2, PP=4``) read into the
    columns it names, and the assumptions saying so. An ambiguous list (:func:`_degrees`, or
    a column stating another value) raises Uninferable when ``strict``, else is left as
    written (the integer check refuses it)."""
    out, notes = dict(row), []
    for column in DEGREE_COLUMNS:
        cell = row.get(column, "").strip()
        if not _LIST.fullmatch(cell):
            continue
        try:
            degrees = _degrees(cell, column)
            for axis, value in degrees.items():
                said = out.get(axis, "").strip()
                if said and said not in DASHES and said != cell and int_cell(said) != value:
                    raise Uninferable(
                        f"the {column} cell {cell!r} names {axis} {value}, but the {axis} "
                        f"column says {said!r}: expected one degree per axis"
                    )
        except Uninferable:
            if strict:
                raise
            continue
        for axis, value in degrees.items():
            out[axis] = str(value)
        listed = ", ".join(f"{axis} {value}" for axis, value in degrees.items())
        notes.append(f"{listed} (the {column} column says {cell!r}: a layout naming its axes)")
    return out, notes
