"""Constants one system file borrows from another, read from the comments next to them.

A preset carries many constants measured on another part (the same silicon, the same NCCL, no
figure of its own) and says so in the value's inline comment. When the source preset is
re-measured, the copies must follow; this module reads every such claim and checks it against the
source's current value, so a stale copy fails a test instead of surviving in silence (s27
presets: h200 / h800 kept the burst-clock attention fractions after h100-80gb moved to the
sustained ones).

The rule, on a value's own inline comment (block comments are prose and are not read):

- ``as <name>`` (also ``as the <name> preset``, ``as <name>'s``, ``as <name> / <other>``,
  ``as <name> and <other>``, and ``analogue: the <name> preset's`` / ``analogue, the <name>
  preset's``) claims the value *equals* ``<name>``'s value for the same key in the same table;
- ``from <name> x <factor>`` claims the value is ``<name>``'s times the factor (a number or a
  ratio ``a / b``), to the precision the value is written with; integers in a list (the
  half-saturation keys of an attention entry) carry over unscaled.

``<name>`` is a shipped preset (``system/presets``) or a bundled system file (``data/systems``);
``[[network]]`` dims are matched by position (the scale-up dim first, then the scale-out one), as
the presets list them. A comment naming a preset in passing, not as the source of the value, says
``the <name> preset's rule`` or similar, never ``as <name>``. Run ``python -m
stage_explore.system.borrowed`` for the table of every claim and whether it holds.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
#: The folders whose ``*.toml`` files are read: the shipped presets and the bundled systems.
FOLDERS = (PACKAGE / "system" / "presets", PACKAGE / "data" / "systems")


@dataclass(frozen=True)
class Entry:
    """One ``key = value`` line of a system file with its inline comment."""

    system: str
    table: str  # "accelerator.kernels", "network[0]", ...
    key: str
    value: Any
    text: str  # the value as written
    comment: str
    line: int


@dataclass(frozen=True)
class Claim:
    """A value's claim to be borrowed: equal to ``source``'s, or ``source``'s x ``factor``."""

    entry: Entry
    source: str
    factor: float | None  # None: equal
    source_value: Any  # None when the source has no such key
    holds: bool


def system_files() -> dict[str, Path]:
    """Every system file by name (the file's stem)."""
    return {path.stem: path for folder in FOLDERS for path in sorted(folder.glob("*.toml"))}


def _split_comment(line: str) -> tuple[str, str]:
    """The code and the inline comment of a TOML line (a ``#`` inside a string is code)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:index], line[index + 1 :].strip()
    return line, ""


def read_entries(name: str, path: Path) -> list[Entry]:
    """Every single-line ``key = value`` of a system file, with its table and inline comment."""
    entries: list[Entry] = []
    table = ""
    networks = -1
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        code, comment = _split_comment(raw)
        code = code.strip()
        if not code:
            continue
        if code == "[[network]]":
            networks += 1
            table = f"network[{networks}]"
            continue
        if code.startswith("["):
            table = code.strip("[]").strip()
            continue
        key, sep, text = code.partition("=")
        if not sep:
            continue
        text = text.strip()
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            continue  # a multi-line value: not a line this rule reads
        entries.append(Entry(name, table, key.strip(), value, text, comment, number))
    return entries


def _names_pattern(names: list[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def claims_of(comment: str, names: list[str]) -> list[tuple[str, float | None]]:
    """The (source, factor) claims an inline comment makes (factor None: equal)."""
    alt = _names_pattern(names)
    name = rf"(?:the )?({alt})(?:'s|\.toml's| preset's| preset)?(?![\w-])"
    found: list[tuple[str, float | None]] = []
    for match in re.finditer(rf"\bfrom {name} x ([0-9.]+(?: / [0-9.]+)?)", comment):
        parts = [float(p) for p in match.group(2).split(" / ")]
        factor = parts[0] / parts[1] if len(parts) == 2 else parts[0]
        found.append((match.group(1), factor))
    heads = (rf"\bas {name}", rf"\banalogue[:,] {name}")
    for head in heads:
        for match in re.finditer(head + rf"((?:(?: / | and ){name})*)", comment):
            found.append((match.group(1), None))
            for more in re.finditer(rf"(?: / | and ){name}", match.group(2)):
                found.append((more.group(1), None))
    return found


def _half_unit(text: str) -> float:
    """Half a unit in the last digit a number is written with (``0.756`` -> 0.0005)."""
    exponent = Decimal(text.replace("_", "")).as_tuple().exponent
    return 0.5 * 10.0 ** int(exponent) if isinstance(exponent, int) else 0.0


def _numbers_of(text: str) -> list[str]:
    return re.findall(r"[-+]?\d[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?", text)


def value_holds(value: Any, text: str, source: Any, factor: float | None) -> bool:
    """Whether a value is the source's (``factor`` None) or the source's x factor as written."""
    if factor is None:
        return bool(value == source)
    if isinstance(value, bool) or isinstance(source, bool):
        return False
    if isinstance(value, (int, float)) and isinstance(source, (int, float)):
        tolerance = _half_unit(_numbers_of(text)[0]) + 1e-12 * abs(source * factor)
        return math.isclose(value, source * factor, rel_tol=0.0, abs_tol=tolerance)
    if isinstance(value, list) and isinstance(source, list) and len(value) == len(source):
        written = _numbers_of(text)
        if len(written) != len(value):
            return False
        return all(
            v == s if isinstance(v, int) and isinstance(s, int) else value_holds(v, w, s, factor)
            for v, w, s in zip(value, written, source, strict=True)
        )
    return False


def check(files: dict[str, Path] | None = None) -> list[Claim]:
    """Every borrowed-value claim in the system files, each checked against its source."""
    files = system_files() if files is None else files
    names = list(files)
    entries = {name: read_entries(name, path) for name, path in files.items()}
    index = {name: {(e.table, e.key): e for e in found} for name, found in entries.items()}
    claims: list[Claim] = []
    for name, found in entries.items():
        for entry in found:
            for source, factor in claims_of(entry.comment, names):
                if source == name:
                    continue  # "as this preset's other figures": not a borrowing
                other = index[source].get((entry.table, entry.key))
                value = None if other is None else other.value
                holds = other is not None and value_holds(
                    entry.value, entry.text, other.value, factor
                )
                claims.append(Claim(entry, source, factor, value, holds))
    return claims


#: The tables whose constants a preset borrows (the model's fractions, not the datasheet's figures).
MODEL_TABLES = ("accelerator.efficiency", "accelerator.kernels", "network[")


def unclaimed_differences(files: dict[str, Path] | None = None) -> list[tuple[Entry, str, Any]]:
    """Model constants of a system that differ from those of a system it borrows from elsewhere,
    with no claim of their own: each is either the part's own figure (its comment cites it) or a
    stale copy the claim rule cannot see (a header's "as <name>"). For review, not a failure."""
    files = system_files() if files is None else files
    names = list(files)
    entries = {name: read_entries(name, path) for name, path in files.items()}
    index = {name: {(e.table, e.key): e for e in found} for name, found in entries.items()}
    found: list[tuple[Entry, str, Any]] = []
    for name, own in entries.items():
        claimed = {(e.table, e.key) for e in own if claims_of(e.comment, names)}
        sources = {s for e in own for s, _ in claims_of(e.comment, names) if s != name}
        for source in sorted(sources):
            for entry in own:
                other = index[source].get((entry.table, entry.key))
                if (
                    other is not None
                    and entry.table.startswith(MODEL_TABLES)
                    and (entry.table, entry.key) not in claimed
                    and other.value != entry.value
                ):
                    found.append((entry, source, other.value))
    return found


def table(claims: list[Claim]) -> str:
    """The claims as a Markdown table (system, table, key, value, source, its value, holds)."""
    rows = [
        "| system | table | key | value | claim | source's value | holds |",
        "|---|---|---|---|---|---|---|",
    ]
    for claim in claims:
        entry = claim.entry
        how = (
            f"as {claim.source}"
            if claim.factor is None
            else f"from {claim.source} x {claim.factor:.4g}"
        )
        rows.append(
            f"| {entry.system} | {entry.table} | `{entry.key}` | {entry.text} | {how} | "
            f"{claim.source_value} | {'yes' if claim.holds else '**no**'} |"
        )
    return "\n".join(rows)


def main() -> int:
    """Print the claims table; exit 1 when any claim does not hold."""
    claims = check()
    print(table(claims))
    print("\nUnclaimed model constants differing from a system the file borrows from:\n")
    print("| system | table | key | value | differs from | its value |\n|---|---|---|---|---|---|")
    for entry, source, value in unclaimed_differences():
        where = f"| {entry.system} | {entry.table} | `{entry.key}` | {entry.text}"
        print(f"{where} | {source} | {value} |")
    return 0 if all(c.holds for c in claims) else 1


if __name__ == "__main__":
    sys.exit(main())
