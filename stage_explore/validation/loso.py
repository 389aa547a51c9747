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
stated scale-out bandwidth, :func:`~stage_explore.validation.setups.case_system`). It answers
"how well does a system calibrated elsewhere predict this source", the question a user with
another cluster asks. Memory rows are left out (no efficiency moves them). Rows with an
inferred setup (:mod:`~stage_explore.validation.infer`) are measured but never trained on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from stage_explore.calibrate import Fit, apply, default_parameters, fit, objective
from stage_explore.system.model import System
from stage_explore.validation.infer import is_inferred
from stage_explore.validation.run import BackendFactory, RowResult
from stage_explore.validation.setups import Case, case_system

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


def leave_one_source_out(
    results: Sequence[RowResult],
    factory: BackendFactory | None = None,
    max_evaluations: int = MAX_EVALUATIONS,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """``{source: {"mae", "rows", "trained_on", "trained_on_system", "fitted", "train_mae"}}``
    or ``{"reason"}``; ``progress`` is called with (sources done, sources, the source about
    to be fitted) before each source and with an empty name after the last (the figure takes
    most of an hour on the package's data)."""
    timing = [r for r in results if r.evaluated and r.case.metric != "peak_mem_gib"]
    systems: dict[str, System] = {}
    out: dict[str, Any] = {}
    # Inferred sources are never trained on, so every one on a system trains on the same rows
    # with the same parameters: one fit serves them all (Nelder-Mead is deterministic).
    fits: dict[tuple[object, ...], Fit] = {}
    order = list(dict.fromkeys(r.case.source for r in timing))
    for done, source in enumerate(order):
        if progress is not None:
            progress(done, len(order), source)
        mine = [r.case for r in timing if r.case.source == source]
        if mine[0].system not in systems:
            systems[mine[0].system] = case_system(mine[0])
        own = systems[mine[0].system]
        others = [  # inferred setups are measured, never fitted on (their setups are guesses)
            r.case for r in timing if r.case.source != source and not is_inferred(r.case.source)
        ]
        train = _training_rows(mine, others, systems)
        if not train:
            out[source] = {
                "reason": f"no other source on {mine[0].system} or on its accelerator "
                f"{own.accelerator.name} to fit on"
            }
            continue
        system = systems[train[0].system]
        # The test source's precisions too: a dtype with the train rows' peak shares their fit.
        dtypes = {str(c.parallel.precision) for c in [*train, *mine] if c.parallel is not None}
        names = [n for n in default_parameters(system, dtypes) if not n.startswith("network.")]
        key = (train[0].system, tuple(names), tuple((c.source, c.id, c.metric) for c in train))
        if key not in fits:
            fits[key] = fit(train, system, names, factory, max_evaluations=max_evaluations)
        fitted = fits[key]
        tested = fitted.system if train[0].system == mine[0].system else apply(own, fitted.values)
        mae, _ = objective(mine, tested, factory)
        out[source] = {
            "mae": mae,
            "rows": len(mine),
            "trained_on": sorted({c.source for c in train}),
            "trained_on_system": train[0].system,
            "train_rows": len(train),
            "train_mae": fitted.in_sample_mae,
            "fitted": fitted.values,
        }
    if progress is not None:
        progress(len(order), len(order), "")
    return out
