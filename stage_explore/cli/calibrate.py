"""``stage calibrate``: fit a system file's efficiency parameters to your measured runs.

``stage calibrate --runs RUNS.csv --system PRESET_OR_FILE [--fit NAME ...] [--framework NAME]
[--model-base FLAVOR] [--out FITTED.toml] [--json]`` reads a CSV of measured runs with the
columns of ``published_runs.csv`` (``docs/validation.md``: ``layers``, ``hidden``, ``ffn``,
``heads``, ``vocab``, ``seq_len``, ``global_batch_seqs``, ``micro_batch``, ``tp``, ``pp``,
``dp``, ``sp``, ``vpp``, ``recompute``, ``precision``, optional ``zero`` and ``model`` (a
flavor, or a model name read as ``stage validate --data`` reads it), and one measured metric
column: ``iter_time_s``, ``tflops_per_gpu`` or ``tokens_per_s_per_gpu``), fits the declared
parameters (:mod:`stage_explore.calibrate`; default: ``matmul_peak``, ``memory`` and every
network dim), prints the fitted values, the in-sample error and the leave-one-out error, and
writes the fitted system as TOML, named ``<system>-calibrated`` (what ``stage eval`` prints).
A run whose own columns disagree (two rates that cannot both hold, a global batch that is not a
whole number of micro-batches per data-parallel rank: :mod:`stage_explore.validation.consistency`)
is a ``warning:`` line before the fit (``data_warnings`` in ``--json``); it is still fitted.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stage_explore.wording import counted, first_named

if TYPE_CHECKING:
    from stage_explore.calibrate import ModelRead


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit a system's efficiency parameters to measured runs",
        description="Fit the declared efficiency parameters of a system to a CSV of measured "
        "runs; print the in-sample and leave-one-out error and write the fitted system file.",
    )
    parser.add_argument("--runs", type=Path, required=True, metavar="CSV", help="measured runs")
    parser.add_argument("--system", required=True, help="a preset name or a system TOML file")
    parser.add_argument(
        "--fit",
        nargs="+",
        default=None,
        metavar="NAME",
        help="parameters to fit (default: the GEMM efficiency of the runs' precisions, or "
        "matmul_peak, then memory and network.<each dim>)",
    )
    parser.add_argument("--framework", default=None, help="framework profile of the runs")
    parser.add_argument(
        "--model-base",
        default="megatron-gpt-1.7b",
        help="flavor giving the block structure when a row's `model` cell is empty or names "
        "no model stage validate --data reads (a flavor name, e.g. llama3-8b; a model name "
        "such as 'Llama 3.1 8B' goes in the `model` cell)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the fitted system here")
    parser.add_argument(
        "--no-loo", action="store_true", help="skip the leave-one-out error (one fit per run)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def _model_notes(reads: Mapping[str, ModelRead], model_base: str) -> list[str]:
    """One note per distinct reading of the model cells that name no flavor: what each was read
    as (``stage validate --data``'s reading), or that ``--model-base`` stands in, and why."""
    groups: dict[tuple[bool, str], list[str]] = {}
    for run_id, read in reads.items():
        groups.setdefault((read.on_base, read.note), []).append(run_id)
    notes = []
    for (on_base, note), ids in groups.items():
        if on_base:
            notes.append(
                f"note: {first_named(ids)}: {note}, so the blocks are {model_base}'s "
                "(--model-base) with the row's dims (a named model's row stating none is not "
                "fitted); name a flavor (stage eval --model lists close names) or a model stage "
                "validate --data reads"
            )
        else:
            notes.append(
                f"note: {first_named(ids)}: read as stage validate --data reads it: {note}"
            )
    return notes


def run(args: argparse.Namespace) -> int:
    from stage_core.errors import ConfigError
    from stage_core.models import get_flavor
    from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK
    from stage_explore.calibrate import (
        apply,
        current_values,
        default_parameters,
        fit,
        fit_warnings,
        leave_one_out,
        model_reads,
        objective,
        parameters_of,
        unread_columns,
        user_cases,
    )
    from stage_explore.calibrate_checks import (
        disagreement_warnings,
        gpu_warnings,
        inert_parameters,
        inert_warning,
        loo_skipped,
        marked_duplicate_ids,
    )
    from stage_explore.calibrate_rows import (
        derived_dps,
        layout_defaults,
        layout_notes,
        recompute_defaults,
        recompute_note,
        sp_defaults,
        sp_note,
        unsharded_zero_notes,
    )
    from stage_explore.calibrate_toml import calibrated_name, system_toml
    from stage_explore.cli.meter import StepMeter
    from stage_explore.cli.paths import writable_folder
    from stage_explore.records import write_text_atomic
    from stage_explore.system import load_system
    from stage_explore.validation.consistency import runs_warnings

    repeated = sorted({name for name in args.fit or [] if args.fit.count(name) > 1})
    if repeated:
        names_twice = ", ".join(repeated)
        raise ConfigError(f"--fit names {names_twice} more than once: name each parameter once")
    if args.out is not None:  # checked before the fit (minutes with leave-one-out), not after
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out}: expected the system file to write, got a folder")
        writable_folder(args.out.parent, "--out")
    try:  # checked before any run needs it (s22 review: a bad name passed unseen until then)
        get_flavor(args.model_base)
    except ConfigError as error:
        raise ConfigError(f"--model-base: {error} (expected a flavor name)") from None
    system = load_system(args.system)
    known = parameters_of(system)  # a misspelt name refused before the runs are read (s27)
    for name in args.fit or []:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"--fit: unknown fittable parameter {name!r} of {system.name}; {hint}expected "
                f"one of {', '.join(sorted(known))}"
            )
    framework = args.framework or DEFAULT_FRAMEWORK
    cases = marked_duplicate_ids(user_cases(args.runs, args.system, framework, args.model_base))
    dtypes = {str(c.parallel.precision) for c in cases if c.parallel is not None}
    names = args.fit or default_parameters(system, dtypes)
    skipped = {c.id: c.reason for c in cases if c.reason}
    read = [c for c in cases if not c.reason]
    # A run the backend refuses (tp not dividing the heads) is refused at any parameter values:
    # listed with its reason and left out, not silently dropped from the fit (nor left to make
    # a leave-one-out fit on the others fail).
    _, rows = objective(read, system)
    skipped.update({r.case.id: r.note for r in rows if not r.evaluated})
    usable = [r.case for r in rows if r.evaluated]
    if not usable:
        by_reason: dict[str, list[str]] = {}  # one reason of many runs said once
        for run_id, reason in skipped.items():
            by_reason.setdefault(reason, []).append(run_id)
        reasons = "; ".join(f"{first_named(ids)}: {reason}" for reason, ids in by_reason.items())
        raise ConfigError(f"no run of {str(args.runs)!r} can be evaluated: {reasons}")
    data_warnings = runs_warnings(args.runs, cases, system)
    run_warnings = [*gpu_warnings(args.runs, system), *disagreement_warnings(usable)]
    run_warnings += [  # a run that ran, yet does not fit the model's memory (s27 review)
        f"{r.case.id}: measured, yet the model predicts it cannot run on {system.name} "
        f"({r.note.removeprefix('predicted infeasible: ')}); its time is fitted all the same: "
        "check its setup (zero, recompute, --framework)"
        for r in rows
        if r.evaluated and not r.feasible
    ]
    if not args.json:  # a row whose own columns disagree: seen before minutes of fitting
        for slip in data_warnings:
            print(f"warning: {slip.text()}")
        for line in run_warnings:
            print(f"warning: {line}")
    unread = unread_columns(args.runs)
    if unread and not args.json:  # before the fit: a wrong setup is seen before minutes of it
        print(
            f"note: columns not read: {', '.join(unread)} (a fit reads the model and layout "
            "columns, sp, recompute, precision and zero; give ZeRO/FSDP as zero and the "
            "framework as --framework)"
        )
    defaults = layout_defaults(args.runs)  # an empty dp fitted a 64-GPU run on 2 GPUs
    derived = derived_dps(args.runs)
    no_sp = sp_defaults(args.runs)  # tp > 1 fitted without sequence parallelism (s28 review)
    recomputes = {c.id: str(c.parallel.recompute) for c in cases if c.parallel is not None}
    no_recompute = recompute_defaults(args.runs, recomputes)  # silent until s37 review10
    if not args.json:
        gpus = {c.id: c.parallel.world_size for c in cases if c.parallel is not None}
        for line in layout_notes(defaults, gpus):
            print(line)
        if no_sp:
            print(sp_note(no_sp))
        for line in recompute_note(no_recompute):
            print(line)
        held = {c.id: c.parallel.zero for c in cases if c.parallel is not None}
        for line in unsharded_zero_notes(args.runs, held):  # zero 2/3 at dp·cp = 1 (s30 review3)
            print(line)
        if derived:
            shown = first_named([f"{run_id} dp {dp}" for run_id, dp in derived.items()])
            print(f"note: dp empty, derived as num_gpus / (tp·pp·cp): {shown}")
    reads = model_reads(args.runs, framework, args.model_base)
    on_base = [run_id for run_id, read in reads.items() if read.on_base]
    if reads and not args.json:
        for line in _model_notes(reads, args.model_base):
            print(line)
    fitted = fit(usable, system, names)
    bounds = parameters_of(system)
    limits = {name: (bounds[name].lower, bounds[name].upper) for name in fitted.values}
    inert = inert_parameters(  # a parameter no run exercises was moved and written as fitted
        fitted.values, limits, lambda values: objective(usable, apply(system, values))[1]
    )
    kept = {name: current_values(system)[name] for name in inert}
    if inert:
        values = {**fitted.values, **kept}
        fitted = replace(fitted, values=values, system=apply(system, values))
    warnings = fit_warnings(fitted, system, len(usable))
    warnings += [inert_warning(name, kept[name], limits[name]) for name in inert]
    meter = StepMeter("leave-one-out", "fits")  # one fit per run: minutes on many runs
    loo = [] if args.no_loo or len(usable) < 2 else leave_one_out(usable, system, names,
                                                                   progress=meter)  # fmt: skip
    loo_errors = [abs(r.error) for r in loo if r.evaluated]
    loo_mae = sum(loo_errors) / len(loo_errors) if loo_errors else math.nan
    # one run, or one configuration measured twice: said, not left out in silence (s33 review6)
    no_loo = "" if args.no_loo else loo_skipped(usable, loo)
    why = f": {no_loo}" if no_loo else " (--no-loo)"
    if args.out is not None:
        header = [
            f"{system.name} calibrated by `stage calibrate` on {args.runs.name} "
            f"({counted(len(usable), 'run')}, framework {framework}).",
            "Fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in fitted.values.items()) + ".",
            f"In-sample mean |error| {fitted.in_sample_mae * 100:.2f} %; leave-one-out "
            + (f"{loo_mae * 100:.2f} %." if math.isfinite(loo_mae) else f"not computed{why}."),
            *(f"Warning: {warning}." for warning in warnings),
        ]
        text = system_toml(system, fitted, header, system_name=calibrated_name(system.name))
        write_text_atomic(args.out, text, "the calibrated system file")  # never half a file
    if args.json:
        print(json.dumps({
            "fitted": fitted.values,
            "in_sample_mae": fitted.in_sample_mae,
            "leave_one_out_mae": loo_mae if math.isfinite(loo_mae) else None,
            "leave_one_out": [r.to_dict() for r in loo],
            "leave_one_out_not_computed": no_loo or None,
            "runs": len(usable),
            "not_evaluated": skipped,
            "warnings": warnings,
            "data_warnings": [w.to_dict() for w in data_warnings],
            "run_warnings": run_warnings,
            "columns_not_read": unread,
            "layout_defaults": {run_id: list(cells) for run_id, cells in defaults.items()},
            "dp_from_num_gpus": derived,
            "sp_defaults": no_sp,
            "recompute_defaults": no_recompute,
            "runs_on_model_base": on_base,
            "models_read": {k: r.flavor for k, r in reads.items() if not r.on_base},
            "evaluations": fitted.evaluations,
            "out": None if args.out is None else str(args.out),
        }, indent=1))  # fmt: skip
        return 0
    for name, value in fitted.values.items():
        print(f"{name:<32} {value:.4g}")
    runs = counted(len(usable), "run")
    print(f"in-sample mean |error|: {fitted.in_sample_mae * 100:.2f} % over {runs}")
    if math.isfinite(loo_mae):
        print(f"leave-one-out mean |error|: {loo_mae * 100:.2f} %")
    elif no_loo:
        print(f"leave-one-out: not computed: {no_loo}")
    for run_id, reason in skipped.items():
        print(f"not evaluated: {run_id}: {reason}")
    for warning in warnings:
        print(f"warning: {warning}")
    if args.out is not None:
        print(f"fitted system written to {args.out}")
    return 0
