"""Published runs and their setups as data: :func:`load_cases` turns the CSV rows of
``stage_explore/data`` and ``setups.toml`` (the assumptions for what each source omits) into
:class:`Case` values — model, parallel config, system preset, framework, precision, metric and
measured value, in-sample flag — or a reason the row cannot be evaluated.

Holds :class:`SourceSetup` (one ``[sources.NAME]`` table), :class:`Case` (with
:attr:`Case.backend_key`, the framework plus the row's ``framework_options``, read back by
:func:`parse_backend_key`), :func:`load_setups`, :func:`read_csv`, :func:`load_cases` and
:func:`data_dir`. A row may name its own ``model_base`` flavor; a source's ``system`` is a
preset name or a ``.toml`` system file of the data folder (:func:`system_file`). Rules (also in
``setups.toml``'s header): the CSV's values come first; a setup field fills a cell the CSV leaves
empty, and one that contradicts a value the CSV states is a :class:`ConfigError` — unless the
row lists it under ``csv_corrections`` with its reason (a source that contradicts itself), which
is reported among the row's assumptions. A schedule is
interleaved 1F1B when ``vpp`` > 1, else 1F1B.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig, Precision, Recompute, Schedule, unsharded_zero_note
from stage_explore.limits import check_sizes
from stage_explore.validation.csv_cells import (
    DASHES,
    DEGREE_COLUMNS,
    LAYOUT_COLUMNS,
    NO,
    STRICT_DIM_COLUMNS,
    YES,
    IntegerCellError,
    first_word,
    int_cell,
    integer_cells,
    measured_value,
    ragged_reason,
    read_csv,
)
from stage_explore.validation.infer_fms_ac import fms_ac_fields
from stage_explore.validation.infer_layer_ac import layer_ac_fields
from stage_explore.validation.infer_release import row_text
from stage_explore.validation.memory_kind import memory_kind, memory_rank0
from stage_explore.validation.setups_file import read_setup_tables

#: What a setup's ``[parallel]`` table may give: :class:`ParallelConfig`'s fields but the
#: precision (a source's or row's own ``precision`` key).
_PARALLEL_FIELDS = frozenset(f.name for f in dataclass_fields(ParallelConfig)) - {"precision"}
METRICS = ("iter_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "peak_mem_gib")
FLOP_CONVENTIONS = ("megatron-recompute", "megatron-model")
#: Model dims read from a CSV (when the cell is an integer).
MODEL_COLUMNS = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len")
#: Parallel fields read from a CSV: column → ParallelConfig field.
PARALLEL_COLUMNS = {
    **{column: column for column in DEGREE_COLUMNS},
    "micro_batch": "micro_batch", "global_batch_seqs": "global_batch",
}  # fmt: skip
_SOURCE_KEYS = {
    "title", "file", "id_prefix", "metric", "flops", "system", "framework", "precision",
    "model_base", "in_sample", "in_sample_why", "group_by", "columns", "metric_scale", "model",
    "parallel", "assumptions", "framework_options",
}  # fmt: skip
_ROW_KEYS = {
    "framework", "precision", "in_sample", "in_sample_why", "not_evaluated", "model", "parallel",
    "assumptions", "model_base", "framework_options", "csv_corrections",
}  # fmt: skip


def data_dir() -> Path:
    """``stage_explore/data``: the published runs and ``setups.toml`` (package data)."""
    return Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True, slots=True)
class SourceSetup:
    """One ``[sources.NAME]`` table of ``setups.toml`` (its header documents every key)."""

    name: str
    title: str
    file: str
    id_prefix: str
    metric: str
    system: str
    framework: str
    precision: str
    model_base: str
    in_sample: bool
    in_sample_why: str = ""
    flops: str = ""
    group_by: str = ""
    metric_scale: float = 1.0
    columns: Mapping[str, str] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    parallel: Mapping[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    #: Framework-profile options of every row (a row's own ``framework_options`` win).
    framework_options: Mapping[str, bool | int | float | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Case:
    """One published row, ready to evaluate (``model``/``parallel`` set) or not (``reason``)."""

    id: str
    source: str
    metric: str
    measured: float
    system: str
    framework: str
    in_sample: bool
    in_sample_why: str
    assumptions: tuple[str, ...]
    group: str = ""
    flops: str = ""
    model: ModelSpec | None = None
    parallel: ParallelConfig | None = None
    reason: str = ""
    #: Framework-profile options the row's recipe switches (``setups.toml`` framework_options).
    framework_options: tuple[tuple[str, bool | int | float | str], ...] = ()
    #: Where :attr:`system` is loaded from: "" for a preset (``system`` is its name), else the
    #: absolute path of the system file ``system`` names inside the data folder.
    system_file: str = ""
    #: The CSV file (name inside the data folder) and 1-based data row the case was read from
    #: (the row count of ``stage validate``); "" and 0 for a case built by hand.
    file: str = ""
    line: int = 0
    #: Figures of the loaded system the row states differently (``(field, value)``; fields of
    #: :data:`~stage_explore.validation.setup_systems.SYSTEM_OVERRIDES`): set by an inferred
    #: setup, :attr:`system` names the result.
    system_overrides: tuple[tuple[str, float], ...] = ()
    #: A ``peak_mem_gib`` row's kind of peak (:mod:`stage_explore.validation.memory_kind`).
    memory_kind: str = "process"
    #: Whether that figure is pipeline rank 0's (the row names rank 0's figure), not the
    #: largest over the pipeline ranks (:func:`~stage_explore.validation.memory_kind.
    #: memory_rank0`).
    memory_rank0: bool = False

    @property
    def system_source(self) -> str:
        """What :func:`~stage_explore.system.load_system` takes for this case's system (before
        :attr:`system_overrides`;
        :func:`~stage_explore.validation.setup_systems.case_system` applies them)."""
        return self.system_file or self.system_base

    @property
    def system_base(self) -> str:
        """:attr:`system` without the overrides' suffix (``h100-80gb`` of
        ``h100-80gb+scale_out=6.25GB/s``)."""
        return self.system.split("+", 1)[0] if self.system_overrides else self.system

    @property
    def backend_key(self) -> str:
        """The framework name, with the row's options: ``megatron-core+moe_comm_overlap=true``
        (:func:`parse_backend_key` reads it back)."""
        options = ",".join(f"{k}={str(v).lower()}" for k, v in self.framework_options)
        return f"{self.framework}+{options}" if options else self.framework


def parse_backend_key(key: str) -> tuple[str, dict[str, bool | int | float | str]]:
    """``(framework, options)`` of a :attr:`Case.backend_key`."""
    framework, _, text = key.partition("+")
    options: dict[str, bool | int | float | str] = {}
    for item in filter(None, text.split(",")):
        name, _, raw = item.partition("=")
        value: bool | int | float | str = raw
        if raw in ("true", "false"):
            value = raw == "true"
        elif raw.lstrip("-").isdigit():
            value = int(raw)
        else:
            try:  # a number option's float (``moe_load_imbalance=1.2``), else the text
                value = float(raw)
            except ValueError:
                pass
        options[name] = value
    return framework, options


def _assumptions(table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    items = table.get("assumptions", [])
    if not isinstance(items, list) or not all(
        isinstance(a, dict) and set(a) == {"what", "why"} for a in items
    ):
        raise ConfigError(f"{where}: `assumptions` must be a list of {{what, why}} tables")
    return tuple(f"{a['what']} ({a['why']})" for a in items)


def _options(table: Mapping[str, Any], where: str) -> dict[str, bool | int | float | str]:
    """A table's ``framework_options`` (option = value), checked."""
    options = table.get("framework_options", {})
    if not isinstance(options, dict) or not all(
        isinstance(v, bool | int | float | str) for v in options.values()
    ):
        raise ConfigError(
            f"{where}: `framework_options` must be a table of option = value, but got {options!r}"
        )
    return dict(options)


def _source(name: str, table: Mapping[str, Any]) -> SourceSetup:
    where = f"setups.toml [sources.{name}]"
    unknown = sorted(set(table) - _SOURCE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {sorted(_SOURCE_KEYS)}")
    if table.get("metric") not in METRICS:
        raise ConfigError(
            f"{where}: `metric` must be one of {METRICS}, got {table.get('metric')!r}"
        )
    if table["metric"] == "tflops_per_gpu" and table.get("flops") not in FLOP_CONVENTIONS:
        raise ConfigError(f"{where}: tflops_per_gpu needs `flops` in {FLOP_CONVENTIONS}")
    try:
        return SourceSetup(
            name=name,
            title=str(table["title"]),
            file=str(table["file"]),
            id_prefix=str(table["id_prefix"]),
            metric=str(table["metric"]),
            system=str(table["system"]),
            framework=str(table["framework"]),
            precision=str(table["precision"]),
            model_base=str(table["model_base"]),
            in_sample=bool(table["in_sample"]),
            in_sample_why=str(table.get("in_sample_why", "")),
            flops=str(table.get("flops", "")),
            group_by=str(table.get("group_by", "")),
            metric_scale=float(table.get("metric_scale", 1.0)),
            columns=dict(table.get("columns", {})),
            model=dict(table.get("model", {})),
            parallel=dict(table.get("parallel", {})),
            assumptions=_assumptions(table, where),
            framework_options=_options(table, where),
        )
    except KeyError as error:
        raise ConfigError(f"{where}: missing key {error.args[0]!r}") from None


def load_setups(path: Path | None = None) -> tuple[list[SourceSetup], dict[str, dict[str, Any]]]:
    """The sources (in file order) and the per-row tables of ``setups.toml``."""
    source_tables, rows = read_setup_tables(path or data_dir() / "setups.toml")
    sources = [_source(name, table) for name, table in source_tables.items()]
    for row_id, table in rows.items():
        unknown = sorted(set(table) - _ROW_KEYS)
        if unknown:
            raise ConfigError(f"setups.toml [rows.{row_id!r}]: unknown key {unknown[0]!r}")
    return sources, rows


#: Columns no text can stand for (a row's layout and the dims no flavor answers for another
#: model); ``ffn`` and ``kv_heads`` may say ``1536 per expert`` or ``MLA``.
STRICT_COLUMNS = (*LAYOUT_COLUMNS, *STRICT_DIM_COLUMNS)
_EMPTY_CELLS = ("", *DASHES, "n/a")


def _check_integer_cells(row: dict[str, str]) -> None:
    """A stated :data:`STRICT_COLUMNS` cell that is not an integer is a ConfigError naming
    the row and the column (not a silent default;
    :func:`~stage_explore.validation.csv_cells.integer_cells`)."""
    try:
        integer_cells(row, STRICT_COLUMNS, _EMPTY_CELLS)
    except IntegerCellError as bad:
        raise ConfigError(f"{row['id']}: the {bad.column} cell {bad.cell!r} {bad.what}") from None


def _merge(
    stated: dict[str, Any], setup: Mapping[str, Any], where: str, fields: str
) -> dict[str, Any]:
    """``stated`` (from the CSV) filled with ``setup``; a contradiction is a ConfigError."""
    merged = dict(stated)
    for key, value in setup.items():
        if key in merged and merged[key] != value:
            raise ConfigError(
                f"{where}: setups.toml gives {fields} {key}={value!r} but the CSV states "
                f"{merged[key]!r}; a setup may only fill what the source leaves empty"
            )
        merged[key] = value
    return merged


def _model_fields(
    source: SourceSetup, row: dict[str, str], extra: Mapping[str, Any]
) -> dict[str, Any]:
    stated = {k: v for k in MODEL_COLUMNS if (v := int_cell(row.get(k, ""))) is not None}
    fields = _merge(stated, {**source.model, **extra}, row["id"], "model")
    per_hidden = fields.pop("ffn_per_hidden", None)
    if per_hidden is not None and "ffn" not in fields:
        fields["ffn"] = int(per_hidden) * int(fields["hidden"])
    return fields


def _model(base_name: str, row: dict[str, str], fields: dict[str, Any]) -> ModelSpec:
    base = get_flavor(base_name)
    seq_len = int(fields.get("seq_len", base.seq_len))
    fields.setdefault("max_position", max(base.max_position, seq_len))
    name = row.get("model", "").strip() or (
        f"GPT-{row['params']}B" if row.get("params") else row["id"]
    )
    return base.with_overrides(name=name, **fields)


def _parallel_fields(
    source: SourceSetup, row: dict[str, str], extra: Mapping[str, Any], layers: int
) -> dict[str, Any]:
    """The parallel fields of ``row``: its CSV cells, a recompute cell's framework reading
    (torchtitan's 'selective layer', fms-fsdp's stated fraction of its ``layers`` blocks), then
    the setup's fields, which may only fill what the CSV leaves empty."""
    stated: dict[str, Any] = {}
    for column, name in PARALLEL_COLUMNS.items():
        value = int_cell(row.get(column, ""))
        if value is not None:
            stated[name] = value
    sp = first_word(row.get("sp", ""))
    if sp:
        if sp not in (*YES, *NO):
            raise ConfigError(
                f"{row['id']}: the sp cell {row['sp']!r} must start with yes or no (or true/false)"
            )
        stated["sp"] = sp in YES
    recompute = first_word(row.get("recompute", ""))
    if recompute:
        stated["recompute"] = recompute
    layer_ac = layer_ac_fields(source.framework, row.get("recompute", ""), row_text(row))
    stated.update(layer_ac[0] if layer_ac else {})  # torchtitan's 'selective layer': full, every n
    fms_ac = fms_ac_fields(source.framework, row.get("recompute", ""), layers)
    stated.update(fms_ac[0] if fms_ac else {})  # fms-fsdp's stated p (spread) or k (every)
    fields = _merge(stated, {**source.parallel, **extra}, row["id"], "parallel")
    unknown = sorted(set(fields) - _PARALLEL_FIELDS)
    if unknown:
        raise ConfigError(
            f"{row['id']}: setups.toml gives unknown parallel field {unknown[0]!r}; known: "
            f"{sorted(_PARALLEL_FIELDS)}"
        )
    value = fields.get("recompute", Recompute.NONE.value)
    if value not in {member.value for member in Recompute}:
        raise ConfigError(
            f"{row['id']}: recompute {value!r} must be one of "
            f"{[member.value for member in Recompute]}"
        )
    return fields


def _parallel(row: dict[str, str], fields: dict[str, Any], precision: str) -> ParallelConfig:
    for required in ("micro_batch", "global_batch"):
        if required not in fields:
            raise ConfigError(f"{row['id']}: `{required}` is neither in the CSV nor in setups.toml")
    fields["recompute"] = Recompute(fields.get("recompute", "none"))
    vpp = int(fields.get("vpp", 1))
    named = fields.get("schedule")  # a schedule an inferred row names (infer_schedule.py)
    default = Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B
    fields["schedule"] = Schedule(named) if named else default
    return ParallelConfig(precision=Precision(precision), **fields)


def _renamed(source: SourceSetup, raw: dict[str, str], line: int) -> dict[str, str]:
    if not source.columns:
        return raw
    row = {name: raw.get(column, "") for name, column in source.columns.items()}
    row["id"] = f"{source.id_prefix}{line}"
    return row


def numbered_rows(source: SourceSetup, folder: Path) -> list[tuple[int, dict[str, str]]]:
    """The rows of ``source`` (its file, filtered by id prefix, columns renamed), each with its
    1-based data row in the file; a row of the source with more cells than the header is a
    one-line :class:`ConfigError` (:func:`~stage_explore.validation.csv_cells.ragged_reason`:
    its cells would be read shifted)."""
    rows = []
    for line, cells in enumerate(read_csv(folder / source.file), start=1):
        row = _renamed(source, cells, line)
        if not (row.get("id") or "").startswith(source.id_prefix):
            continue
        ragged = ragged_reason(cells)
        if ragged:
            raise ConfigError(f"{source.file}: row {line} ({row['id']}): {ragged}")
        rows.append((line, row))
    return rows


def source_rows(source: SourceSetup, folder: Path) -> list[dict[str, str]]:
    """The rows of ``source`` (its file, filtered by id prefix, columns renamed)."""
    return [row for _, row in numbered_rows(source, folder)]


def _corrected(
    row: dict[str, str], row_setup: Mapping[str, Any]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """``row`` with the cells a row's ``csv_corrections`` replace (``{column = {value = …, why =
    "…"}}``: only where the source contradicts itself, each correction reported as an
    assumption naming the published value), and those assumptions."""
    corrections = row_setup.get("csv_corrections", {})
    where = f"setups.toml [rows.{row['id']!r}]"
    if not isinstance(corrections, dict):
        raise ConfigError(f"{where}: `csv_corrections` must be a table, but got {corrections!r}")
    fixed, notes = dict(row), []
    for column, entry in corrections.items():
        if column not in row or not isinstance(entry, dict) or set(entry) != {"value", "why"}:
            raise ConfigError(
                f"{where}: csv_corrections.{column} must correct a CSV column with "
                f'{{ value = …, why = "…" }}, but got {entry!r}'
            )
        fixed[column] = str(entry["value"])
        notes.append(
            f"{column} {entry['value']} instead of the published {row[column]!r} "
            f"(correction: {entry['why']})"
        )
    return fixed, tuple(notes)


def make_case(source: SourceSetup, row: dict[str, str], row_setup: Mapping[str, Any]) -> Case:
    """The :class:`Case` of one CSV row (``reason`` set when it cannot be built)."""
    row, corrections = _corrected(row, row_setup)
    in_sample = bool(row_setup.get("in_sample", source.in_sample))
    options = {
        **source.framework_options,
        **_options(row_setup, f"setups.toml [rows.{row['id']!r}]"),
    }
    why = str(row_setup.get("in_sample_why", source.in_sample_why)) if in_sample else ""
    measured_cell = row.get(source.metric, "").strip()
    case = Case(
        id=row["id"],
        source=source.name,
        metric=source.metric,
        measured=measured_value(measured_cell, row["id"], source.metric) * source.metric_scale
        if measured_cell
        else float("nan"),
        system=source.system,
        framework=str(row_setup.get("framework", source.framework)),
        in_sample=in_sample,
        in_sample_why=why,
        assumptions=source.assumptions
        + corrections
        + _assumptions(row_setup, f"[rows.{row['id']!r}]"),
        group=row.get(source.group_by, "") if source.group_by else "",
        flops=source.flops,
        framework_options=tuple(sorted(options.items())),
        memory_kind=memory_kind(row) if source.metric == "peak_mem_gib" else "process",
        memory_rank0=source.metric == "peak_mem_gib" and memory_rank0(row),
    )
    if not measured_cell:
        return replace(case, reason=f"the source gives no {source.metric}")
    if not case.measured > 0:  # an error relative to 0 or a negative figure means nothing
        return replace(
            case, reason=f"the {source.metric} cell {measured_cell!r} is not a positive number"
        )
    if "not_evaluated" in row_setup:
        return replace(case, reason=str(row_setup["not_evaluated"]))
    base_name = str(row_setup.get("model_base", source.model_base))
    get_flavor(base_name)  # an unknown flavor is an error in setups.toml, not a row's reason
    precision = str(row_setup.get("precision", source.precision)).strip().lower()
    if precision not in {member.value for member in Precision}:
        raise ConfigError(
            f"setups.toml: {row['id']}'s precision {precision!r} must be one of "
            f"{[member.value for member in Precision]} (the FP8 recipe goes in "
            "[parallel] fp8_recipe)"
        )
    _check_integer_cells(row)
    model_fields = _model_fields(source, row, row_setup.get("model", {}))
    layers = int(model_fields.get("layers", get_flavor(base_name).layers))
    parallel_fields = _parallel_fields(source, row, row_setup.get("parallel", {}), layers)
    names = {"gpus": "GPUs (num_gpus)", "seq_len": "seq_len", "global_batch": "global batch"}
    try:
        # an absurd size (e.g. 10^8 layers) is refused before any work, as `stage eval` does:
        # the model's layer list alone would take minutes to build
        check_sizes(
            {key: int_cell(str(model_fields.get(key, ""))) for key in ("layers", "seq_len")},
            names=names,
        )
        model = _model(base_name, row, model_fields)
        parallel = _parallel(row, parallel_fields, precision)
        check_sizes(
            {
                "gpus": parallel.pp * parallel.dp * parallel.cp * parallel.tp,
                "global_batch": parallel.global_batch,
            },
            names=names,
        )
    except ConfigError as error:
        return replace(case, reason=f"the generator cannot express it: {error}")
    stated = parallel_fields.get("zero")  # ZeRO-2/3 over one rank is held as 0 (s30 review3)
    if isinstance(stated, int) and stated >= 2 and parallel.zero == 0:
        case = replace(case, assumptions=(*case.assumptions, unsharded_zero_note(stated)))
    if source.group_by:
        gpus = parallel.dp * parallel.tp * parallel.pp * parallel.cp
        case = replace(case, group=f"{model.name} on {gpus} GPUs")
    return replace(case, model=model, parallel=parallel)


def system_file(source: SourceSetup, folder: Path) -> str:
    """The absolute path of the system file a source names (a ``.toml`` path relative to the
    data folder, e.g. ``systems/grand-teton-h100.toml``), or "" when it names a preset; a
    missing file is a :class:`ConfigError`."""
    if not source.system.endswith(".toml"):
        return ""
    path = (folder / source.system).resolve()
    if not path.is_file():
        raise ConfigError(
            f"setups.toml [sources.{source.name}]: system file {source.system!r} not found in "
            f"{str(folder)!r}; expected a preset name or a .toml file of the data folder"
        )
    return str(path)


def configured_cases(
    folder: Path, sources: list[SourceSetup], rows: Mapping[str, dict[str, Any]]
) -> list[Case]:
    """Every published row of every configured source, in ``setups.toml`` order; a row's
    :class:`ConfigError` names its CSV file."""
    cases = []
    for source in sources:
        where = system_file(source, folder)
        for line, row in numbered_rows(source, folder):
            try:
                case = make_case(source, row, rows.get(row["id"], {}))
            except ConfigError as error:
                raise ConfigError(f"{source.file}: {error}") from None
            case = replace(case, file=source.file, line=line)
            cases.append(replace(case, system_file=where) if where else case)
    return cases


def load_cases(folder: Path | None = None, setups: Path | None = None) -> list[Case]:
    """Every published row of the folder: those of every source in ``setups.toml`` (in its
    order), then the rows no source claims with their inferred setups
    (:mod:`~stage_explore.validation.infer`; every row without ``setups.toml``)."""
    from stage_explore.validation.infer import inferred_cases

    folder = folder or data_dir()
    path = setups or folder / "setups.toml"
    sources, rows = load_setups(path) if setups or path.is_file() else ([], {})
    return configured_cases(folder, sources, rows) + inferred_cases(folder, sources)[0]
