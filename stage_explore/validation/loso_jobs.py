"""The leave-one-source-out fits in worker processes (``stage validate --loso --jobs N``).

Each source's fit (:func:`~stage_explore.validation.loso.fit_source`) depends only on the
evaluated cases, the backend factory and the evaluation budget, never on the fits before it,
so ``jobs`` processes can run them at once and the figure is the same, float for float, as one
process's: every worker receives the cases once (pickled, through the pool's initializer), is
handed one group of sources sharing a fit at a time (:func:`~stage_explore.validation.loso.
fit_key`: e.g. the inferred sources of one system; a group stays in one worker, so it is fitted
once, as in one process), fits it with system and fit caches of its own, and the results are
put back in the sources' data order. Workers are spawned, not forked (as :class:`~stage_explore.
search.executors.LocalExecutor`'s: no copy of the driver's threads or locks), so a ``factory``
other than the default must pickle; the default (``None``: the analytical backend) is built
inside each worker. At most ``jobs`` groups are handed out at a time, so the sources in flight
are the sources being fitted, which the progress callback names. Ctrl-C, or a SIGTERM to the
driver alone (``kill PID``, a batch system's time limit), ends the workers mid-fit and stops
the command as interrupted; before s35 review8 a SIGTERM ended the driver and left its workers
fitting, orphaned, for up to a fit's minutes each.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import Any

from stage_core.errors import ConfigError, StageError
from stage_explore.calibrate import Fit
from stage_explore.interrupts import terminate_as_interrupt
from stage_explore.system.model import System
from stage_explore.validation.run import BackendFactory
from stage_explore.validation.setups import Case

#: A worker's inputs, set once by :func:`_start_worker`: the cases, factory, budget, caches.
_STATE: dict[str, Any] = {}


def _start_worker(
    timing: Sequence[Case], factory: BackendFactory | None, max_evaluations: int
) -> None:
    """A worker's start: keep the inputs of every fit; Ctrl-C is the driver's to handle (it
    ends the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    systems: dict[str, System] = {}
    fits: dict[tuple[object, ...], Fit] = {}
    _STATE.update(timing=timing, factory=factory, budget=max_evaluations)
    _STATE.update(systems=systems, fits=fits)


def _fit(group: Sequence[str]) -> list[dict[str, Any]]:
    """The entries of a group of sources sharing one fit, fitted in a worker."""
    from stage_explore.validation.loso import fit_source

    state = _STATE
    return [
        fit_source(source, state["timing"], state["systems"], state["fits"], state["factory"],
                   state["budget"])
        for source in group
    ]  # fmt: skip


def _in_order(groups: Iterable[Sequence[str]], order: Sequence[str]) -> list[str]:
    """The sources of ``groups``, in data order."""
    sources = {source for group in groups for source in group}
    return [source for source in order if source in sources]


def _doing(running: Sequence[str]) -> str:
    """What the workers are fitting, for the progress line: the first source in data order
    still running and how many more are."""
    more = f" and {len(running) - 1} more" if len(running) > 1 else ""
    return f"{running[0]}{more}"


def _end(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: drop the queued sources and end the workers mid-fit (an interrupted
    or failed figure is not worth the minutes a worker's fit still takes). Python 3.11's pool
    has no public way to end its workers (3.14 adds ``terminate_workers``): its process table
    is read, before ``shutdown`` drops it, if it has one."""
    processes: dict[int, BaseProcess] = dict(getattr(pool, "_processes", None) or {})
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes.values():
        process.terminate()


def fit_in_workers(
    order: Sequence[str],
    groups: Sequence[Sequence[str]],
    timing: Sequence[Case],
    factory: BackendFactory | None,
    max_evaluations: int,
    progress: Callable[[int, int, str], None] | None,
    jobs: int,
) -> dict[str, dict[str, Any]]:
    """``{source: entry}`` for every source of ``order``, fitted by ``jobs`` worker processes
    (at most one per group of ``groups``, which partition ``order``); ``progress`` gets
    (sources done, sources, what is being fitted) when the first groups start and each time
    one finishes."""
    if factory is not None:
        try:
            pickle.dumps(factory)
        except Exception as error:  # a closure or a local function: it cannot reach a worker
            raise ConfigError(
                f"the backend factory {factory!r} cannot be sent to worker processes "
                f"({error}): expected a picklable factory, or jobs=1"
            ) from None
    found: dict[str, dict[str, Any]] = {}
    pending = [list(group) for group in groups]
    running: dict[Future[list[dict[str, Any]]], list[str]] = {}
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(pending)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(list(timing), factory, max_evaluations),
    )
    with terminate_as_interrupt():  # SIGTERM ends the pool as Ctrl-C does (_end)
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    group = pending.pop(0)
                    running[pool.submit(_fit, group)] = group
                if progress is not None:
                    progress(len(found), len(order), _doing(_in_order(running.values(), order)))
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    entries = future.result()
                    found.update(zip(running.pop(future), entries, strict=True))
        except BrokenProcessPool:  # a worker killed (out of memory?) or unable to start
            _end(pool)
            raise StageError(
                f"a worker process of the leave-one-source-out fits ended abruptly (killed, or out "
                f"of memory?) while fitting {_doing(_in_order(running.values(), order))}: "
                "expected every fit to finish; try fewer jobs"
            ) from None
        except BaseException:
            _end(pool)
            raise
        pool.shutdown(wait=True)
    return found
