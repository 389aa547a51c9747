"""The explorer's engine: propose with Optuna, evaluate on workers, tell, record.

Contents:
    :mod:`.driver`     :class:`Explorer`, :func:`explore`.
    :mod:`.progress`   :class:`Progress`, :class:`StudySummary`.
    :mod:`.samplers`   grid, random, TPE and NSGA-II proposals over an in-memory Optuna study.
    :mod:`.executors`  :class:`LocalExecutor` (process pool) and :class:`RayExecutor`.
    :mod:`.connect`    :func:`connect_ray`: joining a Ray cluster (bounded wait) or a local one.
    :mod:`.retry`      :class:`RetryingExecutor`, :class:`RetryPolicy`: infrastructure failures.
    :mod:`.worker`     :func:`evaluate_chunk`, what runs in a worker.
    :mod:`.outcomes`   judging evaluations; what Optuna is told (values, constraints).
    :mod:`.backends`   :func:`register_backend`, :func:`resolve_backend`.
    :mod:`.design`     :func:`build_design_point`, :func:`replace_path`.
"""

from __future__ import annotations

from stage_explore.search.backends import (
    BUILTIN_BACKENDS,
    create_backend,
    register_backend,
    resolve_backend,
)
from stage_explore.search.design import build_design_point, replace_path
from stage_explore.search.driver import Explorer, explore
from stage_explore.search.executors import (
    BaseExecutor,
    LocalExecutor,
    RayExecutor,
    create_executor,
)
from stage_explore.search.progress import Progress, StudySummary
from stage_explore.search.retry import RetryingExecutor, RetryPolicy
from stage_explore.search.worker import Candidate, EvaluationJob, evaluate_chunk

__all__ = [
    "BUILTIN_BACKENDS",
    "BaseExecutor",
    "Candidate",
    "EvaluationJob",
    "Explorer",
    "LocalExecutor",
    "Progress",
    "RayExecutor",
    "RetryPolicy",
    "RetryingExecutor",
    "StudySummary",
    "build_design_point",
    "create_backend",
    "create_executor",
    "evaluate_chunk",
    "explore",
    "register_backend",
    "replace_path",
    "resolve_backend",
]
