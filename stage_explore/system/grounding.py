"""Where each numeric constant of a system file says its public source comes from (issue #11).

Every figure a preset or bundled system file gives the model (a datasheet rate, a measured
efficiency, an NCCL overhead) must carry its public source in a comment next to it. This module
reads every single-line numeric ``key = value`` of the system files
(:func:`stage_explore.system.borrowed.read_entries`) and finds the comment that grounds it:

- its own inline comment;
- else the comment block above it in the same table (the prose a table opens with, or the lines
  just before the key), the nearest one;
- else the part of the file's header comment (before the first table) that names the key or
  writes its value (in the unit a datasheet would: TFLOP/s, TB/s, GB/s, Gb/s, GiB, kW, us, ...): a
  bullet with its continuation lines (a bullet of a ``Sources:`` list is a source by its place),
  or one sentence of a paragraph.

Its status (:data:`STATUSES`): the comment says the value was *fitted in-sample* (chosen on
validation rows: a fit, not evidence); it *borrows* the value from another system file (``as
<name>`` / ``from <name> x <factor>``, the claims :mod:`stage_explore.system.borrowed` checks);
it *derives* it from this file's cited figures; it *cites* a reference a reader can follow (a URL,
a paper or arXiv id, a repository issue / PR / path, a datasheet or whitepaper, a benchmark
suite, a measurement); it *declares* plainly that the value is an estimate with no measurement
behind it; a dim's ``size`` is *structural*; anything else is UNCITED. The rule checks that a
source is named, not that the named source says what the value says: docs/grounding.md holds this
table and, apart, the figures checked against their sources by hand.
Run ``python -m stage_explore.system.grounding`` for the Markdown table of every constant (exit
status 1 when one is UNCITED).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from stage_explore.system.borrowed import Entry, claims_of, read_entries, system_files

#: A comment that holds a reference a reader can follow.
REFERENCE = re.compile(
    r"https?://|arXiv|\bet al\b|datasheet|whitepaper|white paper|data ?sheet|product brief|"
    r"[\w.-]+/[\w.-]+(?:#\d|/[\w.-])|#\d{2,}|\bPR\b|\bissue\b|\.(?:md|txt|csv|py|h|cc|cu|json)\b|"
    r"nccl-tests|mamf|MAMF|MSMF|superbench|MLPerf|Table \d|Fig(?:ure|\.) ?\d|\bspec\b|"
    r"specification|guide|Guide|paper|blog|forum|benchmark|measured|NVIDIA|AMD|Google|Azure|"
    r"^Source: |\bthe source's\b",
)
#: A comment that says the value has no public measurement behind it.
DECLARED = re.compile(
    r"\bestimate|\bassum|no (?:public )?(?:measurement|source|figure)|not a measurement|"
    r"placeholder|illustrative|set your own",
    re.IGNORECASE,
)
#: A comment that says the value was chosen on validation rows (in-sample, not evidence).
FITTED = re.compile(r"\bfitted in-sample\b")
#: A comment that derives the value from other cited constants of the same file.
DERIVED = re.compile(r"\bderived from this file's cited")
#: Keys that name structure, not a figure the model takes from a measurement.
STRUCTURAL = frozenset({"size"})


#: Every status, strongest claim first: the comment says the value was chosen on validation
#: rows; it borrows another system file's value (checked by :mod:`~stage_explore.system.borrowed`);
#: it derives the value from this file's cited figures; it cites a source; it declares an estimate
#: with no measurement; the key is structure (a dim's size); nothing.
STATUSES = ("fitted-in-sample", "borrowed", "derived", "cited", "declared", "structural", "UNCITED")


@dataclass(frozen=True)
class Grounding:
    """One numeric constant of a system file and the comment that grounds it."""

    entry: Entry
    path: Path
    where: str  # "inline", "table note", "header", "none"
    comment: str
    status: str  # see STATUSES


def _is_number(value: object) -> bool:
    """Whether a TOML value is a number, or a non-empty list / inline table of numbers."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, list):
        return bool(value) and all(_is_number(v) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(_is_number(v) for v in value.values())
    return False


#: Scales a value is written at in prose: PFLOP/s, TFLOP/s / TB/s, GB/s / GFLOP, kW, as is, ms, us,
#: Gb/s of a byte rate, the bidirectional GB/s of a per-direction one, GiB.
SCALES = (1e-15, 1e-12, 1e-9, 1e-3, 1.0, 1e3, 1e6, 8e-9, 2e-9, 2.0**-30, 2.0**-40)


def _spellings(value: float) -> list[str]:
    """The ways prose writes ``value`` at the :data:`SCALES` (``1,979``, ``3.35``, ``0.75``)."""
    found: list[str] = []
    candidates = [f"{value * scale:.{digits}g}" for scale in SCALES for digits in (4, 5)]
    for text in candidates:
        if "e" in text or text in found:
            continue
        found.append(text)
        whole, _, frac = text.partition(".")
        if len(whole) > 3 and whole.isdigit():
            found.append(f"{int(whole):,}" + (f".{frac}" if frac else ""))
    return found


def mentions(text: str, value: object) -> bool:
    """Whether ``text`` writes the number ``value`` (two significant digits or more, or one
    digit followed by a unit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        return False
    for spelling in _spellings(float(value)):
        digits = spelling.replace(",", "").replace(".", "").lstrip("0")
        unit = (
            r"\s?(?:us|µs|ms|W|kW|TB|GB|Gb|PB|PFLOP|TFLOP|GFLOP|GiB)\b" if len(digits) < 2 else ""
        )
        if re.search(rf"(?<![\d.,]){re.escape(spelling)}(?![\d]|\.\d){unit}", text):
            return True
    return False


def _header_parts(lines: list[tuple[str, str]]) -> list[str]:
    """The header's bullets (each with its continuation lines) and the sentences of its other
    paragraphs; ``lines`` are (indent, text) pairs of the comment lines."""
    parts: list[str] = []
    bullet: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        if bullet:
            parts.append(" ".join(bullet))
            bullet.clear()
        if prose:
            parts.extend(re.split(r"(?<=[.;])\s+", " ".join(prose)))
            prose.clear()

    sources = False  # inside the bullets of a "Sources:" list
    for indent, text in lines:
        if text.startswith("- "):
            flush()
            bullet.append(("Source: " if sources else "") + text[2:])
        elif bullet and len(indent) > 2:
            bullet.append(text)
        else:
            if bullet:
                flush()
                sources = False
            if text.rstrip().endswith("Sources:"):
                sources = True
            prose.append(text)
    flush()
    return [part for part in parts if part]


def _blocks(path: Path) -> tuple[list[str], dict[int, str]]:
    """The parts of the file's header comment and, per line number of a key, the nearest comment
    block above it in the same table (empty when none)."""
    header: list[tuple[str, str]] = []
    seen_table = False
    above: dict[int, str] = {}
    block: list[str] = []  # the current comment block
    nearest = ""  # the nearest complete block in this table
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#"):
            if not seen_table:
                body = line[1:]
                header.append((body[: len(body) - len(body.lstrip())], body.strip()))
            else:
                block.append(line.lstrip("#").strip())
            continue
        if block:
            nearest = " ".join(block)
            block = []
        if not line:
            continue
        if line.startswith("["):
            seen_table = True
            nearest = ""
            continue
        above[number] = nearest
    return _header_parts(header), above


def _status(comment: str, names: list[str], own: str) -> str:
    """The status a comment gives a value of the system file ``own`` (``names``: every file)."""
    if FITTED.search(comment):
        return "fitted-in-sample"
    if any(source != own for source, _ in claims_of(comment, names)):
        return "borrowed"
    if DERIVED.search(comment):
        return "derived"
    if REFERENCE.search(comment):
        return "cited"
    if DECLARED.search(comment):
        return "declared"
    return "UNCITED"


def ground(files: dict[str, Path] | None = None) -> list[Grounding]:
    """Every numeric constant of the system files with the comment that grounds it."""
    files = system_files() if files is None else files
    names = list(files)
    found: list[Grounding] = []
    for name, path in files.items():
        header, above = _blocks(path)
        for entry in read_entries(name, path):
            if not _is_number(entry.value):
                continue
            if entry.key in STRUCTURAL:
                found.append(Grounding(entry, path, "none", "", "structural"))
                continue
            candidates = [("inline", entry.comment), ("table note", above.get(entry.line, ""))]
            key = re.compile(rf"(?<![\w.]){re.escape(entry.key)}(?![\w])")
            numbers = entry.value if isinstance(entry.value, list) else [entry.value]
            candidates += [
                ("header", part)
                for part in header
                if key.search(part) or any(mentions(part, n) for n in numbers)
            ]
            where, comment, status = "none", "", "UNCITED"
            for place, text in candidates:
                if not text:
                    continue
                verdict = _status(text, names, name)
                if where == "none" or (status == "UNCITED" and verdict != "UNCITED"):
                    where, comment, status = place, text, verdict
                if verdict != "UNCITED":
                    break
            found.append(Grounding(entry, path, where, comment, status))
    return found


def markdown(rows: list[Grounding], root: Path) -> str:
    """The constants as a Markdown table: system, key, value, file:line, where, source, status."""
    lines = [
        "| system | key | value | file:line | source (where) | status |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        entry = row.entry
        path = row.path.resolve().relative_to(root)
        text = row.comment.replace("|", "/")
        short = text if len(text) <= 110 else text[:107] + "..."
        key = f"{entry.table}.{entry.key}" if entry.table else entry.key
        lines.append(
            f"| {entry.system} | `{key}` | {entry.text.replace('|', '/')} | "
            f"{path}:{entry.line} | {short or '—'} ({row.where}) | {row.status} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Print the table; exit 1 when any constant is uncited."""
    rows = ground()
    print(markdown(rows, Path(__file__).resolve().parents[2]))
    return 0 if all(row.status != "UNCITED" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
