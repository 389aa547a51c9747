"""What a user's runs CSV leaves unsaid, or says in a form ``stage calibrate`` does not read
(s27 review: a spreadsheet's export fed to the fit as a user writes it).

Contents:
    :func:`header_problem`
        a header that is one column holding semicolons or tabs (a CSV exported with another
        separator), or that writes a column the fit reads with a unit beside its name
        (``iter_time_s [s]``, ``seq_len (tokens)``): the fit found no measured column, or took
        the model's own sequence length without a word but the ``columns not read`` note.
    :func:`empty_cell_reason`
        a run whose measured cells, ``micro_batch`` or ``global_batch_seqs`` are empty: said in
        the fit's own words (the validation reader's "neither in the CSV nor in setups.toml"
        named a file a fit does not read, and "the source gives no …" a source it has not).
    :func:`derived_dp`, :func:`derived_dps`
        an empty ``dp`` derived from the run's ``num_gpus`` as ``num_gpus / (tp·pp·cp)``, as
        ``stage validate --data`` derives it (JSON ``dp_from_num_gpus``).
    :func:`layout_defaults`, :func:`layout_notes`
        runs whose ``tp``, ``pp`` or ``dp`` cell is empty (or whose file has no such column),
        ``dp`` not derived: each is taken as 1, ``ParallelConfig``'s default. An empty ``dp``
        fitted a 64-GPU run as a 2-GPU one, 327 % off in-sample, with no word (its
        ``num_gpus`` 64 a column not read); the runs and the GPUs they are fitted on are now a
        ``note:`` line (JSON ``layout_defaults``).
    :func:`sp_defaults`, :func:`sp_note`
        runs with tensor parallelism (``tp`` > 1) whose ``sp`` cell is empty or absent: fitted
        without sequence parallelism (``ParallelConfig``'s default, Megatron's
        ``--sequence-parallel`` off) where most tensor-parallel runs since 2022 ran with it; said
        in a ``note:`` line (JSON ``sp_defaults``), as it was not (s28 review).
    :func:`recompute_defaults`, :func:`recompute_note`
        runs whose ``recompute`` cell is empty or absent: fitted with the recompute the
        framework's reading gives (``none`` for a plain layout), without a word until s37
        review10, where an empty ``sp`` had a note since s28 (JSON ``recompute_defaults``).
    :func:`unsharded_zero_notes`
        runs whose ``zero`` cell is 2 or 3 at dp·cp = 1, fitted as ZeRO-0 (as PyTorch FSDP and
        DeepSpeed run them, :func:`stage_core.parallel.unsharded_zero`): a ``note:`` line
        naming them (s30 review3), as ``stage eval`` says it for ``--zero``.
    :func:`base_sizes_reason`
        a run whose ``model`` cell names a model ``stage validate --data`` refuses (``Phi-3
        medium``, a params_b naming another size) and whose row states none of ``layers``,
        ``hidden``, ``heads``: was fitted as ``--model-base``'s own sizes (megatron-gpt-1.7b for
        a 14B model), now not fitted, with the reason (s28 review).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from stage_core.parallel import unsharded_zero_note
from stage_explore.validation.csv_cells import int_cell, read_csv
from stage_explore.wording import counted, first_named

#: The measured columns a fit reads, in the order a run's first filled one is taken.
MEASURED = ("iter_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu")
#: The layout columns that set a run's GPUs (``cp`` too, rarely left to its default of 1 by
#: mistake: a run without context parallelism leaves it empty).
GPU_COLUMNS = ("tp", "pp", "dp")
#: A unit written after a column's name: ``iter_time_s [s]``, ``seq_len (tokens)``,
#: ``tokens_per_s_per_gpu {tok/s}``.
_UNIT = re.compile(r"^(?P<name>[^\[\](){}]+?)\s*[\[({][^\[\](){}]*[\])}]\s*$")


def header_problem(file: str, header: Sequence[str], read: frozenset[str]) -> str:
    """Why ``header`` (a runs CSV's column names, ``file`` naming it) cannot be read as the fit
    expects, "" when it can: one column holding ``;`` or tabs (another separator), or a column
    in ``read`` (the columns a fit reads) written with a unit after its name."""
    if len(header) == 1 and (sep := next((s for s in (";", "\t") if s in header[0]), "")):
        shown = header[0] if len(header[0]) <= 40 else header[0][:37] + "..."
        name = "semicolons" if sep == ";" else "tabs"
        return (
            f"{file!r} is not comma-separated: its header is one column {shown!r}, its names "
            f"separated by {name}; expected the columns separated by commas (save the sheet as "
            "CSV with the comma as separator)"
        )
    for column in header:
        found = _UNIT.match(column.strip())
        name = found.group("name").strip().lower() if found else ""
        if name in read and name not in header:
            return (
                f"{file!r}: column {column!r} is {name} with a unit beside its name; expected "
                f"the header {name} alone (each column's unit is fixed by its name: "
                "docs/validation.md, 'stage calibrate')"
            )
    return ""


def measured_hint(header: Sequence[str]) -> str:
    """For a header without a measured column: `` (column 'iter_time (s)' looks like
    iter_time_s: …)`` naming the first column whose name (a unit beside it dropped) is close to
    one of :data:`MEASURED`, else ""."""
    for column in header:
        found = _UNIT.match(column.strip())
        name = (found.group("name") if found else column).strip().lower()
        close = difflib.get_close_matches(name, MEASURED, n=1, cutoff=0.7)
        if close:
            return (
                f" (column {column!r} looks like {close[0]}: the header is the name alone, "
                "in the unit the name says)"
            )
    return ""


def empty_cell_reason(row: Mapping[str, str], measured: Sequence[str]) -> str:
    """Why a run cannot be fitted for want of a cell, "" when none is missing: no measured cell
    filled (of ``measured``, the measured columns the file has), or an empty ``micro_batch`` /
    ``global_batch_seqs`` (the layout's other cells have defaults; these two have none)."""
    if not any(row.get(column, "").strip() for column in measured):
        cells = "cell is" if len(measured) == 1 else "cells are"
        return f"no measured value: the {_listed(measured)} {cells} empty"
    wanted = {
        "micro_batch": "the micro-batch size in sequences",
        "global_batch_seqs": "the global batch in sequences",
    }
    for column, what in wanted.items():
        if not row.get(column, "").strip():
            where = "cell is empty" if column in row else "column is missing"
            return f"the {column} {where}; expected {what} (a whole number)"
    return ""


def derived_dp(row: Mapping[str, str]) -> int | None:
    """A run's ``dp`` from its ``num_gpus`` when its ``dp`` cell is empty and ``tp·pp·cp``
    (each 1 when empty) divides ``num_gpus`` (as ``stage validate --data`` derives it for a row
    without a setup), else None."""
    if int_cell(row.get("dp") or "") is not None:
        return None
    gpus = int_cell(row.get("num_gpus") or "")
    degrees = [int_cell(row.get(c) or "") or 1 for c in ("tp", "pp", "cp")]
    per_replica = degrees[0] * degrees[1] * degrees[2]
    if gpus is None or gpus <= 0 or per_replica <= 0 or gpus % per_replica:
        return None
    return gpus // per_replica


def layout_defaults(path: Path) -> dict[str, tuple[str, ...]]:
    """The runs of the runs CSV at ``path`` (by id, ``run-N`` for an empty one, as
    :func:`~stage_explore.calibrate.user_cases` names them) whose :data:`GPU_COLUMNS` cells are
    empty or absent, each with those columns: the fit takes each as 1 (``dp`` not when
    :func:`derived_dp` derives it from ``num_gpus``)."""
    found = {}
    for i, row in enumerate(read_csv(path)):
        empty = tuple(
            c
            for c in GPU_COLUMNS
            if not str(row.get(c) or "").strip() and (c != "dp" or derived_dp(row) is None)
        )
        if empty:
            found[row.get("id") or f"run-{i + 1}"] = empty
    return found


def derived_dps(path: Path) -> dict[str, int]:
    """:func:`derived_dp` of every run of the runs CSV at ``path`` that has one, by run id."""
    found = {}
    for i, row in enumerate(read_csv(path)):
        if (dp := derived_dp(row)) is not None:
            found[row.get("id") or f"run-{i + 1}"] = dp
    return found


def _listed(names: Sequence[str]) -> str:
    """``tp``, ``tp and dp``, ``tp, pp and dp``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def layout_notes(defaults: Mapping[str, tuple[str, ...]], gpus: Mapping[str, int]) -> list[str]:
    """One ``note:`` line per set of empty columns (:func:`layout_defaults`), naming at most
    five runs and the GPUs each is then fitted on (``gpus``, by run id, where it was built)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for run_id, columns in defaults.items():
        groups.setdefault(columns, []).append(run_id)
    notes = []
    for columns, ids in groups.items():
        shown = [f"{i} on {counted(gpus[i], 'GPU')}" if i in gpus else i for i in ids]
        notes.append(
            f"note: {_listed(columns)} empty, taken as 1 (the layout's default): fitted as "
            f"{first_named(shown)} (tp·pp·dp·cp); give each run's layout if it ran on more"
        )
    return notes


def sp_defaults(path: Path) -> list[str]:
    """The runs of the runs CSV at ``path`` (by id, as :func:`layout_defaults` names them) with
    ``tp`` > 1 and an empty or absent ``sp`` cell: the fit runs them without sequence
    parallelism."""
    found = []
    for i, row in enumerate(read_csv(path)):
        tp = int_cell(str(row.get("tp") or ""))
        if tp is not None and tp > 1 and not str(row.get("sp") or "").strip():
            found.append(row.get("id") or f"run-{i + 1}")
    return found


def recompute_defaults(path: Path, held: Mapping[str, str]) -> dict[str, str]:
    """The runs of the runs CSV at ``path`` (by id, as :func:`sp_defaults` names them) whose
    ``recompute`` cell is empty or absent, each with the recompute it is fitted with
    (``held``: each built run's ``recompute``, by id)."""
    found = {}
    for i, row in enumerate(read_csv(path)):
        run_id = row.get("id") or f"run-{i + 1}"
        if not str(row.get("recompute") or "").strip() and run_id in held:
            found[run_id] = held[run_id]
    return found


def recompute_note(runs: Mapping[str, str]) -> list[str]:
    """The ``note:`` lines for :func:`recompute_defaults`' runs, one per recompute taken."""
    by_value: dict[str, list[str]] = {}
    for run_id, value in runs.items():
        by_value.setdefault(value, []).append(run_id)
    return [
        f"note: recompute empty on {counted(len(ids), 'run')}, taken as {value}: "
        f"{first_named(ids)}; write none, selective or full for each run as it ran"
        for value, ids in sorted(by_value.items())
    ]


def unsharded_zero_notes(path: Path, held: Mapping[str, int]) -> list[str]:
    """One ``note:`` line per ZeRO stage of the runs CSV at ``path`` whose runs hold ZeRO-0
    though their ``zero`` cell says 2 or 3 (``held``: each built run's ``zero``, by id; the
    ids as :func:`sp_defaults` names them)."""
    runs: dict[int, list[str]] = {}
    for i, row in enumerate(read_csv(path)):
        run_id = row.get("id") or f"run-{i + 1}"
        zero = int_cell(str(row.get("zero") or ""))
        if zero is not None and zero >= 2 and held.get(run_id) == 0:
            runs.setdefault(zero, []).append(run_id)
    return [
        f"note: {first_named(ids)}: {unsharded_zero_note(zero)}"
        for zero, ids in sorted(runs.items())
    ]


def sp_note(runs: Sequence[str]) -> str:
    """The ``note:`` line for :func:`sp_defaults`' runs (at most five named), "" for none."""
    if not runs:
        return ""
    return (
        f"note: sp empty on {counted(len(runs), 'run')} with tp > 1, taken as no (sequence "
        f"parallelism off, the layout's default): {first_named(list(runs))}; write yes for a "
        "run that ran with --sequence-parallel"
    )


#: The dims without any of which ``--model-base``'s own sizes would stand in for a run's model.
BASE_DIMS = ("layers", "hidden", "heads")


def base_sizes_reason(row: Mapping[str, str], refused: str, model_base: str) -> str:
    """Why a run whose non-empty ``model`` cell the reading refused (``refused``: its reason)
    is not fitted when the row states none of :data:`BASE_DIMS`: ``model_base``'s own sizes
    would be fitted for another model; "" when the cell is empty (``--model-base`` is then the
    run's model, as documented) or the row states a dim."""
    cell = str(row.get("model") or "").strip()
    if not cell or any(str(row.get(d) or "").strip() for d in BASE_DIMS):
        return ""
    return (
        f"{refused}; the row states none of {', '.join(BASE_DIMS)}, so --model-base "
        f"{model_base}'s own sizes would stand in for {cell!r}: give the row's dims, or name a "
        "flavor (stage eval --model lists close names)"
    )
