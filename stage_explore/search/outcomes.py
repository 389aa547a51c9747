"""Judging evaluations and telling them to Optuna.

Contents:
    :func:`judge`
        an :class:`~stage_explore.evaluation.Evaluation` and the study's constraints → status
        and reason (ok, infeasible, or failed when an objective is missing).
    :class:`Verdict`, :func:`verdict`
        what Optuna is told for an outcome: the trial state, the objective values and the
        constraint values (> 0 violated): ``memory`` (relative excess of peak memory over the
        limit) and ``feasibility`` (1 for points infeasible for any other reason).
    :func:`outcome_from_row`
        an :class:`~stage_explore.records.Outcome` rebuilt from a stored record (resume).
    :func:`is_infrastructure_error`, :func:`task_failure_status`, :func:`is_final`
        which failures are the machinery's (a node or worker died, a Ray task was lost, an
        external simulator was killed by a signal) rather than the model's.

Only model outcomes are final: ``ok``, ``infeasible``, and ``failed`` (the backend raised, which
it would do again). An infrastructure failure is retried by the executor and, if it persists,
recorded as ``infrastructure_failed``, which ``--resume`` evaluates again.

Infeasible points keep their objective values when the backend computed them (an
out-of-memory point still has a step time), so the sampler learns from them; points without
values are told the worst value (±inf), which only ranks them last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from optuna.trial import TrialState

from stage_explore.evaluation import Evaluation
from stage_explore.records import METRIC_COLUMNS, Outcome, TrialStatus
from stage_explore.study.spec import Constraints, Direction, Objective

_GIB = float(1 << 30)


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _memory_limit(constraints: Constraints, metrics: Mapping[str, Any]) -> int | None:
    limits = [
        limit
        for limit in (constraints.max_memory_bytes, metrics.get("memory_capacity_bytes"))
        if isinstance(limit, int) and limit > 0
    ]
    return min(limits) if limits else None


def judge(
    evaluation: Evaluation,
    metrics: Mapping[str, Any],
    objectives: Sequence[Objective],
    constraints: Constraints,
) -> tuple[TrialStatus, str]:
    """The status of an evaluated point and why (empty reason when ok)."""
    if not evaluation.feasible:
        return (
            TrialStatus.INFEASIBLE,
            evaluation.reason or "the backend reports the point infeasible",
        )
    limit = constraints.max_memory_bytes
    if limit is not None and evaluation.peak_memory_bytes > limit:
        return TrialStatus.INFEASIBLE, (
            f"peak memory {evaluation.peak_memory_bytes / _GIB:.2f} GiB exceeds the constraint "
            f"max_memory_gib = {limit / _GIB:g}"
        )
    bounds = (
        ("time to first token", "time_to_first_token_s", "max_ttft_s", constraints.max_ttft_s),
        ("time per output token", "time_per_output_token_s", "max_tpot_s", constraints.max_tpot_s),
    )
    for label, column, key, bound in bounds:  # inference latency bounds
        value = metrics.get(column)
        if bound is not None and _finite(value) and value > bound:
            return TrialStatus.INFEASIBLE, (
                f"{label} {value:.4g} s exceeds the constraint {key} = {bound:g}"
            )
    for objective in objectives:
        if not _finite(metrics.get(objective.metric)):
            return TrialStatus.FAILED, (
                f"the backend returned no finite {objective.metric} "
                f"(got {metrics.get(objective.metric)!r})"
            )
    return TrialStatus.OK, ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What Optuna is told about one trial."""

    state: TrialState
    values: tuple[float, ...] | None
    constraints: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "state": self.state.name,
            "values": None if self.values is None else list(self.values),
            "constraints": dict(self.constraints),
        }


def verdict(outcome: Outcome, objectives: Sequence[Objective], constraints: Constraints) -> Verdict:
    """The Optuna state, values and constraints of an outcome (the same at tell and at resume)."""
    if not is_success(outcome.status):
        return Verdict(state=TrialState.FAIL, values=None, constraints={})
    values = []
    for objective in objectives:
        value = outcome.metrics.get(objective.metric)
        worst = math.inf if objective.direction is Direction.MIN else -math.inf
        values.append(float(value) if _finite(value) else worst)
    peak = outcome.metrics.get("peak_memory_bytes")
    limit = _memory_limit(constraints, outcome.metrics)
    memory = peak / limit - 1.0 if limit is not None and _finite(peak) else 0.0
    if outcome.status is TrialStatus.OK:
        return Verdict(
            state=TrialState.COMPLETE,
            values=tuple(values),
            constraints={"memory": min(memory, 0.0), "feasibility": 0.0},
        )
    return Verdict(
        state=TrialState.COMPLETE,
        values=tuple(values),
        constraints={"memory": memory, "feasibility": 0.0 if memory > 0 else 1.0},
    )


def outcome_from_row(row: Mapping[str, Any]) -> Outcome:
    """The outcome stored in one record (a dict of Python values, nulls as ``None``)."""
    metrics = {name: row[name] for name in METRIC_COLUMNS if name in row and row[name] is not None}
    return Outcome(
        status=TrialStatus(row["status"]),
        reason=row.get("reason") or "",
        metrics=metrics,
        backend=row.get("backend") or "",
        eval_s=float(row.get("eval_s") or 0.0),
        worker=row.get("worker") or "",
    )


def is_success(status: TrialStatus) -> bool:
    """Whether the point was evaluated (feasible or not), as opposed to an evaluation failure."""
    return status in (TrialStatus.OK, TrialStatus.INFEASIBLE)


def is_final(status: TrialStatus) -> bool:
    """Whether an outcome stands (a model outcome), or the point must be evaluated again."""
    return status is not TrialStatus.INFRASTRUCTURE_FAILED


def is_infrastructure_error(error: BaseException) -> bool:
    """Whether an exception raised while evaluating says the machinery failed, not the model.

    A backend marks such an error with a true ``infrastructure`` attribute (the ASTRA-sim backend
    does when its run was killed by SIGKILL, SIGTERM, SIGINT or SIGHUP, for example by the
    out-of-memory killer); ``MemoryError`` counts too (this host ran out, another may not).
    """
    return bool(getattr(error, "infrastructure", False)) or isinstance(error, MemoryError)


#: Ray errors that are the task's own exception (deterministic, not worth a retry).
_RAY_TASK_ERRORS = frozenset({"RayTaskError", "TaskCancelledError"})


def task_failure_status(error: BaseException) -> TrialStatus:
    """The status of every candidate of a task that failed as a whole with ``error``.

    A dead worker process (``BrokenProcessPool``) and Ray's system errors (worker crashed, node
    died, object or owner lost, raylet or GCS unreachable …) are infrastructure failures; an
    exception raised by the task's own code (``RayTaskError``) or any other error is ``failed``.
    Ray is recognised by module name, so this module does not import it.
    """
    kind = type(error)
    names = {cls.__name__ for cls in kind.__mro__}
    if "BrokenProcessPool" in names:
        return TrialStatus.INFRASTRUCTURE_FAILED
    if kind.__module__.startswith("ray.") and not names & _RAY_TASK_ERRORS:
        return TrialStatus.INFRASTRUCTURE_FAILED
    if is_infrastructure_error(error):
        return TrialStatus.INFRASTRUCTURE_FAILED
    return TrialStatus.FAILED
