"""Two-stage studies: a fast backend screens the space, a slow one re-evaluates the front.

With ``[backend] screen = "analytical"`` and ``name = "astra-sim"``, the search runs on the
screening backend; when it ends, the Pareto front of the study's objectives (feasible points)
is evaluated again with the named backend, on the same executor kind. Those records go to
``<out>/<study>/_refined/part-NNNNN.parquet`` with the screened trial's number, and
:func:`~stage_explore.records.load_results` shows them beside the screening numbers as
``refined_*`` columns, so both numbers are in one row. Points already refined (a resumed study)
are not evaluated again, unless their refinement was lost to an infrastructure failure (e.g.
ASTRA-sim killed by the out-of-memory killer) after its retries: those are evaluated again, and
the new row supersedes the old one.

The folder's leading underscore makes Parquet readers of the study folder skip it, as they skip
``_study.json`` (pyarrow's dataset discovery ignores names starting with ``_`` or ``.``), so
``pandas.read_parquet("<out>/<study>")`` reads the screening rows once each. Before s25 the folder
was ``refined``, which pyarrow walks into: 128 refined rows came back as a second row of their
trials (s25 review). :func:`refined_folder` still reads such a study, and its next run moves the
folder to the new name (:func:`move_legacy_refined`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from stage_explore.pareto import pareto_front
from stage_explore.records import (
    RecordWriter,
    TrialStatus,
    load_results,
    make_row,
    part_files,
    read_records,
    records_schema,
    storage_error,
)
from stage_explore.search.backends import BackendFactory
from stage_explore.search.executors import BaseExecutor
from stage_explore.search.outcomes import is_final
from stage_explore.search.progress import RefineProgress
from stage_explore.search.retry import RetryingExecutor, RetryPolicy
from stage_explore.search.worker import Candidate, EvaluationJob
from stage_explore.study.space import derive_dp
from stage_explore.study.spec import Direction, StudySpec

REFINED_FOLDER = "_refined"
#: The refined records' folder of studies recorded before s25 (read, and renamed on a run).
LEGACY_REFINED_FOLDER = "refined"
_POLL_S = 0.2


def refined_folder(directory: Path) -> Path:
    """The folder of study ``directory``'s refined records: :data:`REFINED_FOLDER`, or the
    :data:`LEGACY_REFINED_FOLDER` of a study recorded before s25 while it alone holds parts."""
    current = directory / REFINED_FOLDER
    legacy = directory / LEGACY_REFINED_FOLDER
    if not current.exists() and part_files(legacy):
        return legacy
    return current


def move_legacy_refined(directory: Path) -> None:
    """Rename a pre-s25 study's ``refined`` folder to :data:`REFINED_FOLDER` (a run holds the
    study's lock when it calls this), so Parquet readers of the study folder skip it."""
    legacy = refined_folder(directory)
    if legacy.name != LEGACY_REFINED_FOLDER:
        return
    try:
        legacy.rename(directory / REFINED_FOLDER)
    except OSError as error:
        raise storage_error(legacy, error, f"the refined records as {REFINED_FOLDER}/") from None


def _python(value: Any) -> Any:
    """A pandas/numpy scalar as the plain Python value a backend expects."""
    return value.item() if hasattr(value, "item") else value


def front_to_refine(spec: StudySpec, directory: Path, names: Sequence[str]) -> list[dict[str, Any]]:
    """The feasible Pareto front of the screening records, minus points already refined."""
    frame = load_results(directory)
    ok = frame[frame.status == str(TrialStatus.OK)]
    if ok.empty:
        return []
    objectives = {
        o.metric: ("max" if o.direction is Direction.MAX else "min") for o in spec.objectives
    }
    front = pareto_front(ok, objectives)
    done: set[int] = set()
    refined = read_records(refined_folder(directory))
    if refined is not None:
        trials = refined.column("trial").to_pylist()
        statuses = refined.column("status").to_pylist()
        done = {
            trial
            for trial, status in zip(trials, statuses, strict=True)
            if is_final(TrialStatus(status))
        }
    points = []
    for _, row in front.iterrows():
        trial = int(row["trial"])
        if trial in done:
            continue
        points.append({"trial": trial, "params": {name: _python(row[name]) for name in names}})
    return points


def refine(
    spec: StudySpec,
    directory: Path,
    names: Sequence[str],
    factory: BackendFactory,
    executor_factory: Callable[[EvaluationJob], BaseExecutor],
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[RefineProgress], None] | None = None,
) -> RefineProgress:
    """Re-evaluate the screened front with ``factory``; returns where that stands (``done``
    below ``total`` when ``should_stop`` ended it), also passed to ``on_progress`` when it
    starts and after each point."""
    move_legacy_refined(directory)
    points = front_to_refine(spec, directory, names)
    started = time.monotonic()
    counts = {"done": 0, "ok": 0, "failed": 0}

    def snapshot() -> RefineProgress:
        elapsed = time.monotonic() - started
        return RefineProgress(backend=spec.backend.name, total=len(points), elapsed_s=elapsed,
                              **counts)  # fmt: skip

    if not points:
        return snapshot()
    if on_progress is not None:
        on_progress(snapshot())
    job = EvaluationJob(
        study=spec, factory=factory, options=spec.backend.options, backend_name=spec.backend.name
    )
    executor = RetryingExecutor(executor_factory(job), RetryPolicy(retries=spec.executor.retries))
    writer = RecordWriter(refined_folder(directory), records_schema(spec.name, spec.space))
    by_key = {index: point for index, point in enumerate(points)}
    try:
        executor.submit([Candidate(key=k, params=p["params"]) for k, p in by_key.items()])
        remaining = len(by_key)
        while remaining and not should_stop():
            for key, outcome in executor.poll(_POLL_S):
                point = by_key[key]
                writer.append(
                    make_row(
                        trial=point["trial"],
                        study=spec.name,
                        params=point["params"],
                        dp=derive_dp(point["params"]),
                        outcome=outcome,
                        finished_at=datetime.now(UTC),
                    )
                )
                remaining -= 1
                counts["done"] += 1
                if outcome.status is TrialStatus.OK:
                    counts["ok"] += 1
                elif outcome.status is not TrialStatus.INFEASIBLE:
                    counts["failed"] += 1
                if on_progress is not None:
                    on_progress(snapshot())
            time.sleep(0)
    finally:
        writer.flush()
        if should_stop():
            executor.cancel()
        executor.close()
    return snapshot()


#: Columns of a refined record shown beside the screening row (with the ``refined_`` prefix).
REFINED_COLUMNS = (
    "status",
    "reason",
    "backend",
    "feasible",
    "step_time_s",
    "mfu",
    "hfu",
    "tokens_per_s_per_gpu",
    "peak_memory_bytes",
    "cost_per_step",
    "cost_per_million_tokens",
)


def join_refined(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """``frame`` (one study's records) with the refined numbers as ``refined_*`` columns."""
    refined_dir = refined_folder(folder)
    if not part_files(refined_dir):
        return frame
    table = read_records(refined_dir)
    assert table is not None
    refined = table.to_pandas()
    columns = [c for c in REFINED_COLUMNS if c in refined.columns]
    refined = refined[["trial", *columns]].drop_duplicates("trial", keep="last")
    refined = refined.rename(columns={c: f"refined_{c}" for c in columns})
    return frame.merge(refined, on="trial", how="left")
