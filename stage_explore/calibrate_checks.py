"""What ``stage calibrate`` checks of its runs and its fit beyond the fit itself (s24 review).

Contents:
    :func:`setup_key`, :func:`setup_groups`
        runs of one configuration (the same model, layout, metric, framework and system): a
        configuration measured several times.
    :func:`marked_duplicate_ids`
        a run whose id an earlier run has is left out with the reason, as ``stage validate
        --data`` leaves it out (a run listed twice would count twice in the fit).
    :func:`disagreement_warnings`
        runs of one configuration whose measurements stand more than
        :data:`~stage_explore.validation.consistency.SLACK` apart: no parameter values fit both.
    :func:`gpu_warnings`
        runs whose ``gpu`` cell names another accelerator than the system being fitted (the fit
        itself reads no ``gpu``: an H100 run was fitted as an A100 one with only a note).
    :func:`inert_parameters`, :func:`inert_warning`
        fitted parameters that move no run's prediction from one bound to the other
        (``network.<dim>`` on runs that never use that dim): the simplex moved them anyway, and
        the written file changed the dim's efficiency on no evidence; they are kept at the
        system's values and named.
    :func:`loo_skipped`
        why a fit prints no leave-one-out error (one run, or every run one configuration): the
        line was left out without a word (s33 review6).

The leave-one-out error of :func:`~stage_explore.calibrate.leave_one_out` leaves out every run
of a configuration together: with a repeated configuration left in, the run "left out" was
predicted by a fit on its own twin, an in-sample figure under the leave-one-out name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from stage_explore.system import load_system
from stage_explore.system.model import System
from stage_explore.validation.consistency import SLACK
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer_fields import Uninferable
from stage_explore.validation.infer_system import infer_system
from stage_explore.validation.run import RowResult
from stage_explore.validation.setups import Case
from stage_explore.wording import counted


def setup_key(case: Case) -> tuple[object, ...]:
    """What makes two runs the same configuration (their ids and measurements aside)."""
    return (
        case.metric, case.framework, case.system, case.framework_options,
        repr(case.model), repr(case.parallel),
    )  # fmt: skip


def setup_groups(cases: Sequence[Case]) -> list[list[int]]:
    """Indices of ``cases`` grouped by :func:`setup_key`, in order of first appearance."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(setup_key(case), []).append(index)
    return list(groups.values())


def marked_duplicate_ids(cases: Sequence[Case]) -> list[Case]:
    """``cases`` with every run whose id an earlier run has given a reason (left out)."""
    first: dict[str, int] = {}
    out = []
    for index, case in enumerate(cases, start=1):
        if case.id in first and not case.reason:
            case = replace(
                case,
                reason=(
                    f"duplicate id {case.id!r}: row {first[case.id]} has it (a run listed twice "
                    "would count twice in the fit); give each row its own id"
                ),
            )
        first.setdefault(case.id, index)
        out.append(case)
    return out


def disagreement_warnings(cases: Sequence[Case]) -> list[str]:
    """One line per configuration measured more than once whose measurements stand more than
    ``SLACK`` apart (the largest over the smallest)."""
    warnings = []
    for group in setup_groups(cases):
        if len(group) < 2:
            continue
        runs = [cases[i] for i in group]
        low, high = min(c.measured for c in runs), max(c.measured for c in runs)
        if low > 0 and high / low > 1 + SLACK:
            ids = ", ".join(c.id for c in runs)
            values = ", ".join(f"{c.measured:g}" for c in runs)
            warnings.append(
                f"runs {ids} are one configuration measured {values} {runs[0].metric} "
                f"({high / low:.2f}x apart): no parameter values fit them all, the fit splits "
                "the difference; check what differs between them (a setting not in the CSV)"
            )
    return warnings


def gpu_warnings(path: Path, system: System) -> list[str]:
    """One line per run whose ``gpu`` cell reads as a preset of another accelerator than
    ``system``'s, or as no preset at all."""
    warnings = []
    for index, row in enumerate(read_csv(path), start=1):
        gpu = str(row.get("gpu") or "").strip()
        if not gpu:
            continue
        run = str(row.get("id") or "").strip() or f"run-{index}"
        try:
            preset = infer_system(gpu).value
        except Uninferable as error:
            warnings.append(
                f"{run}: {error}; it is fitted as {system.name}'s "
                f"{system.accelerator.name} all the same"
            )
            continue
        accelerator = load_system(preset).accelerator.name
        if accelerator != system.accelerator.name:
            warnings.append(
                f"{run}: gpu {gpu!r} is the {preset} preset's {accelerator}, but the runs are "
                f"fitted to {system.name}'s {system.accelerator.name}; fit each GPU's runs to "
                "its own --system"
            )
    return warnings


#: Relative change of a prediction below which a parameter is taken not to move it.
UNMOVED = 1e-9


def inert_parameters(
    values: dict[str, float],
    bounds: dict[str, tuple[float, float]],
    predict: Callable[[dict[str, float]], list[RowResult]],
) -> list[str]:
    """The names of ``values`` that move no evaluated run's prediction when set to either of
    their ``bounds`` (the others at their fitted values); ``predict`` evaluates the runs at
    given parameter values."""
    base = {r.case.id: r.predicted for r in predict(values) if r.evaluated}
    inert = []
    for name, (lower, upper) in bounds.items():
        moved = False
        for bound in (lower, upper):
            for row in predict({**values, name: bound}):
                before = base.get(row.case.id)
                if before is not None and row.evaluated:
                    if abs(row.predicted - before) > UNMOVED * abs(before):
                        moved = True
                        break
            if moved:
                break
        if not moved:
            inert.append(name)
    return inert


def inert_warning(name: str, kept: float, bounds: tuple[float, float]) -> str:
    """The line of a parameter of :func:`inert_parameters`, kept at the system's ``kept``."""
    return (
        f"{name} moves no run's prediction (from {bounds[0]:.4g} to {bounds[1]:.4g} every run "
        f"predicts the same: the runs do not exercise it), so it is not fitted: kept at the "
        f"system's {kept:.4g}; leave it out of --fit"
    )


def loo_skipped(cases: Sequence[Case], loo: Sequence[RowResult]) -> str:
    """Why the leave-one-out error of a fit on ``cases`` (its rows ``loo``, empty when it was
    not run) is not computed, "" when at least one run was predicted by a fit on the others:
    one run (none is left to fit without it), or every run one configuration (left out whole,
    :func:`setup_groups`, so no fit is left to predict it)."""
    if any(row.evaluated for row in loo):
        return ""
    if len(cases) < 2:
        return (
            f"{counted(len(cases), 'run')}; expected at least 2 runs of different configurations "
            "(each run is predicted by a fit on the others)"
        )
    if len(setup_groups(cases)) < 2:
        return (
            f"the {len(cases)} runs are one configuration, left out together (a fit on its "
            "twin would predict it in-sample); expected runs of at least 2 configurations"
        )
    reasons = sorted({row.note for row in loo if row.note})
    return "no fit without a run could predict it" + (f": {reasons[0]}" if reasons else "")
