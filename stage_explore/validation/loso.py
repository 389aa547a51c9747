"""The leave-one-source-out figure: each source predicted by a fit on the others.

For every source with evaluated time or throughput rows, the system's compute efficiency (the
GEMM efficiency of the training rows' precisions, or ``matmul_peak`` without a kernel model) and
HBM efficiency (:mod:`stage_explore.calibrate`; network efficiencies stay as the preset has
them, to keep the figure to minutes) are fitted, at most :data:`MAX_EVALUATIONS` objective
evaluations each, on all *other* sources' evaluated time and throughput rows on the same system
— in-sample and held-out alike — and the source's mean absolute error is measured with the
fitted system. A source on a system file of its own (``systems/<file>.toml``: its cluster's
links or memory differ from a preset's) is fitted on the other sources of the system sharing
its accelerator (the same ``accelerator.name``) that has the most rows, and measured on its own
system with the fitted accelerator efficiencies (:func:`~stage_explore.calibrate.apply`): only
the accelerator's constants travel, its own links stay (also an inferred row's preset with its
stated scale-out bandwidth, :func:`~stage_explore.validation.setup_systems.case_system`). It answers
"how well does a system calibrated elsewhere predict this source", the question a user with
another cluster asks. Memory rows are left out (no efficiency moves them). Rows with an
inferred setup (:mod:`~stage_explore.validation.infer`) are measured but never trained on.
The sources' fits are independent: ``jobs`` worker processes can run them at once
(:mod:`~stage_explore.validation.loso_jobs`, ``stage validate --loso --jobs N``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.calibrate import Fit, apply, default_parameters, fit, objective
from stage_explore.system.model import System
from stage_explore.validation.infer import is_inferred
from stage_explore.validation.run import BackendFactory, RowResult
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import Case

#: Objective evaluations per fit (each evaluates every training row once).
MAX_EVALUATIONS = 40


def _training_rows(
    mine: Sequence[Case], others: Sequence[Case], systems: dict[str, System]
) -> list[Case]:
    """The other sources' rows on ``mine``'s system, else on the system sharing its
    accelerator that has the most of them (ties: the first in data order)."""
    same = [c for c in others if c.system == mine[0].system]
    if same:
        return same
    for case in [mine[0], *others]:
        if case.system not in systems:
            systems[case.system] = case_system(case)
    accelerator = systems[mine[0].system].accelerator.name
    kin = [c for c in others if systems[c.system].accelerator.name == accelerator]
    if not kin:
        return []
    most = Counter(c.system for c in kin).most_common(1)[0][0]
    return [c for c in kin if c.system == most]


def _plan(
    source: str, timing: Sequence[Case], systems: dict[str, System]
) -> tuple[list[Case], list[Case], list[str]]:
    """``source``'s cases, the rows it trains on (none: nothing to fit on) and the parameters
    fitted; ``systems`` caches the loaded systems."""
    mine = [c for c in timing if c.source == source]
    if mine[0].system not in systems:
        systems[mine[0].system] = case_system(mine[0])
    others = [  # inferred setups are measured, never fitted on (their setups are guesses)
        c for c in timing if c.source != source and not is_inferred(c.source)
    ]
    train = _training_rows(mine, others, systems)
    if not train:
        return mine, train, []
    system = systems[train[0].system]
    # The test source's precisions too: a dtype with the train rows' peak shares their fit.
    dtypes = {str(c.parallel.precision) for c in [*train, *mine] if c.parallel is not None}
    names = [n for n in default_parameters(system, dtypes) if not n.startswith("network.")]
    return mine, train, names


def _key(train: Sequence[Case], names: Sequence[str]) -> tuple[object, ...]:
    """What a fit depends on: its system, parameters and training rows."""
    return (train[0].system, tuple(names), tuple((c.source, c.id, c.metric) for c in train))


def fit_key(source: str, timing: Sequence[Case], systems: dict[str, System]) -> tuple[object, ...]:
    """The fit ``source`` needs (no fitting done): sources with equal keys share one fit
    (inferred sources are never trained on, so every one on a system trains on the same rows);
    a source with nothing to fit on has a key of its own."""
    _, train, names = _plan(source, timing, systems)
    return _key(train, names) if train else (source,)


def fit_source(
    source: str,
    timing: Sequence[Case],
    systems: dict[str, System],
    fits: dict[tuple[object, ...], Fit],
    factory: BackendFactory | None,
    max_evaluations: int,
) -> dict[str, Any]:
    """One source's entry of the figure: its system's accelerator efficiencies fitted on the
    other sources' ``timing`` cases and its own cases measured with them. ``systems`` caches
    the loaded systems and ``fits`` the fits by :func:`fit_key` (one fit serves every source
    with the same training rows, system and parameters: Nelder–Mead is deterministic), so
    which sources were fitted before in the same process does not change the result."""
    mine, train, names = _plan(source, timing, systems)
    own = systems[mine[0].system]
    if not train:
        return {
            "reason": f"no other source on {mine[0].system} or on its accelerator "
            f"{own.accelerator.name} to fit on"
        }
    key = _key(train, names)
    if key not in fits:
        system = systems[train[0].system]
        fits[key] = fit(train, system, names, factory, max_evaluations=max_evaluations)
    fitted = fits[key]
    tested = fitted.system if train[0].system == mine[0].system else apply(own, fitted.values)
    mae, _ = objective(mine, tested, factory)
    return {
        "mae": mae,
        "rows": len(mine),
        "trained_on": sorted({c.source for c in train}),
        "trained_on_system": train[0].system,
        "train_rows": len(train),
        "train_mae": fitted.in_sample_mae,
        "fitted": fitted.values,
    }


def leave_one_source_out(
    results: Sequence[RowResult],
    factory: BackendFactory | None = None,
    max_evaluations: int = MAX_EVALUATIONS,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """``{source: {"mae", "rows", "trained_on", "trained_on_system", "fitted", "train_mae"}}``
    or ``{"reason"}``, in the sources' data order; ``progress`` is called with (sources done,
    sources, the source being fitted) before each source and with an empty name after the last
    (the figure takes most of an hour on the package's data). ``jobs`` > 1 fits that many
    groups of sources sharing a fit (:func:`fit_key`) at once in worker processes
    (:mod:`~stage_explore.validation.loso_jobs`; the same figure, float for float); the name
    given to ``progress`` is then the first source still being fitted and how many more are."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs must be an integer >= 1, but got {jobs!r}")
    timing = [r.case for r in results if r.evaluated and r.case.metric != "peak_mem_gib"]
    order = list(dict.fromkeys(c.source for c in timing))
    systems: dict[str, System] = {}
    if jobs > 1 and len(order) > 1:
        from stage_explore.validation.loso_jobs import fit_in_workers

        groups: dict[tuple[object, ...], list[str]] = {}
        for source in order:
            groups.setdefault(fit_key(source, timing, systems), []).append(source)
        found = fit_in_workers(
            order, list(groups.values()), timing, factory, max_evaluations, progress, jobs
        )
    else:
        fits: dict[tuple[object, ...], Fit] = {}
        found = {}
        for done, source in enumerate(order):
            if progress is not None:
                progress(done, len(order), source)
            found[source] = fit_source(source, timing, systems, fits, factory, max_evaluations)
    if progress is not None:
        progress(len(order), len(order), "")
    return {source: found[source] for source in order}
