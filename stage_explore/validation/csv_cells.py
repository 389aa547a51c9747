"""Reading the published-runs CSVs cell by cell: the schema's column names whatever a
spreadsheet export did to them, and what an integer, a yes/no, a measured value or a first word
looks like in a cell a table printed (thousands separators, ``8.0``, ``Yes (assumed)``, dashes
for "not stated"). Moved out of :mod:`stage_explore.validation.setups` (which turns a row and
its setup into a :class:`~stage_explore.validation.setups.Case`), whose helpers they were."""

from __future__ import annotations

import csv
import difflib
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError

#: The published-runs schema's columns (``published_runs_more.csv``'s header).
SCHEMA_COLUMNS = frozenset((
    "id", "source", "source_table", "url", "model", "params_b", "layers", "hidden", "ffn",
    "heads", "kv_heads", "vocab", "seq_len", "moe", "global_batch_seqs", "micro_batch", "tp",
    "pp", "dp", "cp", "ep", "sp", "vpp", "dp_sharding", "recompute", "precision", "gpu",
    "num_gpus", "interconnect", "iter_time_s", "tflops_per_gpu", "mfu_pct", "hfu_pct",
    "tokens_per_s_per_gpu", "peak_mem_gib", "uncertain", "notes",
))  # fmt: skip

#: The layout columns that state a parallel degree (a cell there may name its own axis,
#: ``TP=8``: :data:`~stage_explore.validation.infer_spelling.AXIS_NAMES`).
DEGREE_COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp")
#: A row's layout and batch columns, which must be integers when stated.
LAYOUT_COLUMNS = (*DEGREE_COLUMNS, "micro_batch", "global_batch_seqs")
#: The model dims that must be integers when stated (no flavor answers text there for another
#: model; ``ffn`` and ``kv_heads`` may say ``1536 per expert`` or ``MLA``, which the flavor
#: answers).
STRICT_DIM_COLUMNS = ("layers", "hidden", "heads", "vocab", "seq_len")


#: Columns of ``stage calibrate``'s runs CSV that this schema spells otherwise (s30 review3: a
#: calibrate CSV's ``zero`` 3 was named only as "not read", beside "zero 1 … (column empty)").
CALIBRATE_COLUMNS = {"zero": "dp_sharding"}


def unread_column(name: str) -> str:
    """A header column not in :data:`SCHEMA_COLUMNS` as the accounting line names it, with the
    schema's column it is close to (``iter_time (looks like iter_time_s)``; 7 Dec 2026, s29
    review: the row said only "no measured value", the near miss unnamed) or that holds what
    ``stage calibrate``'s column of that name holds (:data:`CALIBRATE_COLUMNS`)."""
    if (schema := CALIBRATE_COLUMNS.get(name.strip().lower())) is not None:
        return f"{name} (stage calibrate's column; give it as {schema} here)"
    close = difflib.get_close_matches(name.strip().lower(), sorted(SCHEMA_COLUMNS), 1, 0.7)
    return f"{name} (looks like {close[0]})" if close else name


def unread_columns(name: str, rows: Sequence[dict[str, str]]) -> str:
    """``name (col, col)``: the columns of a CSV's header that are not the schema's
    (:data:`SCHEMA_COLUMNS`), which the inferred setup does not read, each with the schema's
    column it is close to (:func:`unread_column`); "" when there are none. Moved from
    :mod:`~stage_explore.validation.infer` (s29 review)."""
    extra = [c for c in (rows[0] if rows else {}) if c and c not in SCHEMA_COLUMNS]
    return f"{name} ({', '.join(map(unread_column, extra))})" if extra else ""


def _column_name(name: str) -> str:
    """A header cell as the schema's column it names (`` Source`` or ``ID``: surrounding
    spaces and capitals of a spreadsheet export); any other name stripped only (a source's
    ``columns`` name them as the file does)."""
    stripped = name.strip()
    return stripped.lower() if stripped.lower() in SCHEMA_COLUMNS else stripped


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV's rows (a spreadsheet's byte-order mark skipped, the schema's column names read
    whatever their spaces and capitals, the cells a row shorter than the header lacks read as
    empty: ``restval=""``, where :class:`csv.DictReader`'s default None made every reader of a
    cell fail with a traceback, s22 review; a row whose every cell is empty, a spreadsheet's
    trailing ``,,,,`` line, skipped as :mod:`csv` skips a blank line: it was a run of its own,
    s27 review); a missing or unreadable file is a one-line :class:`ConfigError`."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, restval="")
            if reader.fieldnames is not None:
                reader.fieldnames = [_column_name(name) for name in reader.fieldnames]
                _check_distinct(path, reader.fieldnames)
            return [row for row in reader if not _all_empty(row)]
    except OSError as error:
        raise ConfigError(f"cannot read published runs {str(path)!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"published runs {str(path)!r}: not UTF-8 text (byte {error.start}); expected a "
            "UTF-8 CSV"
        ) from None


def _check_distinct(path: Path, names: Sequence[str]) -> None:
    """A one-line :class:`ConfigError` when the header names a column twice (as read: spaces
    and capitals aside). :class:`csv.DictReader` keeps the last cell of a repeated name, so a
    second ``iter_time_s`` column silently replaced every run's first (s37 review10). Unnamed
    columns (a spreadsheet's trailing commas) may repeat."""
    seen: dict[str, int] = {}
    for number, name in enumerate(names, start=1):
        if name and name in seen:
            raise ConfigError(
                f"published runs {str(path)!r}: the header names column {name!r} twice "
                f"(columns {seen[name]} and {number}); expected each column once"
            )
        seen.setdefault(name, number)


def _all_empty(row: Mapping[Any, Any]) -> bool:
    """Whether every cell of a :class:`csv.DictReader` row is empty or spaces (none past the
    header either)."""
    return all(not str(value or "").strip() for key, value in row.items() if key is not None) and (
        not row.get(None)
    )


def ragged_reason(row: Mapping[Any, Any]) -> str:
    """The reason a CSV row with more cells than its header has columns is not read (a
    :class:`csv.DictReader` row keeps the cells past the header under the key None), ""
    otherwise: a comma inside an unquoted cell (``14,451`` typed as a thousands separator)
    shifts every cell after it, so that ``tokens_per_s_per_gpu`` 14 would be read (s18
    csvrobust: the cells past the header were dropped silently, an empty last column hiding
    the shift); commas after a row's last cell look the same and are refused too. A row with
    fewer cells is read as before (its missing trailing cells empty). The inferred path makes
    it the row's not-evaluated reason (:mod:`~stage_explore.validation.infer`), a configured
    source's rows a :class:`ConfigError` (:func:`~stage_explore.validation.setups.
    numbered_rows`), as their other malformed cells."""
    extra = row.get(None) or []
    if not extra:
        return ""
    header = sum(1 for k in row if k is not None)
    return (
        f"the row has {header + len(extra)} cells but the header {header}: a comma inside an "
        "unquoted cell (a thousands separator such as 14,451?) shifts every cell after it, or "
        "the row ends in extra commas; quote that cell or remove them"
    )


#: An integer as a table may print it: ``1024``, ``1,024`` (thousands separators), ``8.0``.
INTEGER_CELL = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?")
#: The dashes a table prints for "not stated" (``-``, en dash, em dash).
DASHES = ("-", "–", "—")
#: How a table may state a yes/no cell (the first word, lower-cased).
YES = ("yes", "y", "true", "on", "1", "enabled", "✓", "✔")
NO = ("no", "n", "false", "off", "0", "disabled", "✗", "✘")


def int_cell(value: str) -> int | None:
    """The integer a cell states (``1,024`` and ``8.0`` included), or None when it states
    none (empty, ``-``, or text such as ``1536 per expert`` that the flavor answers)."""
    match = INTEGER_CELL.fullmatch(value.strip())
    return int(match.group(1).replace(",", "")) if match else None


def negative_cell(value: str) -> bool:
    """Whether a cell states a negative number (``-8``, ``−2``): an integer column's count
    cannot be one, which the refusal says instead of "not an integer"."""
    stripped = value.strip()
    return stripped[:1] in ("-", "\u2212") and int_cell(stripped[1:]) is not None


class IntegerCellError(ValueError):
    """A stated cell of an integer column that states no integer: its ``column``, its
    ``cell`` and ``what`` is wrong with it (``is not an integer``, or ``is negative (expected
    a count)``); the caller names the file and the row in its own error."""

    def __init__(self, column: str, cell: str) -> None:
        self.column, self.cell = column, cell
        self.what = "is negative (expected a count)" if negative_cell(cell) else "is not an integer"
        super().__init__(f"column {column}: {cell!r} {self.what}")


def integer_cells(
    row: Mapping[str, str | None], columns: Iterable[str], not_stated: Collection[str]
) -> dict[str, int]:
    """The integers ``row`` states in ``columns`` (a missing cell, or one whose lower-cased
    text is in ``not_stated``, states none); the first stated cell that is no integer raises
    :class:`IntegerCellError`. The one integer-cell check of an inferred row
    (:mod:`~stage_explore.validation.infer`) and of a ``setups.toml`` row
    (:mod:`~stage_explore.validation.setups`), each with its column set."""
    values = {}
    for column in columns:
        cell = (row.get(column) or "").strip()
        if cell.lower() in not_stated:
            continue
        value = int_cell(cell)
        if value is None:
            raise IntegerCellError(column, cell)
        values[column] = value
    return values


#: A measured value as a table may print it: ``5762``, ``14,451``, ``0.95``, ``1.2e3``.
NUMBER_CELL = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d*)?(?:[eE][+-]?\d+)?")


#: The unit a measured column's name states, for the error on a cell that is not a number
#: (``13.08 s``, ``13080 ms``: s35 review8, the unit belongs in the header alone).
MEASURED_UNITS = {
    "iter_time_s": "seconds",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "tflops_per_gpu": "TFLOP/s per GPU",
    "mfu_pct": "percent",
    "hfu_pct": "percent",
    "peak_mem_gib": "GiB",
}


def measured_value(cell: str, row_id: str, metric: str) -> float:
    """The measured value of a metric cell (thousands separators allowed); anything else is a
    :class:`ConfigError` naming the row and the cell, not a ``ValueError`` traceback."""
    if NUMBER_CELL.fullmatch(cell):
        try:
            value = float(cell.replace(",", ""))
        except ValueError:
            pass
        else:  # ``1e400`` reads as inf: was fitted to an empty reason (s33 review6)
            if math.isfinite(value):
                return value
            raise ConfigError(
                f"{row_id}: the {metric} cell {cell!r} is beyond a float's range; expected a "
                "finite number"
            )
    unit = MEASURED_UNITS.get(metric)
    expected = f"; expected a plain number of {unit} (the unit in the header only)" if unit else ""
    raise ConfigError(f"{row_id}: the {metric} cell {cell!r} is not a number{expected}")


#: The integer columns a cell printed as ``1,024`` / ``8.0`` is written back to its digits in
#: (:func:`normalized_cells`): the layout, batch, GPU and model-dim columns (``ffn`` and
#: ``kv_heads`` only when the cell is an integer: they may say ``1536 per expert`` or ``MLA``).
NORMALIZED_INTEGERS = (*LAYOUT_COLUMNS, "num_gpus", *STRICT_DIM_COLUMNS, "ffn", "kv_heads")
#: A model cell that is a Hugging Face repository id (``mistralai/Mixtral-8x7B-v0.1``,
#: ``meta-llama/Llama-3.1-70B``): the owner and the model's name, no spaces.
_REPO_ID = re.compile(r"[\w.-]+/([\w.-]+)")


def normalized_cells(cells: Mapping[str, str]) -> dict[str, str]:
    """A row's cells as the inferred setup reads them whatever the table's spelling (7 Dec
    2026, s30 fuzz: each was found to move or refuse a package row by
    ``benchmarks/spelling_robustness.py``): every run of whitespace one space and the ends
    stripped (``Card's  expected`` read no longer its notes' recipe), an integer cell of
    :data:`NORMALIZED_INTEGERS` as its digits (``4,096`` / ``4096.0`` were read apart from
    ``4096`` by the readers that match a cell's text, or refused as a model dim), a model
    cell that is a Hugging Face repository id as the model's name (``mistralai/Mixtral-8x7B``
    was read as Mistral 7B by the owner's name)."""
    out = {k: " ".join(v.split()) for k, v in cells.items()}
    for column in NORMALIZED_INTEGERS:
        value = int_cell(out.get(column, ""))
        if value is not None:
            out[column] = str(value)
    repo = _REPO_ID.fullmatch(out.get("model", ""))
    if repo:
        out["model"] = repo.group(1)
    return out


def first_word(cell: str) -> str:
    """The lower-cased first word of a cell (``"Yes (assumed)"`` → ``"yes"``); "" for an
    empty cell or a dash."""
    words = cell.strip().lower().split()
    word = words[0].rstrip(",;:") if words else ""
    return "" if word in (*DASHES, "n/a") else word
