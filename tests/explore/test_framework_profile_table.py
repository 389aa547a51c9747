"""docs/analytical.md's framework-profile table against the profiles themselves: every option of
:data:`~stage_explore.analytical.framework_profile.OPTION_FLAGS` has a row, and every on/off
cell is the named profile's value (the table drifted three times in one session)."""

from __future__ import annotations

import re
from pathlib import Path

from stage_explore.analytical.framework_profile import OPTION_FLAGS
from stage_explore.analytical.frameworks import FRAMEWORKS

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytical.md"
HEADER = "| option (flag) |"


def _table() -> tuple[list[str], dict[str, list[str]]]:
    """The profiles the table's columns name, and each option's cells (first row per option)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    names = [cell.strip() for cell in lines[start].strip("|").split("|")[1:]]
    names = [name.split(" ")[0] for name in names]  # "megatron-lm-2021 (default)"
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        found = re.match(r"`(\w+)`", cells[0])
        if found:
            rows.setdefault(found.group(1), cells[1:])
    return names, rows


def test_every_option_has_a_row() -> None:
    names, rows = _table()
    assert names and all(name in FRAMEWORKS for name in names), names
    assert sorted(set(OPTION_FLAGS) - set(rows)) == []


def test_on_off_cells_are_the_profiles_values() -> None:
    names, rows = _table()
    wrong = []
    for option, cells in rows.items():
        for name, cell in zip(names, cells, strict=True):
            value = getattr(FRAMEWORKS[name], option)
            if isinstance(value, bool) and (cell.split(" ")[0] == "on") != value:
                wrong.append((option, name, cell.split(" ")[0], value))
    assert wrong == []
