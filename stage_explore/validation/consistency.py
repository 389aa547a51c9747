"""A published or measured row's own columns checked against each other (s20 datacheck).

A row that states two or more rates (:data:`RATE_COLUMNS`) states one throughput twice; each
cell is turned into the tokens per second per GPU it implies, as an interval
(:func:`token_rates`), and two cells whose intervals do not meet are a :class:`DataWarning`:

- ``tokens_per_s_per_gpu`` ``T``: ``T``, within the rounding of the cell as written (half a unit
  of its last digit: ``2557`` is 2556.5-2557.5);
- ``iter_time_s`` ``t``: ``B·s / (t·N)`` (global batch ``B`` sequences of ``s`` tokens over ``N``
  GPUs), within the cell's rounding;
- ``tflops_per_gpu`` ``X``: ``X / F`` for ``F`` anywhere in the model's band of FLOPs per token
  (:func:`~stage_explore.validation.flop_band.flop_band`: the counting conventions in use);
- ``mfu_pct`` / ``hfu_pct`` ``m``: ``m·P / F`` for ``P`` the system's dense peak for bf16/fp16
  or for the run's precision (sources count an FP8 run's MFU against either).

Two intervals may stand apart by :data:`SLACK` (5 %) before the row is flagged, and by nothing
else: the band is the spread of the formulas, the rounding is the cells' own, so a flagged row
holds a slip no convention explains (a rate per node, a doubled cell, an MFU on a peak the GPU
does not have). The layout's arithmetic is checked too (:func:`layout_warnings`):
the global batch a multiple of micro-batch · dp, and ``num_gpus`` = tp·pp·cp·dp. The check reads
the rows and never changes a prediction or which rows are evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_core.parallel.vocab import Recompute
from stage_explore.system.model import System
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.flop_band import FlopBand, flop_band
from stage_explore.validation.infer_spelling import spelled_cells
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import Case, SourceSetup, numbered_rows

#: The rate columns compared, in the order a warning names them.
RATE_COLUMNS = ("tokens_per_s_per_gpu", "iter_time_s", "tflops_per_gpu", "mfu_pct", "hfu_pct")
#: How far two rates may stand apart beyond the band and the rounding before a row is flagged.
#: Not a convention's spread (the band is that) but the check's threshold: a quarter of the
#: smallest slip it is for (an MFU on the H100 PCIe's 756 TFLOP/s instead of the SXM's 989 is
#: 1.31x; a rate per node 4-8x, a doubled cell 2x, a BF16 peak for an FP8 one 2x), and above
#: what the formulas leave out (norms, biases, routers and softmax: well under 1 % of a layer's
#: FLOPs; the vocabulary Megatron pads to 128·tp: 32,000 to 32,768 at tp 8 adds 2.4 % of the
#: output layer's, itself 2-10 % of the step's) and a step time and a tokens/s taken over
#: different steps of one run.
SLACK = 0.05
#: CSV files' rows by file name, each read once.
_Tables = dict[str, list[dict[str, str]]]
#: A plain number cell as written (``2,557``, ``0.95``; not ``14.1k`` nor ``1e3``: such a cell is
#: not read), its decimals setting its rounding.
_NUMBER = re.compile(r"\d[\d,]*(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class DataWarning:
    """Two cells of one row that cannot both hold (or a layout that does not add up: ``values``
    are then the two sides of the equation)."""

    id: str
    file: str
    line: int
    columns: tuple[str, str]
    values: tuple[float, float]
    why: str

    def text(self) -> str:
        """One line naming the row, the two columns and their values, and why they disagree."""
        where = f" ({self.file}, row {self.line})" if self.file else ""
        (a, b), (x, y) = self.columns, self.values
        if a == b:  # one cell that cannot hold (:func:`nonpositive_warnings`)
            return f"{self.id}{where}: {a} {x:g}: {self.why}"
        return f"{self.id}{where}: {a} {x:g} and {b} {y:g} disagree: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        """The warning as ``data_warnings`` prints it in ``--json``."""
        return {
            "id": self.id,
            "file": self.file,
            "line": self.line,
            "columns": list(self.columns),
            "values": list(self.values),
            "why": self.why,
        }


def stated_cell(cell: str) -> tuple[float, float] | None:
    """``(value, relative rounding)`` of a plain number cell (thousands separators allowed):
    the rounding is half a unit of its last written digit over the value; None for an empty,
    non-numeric or non-positive cell."""
    text = cell.strip()
    found = _NUMBER.fullmatch(text)
    if found is None:
        return None
    value = float(text.replace(",", ""))
    if not value > 0:
        return None
    decimals = len(found.group(1) or "")
    return value, 0.5 * 10.0**-decimals / value


@dataclass(frozen=True, slots=True)
class _Rate:
    """One cell as the tokens per second per GPU it implies: a union of intervals."""

    column: str
    value: float
    spans: tuple[tuple[float, float], ...]
    how: str

    def meets(self, other: _Rate) -> bool:
        """Whether the two rates agree within :data:`SLACK`."""
        return any(lo <= b_hi * (1 + SLACK) and b_lo <= hi * (1 + SLACK)
                   for lo, hi in self.spans for b_lo, b_hi in other.spans)  # fmt: skip

    @property
    def said(self) -> str:
        """How the cell reads as tokens/s per GPU, for a warning's ``why``."""
        return f"{self.how} {_g(_low(self))}-{_g(_high(self))} tokens/s per GPU"


def _g(value: float) -> str:
    return f"{value:.4g}" if value < 1e4 else f"{value:,.0f}"


def token_rates(
    cells: Mapping[str, str],
    tokens_per_step: int,
    gpus: int,
    band: FlopBand,
    peaks: Mapping[str, float],
    hardware: FlopBand | None = None,
) -> list[_Rate]:
    """Every stated rate cell of ``cells`` as the tokens/s per GPU it implies (module doc);
    ``peaks``: dense peak FLOP/s by the dtype name the MFU may be counted against;
    ``hardware``: the band an HFU is read with (default ``band``; :func:`rate_warnings` gives
    it full recompute's count: hardware FLOPs count what was recomputed, whatever the row's
    ``recompute`` cell says)."""
    rates = []
    for column in RATE_COLUMNS:
        used = (hardware or band) if column == "hfu_pct" else band
        low, high = used.low, used.high
        read = stated_cell(cells.get(column, ""))
        if read is None:
            continue
        value, r = read
        lo, hi = value * (1 - r), value * (1 + r)
        spans: tuple[tuple[float, float], ...]
        if column == "tokens_per_s_per_gpu":
            spans, how = ((lo, hi),), "is"
        elif column == "iter_time_s":
            spans = ((tokens_per_step / (hi * gpus), tokens_per_step / (lo * gpus)),)
            how = f"with {tokens_per_step:,} tokens per step on {gpus} GPUs is"
        elif column == "tflops_per_gpu":
            spans = ((lo * 1e12 / high, hi * 1e12 / low),)
            how = f"at {_g(low / 1e9)}-{_g(high / 1e9)} GFLOP per token is"
        elif peaks:
            spans = tuple((lo / 100 * p / high, hi / 100 * p / low) for p in peaks.values())
            named = "/".join(f"{k} {p / 1e12:g}" for k, p in peaks.items())
            how = f"of a {named} TFLOP/s peak at {_g(low / 1e9)}-{_g(high / 1e9)} GFLOP/token is"
        else:  # an MFU without a peak to read it by
            continue
        rates.append(_Rate(column, value, spans, how))
    return rates


def rate_warnings(
    row_id: str,
    cells: Mapping[str, str],
    model: ModelSpec,
    parallel: ParallelConfig,
    peaks: Mapping[str, float],
    where: tuple[str, int] = ("", 0),
) -> list[DataWarning]:
    """A warning for each two rate cells of a row whose implied tokens/s per GPU do not meet;
    ``model`` and ``parallel`` are the row's setup (``seq_len``, the global batch, the GPUs)."""
    gpus = parallel.tp * parallel.pp * parallel.cp * parallel.dp
    band = flop_band(model, parallel.recompute)
    tokens = parallel.global_batch * model.seq_len
    rates = token_rates(cells, tokens, gpus, band, peaks, flop_band(model, Recompute.FULL))
    out = []
    for a, b in combinations(rates, 2):
        if a.meets(b):
            continue
        apart = max(_low(a) / _high(b), _low(b) / _high(a))
        why = f"{a.column} {a.said}, {b.column} {b.said}: {apart:.2f}x apart"
        out.append(DataWarning(row_id, *where, (a.column, b.column), (a.value, b.value), why))
    return out


def _low(rate: _Rate) -> float:
    return min(lo for lo, _ in rate.spans)


def _high(rate: _Rate) -> float:
    return max(hi for _, hi in rate.spans)


def layout_warnings(
    row_id: str, cells: Mapping[str, str], where: tuple[str, int] = ("", 0)
) -> list[DataWarning]:
    """The layout's arithmetic of the cells a row states: ``global_batch_seqs`` a multiple of
    ``micro_batch``·``dp`` (GBS = MBS·DP·GA; dp from ``num_gpus``/(tp·pp·cp) when not stated)
    and ``num_gpus`` = tp·pp·cp·dp."""
    stated = {c: _integer(cells.get(c, "")) for c in
              ("tp", "pp", "cp", "dp", "num_gpus", "micro_batch", "global_batch_seqs")}  # fmt: skip
    tp, pp, cp = (stated[c] or 1 for c in ("tp", "pp", "cp"))
    gpus, dp = stated["num_gpus"], stated["dp"]
    out = []
    if gpus is not None and dp is not None and gpus != tp * pp * cp * dp:
        out.append(DataWarning(
            row_id, *where, ("num_gpus", "dp"), (gpus, dp),
            f"tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {tp * pp * cp * dp} GPUs, not {gpus}",
        ))  # fmt: skip
    if dp is None and gpus is not None and gpus % (tp * pp * cp) == 0:
        dp = gpus // (tp * pp * cp)
    batch, micro = stated["global_batch_seqs"], stated["micro_batch"]
    if batch is not None and micro is not None and dp is not None and batch % (micro * dp):
        out.append(DataWarning(
            row_id, *where, ("global_batch_seqs", "micro_batch"), (batch, micro),
            f"the global batch is not a whole number of micro-batches of {micro} on each of "
            f"dp {dp} (GBS = MBS·DP·GA: {batch}/{micro * dp} = {batch / (micro * dp):.4g})",
        ))  # fmt: skip
    return out


def _integer(cell: str) -> int | None:
    text = cell.strip().replace(",", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def nonpositive_warnings(
    row_id: str, cells: Mapping[str, str], metric: str, where: tuple[str, int] = ("", 0)
) -> list[DataWarning]:
    """A rate cell (:data:`RATE_COLUMNS`) other than the row's evaluated ``metric`` written as
    a number that is not positive: the row is measured by ``metric``, and this cell was skipped
    with no word (7 Dec 2026, s29 review: ``iter_time_s -13`` beside a tokens/s cell). The
    evaluated cell's own such value is the row's not-evaluated reason, not flagged here."""
    out = []
    for column in RATE_COLUMNS:
        try:
            value = float(cells.get(column, "").strip().replace(",", ""))
        except ValueError:
            continue
        if column != metric and not value > 0:
            why = f"expected a positive number; the row is measured by its {metric}"
            out.append(DataWarning(row_id, *where, (column, column), (value, value), why))
    return out


def row_warnings(
    row_id: str,
    cells: Mapping[str, str],
    model: ModelSpec | None,
    parallel: ParallelConfig | None,
    peaks: Mapping[str, float],
    where: tuple[str, int] = ("", 0),
) -> list[DataWarning]:
    """The layout's and (for a row with a setup) the rates' warnings of one row."""
    out = layout_warnings(row_id, cells, where)
    if model is not None and parallel is not None:
        out += rate_warnings(row_id, cells, model, parallel, peaks, where)
    return out


def warning_lines(warnings: Sequence[DataWarning]) -> list[str]:
    """``warning: <row>: …`` lines, one per warning."""
    return [f"warning: {w.text()}" for w in warnings]


def system_peaks(system: System, precision: str) -> dict[str, float]:
    """The dense peaks an MFU may be counted against: bf16 (fp16 when it has no bf16) and the
    run's precision's, by dtype name."""
    known = system.accelerator.peak_flops_per_s
    names = ["bf16" if "bf16" in known else "fp16", precision]
    return {name: known[name] for name in dict.fromkeys(names) if name in known}


def _published_rows(
    folder: Path,
    sources: Sequence[SourceSetup],
    setups: Mapping[str, Mapping[str, Any]],
    tables: _Tables,
) -> dict[tuple[str, int], dict[str, str]]:
    """The cells of every configured source's row by ``(file, line)``: renamed as the source
    reads them (its measured column left out when scaled: a cell in another unit), with the
    row's ``csv_corrections``; ``tables``: the files read so far, by name (added to)."""
    out: dict[tuple[str, int], dict[str, str]] = {}
    for source in sources:
        if source.columns:  # a renaming source: its own reading
            numbered = numbered_rows(source, folder)
        else:
            table = _table(tables, folder, source.file)
            numbered = [(line, row) for line, row in enumerate(table, start=1)
                        if (row.get("id") or "").startswith(source.id_prefix)]  # fmt: skip
        for line, row in numbered:
            cells = dict(row)
            if source.metric_scale != 1.0:
                cells.pop(source.metric, None)
            fixes = setups.get(row["id"], {}).get("csv_corrections", {})
            cells.update({c: str(e["value"]) for c, e in fixes.items() if isinstance(e, dict)})
            out[(source.file, line)] = cells
    return out


def _table(tables: _Tables, folder: Path, name: str) -> list[dict[str, str]]:
    """The rows of ``folder / name``, read once into ``tables``."""
    if name not in tables:
        tables[name] = read_csv(folder / name)
    return tables[name]


@dataclass(frozen=True, slots=True)
class DataCheck:
    """The check of a set of rows: how many were read, how many state two or more rates with a
    setup to compare them by, and the warnings."""

    rows: int
    compared: int
    warnings: tuple[DataWarning, ...]

    def line(self) -> str:
        """``rows checked against themselves: …`` (one line)."""
        flagged = len({(w.file, w.line, w.id) for w in self.warnings})
        return (
            f"rows checked against themselves: {self.rows} read, {self.compared} state two or "
            f"more of {', '.join(RATE_COLUMNS)}; {flagged} flagged"
        )

    def to_list(self) -> list[dict[str, Any]]:
        """The warnings as ``data_warnings`` (:meth:`DataWarning.to_dict` each)."""
        return [w.to_dict() for w in self.warnings]


def _stated_rates(cells: Mapping[str, str]) -> int:
    return sum(stated_cell(cells.get(c, "")) is not None for c in RATE_COLUMNS)


def case_warnings(
    cases: Sequence[Case],
    folder: Path,
    sources: Sequence[SourceSetup] = (),
    setups: Mapping[str, Mapping[str, Any]] | None = None,
) -> DataCheck:
    """The check of every row the ``cases`` were read from (once per row: a row's memory
    case is the same row), its cells read from ``folder`` (``sources``' files renamed as they
    read them, ``setups``' ``[rows]`` corrections applied), its setup and system the case's."""
    files: _Tables = {}
    rows = _published_rows(folder, sources, setups or {}, files)
    systems: dict[str, System] = {}
    out: list[DataWarning] = []
    seen: set[tuple[str, int]] = set()
    compared = 0
    for case in cases:
        key = (case.file, case.line)
        if not case.file or key in seen:
            continue
        seen.add(key)
        cells = rows.get(key)
        if cells is None:
            table = _table(files, folder, case.file)
            if not 0 < case.line <= len(table):
                continue
            cells = spelled_cells(dict(table[case.line - 1]))[0]
        peaks: dict[str, float] = {}
        if case.model is not None and case.parallel is not None:
            if case.system not in systems:
                systems[case.system] = case_system(case)
            peaks = system_peaks(systems[case.system], str(case.parallel.precision))
            compared += _stated_rates(cells) >= 2
        out += row_warnings(case.id, cells, case.model, case.parallel, peaks, key)
        if case.metric in RATE_COLUMNS:
            out += nonpositive_warnings(case.id, cells, case.metric, key)
    return DataCheck(len(seen), compared, tuple(out))


def runs_warnings(path: Path, cases: Sequence[Case], system: System) -> list[DataWarning]:
    """The warnings of a user's runs CSV (``stage calibrate --runs``): ``cases`` one per row
    of ``path`` in its order (:func:`~stage_explore.calibrate.user_cases`), on ``system``."""
    out: list[DataWarning] = []
    for line, (row, case) in enumerate(zip(read_csv(path), cases, strict=False), start=1):
        parallel = case.parallel if case.model is not None else None
        peaks = system_peaks(system, str(parallel.precision)) if parallel is not None else {}
        out += row_warnings(case.id, row, case.model, parallel, peaks, (path.name, line))
    return out
