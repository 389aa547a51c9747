"""The leave-one-source-out figure: each source predicted by a fit on the others.

For every source with evaluated time or throughput rows, the system's compute efficiency (the
GEMM efficiency of the training rows' precisions, or ``matmul_peak`` without a kernel model) and
HBM efficiency (:mod:`stage_explore.calibrate`; network efficiencies stay as the preset has
them, to keep the figure to minutes) are fitted, at most :data:`MAX_EVALUATIONS` objective
evaluations each, on
all *other* sources' evaluated time and throughput rows on the same system preset — in-sample
and held-out alike — and the source's mean absolute error is measured with the fitted system.
It answers "how well does a system calibrated elsewhere predict this source", the question a
user with another cluster asks. Memory rows are left out (no efficiency moves them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stage_explore.calibrate import default_parameters, fit, objective
from stage_explore.system import load_system
from stage_explore.validation.run import BackendFactory, RowResult

#: Objective evaluations per fit (each evaluates every training row once).
MAX_EVALUATIONS = 40


def leave_one_source_out(
    results: Sequence[RowResult],
    factory: BackendFactory | None = None,
    max_evaluations: int = MAX_EVALUATIONS,
) -> dict[str, Any]:
    """``{source: {"mae", "rows", "trained_on", "fitted", "train_mae"}}`` or ``{"reason"}``."""
    timing = [r for r in results if r.evaluated and r.case.metric != "peak_mem_gib"]
    out: dict[str, Any] = {}
    for source in dict.fromkeys(r.case.source for r in timing):
        mine = [r.case for r in timing if r.case.source == source]
        system_name = mine[0].system
        train = [r.case for r in timing if r.case.source != source and r.case.system == system_name]
        if not train:
            out[source] = {"reason": f"no other source on {system_name} to fit on"}
            continue
        system = load_system(mine[0].system_source)
        # The test source's precisions too: a dtype with the train rows' peak shares their fit.
        dtypes = {str(c.parallel.precision) for c in [*train, *mine] if c.parallel is not None}
        names = [n for n in default_parameters(system, dtypes) if not n.startswith("network.")]
        fitted = fit(train, system, names, factory, max_evaluations=max_evaluations)
        mae, _ = objective(mine, fitted.system, factory)
        out[source] = {
            "mae": mae,
            "rows": len(mine),
            "trained_on": sorted({c.source for c in train}),
            "train_rows": len(train),
            "train_mae": fitted.in_sample_mae,
            "fitted": fitted.values,
        }
    return out
