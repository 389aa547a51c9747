"""The study driver: ask a batch, evaluate it on the executor, tell and record each trial.

Contents:
    :class:`Explorer`
        runs one study: output folder checks (:mod:`~stage_explore.search.study_folder`),
        resume, the ask/evaluate/tell loop, records, progress, time limit, and a clean stop on
        Ctrl-C (SIGINT) or SIGTERM.
    :func:`explore`
        load nothing, inject everything: a convenience wrapper around :class:`Explorer`.

Each record is one distinct canonical configuration. Trial numbers count them in the order
they were proposed (0, 1, 2 …): outcomes are told to the sampler and recorded in proposal
order, never in completion order, so the same study file and seed give the same trials on any
executor, chunking, batch size or timing. A proposal of a configuration already proposed is
answered from the first evaluation (told to the sampler, not recorded, not counted against the
budget). A study stopped at any point, even killed, leaves the trials ``0 … n-1`` and a
resumed study continues at ``n``; trials that were running when it stopped are asked again.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import optuna

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_explore.pareto import pareto_mask
from stage_explore.records import (
    Outcome,
    RecordWriter,
    TrialStatus,
    make_row,
    read_records,
    records_schema,
)
from stage_explore.search.backends import (
    BackendFactory,
    create_backend,
    preflight,
    resolve_backend,
)
from stage_explore.search.design import model_is_moe
from stage_explore.search.executors import BaseExecutor, create_executor
from stage_explore.search.folder_lock import study_lock
from stage_explore.search.outcomes import is_final, outcome_from_row, verdict
from stage_explore.search.progress import Progress, RefineProgress, StudySummary
from stage_explore.search.refine import refine
from stage_explore.search.replay import replay
from stage_explore.search.retry import RetryingExecutor, RetryPolicy
from stage_explore.search.samplers import (
    BaseSearch,
    GridSearch,
    Proposal,
    create_search,
    is_fast,
)
from stage_explore.search.study_folder import check_study_folder, write_study_meta
from stage_explore.search.worker import Candidate, EvaluationJob
from stage_explore.study.space import derive_dp, structural_reason
from stage_explore.study.spec import Direction, SamplerKind, StudySpec
from stage_explore.wording import counted

logger = logging.getLogger(__name__)

ExecutorFactory = Callable[[EvaluationJob], BaseExecutor]

_FLUSH_ROWS = 1000
_FLUSH_EVERY_S = 2.0
_PROGRESS_EVERY_S = 0.5
_POLL_S = 0.1


class Explorer:
    """Runs one study with an injected executor (and, optionally, an injected backend factory).

    ``out`` is the output folder (the records go to ``out/<study name>``); ``trials`` overrides
    the study's budget of distinct configurations (resumed trials included); ``resume``
    continues a study whose folder already holds records, which is refused otherwise, first
    evaluating again its trials lost to infrastructure failures. ``retry`` is the policy for
    those failures (default: the study's ``[executor] retries`` with backoff; the executor is
    wrapped in a
    :class:`~stage_explore.search.retry.RetryingExecutor`). ``on_refine`` follows a two-stage
    study's re-evaluation of the front (when it starts and after each point).
    ``executor_factory`` makes the executor of an
    :class:`~stage_explore.search.worker.EvaluationJob`; None: the study's ``[executor]``
    (:func:`~stage_explore.search.executors.create_executor`).
    """

    def __init__(
        self,
        spec: StudySpec,
        *,
        out: Path | str,
        executor_factory: ExecutorFactory | None = None,
        backend_factory: BackendFactory | None = None,
        trials: int | None = None,
        resume: bool = False,
        on_progress: Callable[[Progress], None] | None = None,
        retry: RetryPolicy | None = None,
        on_refine: Callable[[RefineProgress], None] | None = None,
    ) -> None:
        expect(spec, StudySpec, "spec", "load_study('quickstart') or load_study(path)")
        expect(out, (str, os.PathLike), "out", "the output folder")
        if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool)
                                   or trials < 1):  # fmt: skip
            raise ConfigError(f"trials: expected a positive integer or None, got {trials!r}")
        self.spec = spec
        self._on_refine = on_refine
        self._retry = retry
        self.directory = Path(out) / spec.name
        self._executor_factory = executor_factory or partial(create_executor, spec.executor)
        self._backend_factory = backend_factory
        self._budget = trials if trials is not None else spec.sampler.trials
        if self._budget is None and spec.sampler.kind not in (SamplerKind.GRID, SamplerKind.AUTO):
            raise ConfigError(
                f"{spec.path}: [sampler] trials: expected a trial budget for sampler "
                f'"{spec.sampler.kind}" (or pass --trials), got none'
            )
        self._resume = resume
        self._on_progress = on_progress
        self._stop: str | None = None
        self._counts = dict.fromkeys(TrialStatus, 0)
        self._ok_values: list[tuple[float, ...]] = []
        #: Outcome of every configuration finished (canonical key → outcome).
        self._cache: dict[tuple[Any, ...], Outcome] = {}
        self._next_trial = 0
        self._started = time.monotonic()
        self._search: BaseSearch | None = None
        self._new = 0
        self._distinct = 0
        self._repeats = 0
        self._sampler_s = 0.0
        #: The front's re-evaluation by the second backend of a two-stage study.
        self.refined: RefineProgress | None = None
        #: Resumed trials lost to infrastructure failures: (trial number, params), re-run first.
        self._lost: list[tuple[int, dict[str, Any]]] = []
        self._executor: BaseExecutor | None = None

    # ------------------------------------------------------------------ setup

    @property
    def study(self) -> optuna.Study | None:
        """The in-memory Optuna study of the last run (resumed trials and repeats included;
        TPE's history is bounded, see :mod:`~stage_explore.search.samplers`)."""
        return None if self._search is None else self._search.study

    def _load_previous(self, search: BaseSearch, factory: BackendFactory) -> list[Proposal]:
        """Take up the recorded trials; returns the proposals of the last generation still to
        tell (:func:`~stage_explore.search.replay.replay`), which the loop tells first."""
        table = read_records(self.directory)
        if table is None:
            return []
        rows = sorted(table.to_pylist(), key=lambda row: row["trial"])
        outcomes = {search.canonical(row)[1]: outcome_from_row(row) for row in rows}
        spec = self.spec
        started = time.perf_counter()
        pending = replay(
            search,
            outcomes,
            partial(verdict, objectives=spec.objectives, constraints=spec.constraints),
            budget=self._budget,
            window=spec.sampler.batch_size,
        )
        self._sampler_s += time.perf_counter() - started
        if pending is None and not isinstance(search, GridSearch):
            logger.info(
                "resume: the records of study %s do not follow its sampler's proposals (another "
                "seed or budget); they are added as finished trials, and the rest of the study "
                "may differ from an uninterrupted run", spec.name,
            )  # fmt: skip
            search = self._create_search(factory)
        told = pending is not None
        later = {proposal.key for proposal in pending or () if proposal.recorded}
        final = 0
        for row in rows:
            params = {name: row[name] for name in search.names}
            outcome = outcome_from_row(row)
            key = search.canonical(params)[1]
            if key in later:  # recorded, but told after an unfinished trial: by the loop
                self._cache[key] = outcome
            if not is_final(outcome.status):  # lost to the machinery: evaluated again first
                self._lost.append((row["trial"], params))
                continue
            if key in later:
                continue
            self._account(params, outcome, search, None, told=told)
            final += 1
        self._next_trial = rows[-1]["trial"] + 1 if rows else 0
        self._distinct = final
        logger.info(
            "resumed %d trials of study %s (%d lost to infrastructure failures, re-run)",
            final + len(later), spec.name, len(self._lost),
        )  # fmt: skip
        return pending or []

    # ------------------------------------------------------------------ bookkeeping

    def _account(
        self,
        params: dict[str, Any],
        outcome: Outcome,
        search: BaseSearch,
        proposal: Proposal | None,
        *,
        told: bool = False,
    ) -> None:
        """Tell ``search`` an outcome (``proposal`` None: a recorded trial, added as finished
        unless the replay ``told`` it already) and count it."""
        result = verdict(outcome, self.spec.objectives, self.spec.constraints)
        started = time.perf_counter()
        if proposal is None:
            if not told:
                search.add_finished(params, result)
            if outcome.status is not TrialStatus.FAILED:
                self._cache.setdefault(search.canonical(params)[1], outcome)
        else:
            search.tell(proposal, result)
        self._sampler_s += time.perf_counter() - started
        if proposal is not None and proposal.repeat:
            self._repeats += 1
            return
        self._counts[outcome.status] += 1
        if outcome.status is TrialStatus.OK and result.values is not None:
            self._ok_values.append(result.values)

    def _best_text(self) -> str:
        if not self._ok_values:
            return "none feasible yet"
        values = np.asarray(self._ok_values)
        objectives = self.spec.objectives
        if len(objectives) == 1:
            column = values[:, 0]
            best = column.min() if objectives[0].direction is Direction.MIN else column.max()
            return f"best {objectives[0].metric} {best:.6g}"
        mask = pareto_mask(values, [o.direction is Direction.MAX for o in objectives])
        return f"front {counted(int(mask.sum()), 'point')}"

    def progress(self) -> Progress:
        """The current snapshot."""
        elapsed = time.monotonic() - self._started
        return Progress(
            study=self.spec.name,
            done=sum(self._counts.values()),
            total=self._budget,
            ok=self._counts[TrialStatus.OK],
            infeasible=self._counts[TrialStatus.INFEASIBLE],
            failed=self._counts[TrialStatus.FAILED],
            best=self._best_text(),
            rate_per_s=self._new / elapsed if elapsed > 0 else 0.0,
            elapsed_s=elapsed,
            repeats=self._repeats,
            sampler_s=self._sampler_s,
            infrastructure_failed=self._counts[TrialStatus.INFRASTRUCTURE_FAILED],
            where="" if self._executor is None else self._executor.where(),
        )

    @contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(number: int, frame: FrameType | None) -> None:
            if self._stop == "interrupted":
                raise KeyboardInterrupt
            self._stop = "interrupted"
            logger.warning("stopping: finished trials are kept (interrupt again to abort)")

        previous = {
            number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield
        finally:
            for number, old in previous.items():
                signal.signal(number, old)

    # ------------------------------------------------------------------ the loop

    def run(self) -> StudySummary:
        """Run the study to its budget, the end of its grid, its time limit or a signal."""
        assert self._search is None, "an Explorer runs once"
        check_study_folder(self.directory, self.spec, self._resume)
        backend = self.spec.backend
        factory = self._backend_factory or self._resolve(backend.search_name)
        # Options are checked, and a backend that needs a program finds it, before any task.
        preflight(create_backend(factory, backend.search_options))
        refine_factory = None
        if backend.screen is not None:
            refine_factory = self._resolve(backend.name)
            preflight(create_backend(refine_factory, backend.options))
        search = self._create_search(factory)
        with study_lock(self.directory):  # one writer per folder (folder_lock)
            # again: another run may have recorded since the first check
            check_study_folder(self.directory, self.spec, self._resume)
            return self._record(search, factory, refine_factory)

    def _resolve(self, name: str) -> BackendFactory:
        """The factory of a backend the study names; an unknown name is an error naming the
        study file and the key (registered names are looked up now, so not when it loads)."""
        try:
            return resolve_backend(name)
        except ConfigError as error:
            key = "name" if name == self.spec.backend.name else "screen"
            raise ConfigError(f"{self.spec.path}: [backend] {key}: {error}") from None

    def _record(
        self, search: BaseSearch, factory: BackendFactory, refine_factory: BackendFactory | None
    ) -> StudySummary:
        """The rest of :meth:`run`, holding the folder: resume, the loop, the records, the
        front's refinement."""
        backend = self.spec.backend
        pending = self._load_previous(search, factory)
        search = self._search or search
        resumed = self._distinct + sum(1 for proposal in pending if proposal.recorded)
        job = EvaluationJob(
            study=self.spec,
            factory=factory,
            options=backend.search_options,
            backend_name=backend.search_name,
        )
        policy = self._retry or RetryPolicy(retries=self.spec.executor.retries)
        executor = self._executor = RetryingExecutor(self._executor_factory(job), policy)
        try:
            write_study_meta(self.directory, self.spec)
            writer = RecordWriter(self.directory, records_schema(self.spec.name, self.spec.space))
        except BaseException:
            executor.close()
            raise
        self._started = time.monotonic()
        try:
            with self._signals():
                self._rerun_lost(search, executor, writer)
                stopped_by = self._stop or self._loop(search, executor, writer, pending)
        finally:
            if self._stop == "interrupted":
                executor.cancel()
            try:
                writer.flush()
            finally:
                executor.close()
        if refine_factory is not None and self._stop != "interrupted":
            with self._signals():
                self.refined = refine(
                    self.spec,
                    self.directory,
                    search.names,
                    refine_factory,
                    self._executor_factory,
                    lambda: self._stop == "interrupted",
                    self._on_refine,
                )
            if self._stop == "interrupted":  # Ctrl-C while refining: --resume refines the rest
                stopped_by = "interrupted"
        progress = self.progress()
        if self._on_progress is not None:
            self._on_progress(progress)
        return StudySummary(
            directory=self.directory, progress=progress, resumed=resumed, stopped_by=stopped_by,
            refined=self.refined,
        )  # fmt: skip

    def _create_search(self, factory: BackendFactory) -> BaseSearch:
        """The search (``auto`` resolved with the budget and the backend's speed)."""
        spec = self.spec
        fast = is_fast(spec, factory)
        started = time.perf_counter()
        search = create_search(spec, budget=self._budget, fast=fast, moe=model_is_moe(spec))
        self._sampler_s += time.perf_counter() - started
        if self._budget is None and not isinstance(search, GridSearch):
            raise ConfigError(
                f"{spec.path}: [sampler] trials: expected a trial budget for sampler "
                f'"{spec.sampler.kind}" with backend {spec.backend.search_name!r}, which it does '
                "not enumerate (or pass --trials), got none"
            )
        self._search = search
        return search

    def _rerun_lost(self, search: BaseSearch, executor: BaseExecutor, writer: RecordWriter) -> None:
        """Evaluate again the resumed trials lost to infrastructure failures; each new row keeps
        its trial number (and supersedes the lost one, see :func:`read_records`)."""
        lost = dict(enumerate(self._lost))
        width = executor.parallelism
        chunk = self.spec.executor.chunk_size or max(1, min(256, len(lost) // (2 * width)))
        candidates = [Candidate(key=key, params=dict(params)) for key, (_, params) in lost.items()]
        for start in range(0, len(candidates), chunk):
            executor.submit(candidates[start : start + chunk])
        while executor.in_flight and self._stop is None:
            for key, outcome in executor.poll(_POLL_S):
                trial, params = lost.pop(key)
                self._account(params, outcome, search, None)
                self._distinct += 1
                self._new += 1
                row = make_row(
                    trial=trial,
                    study=self.spec.name,
                    params=params,
                    dp=derive_dp(params),
                    outcome=outcome,
                    finished_at=datetime.now(UTC),
                )
                writer.append(row)
            if self._on_progress is not None:
                self._on_progress(self.progress())
        writer.flush()
        self._lost = [lost[key] for key in sorted(lost)]

    def _loop(
        self,
        search: BaseSearch,
        executor: BaseExecutor,
        writer: RecordWriter,
        pending: list[Proposal],
    ) -> str:
        """Ask, evaluate, tell and record until a stop; ``pending``: a resumed study's
        proposals still to tell, in proposal order (the recorded ones are not evaluated)."""
        spec = self.spec
        window = spec.sampler.batch_size  # evaluations in flight at once
        chunk = spec.executor.chunk_size or max(1, min(256, window // (2 * executor.parallelism)))
        # proposals not yet told, in proposal order; a repeat waits for the first evaluation
        queue: deque[Proposal] = deque()
        running: dict[int, tuple[Any, ...]] = {}  # candidate key → configuration key
        buffer: list[Candidate] = []
        keys = iter(range(1 << 62))
        last_flush = last_progress = time.monotonic()

        def finish(proposal: Proposal, outcome: Outcome) -> None:
            params = dict(proposal.params)
            self._account(params, outcome, search, proposal)
            if proposal.repeat or proposal.recorded:
                return
            writer.append(
                make_row(
                    trial=self._next_trial,
                    study=spec.name,
                    params=params,
                    dp=derive_dp(params),
                    outcome=outcome,
                    finished_at=datetime.now(UTC),
                )
            )
            self._next_trial += 1
            self._new += 1

        def drain() -> None:
            while queue and queue[0].key in self._cache:
                proposal = queue.popleft()
                finish(proposal, self._cache[proposal.key])

        def room() -> int:
            left = math.inf if self._budget is None else self._budget - self._distinct
            if search.generation is not None:  # adaptive: one whole generation at a time
                return int(min(search.generation, left)) if not queue else 0
            return int(min(window - len(running), left, 8 * window - len(queue)))

        def dispatch(proposal: Proposal) -> None:
            queue.append(proposal)
            if proposal.repeat:
                return
            self._distinct += 1
            if proposal.recorded:  # its outcome is in the cache (_load_previous)
                return
            reason = structural_reason(proposal.params, spec.workload, spec.constraints)
            if reason is not None:
                self._cache[proposal.key] = Outcome(
                    status=TrialStatus.INFEASIBLE, reason=reason, backend=spec.backend.search_name
                )
                return
            candidate = Candidate(key=next(keys), params=dict(proposal.params))
            running[candidate.key] = proposal.key
            buffer.append(candidate)

        for proposal in pending:
            dispatch(proposal)
        while True:
            limit = spec.sampler.time_limit_s
            if self._stop is None and limit is not None:
                if time.monotonic() - self._started >= limit:
                    self._stop = "time limit"
            while self._stop is None and not search.exhausted and room() > 0:
                started = time.perf_counter()
                proposals = search.propose(room())
                self._sampler_s += time.perf_counter() - started
                for proposal in proposals:
                    dispatch(proposal)
                while len(buffer) >= chunk:
                    executor.submit(buffer[:chunk])
                    del buffer[:chunk]
                if not proposals:
                    break
            if buffer and (executor.in_flight == 0 or room() <= 0 or search.exhausted):
                executor.submit(buffer)
                buffer = []
            drain()
            if self._stop == "interrupted" or (executor.in_flight == 0 and not buffer):
                break
            for key, outcome in executor.poll(_POLL_S):
                self._cache[running.pop(key)] = outcome
            drain()
            now = time.monotonic()
            if writer.pending >= _FLUSH_ROWS or (
                writer.pending and now - last_flush >= _FLUSH_EVERY_S
            ):
                writer.flush()
                last_flush = now
            if self._on_progress is not None and now - last_progress >= _PROGRESS_EVERY_S:
                self._on_progress(self.progress())
                last_progress = now
        # interrupted: keep what finished, in proposal order, behind any unfinished trial
        for proposal in queue:
            if not proposal.repeat and proposal.key in self._cache:
                finish(proposal, self._cache[proposal.key])
        if self._stop is not None:
            return self._stop
        if not search.exhausted:
            return "budget"
        return "grid" if isinstance(search, GridSearch) else "exhausted"


def explore(
    spec: StudySpec,
    *,
    out: Path | str,
    executor_factory: ExecutorFactory | None = None,
    backend_factory: BackendFactory | None = None,
    trials: int | None = None,
    resume: bool = False,
    on_progress: Callable[[Progress], None] | None = None,
    retry: RetryPolicy | None = None,
    on_refine: Callable[[RefineProgress], None] | None = None,
) -> StudySummary:
    """Run ``spec`` (see :class:`Explorer` for the arguments) and return its summary."""
    return Explorer(
        spec,
        out=out,
        executor_factory=executor_factory,
        backend_factory=backend_factory,
        trials=trials,
        resume=resume,
        on_progress=on_progress,
        retry=retry,
        on_refine=on_refine,
    ).run()
