"""Trial records: one flat, versioned Parquet schema, written atomically part by part.

Contents:
    :data:`RECORDS_VERSION`, :data:`BREAKDOWN_COMPONENTS`
        the schema version and the fixed breakdown columns.
    :class:`TrialStatus`, :class:`Outcome`
        what became of a trial (ok / infeasible / failed) and its flattened metrics.
    :func:`flatten_evaluation`
        an :class:`~stage_explore.evaluation.Evaluation` → metric columns.
    :func:`records_schema`, :func:`make_row`
        the Arrow schema of a study's records and one row of it.
    :class:`RecordWriter`
        buffers rows and writes ``part-NNNNN.parquet`` files (temp file + rename).
    :func:`read_records`, :func:`load_results`, :func:`count_records`
        read a study's records back (Arrow table / pandas DataFrame / number of rows).
    :func:`write_json_atomic`, :func:`read_study_meta`
        the study definition ``_study.json``, written atomically and read back strictly.
    :func:`make_folder`, :func:`storage_error`
        a study folder created, and a failed write, as one-line errors naming the path.

Failures of the file system (read-only folder, full disk, a file where a folder should be)
become one-line :class:`~stage_core.errors.ConfigError` messages naming the path; a part is
either whole or absent, so a failed write never damages what was recorded before it.

Layout: ``<out>/<study>/part-00000.parquet …`` plus ``_study.json`` (the study definition) and,
for a two-stage study, ``_refined/part-*.parquet`` (:mod:`stage_explore.search.refine`); the
underscores and the dot of temporary files make Parquet readers of the folder skip them, so
``pandas.read_parquet("<out>/<study>")`` works too, one row per trial.
Columns, in order: ``trial study status reason backend``; the parameters ``num_gpus dp tp pp
cp ep sp zero recompute schedule vpp micro_batch pp_split dp_shard recompute_num_layers
recompute_method precision fp8_recipe`` and one ``hw_*`` column per searched hardware parameter;
the metrics ``feasible step_time_s mfu hfu tokens_per_s_per_gpu peak_memory_bytes
memory_capacity_bytes model_flops_per_step hardware_flops_per_step cost_per_step
cost_per_million_tokens``, ``breakdown_<component>`` for the fixed components,
``breakdown_other`` (the rest, summed), ``breakdown_json`` and ``extra_json`` (lossless maps);
the timings ``eval_s finished_at worker``. FLOP counts are float64 (they overflow int64).
Inference studies record their serving knobs instead of the training ones (``num_gpus tp pp dp
ep batch chunk kv_precision precision prefill_instances prefill_tp prefill_dp prefill_ep
arrival_rate two_batch_overlap decode_instances``) and the serving metrics after the common ones
(``time_to_first_token_s time_per_output_token_s tokens_per_s requests_per_s
capacity_requests_per_s running_sequences max_running_sequences prefill_wait_s
prefill_utilization kv_cache_bytes weight_bytes memory_bound_fraction``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_explore.evaluation import Evaluation
from stage_explore.wording import counted

if TYPE_CHECKING:
    import pandas as pd

    from stage_explore.study.spec import SearchSpace

RECORDS_VERSION = 1
VERSION_KEY = b"stage.records_version"

#: Breakdown components that get a column of their own; any other component (a backend's
#: ``other`` included) adds up in ``breakdown_other``.
BREAKDOWN_COMPONENTS: tuple[str, ...] = (
    "compute",
    "exposed_all_reduce",
    "exposed_all_gather",
    "exposed_reduce_scatter",
    "exposed_all_to_all",
    "exposed_p2p",
    "exposed_gradient_sync",
    "parameter_gather",
    "pipeline_bubble",
    "recompute",
    "optimizer",
    "idle",
)

_PART = re.compile(r"^part-(\d{5,})\.parquet$")

#: Training knobs whose record columns came after the first records (3-5 Dec 2026): a part without
#: one ran the knob's default (:func:`with_later_knobs`).
LATER_KNOBS: tuple[str, ...] = (
    "pp_split",
    "dp_shard",
    "recompute_num_layers",
    "recompute_method",
    "precision",
    "fp8_recipe",
)

_META = [
    ("trial", pa.int64()),
    ("study", pa.string()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("backend", pa.string()),
]
_PARAMS = [
    ("num_gpus", pa.int64()),
    ("dp", pa.int64()),
    ("tp", pa.int64()),
    ("pp", pa.int64()),
    ("cp", pa.int64()),
    ("ep", pa.int64()),
    ("sp", pa.bool_()),
    ("zero", pa.int64()),
    ("recompute", pa.string()),
    ("schedule", pa.string()),
    ("vpp", pa.int64()),
    ("micro_batch", pa.int64()),
    ("pp_split", pa.string()),
    ("dp_shard", pa.int64()),
    ("recompute_num_layers", pa.int64()),
    ("recompute_method", pa.string()),
    ("precision", pa.string()),
    ("fp8_recipe", pa.string()),
]
_METRICS = [
    ("feasible", pa.bool_()),
    ("step_time_s", pa.float64()),
    ("mfu", pa.float64()),
    ("hfu", pa.float64()),
    ("tokens_per_s_per_gpu", pa.float64()),
    ("peak_memory_bytes", pa.int64()),
    ("memory_capacity_bytes", pa.int64()),
    ("model_flops_per_step", pa.float64()),
    ("hardware_flops_per_step", pa.float64()),
    ("cost_per_step", pa.float64()),
    ("cost_per_million_tokens", pa.float64()),
]
#: Inference studies: their parameters (``decode_instances`` derived) and serving metrics
#: (:data:`stage_explore.analytical.serving_design.SERVING_METRICS`, from ``extra``).
_SERVING_PARAMS = [
    ("num_gpus", pa.int64()),
    ("tp", pa.int64()),
    ("pp", pa.int64()),
    ("dp", pa.int64()),
    ("ep", pa.int64()),
    ("batch", pa.int64()),
    ("chunk", pa.int64()),
    ("kv_precision", pa.string()),
    ("precision", pa.string()),
    ("prefill_instances", pa.int64()),
    ("prefill_tp", pa.int64()),
    ("prefill_dp", pa.int64()),
    ("prefill_ep", pa.int64()),
    ("arrival_rate", pa.float64()),
    ("two_batch_overlap", pa.bool_()),
    ("decode_instances", pa.int64()),
]
_SERVING_METRICS = [
    ("time_to_first_token_s", pa.float64()),
    ("time_per_output_token_s", pa.float64()),
    ("tokens_per_s", pa.float64()),
    ("requests_per_s", pa.float64()),
    ("capacity_requests_per_s", pa.float64()),
    ("running_sequences", pa.float64()),
    ("max_running_sequences", pa.int64()),
    ("prefill_wait_s", pa.float64()),
    ("prefill_utilization", pa.float64()),
    ("kv_cache_bytes", pa.int64()),
    ("weight_bytes", pa.int64()),
    ("memory_bound_fraction", pa.float64()),
]
_BREAKDOWN = [(f"breakdown_{name}", pa.float64()) for name in BREAKDOWN_COMPONENTS] + [
    ("breakdown_other", pa.float64()),
    ("breakdown_json", pa.string()),
    ("extra_json", pa.string()),
]
_TIMINGS = [
    ("eval_s", pa.float64()),
    ("finished_at", pa.timestamp("us", tz="UTC")),
    ("worker", pa.string()),
]

#: The study definition written beside the parts.
STUDY_FILE = "_study.json"

#: Names of the metric columns (what :func:`flatten_evaluation` fills).
METRIC_COLUMNS: tuple[str, ...] = tuple(
    name for name, _ in _METRICS + _BREAKDOWN + _SERVING_METRICS + [("decode_instances", None)]
)


class TrialStatus(StrEnum):
    """What became of a trial.

    ``ok``, ``infeasible`` and ``failed`` (the backend raised) are final. An
    ``infrastructure_failed`` trial lost its evaluation to the machinery (a node or worker died,
    a Ray task was lost, ASTRA-sim was killed by a signal) after its retries: ``--resume``
    evaluates it again, and the new row of the same trial number supersedes it.
    """

    OK = "ok"
    INFEASIBLE = "infeasible"
    FAILED = "failed"
    INFRASTRUCTURE_FAILED = "infrastructure_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """A finished trial: status, why (for infeasible and failed), metric columns, timings."""

    status: TrialStatus
    reason: str = ""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    backend: str = ""
    eval_s: float = 0.0
    worker: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "status": str(self.status),
            "reason": self.reason,
            "metrics": dict(self.metrics),
            "backend": self.backend,
            "eval_s": self.eval_s,
            "worker": self.worker,
        }


def flatten_evaluation(evaluation: Evaluation) -> dict[str, Any]:
    """The metric columns of one evaluation (breakdown spread over the fixed columns)."""
    row: dict[str, Any] = {name: getattr(evaluation, name) for name, _ in _METRICS}
    row["feasible"] = bool(evaluation.feasible)
    breakdown = {str(key): float(value) for key, value in evaluation.breakdown.items()}
    for name in BREAKDOWN_COMPONENTS:
        row[f"breakdown_{name}"] = breakdown.get(name)
    other = [value for key, value in breakdown.items() if key not in BREAKDOWN_COMPONENTS]
    row["breakdown_other"] = math.fsum(other) if other else None
    row["breakdown_json"] = json.dumps(breakdown, sort_keys=True)
    row["extra_json"] = json.dumps(dict(evaluation.extra), sort_keys=True, default=str)
    for name in ("model_flops_per_step", "hardware_flops_per_step"):
        row[name] = float(row[name])
    if "time_per_output_token_s" in evaluation.extra:  # a serving evaluation
        for name, _ in [*_SERVING_METRICS, ("decode_instances", None)]:
            row[name] = evaluation.extra.get(name)
    return row


def _arrow_type(values: Sequence[Any]) -> pa.DataType:
    if all(isinstance(value, bool) for value in values):
        return pa.bool_()
    if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return pa.int64()
    if all(isinstance(value, int | float) and not isinstance(value, bool) for value in values):
        return pa.float64()
    return pa.string()


def records_schema(study_name: str, space: SearchSpace) -> pa.Schema:
    """The Arrow schema of a study's records (the hardware columns come from its space)."""
    hardware = [(param.column, _arrow_type(param.values)) for param in space.hardware]
    if space.serving:
        fields = _META + _SERVING_PARAMS + _METRICS + _SERVING_METRICS + _BREAKDOWN + _TIMINGS
    else:
        fields = _META + _PARAMS + hardware + _METRICS + _BREAKDOWN + _TIMINGS
    metadata = {VERSION_KEY: str(RECORDS_VERSION).encode(), b"stage.study": study_name.encode()}
    return pa.schema(fields, metadata=metadata)


def make_row(
    *,
    trial: int,
    study: str,
    params: Mapping[str, Any],
    dp: int,
    outcome: Outcome,
    finished_at: datetime,
) -> dict[str, Any]:
    """One record: trial number, parameters (with the derived ``dp``) and the outcome."""
    row: dict[str, Any] = {
        "trial": trial,
        "study": study,
        "status": str(outcome.status),
        "reason": outcome.reason,
        "backend": outcome.backend,
    }
    row.update(params)
    row["dp"] = dp
    row["feasible"] = False
    row.update(outcome.metrics)
    row.update(eval_s=outcome.eval_s, finished_at=finished_at, worker=outcome.worker)
    return row


def storage_error(path: Path, error: OSError, what: str) -> ConfigError:
    """A one-line error for a failed write of ``what`` at ``path`` (keeps the OS reason)."""
    reason = error.strerror or str(error)
    if error.errno == errno.ENOSPC:
        reason += " (the disk is full)"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason += " (expected a writable folder)"
    elif error.errno in (errno.ENOTDIR, errno.EEXIST):
        reason += " (expected a folder, a file is in the way)"
    return ConfigError(f"{path}: cannot write {what}: {reason}")


def _discard(temporary: Path) -> None:
    """Remove a temporary file a failed write left behind, if the folder still allows it."""
    try:
        temporary.unlink(missing_ok=True)
    except OSError:
        pass


def make_folder(directory: Path, what: str = "trial records") -> None:
    """``mkdir -p directory``; a :class:`ConfigError` naming it when that is impossible."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise storage_error(directory, error, what) from None


def write_text_atomic(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it and a rename, so that a
    reader (or a kill mid-write) sees the old file or the new one, never half of one.

    Raises :class:`ConfigError` naming ``path`` and ``what`` it was to hold when the folder
    cannot be written; the file that was there before (if any) is left as it was.
    """
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        _discard(temporary)
        raise storage_error(path, error, what) from None


def write_json_atomic(path: Path, content: Mapping[str, Any]) -> None:
    """Write ``content`` as JSON to ``path`` atomically (:func:`write_text_atomic`)."""
    text = json.dumps(content, indent=2, sort_keys=True) + "\n"
    write_text_atomic(path, text, "the study definition")


def read_study_meta(directory: Path) -> dict[str, Any] | None:
    """The study definition recorded in ``directory`` (``None`` if there is none).

    A truncated or otherwise unreadable ``_study.json`` is a :class:`ConfigError` that says
    the records beside it are untouched and how to go on.
    """
    path = directory / STUDY_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the study definition ({error})") from None
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        content = error
    if not isinstance(content, dict) or not isinstance(content.get("fingerprint", {}), dict):
        problem = content if isinstance(content, json.JSONDecodeError) else "not a JSON object"
        raise ConfigError(
            f"{path}: corrupt study definition ({problem}); expected the JSON that stage "
            "explore writes. The trial records beside it are not affected: delete the file to "
            "resume from the records alone (stage report also takes --objectives instead)"
        )
    return content


def part_files(directory: Path) -> list[Path]:
    """The part files of a study folder, in order."""
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.iterdir() if _PART.match(path.name))


def _part_number(path: Path) -> int:
    match = _PART.match(path.name)
    assert match is not None, "part_files() lists only part files"
    return int(match.group(1))


class RecordWriter:
    """Buffers rows and writes them as numbered Parquet parts, each atomically.

    A part is first written as ``.part-NNNNN.parquet.tmp`` and then renamed, so a reader (or a
    resumed study) never sees half a part; leftover ``.tmp`` files of a crash are removed.
    """

    def __init__(self, directory: Path, schema: pa.Schema) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for leftover in directory.glob(".*.tmp"):
                leftover.unlink()
        except OSError as error:
            raise storage_error(directory, error, "trial records") from None
        self._directory = directory
        self._schema = schema
        parts = part_files(directory)
        self._next_part = _part_number(parts[-1]) + 1 if parts else 0
        self._rows: list[dict[str, Any]] = []

    @property
    def pending(self) -> int:
        """Rows buffered and not yet written."""
        return len(self._rows)

    def append(self, row: Mapping[str, Any]) -> None:
        """Buffer one row."""
        self._rows.append(dict(row))

    def flush(self) -> Path | None:
        """Write the buffered rows as the next part; ``None`` if there were none.

        When the write fails (full disk, folder made read-only) the temporary file is removed,
        the rows stay buffered and a :class:`ConfigError` says how many trials the earlier
        parts hold; those parts are not touched.
        """
        if not self._rows:
            return None
        table = pa.Table.from_pylist(self._rows, schema=self._schema)
        path = self._directory / f"part-{self._next_part:05d}.parquet"
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            with open(temporary, "wb") as handle:
                pq.write_table(table, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except OSError as error:
            _discard(temporary)
            kept = count_records(self._directory)
            raise ConfigError(
                f"{storage_error(path, error, 'trial records')}; the {counted(kept, 'trial')} "
                f"recorded before are intact in {self._directory} (free the space or fix the "
                "folder, then continue with --resume)"
            ) from None
        self._next_part += 1
        self._rows = []
        return path


def _unreadable(path: Path, error: Exception) -> ConfigError:
    """The one-line error of a part that cannot be read (truncated, copied half-way: a part
    STAGE writes is renamed into place whole), with what the user can do about it."""
    return ConfigError(
        f"{path}: not a readable Parquet part ({error}); the study's other parts are not "
        f"affected: move this file out of {path.parent} to read them, and --resume continues "
        "without its trials"
    )


def _read_part(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as error:
        raise _unreadable(path, error) from None
    metadata = table.schema.metadata or {}
    version = int(metadata.get(VERSION_KEY, b"0"))
    if not 1 <= version <= RECORDS_VERSION:
        raise ConfigError(
            f"{path}: records version {version} is not supported (expected 1 to {RECORDS_VERSION})"
        )
    return with_later_knobs(table)


def with_later_knobs(table: pa.Table) -> pa.Table:
    """A training study's part with every :data:`LATER_KNOBS` column, a part written before
    the knob existed given the value it ran (:data:`~stage_explore.study.space.KNOB_DEFAULTS`)
    in its schema position; a missing column made ``--resume`` fail with a ``KeyError`` and
    ``load_results`` show nulls (s23 review). Inference parts (no ``recompute``) as they are."""
    from stage_explore.study.space import KNOB_DEFAULTS

    names = table.column_names
    if "recompute" not in names or all(name in names for name in LATER_KNOBS):
        return table
    types = dict(_PARAMS)
    order = [name for name, _ in _PARAMS]
    for name in LATER_KNOBS:
        if name in table.column_names:
            continue
        before = [n for n in order[: order.index(name)] if n in table.column_names]
        values = pa.array([KNOB_DEFAULTS[name]] * table.num_rows, types[name])
        index = table.column_names.index(before[-1]) + 1
        table = table.add_column(index, pa.field(name, types[name]), values)
    return table


def count_records(directory: Path, *, final: bool = False) -> int:
    """The number of trials recorded in a study folder (0 if none), each trial number once.

    With ``final``, trials whose latest row is ``infrastructure_failed`` (``--resume`` runs
    them again) are left out. Only the ``trial`` and ``status`` columns are read.
    """
    last: dict[int, str] = {}
    for path in part_files(directory):
        try:
            table = pq.read_table(path, columns=["trial", "status"])
        except (OSError, pa.ArrowInvalid) as error:
            raise _unreadable(path, error) from None
        trials, statuses = table.column("trial").to_pylist(), table.column("status").to_pylist()
        last.update(zip(trials, statuses, strict=True))
    if not final:
        return len(last)
    lost = str(TrialStatus.INFRASTRUCTURE_FAILED)
    return sum(1 for status in last.values() if status != lost)


def read_records(directory: Path) -> pa.Table | None:
    """All records of one study folder as one Arrow table (``None`` if it has no parts)."""
    parts = part_files(directory)
    if not parts:
        return None
    table = pa.concat_tables([_read_part(path) for path in parts], promote_options="default")
    return _latest_per_trial(table)


def _latest_per_trial(table: pa.Table) -> pa.Table:
    """One row per trial number: a trial re-run on resume (it had failed for infrastructure
    reasons) is recorded again under its number, and the later row, in part order, wins."""
    trials = table.column("trial").to_pylist()
    if len(set(trials)) == len(trials):
        return table
    last = {trial: index for index, trial in enumerate(trials)}
    return table.take(sorted(last.values()))


def load_results(directory: str | Path) -> pd.DataFrame:
    """Load a study's records as a pandas DataFrame, one row per trial, sorted by ``trial``.

    ``directory`` is a study folder (``<out>/<study>``) or an output folder holding several
    studies (their rows are concatenated; the ``study`` column tells them apart). Points a
    two-stage study re-evaluated carry the second backend's numbers as ``refined_*`` columns.
    """
    expect(directory, (str, os.PathLike), "directory", "a study's records folder")
    root = Path(directory)
    folders = (
        [root]
        if part_files(root)
        else sorted(path for path in root.iterdir() if path.is_dir() and part_files(path))
        if root.is_dir()
        else []
    )
    if not folders:
        expected = "expected a study's records folder (OUT/<study>) or an OUT folder of several"
        state = (
            "no trial records (part-*.parquet) found" if root.is_dir()
            else "a file, not a folder" if root.exists()
            else "no such folder"
        )  # fmt: skip
        raise ConfigError(f"{root}: {state}; {expected}")
    import pandas as pd  # noqa: F811 - imported here: the CLI starts faster without it

    from stage_explore.search.refine import join_refined

    frames = []
    for folder in folders:
        table = read_records(folder)
        if table is not None:
            frames.append(join_refined(table.to_pandas(), folder))
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return frame.sort_values(["study", "trial"], kind="stable").reset_index(drop=True)
