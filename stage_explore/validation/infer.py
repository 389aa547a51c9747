"""Rows no ``setups.toml`` source claims, set up from what the CSV states: every row of every
published-runs CSV of a data folder is evaluated or reported, never dropped.

A published-runs CSV is a ``published_runs*.csv`` file, or any other ``.csv`` of the folder with
``id``, ``gpu`` and a measured column (:data:`MEASURED_COLUMNS`) that no source reads. A row
whose ``id`` no ``[sources.X] id_prefix`` of its file claims gets an inferred setup
(:func:`inferred_cases`): one held-out source per distinct ``source`` text, named
``INFERRED: <text>`` (split by system or metric when its rows differ in them, `` (memory)`` for
the ``peak_mem_gib`` figure), every inference an assumption of the row
(:mod:`~stage_explore.validation.infer_fields`), the rest the :class:`~stage_explore.validation
.setups.SourceSetup` path configured sources take. A row that still cannot be set up is a
not-evaluated :class:`~stage_explore.validation.setups.Case` with a one-line reason.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_explore.validation import infer_sparse as sparse
from stage_explore.validation.csv_cells import (
    DASHES,
    IntegerCellError,
    first_word,
    int_cell,
    integer_cells,
    normalized_cells,
    ragged_reason,
    read_csv,
    unread_columns,
)
from stage_explore.validation.infer_axis_words import accumulation_reason
from stage_explore.validation.infer_cells import moe_counts
from stage_explore.validation.infer_cluster import cluster_system
from stage_explore.validation.infer_compile import fms_selective_refusal
from stage_explore.validation.infer_defaults import recipe_defaults
from stage_explore.validation.infer_fields import (
    FRAMEWORK_COLUMNS,
    FRAMEWORK_RULES,
    Uninferable,
    infer_framework,
    infer_model,
    infer_precision,
    names_bridge,
    unmodelled_framework,
)
from stage_explore.validation.infer_fms_ac import fms_ac_fields
from stage_explore.validation.infer_internevo import internevo_refusal
from stage_explore.validation.infer_offload import check_offload_setup, named_offload
from stage_explore.validation.infer_optimizer import named_optimizer
from stage_explore.validation.infer_parallel import (
    ETP_DEFAULT_NOTE,
    NO_RECOMPUTE,
    folded_etp,
    parallel_layout,
    stated_etp,
)
from stage_explore.validation.infer_recompute import named_num_layers
from stage_explore.validation.infer_schedule import named_schedule
from stage_explore.validation.infer_segment import perf_script_domain
from stage_explore.validation.infer_spelling import (
    INTEGER_COLUMNS,
    TEXT_ALLOWED,
    TEXT_ALLOWED_SAID,
    other_unit,
    spelled_cells,
)
from stage_explore.validation.infer_system import infer_system, memory_override
from stage_explore.validation.memory_kind import kind_assumption, memory_kind, memory_rank0
from stage_explore.validation.setup_systems import derived_name
from stage_explore.validation.setups import Case, SourceSetup, make_case, system_file

INFERRED_PREFIX = "INFERRED: "
SERVING_RUNS = "serving_runs.csv"
#: The compared training metrics, in the order a row's measured column is chosen.
TRAINING_METRICS = ("tokens_per_s_per_gpu", "iter_time_s", "tflops_per_gpu")
MEASURED_COLUMNS = (*TRAINING_METRICS, "mfu_pct", "peak_mem_gib")
HEADER = (
    "no setups.toml source claims this row: its setup is inferred from the CSV "
    "(docs/validation.md, 'Rows without a setup'); every other setting is the ParallelConfig "
    "and framework profile default"
)
#: A cell that states nothing: empty or a dash.
_NOT_STATED = ("", *DASHES)


def is_inferred(source: str) -> bool:
    """Whether a source name is an inferred one."""
    return source.startswith(INFERRED_PREFIX)


def is_runs_csv(path: Path) -> bool:
    """Whether ``path`` is a published-runs CSV: ``published_runs*.csv``, or a header with
    ``id``, ``gpu`` and a measured column."""
    if path.name.startswith("published_runs") and path.suffix == ".csv":
        return True
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            first = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    header = {c.strip().lower() for c in first}  # quoted names too (``"id","gpu",…``)
    return {"id", "gpu"} <= header and bool(header & set(MEASURED_COLUMNS))


def _checked(row: dict[str, str], file: str) -> dict[str, int]:
    """The integer cells a row states (:data:`INTEGER_COLUMNS`,
    :func:`~stage_explore.validation.csv_cells.integer_cells`); a stated cell that is not an
    integer is Uninferable naming the file, the row and the column."""
    try:
        values = integer_cells(row, INTEGER_COLUMNS, _NOT_STATED)
    except IntegerCellError as bad:
        raise Uninferable(
            f"{file}, row {row['id']}, column {bad.column}: {bad.cell!r} {bad.what}"
        ) from None
    for column, words in TEXT_ALLOWED.items():
        cell = row.get(column, "").strip()
        if cell in _NOT_STATED or int_cell(cell) is not None:
            continue
        if not re.search(words, cell, re.IGNORECASE):
            raise Uninferable(
                f"{file}, row {row['id']}, column {column}: {cell!r} is not an integer (text "
                f"is read only as {TEXT_ALLOWED_SAID[column]})"
            )
    return values


#: A ZeRO stage as a source's text names it: ``ZeRO-3``, ``ZeRO stage 2``, ``zero1``.
def _flops(row: dict[str, str], framework: str, recompute: str) -> tuple[str, str]:
    """The FLOP convention of a TFLOP/s cell: the notes' words (model FLOPs; recompute FLOPs
    denied; recompute or hardware FLOPs, HFU), else Megatron-LM 2021's count with recompute
    for its full-recompute rows, model FLOPs otherwise."""
    text = f"{row.get('notes', '')} {row.get('uncertain', '')}".lower()
    if "model flop" in text or "model tflop" in text:
        return "megatron-model", "TFLOP/s counted as model FLOPs (the notes say so)"
    denied = sparse.NO_RECOMPUTE_FLOPS.search(text)
    if denied is not None:
        return "megatron-model", (
            f"TFLOP/s counted as model FLOPs (the notes say {denied.group(0)!r})"
        )
    if "recompute flop" in text or "hardware flop" in text or re.search(r"\bhfu\b", text):
        return "megatron-recompute", "TFLOP/s counted with recompute FLOPs (the notes say so)"
    if framework == "megatron-lm-2021" and recompute == "full":
        return "megatron-recompute", "TFLOP/s counted with recompute FLOPs (Megatron-LM 2021)"
    paper = dict((f, p) for p, f in FRAMEWORK_RULES)["megatron-lm-2021"]
    named = any(re.search(paper, row.get(c, ""), re.IGNORECASE) for c in FRAMEWORK_COLUMNS)
    if named and recompute == "full":
        return "megatron-recompute", (
            "TFLOP/s counted with recompute FLOPs: the source is a Megatron-LM paper, whose "
            "tables count every row with its eq. 3 (96·B·s·l·h², the recompute forward "
            "included), whichever framework ran the row"
        )
    return "megatron-model", "TFLOP/s counted as model FLOPs (a default: the notes do not say)"


def inferred_setup(
    row: dict[str, str], metric: str, name: str, file: str, folder: Path | None = None
) -> tuple[SourceSetup, dict[str, bool | int | float | str], tuple[tuple[str, float], ...]]:
    """The setup of one unclaimed row for ``metric``, the framework options its
    framework's defaults switch (:class:`Uninferable` when it has none) and its system
    overrides; its system is a ``systems/*.toml`` file of ``folder`` when the row states that
    cluster (:func:`~stage_explore.validation.infer_cluster.cluster_system`), else the preset,
    with a stated scale-out bandwidth per GPU as an override (the setup's system names it)."""
    stated = _checked(row, file)
    framework = infer_framework(row)
    unmodelled = (
        unmodelled_framework(row, framework)
        or fms_selective_refusal(framework.value, row.get("recompute", ""))
        or internevo_refusal(framework.value, row)
    )
    if unmodelled:
        raise Uninferable(unmodelled)
    offload, offload_note = named_offload(row, framework.value)  # CPU offload (s34)
    optimizer, optimizer_note = named_optimizer(row)  # the optimizer stated (s37 optim)
    system = infer_system(row.get("gpu", ""))
    cluster = cluster_system(row.get("gpu", ""), row.get("interconnect", ""), system.value, folder)
    # a matched file replaces the preset, and with it what the preset note says of the GPU
    system_notes = [cluster.assumption] if cluster.value != system.value else [
        system.assumption, cluster.assumption
    ]  # fmt: skip
    precision = infer_precision(row.get("precision", ""), framework.value, names_bridge(row))
    model = infer_model(row, framework.value)
    parallel, notes = parallel_layout(row, stated, framework.value)
    schedule = named_schedule(row, stated.get("pp", 1))
    if schedule is not None:  # a schedule the CSV has no column for (s32 rowsC)
        parallel["schedule"] = schedule[0]
        notes.append(schedule[1])
    cell = row.get("recompute", "")
    layers = stated.get("layers", get_flavor(model.value).layers)
    chunks = stated.get("pp", 1) * stated.get("vpp", 1)  # the CSV's: parallel_layout fills neither
    partial = named_num_layers(cell, layers, chunks) if first_word(cell) == "full" else None
    if partial is not None:
        parallel["recompute_num_layers"], parallel["recompute_method"] = partial[0], "block"
        notes.append(partial[1])
    fms_ac = fms_ac_fields(framework.value, cell, layers)  # the fields: setups._parallel_fields
    if fms_ac is not None:
        notes.append(fms_ac[1])
    if precision.fp8_recipe:
        parallel["fp8_recipe"] = precision.fp8_recipe
    if precision.fp8_gemms:
        parallel["fp8_gemms"] = list(precision.fp8_gemms)
    experts, expert_notes = moe_counts(row.get("moe", ""))
    defaults = recipe_defaults(
        row, framework.value, precision.precision, model.value, parallel, stated, system.value,
        precision.fp8_recipe, experts.get("num_experts", 0), dict(model.model),
    )  # fmt: skip
    parallel.update(defaults.parallel)
    check_offload_setup(offload, int(parallel.get("zero", 0)), system.value)
    moe = bool(experts.get("num_experts") or get_flavor(model.value).num_experts)
    etp = stated_etp(row)
    if etp is not None:
        parallel["etp"] = etp[0]
        defaults.notes[:] = [n for n in defaults.notes if not n.startswith(ETP_DEFAULT_NOTE)]
        notes.append(etp[1])
    folded = folded_etp(parallel, stated, moe)
    if folded is not None:
        parallel["etp"] = folded[0]
        notes.append(folded[1])
    notes += [n for n in [sparse.empty_ep_note(moe, stated, parallel)] if n]
    replaced = {
        "micro_batch": "micro-batch 1 (", "vpp": "no interleaving", "recompute": NO_RECOMPUTE,
    }  # fmt: skip
    notes = [n for n in notes if not any(
        n.startswith(text) for field, text in replaced.items() if field in defaults.parallel
    )]  # fmt: skip
    flops, flops_note = "", ""
    if metric == "tflops_per_gpu":
        recompute = row.get("recompute", "").strip().lower().split(" ")[0] or "none"
        flops, flops_note = _flops(row, framework.value, recompute)
    assumptions = [
        HEADER, *system_notes, framework.assumption, precision.assumption,
        model.assumption, *expert_notes, *notes, *defaults.notes,
        *([offload_note] if offload_note else []),
        *([optimizer_note] if optimizer_note else []),
        *([flops_note] if flops_note else []),
    ]  # fmt: skip
    if metric == "peak_mem_gib":
        try:
            assumptions.append(kind_assumption(memory_kind(row), memory_rank0(row)))
        except ConfigError as error:  # two kinds named: the row's reason
            raise Uninferable(str(error)) from None
    overrides: tuple[tuple[str, float], ...] = (
        (("scale_out_bandwidth_bytes_per_s", cluster.scale_out),)
        if cluster.scale_out is not None else ()
    )  # fmt: skip
    segment = (
        perf_script_domain(row, framework.value, system.value)
        if cluster.value == system.value else None
    )  # fmt: skip
    if segment is not None:
        overrides = (*overrides, ("scale_up_size", float(segment[0])))
        assumptions.append(segment[1])
    if cluster.value == system.value:  # a stated memory no preset has (a file states its own)
        overrides = (*overrides, *memory_override(row.get("gpu", "")))
    setup = SourceSetup(
        name=name, title=f"inferred from {file}: {row.get('source', '').strip() or file}",
        file=file, id_prefix=row["id"], metric=metric,
        system=derived_name(cluster.value, overrides),
        framework=framework.value, precision=precision.precision, model_base=model.value,
        in_sample=False, flops=flops, model={**defaults.model, **dict(model.model), **experts},
        parallel=parallel,
        assumptions=tuple(f"inferred: {a}" for a in assumptions),
    )  # fmt: skip
    return setup, {**defaults.options, **offload, **optimizer}, overrides


def _unevaluable(
    row: dict[str, str], metric: str, name: str, reason: str, folder: Path | None = None
) -> Case:
    """A not-evaluated case, with the system and framework when they can be read (the data
    folder's system file the row's cluster states, when ``folder`` is given and one does)."""
    cell = row.get(metric, "").replace(",", "").strip()
    try:
        measured = float(cell)
    except ValueError:
        measured = float("nan")
    try:
        system = infer_system(row.get("gpu", "")).value
    except Uninferable:
        system = ""
    if system and folder is not None:
        gpu, network = row.get("gpu", ""), row.get("interconnect", "")
        try:
            system = cluster_system(gpu, network, system, folder).value
        except (Uninferable, ConfigError):
            pass  # the preset: the cluster's cells are the row's reason elsewhere, or none
    return Case(
        id=row["id"], source=name, metric=metric, measured=measured, system=system,
        framework=infer_framework(row).value, in_sample=False, in_sample_why="",
        assumptions=(), reason=reason,
    )  # fmt: skip


def _case(
    row: dict[str, str], metric: str, name: str, file: str, line: int, folder: Path | None
) -> Case:
    raw = row
    try:
        row, spelled = spelled_cells(row, strict=True)
        row, batch = sparse.batch_in_tokens(row)
    except Uninferable as error:
        return replace(_unevaluable(row, metric, name, str(error), folder), file=file, line=line)
    spelled += batch
    unit = other_unit(row, metric)
    if unit:
        return replace(_unevaluable(row, metric, name, unit), file=file, line=line)
    try:
        setup, options, overrides = inferred_setup(row, metric, name, file, folder)
    except Uninferable as error:
        unevaluable = _unevaluable(row, metric, name, str(error), folder)
        return replace(unevaluable, file=file, line=line)
    if spelled:
        notes = tuple(f"inferred: {n}" for n in spelled)
        setup = replace(setup, assumptions=(*setup.assumptions, *notes))
    try:
        case = make_case(setup, row, {"framework_options": options} if options else {})
    except ConfigError as error:  # a malformed cell: the row's reason, not the run's error
        return replace(_unevaluable(row, metric, name, f"{file}: {error}"), file=file, line=line)
    par = case.parallel  # a batch cell's remark stating another accumulation (s32 readers7)
    ga = accumulation_reason(raw, par.global_batch, par.micro_batch, par.dp) if par else ""
    if ga:
        return replace(_unevaluable(row, metric, name, ga, folder), file=file, line=line)
    where = system_file(setup, folder) if folder is not None else ""
    return replace(case, file=file, line=line, system_file=where, system_overrides=overrides)


def _read_row(row: Mapping[Any, Any], file: str) -> tuple[dict[str, str], str, str]:
    """``(cells, source name, metric)`` of a CSV row: its cells under the header's columns
    (empty for a missing one; the cells past the header,
    :func:`~stage_explore.validation.csv_cells.ragged_reason`, left out), the inferred source
    it is reported under, and its first stated training metric (:data:`TRAINING_METRICS`; ""
    when none)."""
    cells = normalized_cells({k: (v or "") for k, v in row.items() if k is not None})
    name = INFERRED_PREFIX + (cells.get("source", "").strip() or file)
    metric = next((m for m in TRAINING_METRICS if cells.get(m, "").strip()), "")
    return cells, name, metric


def row_cases(
    row: dict[str, str], file: str, line: int, folder: Path | None = None
) -> list[Case]:
    """The cases of one unclaimed row: its first stated training metric
    (:data:`TRAINING_METRICS`) and its ``peak_mem_gib``; a row stating neither is one
    not-evaluated case. ``folder``: the data folder, whose ``systems/*.toml`` a row's stated
    cluster may name (none: the presets only)."""
    ragged = ragged_reason(row)
    row, name, metric = _read_row(row, file)
    row["id"] = row.get("id", "").strip() or f"{file}:{line}"
    if ragged:
        case = _unevaluable(row, metric or TRAINING_METRICS[0], name, ragged)
        return [replace(case, file=file, line=line)]
    memory = bool(row.get("peak_mem_gib", "").strip())
    cases = [_case(row, metric, name, file, line, folder)] if metric else []
    if memory:
        cases.append(_case(row, "peak_mem_gib", f"{name} (memory)", file, line, folder))
    if not cases:
        mfu = " (mfu_pct alone is not compared: sources count MFU against different peaks)"
        reason = f"no measured value: none of {', '.join(TRAINING_METRICS)}, peak_mem_gib"
        hfu = " (hfu_pct alone is not compared: HFU counts against different peaks and recompute)"
        said = [row.get(c, "").strip() for c in ("mfu_pct", "hfu_pct")]
        reason += mfu if said[0] else hfu if said[1] else ""
        case = _unevaluable(row, TRAINING_METRICS[0], name, reason)
        cases.append(replace(case, file=file, line=line))
    return cases


def _duplicate(row: dict[str, str], file: str, line: int, first: tuple[str, int]) -> Case:
    """The not-evaluated case of a row whose ``id`` an earlier row already stated: the same run
    listed twice would weigh twice in its source's error, and two runs under one id cannot be
    told apart in the report, so only the first is evaluated."""
    clean, name, metric = _read_row(row, file)
    reason = (
        f"duplicate id {clean['id'].strip()!r}: row {first[1]} of {first[0]} has it (a run listed "
        "twice would count twice in its source's error); give each row its own id"
    )
    case = _unevaluable(clean, metric or TRAINING_METRICS[0], name, reason)
    return replace(case, file=file, line=line)


def _split(cases: list[Case]) -> list[Case]:
    """Inferred sources whose rows differ in system or metric, split by them (a source is
    summarised, fitted and targeted on one system and one metric)."""
    out = []
    for case in cases:
        same = [c for c in cases if c.source == case.source]
        systems = {c.system for c in same if c.system}
        metrics = {c.metric for c in same}
        parts = [p for p, many in ((case.system, len(systems) > 1), (case.metric, len(metrics) > 1))
                 if many and p]  # fmt: skip
        out.append(replace(case, source=f"{case.source} [{', '.join(parts)}]") if parts else case)
    return out


def _claims(claimers: Sequence[SourceSetup], row_id: str) -> bool:
    """Whether one of ``claimers`` (the sources of the row's file) claims the row by its id."""
    return bool(row_id) and any(row_id.startswith(s.id_prefix) for s in claimers)


def inferred_cases(
    folder: Path,
    sources: Sequence[SourceSetup],
    only: str | None = None,
    systems: Path | None = None,
) -> tuple[list[Case], list[tuple[str, int]], list[str], list[str]]:
    """``(cases, files read with their row counts, files ignored with why, files whose header
    has columns not in the schema with them)``: the cases of every row of the folder's
    published-runs CSVs (``only``: of that one file) that no source claims, in file order; a
    stated cluster is looked up in ``systems``' ``systems/*.toml`` (default: the folder's). A
    row whose id an earlier row or a claimed row of any file states is not evaluated
    (:func:`_duplicate`)."""
    cases: list[Case] = []
    files: list[tuple[str, int]] = []
    ignored: list[str] = []
    unread: list[str] = []
    tables: list[tuple[str, list[dict[str, str]], list[SourceSetup]]] = []
    named = {s.file for s in sources}
    found = {p.name for p in folder.glob("*.csv")} if only is None else {only}
    for name in sorted(named | found):
        if name not in named and not is_runs_csv(folder / name):
            if name != SERVING_RUNS:  # evaluated beside (validation.serving)
                ignored.append(f"{name} (no source reads it, and it is not a published-runs "
                               "CSV: no id, gpu and measured column)")  # fmt: skip
            continue
        rows = read_csv(folder / name)
        files.append((name, len(rows)))
        claimers = [s for s in sources if s.file == name]
        if not any(s.columns for s in claimers):  # a renaming source reads every row of its file
            tables.append((name, rows, claimers))
    seen: dict[str, tuple[str, int]] = {}  # an id → the file and row that first stated it
    for name, rows, claimers in tables:  # a claimed row's id first: its source evaluates it
        for line, row in enumerate(rows, start=1):
            row_id = (row.get("id") or "").strip()
            if _claims(claimers, row_id):
                seen.setdefault(row_id, (name, line))
    for name, rows, claimers in tables:
        before = len(cases)
        for line, row in enumerate(rows, start=1):
            row_id = (row.get("id") or "").strip()
            if _claims(claimers, row_id):
                continue
            first = seen.setdefault(row_id, (name, line)) if row_id else (name, line)
            if first != (name, line):
                cases.append(_duplicate(row, name, line, first))
            else:
                cases += row_cases(row, name, line, systems or folder)
        extra = unread_columns(name, rows) if len(cases) > before else ""
        unread += [extra] if extra else []
    return _split(cases), files, ignored, unread
