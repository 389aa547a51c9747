"""What runs in a worker: evaluating a chunk of candidates with one backend instance.

Contents:
    :class:`Candidate`
        one trial's parameters and the driver's key for it.
    :class:`EvaluationJob`
        everything a worker needs besides the candidates (sent once per executor).
    :func:`evaluate_chunk`
        evaluate candidates one by one; each becomes an :class:`~stage_explore.records.Outcome`.
    :class:`GarbagePolicy`
        freezes what a worker's backend memoised into the garbage collector's permanent
        generation every :data:`FREEZE_EVERY` evaluations, and early on (when created, after
        the 1st, 2nd, 4th, … evaluation; also used by the speed benchmark).

Errors never escape: a ConfigError, ShardingError or InfeasibleError (the point is invalid
for this model or system) makes the trial infeasible with the error's message; an error that
says the machinery failed (:func:`~stage_explore.search.outcomes.is_infrastructure_error`, e.g.
ASTRA-sim killed by the out-of-memory killer) makes it ``infrastructure_failed`` (retried); any
other exception makes it failed with the exception's type and message.
"""

from __future__ import annotations

import gc
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stage_core.errors import ConfigError, InfeasibleError, ShardingError
from stage_core.parallel import unsharded_zero_note
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.records import Outcome, TrialStatus, flatten_evaluation
from stage_explore.search.backends import BackendFactory, create_backend
from stage_explore.search.design import build_design_point
from stage_explore.search.outcomes import is_infrastructure_error, judge
from stage_explore.study.spec import StudySpec

DesignPointBuilder = Callable[[StudySpec, Mapping[str, Any]], tuple[Any, Any, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One trial to evaluate: the driver's key and the parameters."""

    key: int
    params: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"key": self.key, "params": dict(self.params)}


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationJob:
    """The study and the backend factory with its options.

    ``backend_name`` is the name the study gives this backend: ``[backend] screen`` in a
    two-stage study's search, ``name`` when its front is refined (None: the backend the study
    searches with). A worker that cannot create the backend records each trial's failure
    under it; an evaluation is recorded under the name the backend reports."""

    study: StudySpec
    factory: BackendFactory
    options: Mapping[str, Any]
    backend_name: str | None = None

    @property
    def study_backend_name(self) -> str:
        """``backend_name``, or the study's searching backend when it is None."""
        if self.backend_name is not None:
            return self.backend_name
        return self.study.backend.search_name

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "study": self.study.name,
            "factory": repr(self.factory),
            "options": dict(self.options),
            "backend_name": self.study_backend_name,
        }


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _evaluate(
    backend: BaseBackend,
    builder: DesignPointBuilder,
    job: EvaluationJob,
    candidate: Candidate,
    worker: str,
    backend_name: str,
) -> Outcome:
    start = time.perf_counter()
    metrics: dict[str, Any] = {}
    try:
        model, parallel, system = builder(job.study, candidate.params)
        if job.study.workload.requests is not None:  # an inference study
            evaluation = _evaluate_serving(backend, model, parallel, system)
        else:
            evaluation = backend.evaluate(model, parallel, system)
    except InfeasibleError as error:
        status, reason, metrics = TrialStatus.INFEASIBLE, error.reason, {}
    except (ConfigError, ShardingError) as error:
        status, reason, metrics = TrialStatus.INFEASIBLE, " ".join(str(error).split()), {}
    except Exception as error:  # a failing evaluation is a failed trial, never a crashed study
        status = (
            TrialStatus.INFRASTRUCTURE_FAILED
            if is_infrastructure_error(error)
            else TrialStatus.FAILED
        )
        reason, metrics = _one_line(error), {}
    else:
        if isinstance(evaluation, Evaluation):
            metrics = flatten_evaluation(_noted(evaluation, candidate.params, parallel))
            status, reason = judge(evaluation, metrics, job.study.objectives, job.study.constraints)
            backend_name = evaluation.backend or backend_name
        else:
            status, reason, metrics = (
                TrialStatus.FAILED,
                f"the backend returned {type(evaluation).__name__}, expected an Evaluation",
                {},
            )
    return Outcome(
        status=status,
        reason=reason,
        metrics=metrics,
        backend=backend_name,
        eval_s=time.perf_counter() - start,
        worker=worker,
    )


def _noted(evaluation: Evaluation, params: Mapping[str, Any], parallel: Any) -> Evaluation:
    """``evaluation`` with the one-line note in its ``extra`` when the trial's ``zero`` ran as
    ZeRO-0 (:func:`~stage_core.parallel.unsharded_zero`: a study listing only ZeRO-2/3 keeps
    that value at ``dp·cp`` = 1, the canonical space's pin to its first listed value)."""
    zero = params.get("zero")
    if not isinstance(zero, int) or zero == getattr(parallel, "zero", zero):
        return evaluation
    return replace(evaluation, extra={**evaluation.extra, "note": unsharded_zero_note(zero)})


def _evaluate_serving(backend: BaseBackend, model: Any, design: Any, system: Any) -> Evaluation:
    """A serving design point, evaluated with the analytical serving model."""
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.analytical.serving_design import evaluate_design

    if not isinstance(backend, AnalyticalBackend):
        raise ConfigError(
            "inference studies are evaluated by the analytical backend, got "
            f"{type(backend).__name__}"
        )
    return evaluate_design(backend, model, design, system)


#: Backends of this worker process by (factory, options): a backend's memo (bound blocks,
#: timings) then serves every chunk the process evaluates instead of one chunk. Process-local by
#: design; the explorer's driver process never fills it.
_PROCESS_BACKENDS: dict[tuple[Any, str], BaseBackend] = {}


#: Evaluations between two freezes of a worker's long-lived objects (:class:`GarbagePolicy`).
FREEZE_EVERY = 256


class GarbagePolicy:
    """Keeps the garbage collector off what the backend's memos hold.

    A worker's backend memoises hundreds of thousands of objects (bound blocks, plans, stage
    timelines) that live as long as the process. CPython's full collection traverses every
    tracked object, and it runs each time the objects that survived younger collections grow by
    a quarter: on the analytical backend's 10,000-candidate sweep
    (``benchmarks/bench_analytical.py``) about 10 full collections took ~13 % of the CPU time.
    Every :data:`FREEZE_EVERY` evaluations this runs a young collection (short-lived cycles,
    e.g. an exception's traceback, are freed, not frozen) and then :func:`gc.freeze`: what
    survived moves to the permanent generation, which no collection traverses (there: ~1.4 s
    of GC CPU time down to ~0.5 s). Frozen objects are still freed by reference counting; only a
    reference cycle among them would never be reclaimed, and the analytical backend's memos
    form none (tests/explore/test_worker_garbage.py checks it).

    It also freezes when created (what the process holds then: its modules — sympy's alone
    are ~10⁵ objects — and their tables, which live as long as it does) and after the 1st,
    2nd, 4th, … evaluation up to :attr:`every` (the first evaluations bind the blocks and
    compile the schedule shapes that later ones reuse): otherwise the first full collections
    traverse all of that, two of them ~0.05 s each in the benchmark's first 100 evaluations."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self.every = every
        self.pending = 0
        self.evaluations = 0
        self._early = 1  # the next early freeze (a power of two up to `every`)
        self._freeze()

    def evaluated(self, count: int = 1) -> None:
        """Count ``count`` evaluations; freeze once :attr:`every` have passed since the last,
        or at the next power of two up to :attr:`every`."""
        self.pending += count
        self.evaluations += count
        early = self._early <= self.every and self.evaluations >= self._early
        if early or self.pending >= self.every:
            while self._early <= self.evaluations:
                self._early *= 2
            self._freeze()

    def _freeze(self) -> None:
        self.pending = 0
        gc.collect(1)
        gc.freeze()


#: This worker process's policy (process-local, like :data:`_PROCESS_BACKENDS`).
_PROCESS_GARBAGE = GarbagePolicy()


def _process_backend(job: EvaluationJob) -> BaseBackend:
    key = (job.factory, repr(sorted(job.options.items())))
    backend = _PROCESS_BACKENDS.get(key)
    if backend is None:
        backend = _PROCESS_BACKENDS[key] = create_backend(job.factory, job.options)
    return backend


def evaluate_chunk(
    job: EvaluationJob, candidates: Sequence[Candidate], node: str = ""
) -> list[tuple[int, Outcome]]:
    """Evaluate ``candidates`` with one backend built from ``job``; one outcome per key.

    The ``worker`` of each outcome is ``host:pid``, prefixed with ``node/`` when ``node`` names
    the cluster node the task runs on (Ray tasks do: several nodes may share a host).
    """
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if node:
        worker = f"{node}/{worker}"
    try:
        backend = _process_backend(job)
    except Exception as error:
        failed = Outcome(
            status=TrialStatus.FAILED,
            reason=f"creating the backend: {_one_line(error)}",
            worker=worker,
            backend=job.study_backend_name,
        )
        return [(candidate.key, failed) for candidate in candidates]
    builder: DesignPointBuilder = getattr(backend, "build_design_point", build_design_point)
    name = str(getattr(backend, "name", type(backend).__name__))
    outcomes = []
    for candidate in candidates:
        outcomes.append((candidate.key, _evaluate(backend, builder, job, candidate, worker, name)))
        _PROCESS_GARBAGE.evaluated()
    return outcomes
