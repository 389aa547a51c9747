"""docs/model.md, the model at a glance, against the code it summarises: every file path and
``module.name`` it names exists, every link into a docs section resolves to a heading (GitHub's
anchor rule), and its two tables — the system presets and the framework profiles — hold the
values the TOML files and :data:`~stage_explore.analytical.frameworks.FRAMEWORKS` hold. A
renamed module or section, a changed preset figure or profile default, or a new profile option
fails here with the line to fix (s26 docsref)."""

from __future__ import annotations

import dataclasses
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

from stage_explore.analytical.framework_profile import OPTION_FLAGS, FrameworkProfile
from stage_explore.analytical.frameworks import FRAMEWORKS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DOC = DOCS / "model.md"
#: Where a bare ``name.py`` in the page may live (the page names most modules in full).
MODULE_DIRS = (
    "stage_explore/analytical",
    "stage_explore/validation",
    "stage_explore/system",
    "stage_core/lower",
)
_NOT_OPTIONS = ("name", "description", "source")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, every character but letters, digits,
    underscores, hyphens and spaces dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets ``-1``, ``-2``, …),
    headings inside fenced code left out."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_anchor_rule() -> None:
    assert slug("GB200 / GB300 GEMMs (6 Dec 2026, s21 gemmgb)") == (
        "gb200--gb300-gemms-6-dec-2026-s21-gemmgb"
    )
    assert slug("The interleaved group size `N` (5 Dec 2026, s12 sched)") == (
        "the-interleaved-group-size-n-5-dec-2026-s12-sched"
    )


def test_every_named_path_exists() -> None:
    missing = []
    for token in re.findall(r"`([^`\s]+)`", _text()):
        if "*" in token or "<" in token:
            continue  # a pattern (`systems/*.toml`, `presets/<name>.toml`)
        if re.fullmatch(r"[\w./-]+/[\w.-]*", token) and "/" in token:
            if not (ROOT / token.rstrip("/")).exists():
                missing.append(token)
        elif re.fullmatch(r"\w+\.(py|toml|md)", token):
            if not any((ROOT / d / token).exists() for d in MODULE_DIRS):
                missing.append(token)
    assert missing == []


def test_every_named_module_attribute_exists() -> None:
    """``kernels.is_own_kernel``-style names: a module of stage_explore/analytical and a name
    it defines."""
    missing = []
    for module, name in re.findall(r"`(\w+)\.(\w+)`", _text()):
        if (
            name in ("py", "toml", "md")
            or not (ROOT / "stage_explore" / "analytical" / f"{module}.py").exists()
        ):
            continue  # a file (checked above) or a field path such as `efficiency.memory`
        imported = importlib.import_module(f"stage_explore.analytical.{module}")
        if not hasattr(imported, name):
            missing.append(f"{module}.{name}")
    assert missing == []


def test_every_section_link_resolves() -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _text()):
        if re.match(r"https?:", target):
            continue
        file, _, anchor = target.partition("#")
        path = DOC if not file else (DOCS / file).resolve()
        if not path.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(path):
            broken.append(target)
    assert broken == []


def _table(header: str) -> list[list[str]]:
    """The rows (cells) of the page's table whose header line starts with ``header``."""
    lines = _text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def preset_row(path: Path) -> str:
    """A system file's row of the presets table, as the page writes it."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    accelerator = data["accelerator"]
    peaks = accelerator["peak_flops_per_s"]
    kernels = accelerator.get("kernels", {})
    gemm = kernels.get("gemm_efficiency", {})
    up, out = data["network"][0], data["network"][-1]
    fp8 = _number(peaks["fp8"] / 1e12) if peaks.get("fp8") else "—"
    cells = [
        f"`{data['name']}`",
        f"{_number(peaks['bf16'] / 1e12)} / {fp8}",
        f"{accelerator['memory_bandwidth_bytes_per_s'] / 1e12:.2f} × "
        f"{_number(accelerator['efficiency']['memory'])}",
        f"{_number(gemm.get('bf16'))} / {_number(gemm.get('fp8'))}",
        f"{_number(kernels.get('attention_forward'))} / "
        f"{_number(kernels.get('attention_backward'))}",
        f"{up['name']} {up['size']}: {_number(up['bandwidth_bytes_per_s'] / 1e9)} × "
        f"{_number(up.get('bus_efficiency'))}",
        f"{out['name']}: {_number(out['bandwidth_bytes_per_s'] / 1e9)} × "
        f"{_number(out.get('bus_efficiency'))}",
    ]
    return "| " + " | ".join(cells) + " |"


def test_presets_table_is_the_presets() -> None:
    files = sorted((ROOT / "stage_explore" / "system" / "presets").glob("*.toml"))
    files += sorted((ROOT / "stage_explore" / "data" / "systems").glob("*.toml"))
    rows = {row[0]: "| " + " | ".join(row) + " |" for row in _table("| system | bf16 / fp8 peak")}
    expected = {f"`{path.stem}`": preset_row(path) for path in files}
    assert sorted(rows) == sorted(expected), "docs/model.md §2: one row per system file"
    wrong = [
        f"{rows[name]}\n  should be\n{row}" for name, row in expected.items() if rows[name] != row
    ]
    assert wrong == [], "\n".join(wrong)


def profile_cell(value: Any) -> str:
    """A profile option's value as the profiles table writes it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "—"
    if value == 2**30 and isinstance(value, int):
        return "1 GiB"
    return str(value)


def test_profiles_table_is_the_profiles() -> None:
    rows = _table("| option | flag it stands for")
    header = _text().splitlines()
    names = next(
        [cell.strip() for cell in line.strip("|").split("|")[2:]]
        for line in header
        if line.startswith("| option | flag it stands for")
    )
    assert names == list(FRAMEWORKS), "docs/model.md §3: a column per shipped profile, in order"
    options = [f.name for f in dataclasses.fields(FrameworkProfile) if f.name not in _NOT_OPTIONS]
    differ = [o for o in options if len({repr(getattr(p, o)) for p in FRAMEWORKS.values()}) > 1]
    tabled = {row[0].strip("`"): row for row in rows}
    assert sorted(tabled) == sorted(differ), "§3 table: the options in which profiles differ"
    wrong = []
    for option, row in tabled.items():
        cells = [
            OPTION_FLAGS[option],
            *(profile_cell(getattr(p, option)) for p in FRAMEWORKS.values()),
        ]
        if row[1:] != cells:
            wrong.append(f"{option}: {row[1:]} should be {cells}")
    assert wrong == [], "\n".join(wrong)


def test_options_every_profile_shares_are_listed() -> None:
    """The paragraph after the table: each option no profile changes, with its value."""
    text = " ".join(_text().split())
    start = text.index("Every profile leaves these options at the same value")
    paragraph = text[start : text.index("`stage eval` exposes", start)]
    options = [f.name for f in dataclasses.fields(FrameworkProfile) if f.name not in _NOT_OPTIONS]
    shared = [o for o in options if len({repr(getattr(p, o)) for p in FRAMEWORKS.values()}) == 1]
    first = next(iter(FRAMEWORKS.values()))
    missing = [
        f"`{o}` {profile_cell(getattr(first, o))}"
        for o in shared
        if f"`{o}` {profile_cell(getattr(first, o))}" not in paragraph
    ]
    assert missing == []
