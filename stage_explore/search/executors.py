"""Where evaluations run: a local process pool or Ray.

Contents:
    :class:`BaseExecutor`
        the contract the driver uses: submit chunks, poll finished ones, cancel, close.
    :class:`LocalExecutor`
        a pool of worker processes (spawned, ignoring Ctrl-C so the driver handles it, and
        ending when the driver's process is gone).
    :class:`RayExecutor`
        Ray tasks on a local instance started for the study, or on an existing cluster.
    :func:`create_executor`
        the executor a study (and the command line) asks for.

A task that fails as a whole returns one outcome per candidate: ``infrastructure_failed`` when
the machinery lost it (a worker process or node died, Ray lost the task), which the driver's
:class:`~stage_explore.search.retry.RetryingExecutor` retries; ``failed`` otherwise. The study
goes on either way. Such outcomes are recorded under the backend the job runs
(:attr:`~stage_explore.search.worker.EvaluationJob.study_backend_name`).

Ray's address: ``None`` (or ``"local"``) always starts a Ray instance of our own on this
machine, whatever ``RAY_ADDRESS`` or a leftover ``ray start`` cluster file says; ``"auto"``
follows Ray's discovery (``RAY_ADDRESS``, then the cluster last started with ``ray start`` on
this machine); ``HOST:PORT`` or ``ray://HOST:PORT`` joins that cluster. Joining waits at most
``connect_timeout_s`` for the address to answer, then fails with a one-line ConfigError.
"""

from __future__ import annotations

import abc
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.records import Outcome
from stage_explore.search.connect import CONNECT_TIMEOUT_S, connect_ray, local_token_auth
from stage_explore.search.outcomes import task_failure_status
from stage_explore.search.worker import Candidate, EvaluationJob, evaluate_chunk
from stage_explore.study.spec import ExecutorKind, ExecutorSpec
from stage_explore.wording import counted

logger = logging.getLogger(__name__)

Results = list[tuple[int, Outcome]]


_NODES_EVERY_S = 2.0


def _failed(keys: Sequence[int], error: BaseException, what: str, backend: str) -> Results:
    """One outcome per key of a task lost as a whole, recorded under ``backend``: the backend
    the job runs (:attr:`EvaluationJob.study_backend_name`), which the task never reported."""
    text = " ".join(str(error).split())[:500]
    outcome = Outcome(
        status=task_failure_status(error),
        reason=f"{what}: {type(error).__name__}: {text}",
        backend=backend,
    )
    return [(key, outcome) for key in keys]


class BaseExecutor(abc.ABC):
    """Runs :func:`~stage_explore.search.worker.evaluate_chunk` tasks.

    Contract:
        ``submit`` queues one task for a chunk of candidates. ``poll(timeout_s)`` waits at most
        that long for tasks to finish and returns the outcomes of all finished tasks (possibly
        none), each candidate exactly once. ``in_flight`` counts tasks submitted and not yet
        returned. ``cancel`` abandons them (their candidates are never returned). ``close``
        releases the workers; the executor is unusable afterwards. ``parallelism`` is the number
        of tasks that can run at once. ``where`` describes, for the progress line, where tasks
        run now (e.g. ``ray: 2 nodes, 4 CPUs``).
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

    def where(self) -> str:
        """Where tasks run, in a few words (empty when the executor does not say)."""
        return ""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the workers."""


#: How often a local worker checks that the study's process is still its parent.
_PARENT_CHECK_S = 1.0


def _exit_with_parent(parent: int) -> None:
    """End this worker when the process that started it is gone (reparented: its parent id
    changed): a ``stage explore`` killed by SIGKILL or the out-of-memory killer cannot close
    its pool, and its idle workers would otherwise wait on the pool's queue for ever."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(1)


#: How long :meth:`LocalExecutor.cancel` waits for the pool to fail the tasks of the processes
#: it ended (the pool's thread notices a dead worker within its next wake-up, well under this).
_CANCEL_WAIT_S = 10.0


def _ignore_interrupts() -> None:
    """A local worker's start: Ctrl-C is the driver's to handle; exit when the driver dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watcher = threading.Thread(
        target=_exit_with_parent, args=(os.getppid(),), name="exit-with-parent", daemon=True
    )
    watcher.start()


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
        backend = self._job.study_backend_name
        for future in done:
            keys, pool = self._futures.pop(future)
            try:
                results.extend(future.result())
            except BrokenProcessPool as error:
                broken |= pool is self._pool
                results.extend(_failed(keys, error, "the worker process died", backend))
            except Exception as error:
                results.extend(_failed(keys, error, "the task failed", backend))
        if broken:
            self._restart()
        return results

    def where(self) -> str:
        return f"local: {self.parallelism} worker processes"

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    def cancel(self) -> None:
        processes = list(getattr(self._pool, "_processes", {}).values())
        if self._futures and processes:
            # Running tasks cannot be cancelled: end their processes (the pool has no public
            # way); the pool then fails every outstanding future with BrokenProcessPool. The
            # pending ones are not cancelled first: CPython 3.11's pool thread sets that
            # exception on them unchecked (``_ExecutorManagerThread.terminate_broken``), and on
            # a cancelled future it raised InvalidStateError, a thread traceback on Ctrl-C.
            for process in processes:
                process.terminate()
            wait(list(self._futures), timeout=_CANCEL_WAIT_S)
        else:
            for future in self._futures:
                future.cancel()
        self._futures.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _evaluate_on_ray_node(
    job: EvaluationJob, candidates: Sequence[Candidate]
) -> list[tuple[int, Outcome]]:
    """:func:`evaluate_chunk` in a Ray task, each outcome's worker naming the node."""
    import ray

    node = str(ray.get_runtime_context().get_node_id())[:8]
    return evaluate_chunk(job, candidates, node)


class RayExecutor(BaseExecutor):
    """Ray tasks, one per chunk, on a cluster at ``address`` or on a local instance.

    A local instance is started with ``workers`` CPUs (default: every CPU) and without the
    dashboard (:func:`connect_ray`). When Ray is already initialised in this process, that
    instance is used and left running. Ray's own task retries are off: infrastructure failures
    come back as ``infrastructure_failed`` outcomes and the driver retries them.
    """

    def __init__(
        self,
        job: EvaluationJob,
        address: str | None = None,
        workers: int | None = None,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        if address in (None, "", "local"):
            local_token_auth()  # before Ray is imported: it reads RAY_AUTH_MODE once
        import ray

        self._ray: Any = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            connect_ray(address, workers=workers, connect_timeout_s=connect_timeout_s)
        self.parallelism = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=0)(_evaluate_on_ray_node)
        self._backend_name = job.study_backend_name
        self._job = ray.put(job)
        self._refs: dict[Any, list[int]] = {}
        self._where = ""
        self._where_at = -math.inf

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
                results.extend(_failed(keys, error, "the Ray task failed", self._backend_name))
        return results

    @property
    def in_flight(self) -> int:
        return len(self._refs)

    def where(self) -> str:
        """The live nodes with CPUs and their CPUs (asked of Ray at most every 2 s)."""
        now = time.monotonic()
        if self._ray.is_initialized() and now - self._where_at >= _NODES_EVERY_S:
            self._where_at = now
            try:
                nodes = [
                    node for node in self._ray.nodes()
                    if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0
                ]  # fmt: skip
            except Exception as error:  # the head went away: say so rather than fail a study
                logger.debug("listing Ray nodes: %s", error)
                return "ray: nodes unknown"
            cpus = sum(int(node["Resources"]["CPU"]) for node in nodes)
            self._where = f"ray: {counted(len(nodes), 'node')}, {counted(cpus, 'CPU')}"
        return self._where

    def cancel(self) -> None:
        for reference in self._refs:
            try:
                self._ray.cancel(reference, force=True)
            except Exception as error:  # a task that already finished cannot be cancelled
                logger.debug("cancelling a Ray task: %s", error)
        self._refs.clear()

    def close(self) -> None:
        self._where_at = -math.inf
        self.where()  # the last word on the nodes, for the final progress line
        if self._owns:
            self._ray.shutdown()


def create_executor(
    spec: ExecutorSpec,
    job: EvaluationJob,
    *,
    kind: ExecutorKind | None = None,
    address: str | None = None,
) -> BaseExecutor:
    """The executor of ``spec``; ``kind`` and ``address`` (command line) take precedence.

    Without an address from either, a Ray executor starts a local instance of its own
    (``RAY_ADDRESS`` is honoured only through ``address = "auto"``).
    """
    chosen = kind or spec.kind
    if chosen is ExecutorKind.LOCAL:
        if address:
            named = "a Ray instance of its own" if address == "local" else "a Ray cluster"
            raise ConfigError(f"--address {address} names {named}; it needs --executor ray")
        return LocalExecutor(job, spec.workers)
    return RayExecutor(
        job, address or spec.address, spec.workers, connect_timeout_s=spec.connect_timeout_s
    )
