"""Where evaluations run: a local process pool or Ray.

Contents:
    :class:`BaseExecutor`
        the contract the driver uses: submit chunks, poll finished ones, cancel, close.
    :class:`LocalExecutor`
        a pool of worker processes (spawned, ignoring Ctrl-C so the driver handles it).
    :class:`RayExecutor`
        Ray tasks on a local instance started for the study, or on an existing cluster.
    :func:`create_executor`
        the executor a study (and the command line) asks for.

A task that fails as a whole (a worker process dies, Ray loses the task) returns a failed
outcome for each of its candidates; the study goes on.
"""

from __future__ import annotations

import abc
import logging
import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.records import Outcome, TrialStatus
from stage_explore.search.worker import Candidate, EvaluationJob, evaluate_chunk
from stage_explore.study.spec import ExecutorKind, ExecutorSpec

logger = logging.getLogger(__name__)

Results = list[tuple[int, Outcome]]


def _failed(keys: Sequence[int], reason: str) -> Results:
    outcome = Outcome(status=TrialStatus.FAILED, reason=reason)
    return [(key, outcome) for key in keys]


class BaseExecutor(abc.ABC):
    """Runs :func:`~stage_explore.search.worker.evaluate_chunk` tasks.

    Contract:
        ``submit`` queues one task for a chunk of candidates. ``poll(timeout_s)`` waits at most
        that long for tasks to finish and returns the outcomes of all finished tasks (possibly
        none), each candidate exactly once. ``in_flight`` counts tasks submitted and not yet
        returned. ``cancel`` abandons them (their candidates are never returned). ``close``
        releases the workers; the executor is unusable afterwards. ``parallelism`` is the number
        of tasks that can run at once.
    """

    parallelism: int = 1

    @abc.abstractmethod
    def submit(self, candidates: Sequence[Candidate]) -> None:
        """Queue one task evaluating ``candidates``."""

    @abc.abstractmethod
    def poll(self, timeout_s: float) -> Results:
        """Outcomes of the tasks that finished within ``timeout_s``."""

    @property
    @abc.abstractmethod
    def in_flight(self) -> int:
        """Tasks submitted and not yet returned by ``poll``."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Abandon every task in flight."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the workers."""


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor(BaseExecutor):
    """Worker processes on this machine (``workers``, default: every CPU)."""

    def __init__(self, job: EvaluationJob, workers: int | None = None) -> None:
        self.parallelism = workers or os.cpu_count() or 1
        self._job = job
        self._pool = self._start()
        self._futures: dict[Future[Results], tuple[list[int], ProcessPoolExecutor]] = {}

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.parallelism,
            initializer=_ignore_interrupts,
            mp_context=multiprocessing.get_context("spawn"),
        )

    def _restart(self) -> None:
        logger.warning("a worker process died; restarting the process pool")
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._start()

    def submit(self, candidates: Sequence[Candidate]) -> None:
        keys = [candidate.key for candidate in candidates]
        try:
            future = self._pool.submit(evaluate_chunk, self._job, list(candidates))
        except BrokenProcessPool:  # a worker died since the last poll; its tasks fail there
            self._restart()
            future = self._pool.submit(evaluate_chunk, self._job, list(candidates))
        self._futures[future] = (keys, self._pool)

    def poll(self, timeout_s: float) -> Results:
        if not self._futures:
            return []
        done, _ = wait(list(self._futures), timeout=timeout_s, return_when=FIRST_COMPLETED)
        results: Results = []
        broken = False
        for future in done:
            keys, pool = self._futures.pop(future)
            try:
                results.extend(future.result())
            except BrokenProcessPool as error:
                broken |= pool is self._pool
                results.extend(_failed(keys, f"the worker process died ({error})"))
            except Exception as error:
                results.extend(_failed(keys, f"the task failed: {type(error).__name__}: {error}"))
        if broken:
            self._restart()
        return results

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    def cancel(self) -> None:
        for future in self._futures:
            future.cancel()
        if self._futures:
            # Running tasks cannot be cancelled: end their processes (the pool has no public way).
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
        self._futures.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor(BaseExecutor):
    """Ray tasks, one per chunk, on a cluster at ``address`` or on a local instance.

    A local instance is started with ``workers`` CPUs (default: every CPU) and without the
    dashboard. When Ray is already initialised in this process, that instance is used and
    left running.
    """

    def __init__(
        self, job: EvaluationJob, address: str | None = None, workers: int | None = None
    ) -> None:
        import ray

        self._ray: Any = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING)
                else:
                    ray.init(
                        num_cpus=workers, include_dashboard=False, logging_level=logging.WARNING
                    )
            except (ConnectionError, RuntimeError, ValueError) as error:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ConfigError(
                    f"cannot start or reach {where}: {' '.join(str(error).split())}"
                ) from None
        self.parallelism = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=0)(evaluate_chunk)
        self._job = ray.put(job)
        self._refs: dict[Any, list[int]] = {}

    def submit(self, candidates: Sequence[Candidate]) -> None:
        reference = self._task.remote(self._job, list(candidates))
        self._refs[reference] = [candidate.key for candidate in candidates]

    def poll(self, timeout_s: float) -> Results:
        if not self._refs:
            return []
        ray = self._ray
        ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=timeout_s)
        if ready:
            ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        results: Results = []
        for reference in ready:
            keys = self._refs.pop(reference)
            try:
                results.extend(ray.get(reference))
            except Exception as error:
                text = " ".join(str(error).split())[:500]
                results.extend(
                    _failed(keys, f"the Ray task failed: {type(error).__name__}: {text}")
                )
        return results

    @property
    def in_flight(self) -> int:
        return len(self._refs)

    def cancel(self) -> None:
        for reference in self._refs:
            try:
                self._ray.cancel(reference, force=True)
            except Exception as error:  # a task that already finished cannot be cancelled
                logger.debug("cancelling a Ray task: %s", error)
        self._refs.clear()

    def close(self) -> None:
        if self._owns:
            self._ray.shutdown()


def create_executor(
    spec: ExecutorSpec,
    job: EvaluationJob,
    *,
    kind: ExecutorKind | None = None,
    address: str | None = None,
) -> BaseExecutor:
    """The executor of ``spec``; ``kind`` and ``address`` (command line) take precedence."""
    chosen = kind or spec.kind
    if chosen is ExecutorKind.LOCAL:
        if address:
            raise ConfigError(f"--address {address} names a Ray cluster; it needs --executor ray")
        return LocalExecutor(job, spec.workers)
    return RayExecutor(job, address or spec.address, spec.workers)
