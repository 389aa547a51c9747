"""Retrying evaluations lost to the machinery, with a bounded number of attempts and backoff.

Contents:
    :class:`RetryPolicy`
        how many times a candidate is evaluated again, and how long to wait before each retry.
    :class:`RetryingExecutor`
        wraps any :class:`~stage_explore.search.executors.BaseExecutor`: a candidate whose
        outcome is ``infrastructure_failed`` (its worker or node died, its Ray task was lost,
        ASTRA-sim was killed by a signal) is submitted again after a backoff, up to
        ``policy.retries`` times; then that outcome is returned, its reason saying how many
        attempts were made. Every other outcome passes through at once.

The driver wraps the executor it is given, so every executor (local, Ray, a test's) retries
the same way. A retry waits without blocking the driver: the candidates are held with the time
they are due and submitted by the first ``poll`` after it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.records import TrialStatus
from stage_explore.search.executors import BaseExecutor, Results
from stage_explore.search.worker import Candidate

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """``retries`` further attempts per candidate, the n-th one after
    ``min(max_backoff_s, backoff_s * backoff_factor ** (n - 1))`` seconds."""

    retries: int = 3
    backoff_s: float = 1.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"`retries` must be an integer >= 0, but got {self.retries!r}")
        for name in ("backoff_s", "backoff_factor", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"`{name}` must be a finite number >= 0, but got {value!r}")

    def delay_s(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1 for the first retry)."""
        return float(min(self.max_backoff_s, self.backoff_s * self.backoff_factor ** (attempt - 1)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "retries": self.retries,
            "backoff_s": self.backoff_s,
            "backoff_factor": self.backoff_factor,
            "max_backoff_s": self.max_backoff_s,
        }


class RetryingExecutor(BaseExecutor):
    """``inner`` with infrastructure failures retried under ``policy`` (see the module)."""

    def __init__(
        self,
        inner: BaseExecutor,
        policy: RetryPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self.parallelism = inner.parallelism
        self._clock = clock
        self._sleep = sleep
        self._candidates: dict[int, Candidate] = {}
        self._attempts: dict[int, int] = {}
        #: (due time, candidates) of retries not yet submitted
        self._delayed: list[tuple[float, list[Candidate]]] = []
        #: Retries submitted so far.
        self.retried = 0

    def submit(self, candidates: Sequence[Candidate]) -> None:
        for candidate in candidates:
            self._candidates[candidate.key] = candidate
            self._attempts.setdefault(candidate.key, 0)
        self.inner.submit(candidates)

    def _submit_due(self) -> None:
        now = self._clock()
        due = [candidates for when, candidates in self._delayed if when <= now]
        self._delayed = [(when, candidates) for when, candidates in self._delayed if when > now]
        for candidates in due:
            self.retried += len(candidates)
            self.inner.submit(candidates)

    def poll(self, timeout_s: float) -> Results:
        self._submit_due()
        wait_s = timeout_s
        if self._delayed:
            next_due = min(when for when, _ in self._delayed)
            wait_s = max(0.0, min(timeout_s, next_due - self._clock()))
        if self.inner.in_flight:
            results = self.inner.poll(wait_s)
        else:
            self._sleep(wait_s)
            results = []
        finished: Results = []
        again: dict[int, list[Candidate]] = {}
        for key, outcome in results:
            attempts = self._attempts[key]
            if outcome.status is TrialStatus.INFRASTRUCTURE_FAILED:
                if attempts < self.policy.retries:
                    self._attempts[key] = attempts + 1
                    again.setdefault(attempts + 1, []).append(self._candidates[key])
                    logger.warning(
                        "trial lost to an infrastructure failure (%s); retry %d of %d",
                        outcome.reason,
                        attempts + 1,
                        self.policy.retries,
                    )
                    continue
                tries = f"{attempts + 1} attempt{'s' if attempts else ''}"
                outcome = replace(outcome, reason=f"{outcome.reason} (gave up after {tries})")
            del self._candidates[key], self._attempts[key]
            finished.append((key, outcome))
        now = self._clock()
        for attempt, candidates in again.items():
            self._delayed.append((now + self.policy.delay_s(attempt), candidates))
        return finished

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight + len(self._delayed)

    def where(self) -> str:
        return self.inner.where()

    def cancel(self) -> None:
        self._delayed.clear()
        self._candidates.clear()
        self._attempts.clear()
        self.inner.cancel()

    def close(self) -> None:
        self.inner.close()
