"""Proposing candidates over the canonical search space with an in-memory Optuna study.

Contents:
    :class:`Proposal`
        one proposed point: its canonical parameters, its key, whether it repeats a point
        already proposed, and the Optuna handle to tell it with.
    :class:`BaseSearch`
        the contract the driver uses: ``propose``, ``tell``, ``add_finished`` (resume).
    :class:`GridSearch`
        every structurally possible canonical point once, in the space's order (the grid, and
        ``auto`` when the space fits the budget and the backend is fast).
    :class:`OptunaSearch`
        random, TPE and NSGA-II through ``study.ask`` / ``study.tell``; a proposal of a point
        already proposed is marked as a repeat (the driver answers it from its cache and it
        does not count against the budget); a sampler stuck on known points is given unseen
        points; TPE's history is bounded.
    :func:`choose_sampler`, :func:`create_search`
        what ``auto`` resolves to, and the search a study asks for.

Every point a search proposes is canonical (:func:`~stage_explore.study.space.canonical_params`)
so configurations that are the same workload are one point. Model-based samplers are adaptive:
they ask a whole generation (TPE: :data:`TPE_GENERATION`, NSGA-II: its population), and the
driver tells the generation in proposal order before asking the next, so the trials do not
depend on the executor, the chunking, the batch size or the timing.
"""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

from stage_explore.pareto import pareto_mask
from stage_explore.search.optuna_quiet import create_study
from stage_explore.search.outcomes import Verdict
from stage_explore.study.space import (
    canonical_key,
    canonical_params,
    grid_points,
    structural_reason,
)
from stage_explore.study.spec import Direction, SamplerKind, StudySpec

#: Trials TPE asks per generation (told together, in proposal order, before the next).
TPE_GENERATION = 64
#: Options that bound TPE's cost: startup trials sampled at random, candidates scored per ask.
TPE_STARTUP_TRIALS = 10
TPE_EI_CANDIDATES = 24
#: TPE's history is cut back to :data:`TPE_HISTORY` trials (the best :data:`TPE_KEEP_BEST`
#: by non-domination rank, then the most recent) when it exceeds twice that, so an ask costs
#: O(TPE_HISTORY) however long the study runs (Optuna's TPE costs O(trials) per ask). TPE's
#: "below" group is at most 25 trials and it down-weights older trials past 25, so a window
#: of a few hundred keeps what its model uses.
TPE_HISTORY = 128
TPE_KEEP_BEST = 32
#: NSGA-II's population, which is also its generation.
NSGA2_POPULATION = 50
#: Consecutive proposals of known points after which a sampler is given an unseen point.
REPEAT_STREAK = 16
#: An adaptive sampler may repeat known points this fraction of the points a generation
#: needs; the rest of the generation is unseen points. Asks stay within (1 + this) times the
#: budget: a repeat costs a whole ask (milliseconds for TPE) and brings nothing new.
REPEATS_PER_POINT = 0.25
#: Spaces up to this many raw points are enumerated up front (to count them for ``auto``,
#: and to draw unseen points from); larger ones are sampled.
ENUMERATION_LIMIT = 500_000
#: Backends fast enough for ``auto`` to enumerate a space that fits the budget; a plug-in
#: backend class may declare ``fast = True``.
FAST_BACKENDS = frozenset({"analytical"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """A proposed canonical point; ``repeat``: it was proposed before (finished or in flight);
    ``recorded``: a resumed study already holds its record (told, not recorded again)."""

    params: Mapping[str, Any]
    key: tuple[Any, ...]
    repeat: bool = False
    trial: Trial | None = None
    recorded: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "params": dict(self.params),
            "repeat": self.repeat,
            "optuna_trial": None if self.trial is None else self.trial.number,
        }


class BaseSearch(abc.ABC):
    """A source of canonical candidates backed by an in-memory Optuna study.

    Contract:
        ``propose(count)`` returns proposals of at most ``count`` new points, plus any repeats
        the sampler made on the way (each repeat must be told too, and is never evaluated
        again); fewer new points (possibly none) only when the space is exhausted, after which
        ``exhausted`` is true. Every proposal is finished exactly once with ``tell``. When
        ``generation`` is set, the search is adaptive: the driver asks at most that many new
        points, then tells all of them in proposal order before asking again.
        ``add_finished`` records a trial finished in an earlier run, before any ``propose``;
        the search neither repeats nor forgets it.
    """

    generation: int | None = None

    def __init__(
        self, spec: StudySpec, sampler: optuna.samplers.BaseSampler, *, moe: bool | None
    ) -> None:
        self.spec = spec
        self.names = spec.space.names()
        self.choices = spec.space.choices()
        self.moe = moe
        self.distributions: dict[str, BaseDistribution] = {
            name: CategoricalDistribution(values) for name, values in self.choices.items()
        }
        self.directions = [
            StudyDirection.MINIMIZE
            if objective.direction is Direction.MIN
            else StudyDirection.MAXIMIZE
            for objective in spec.objectives
        ]
        self.study = create_study(spec.name, self.directions, sampler)
        #: Keys of every point proposed (or finished in an earlier run).
        self.seen: set[tuple[Any, ...]] = set()
        self.exhausted = False

    def canonical(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[Any, ...]]:
        """The canonical form of ``params`` and its key."""
        point = canonical_params(
            {name: params[name] for name in self.names}, self.choices, moe=self.moe
        )
        return point, canonical_key(point, self.names)

    @abc.abstractmethod
    def propose(self, count: int) -> list[Proposal]:
        """Proposals of up to ``count`` new points (and the repeats met on the way)."""

    @abc.abstractmethod
    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        """Finish a proposal with its verdict (a repeat's verdict is its first evaluation's)."""

    def add_finished(self, params: Mapping[str, Any], verdict: Verdict) -> None:
        """Add a trial finished earlier (resume); a failed one may be proposed again."""
        point, key = self.canonical(params)
        self.study.add_trial(_frozen(point, self.distributions, verdict))
        if verdict.state is not TrialState.FAIL:
            self.seen.add(key)


def _frozen(
    params: Mapping[str, Any], distributions: dict[str, BaseDistribution], verdict: Verdict
) -> FrozenTrial:
    return create_trial(
        state=verdict.state,
        values=None if verdict.values is None else list(verdict.values),
        params=dict(params),
        distributions=distributions,
        constraints=None if verdict.state is TrialState.FAIL else dict(verdict.constraints),
    )


class GridSearch(BaseSearch):
    """Every structurally possible canonical point once; impossible points are never proposed."""

    def __init__(
        self, spec: StudySpec, sampler: optuna.samplers.BaseSampler, *, moe: bool | None
    ) -> None:
        super().__init__(spec, sampler, moe=moe)
        self._points: Iterator[dict[str, Any]] = grid_points(
            spec.space, spec.workload, spec.constraints, moe=moe
        )

    def propose(self, count: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        while len(proposals) < count:
            point = next(self._points, None)
            if point is None:
                self.exhausted = True
                break
            key = canonical_key(point, self.names)
            if key not in self.seen:
                self.seen.add(key)
                proposals.append(Proposal(params=point, key=key))
        return proposals

    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        self.study.add_trial(_frozen(proposal.params, self.distributions, verdict))


class OptunaSearch(BaseSearch):
    """Random, TPE or NSGA-II proposals through ask/tell, deduplicated on the canonical key.

    A repeat is told as failed, so the sampler's model holds each configuration once. After
    :data:`REPEAT_STREAK` repeats in a row, or once an adaptive generation has made
    :data:`REPEATS_PER_POINT` repeats per point it needs, the next point is an unseen one, drawn
    with this search's own seeded generator and enqueued, so the study always progresses, its
    asks stay proportional to its budget, and it ends when the space is exhausted.
    """

    def __init__(
        self,
        spec: StudySpec,
        sampler: optuna.samplers.BaseSampler,
        *,
        moe: bool | None,
        generation: int | None = None,
        rebuild: bool = False,
    ) -> None:
        super().__init__(spec, sampler, moe=moe)
        self.generation = generation
        self._rebuild = rebuild
        self._rebuilds = 0
        self._streak = 0
        self._rng = random.Random(spec.seed)
        self._pool: list[dict[str, Any]] | None = None
        self._order: Iterator[int] | None = None

    # ------------------------------------------------------------------ unseen points

    def _unseen(self) -> dict[str, Any] | None:
        """A point not proposed yet, or ``None`` when none is left (or none can be found)."""
        if self._pool is None and self.spec.space.size() <= ENUMERATION_LIMIT:
            spec, moe = self.spec, self.moe
            self._pool = list(grid_points(spec.space, spec.workload, spec.constraints, moe=moe))
            indices = list(range(len(self._pool)))
            self._rng.shuffle(indices)
            self._order = iter(indices)
        if self._pool is not None and self._order is not None:
            for index in self._order:
                point = self._pool[index]
                if canonical_key(point, self.names) not in self.seen:
                    return point
            return None
        for _ in range(1000):  # a space too large to enumerate: sample it
            raw = {name: self._rng.choice(values) for name, values in self.choices.items()}
            point, key = self.canonical(raw)
            if key not in self.seen and (
                structural_reason(point, self.spec.workload, self.spec.constraints) is None
            ):
                return point
        return None

    # ------------------------------------------------------------------ ask and tell

    def propose(self, count: int) -> list[Proposal]:
        if self._rebuild:
            self._bound_history()
        proposals: list[Proposal] = []
        new = 0
        # per generation, not per ask: a generation cut short by the budget proposes the
        # same first points as a whole one, so a study resumed with a larger budget replays
        allowed = math.ceil(REPEATS_PER_POINT * self.generation) if self.generation else math.inf
        while new < count:
            if self._streak >= REPEAT_STREAK or len(proposals) - new >= allowed:
                point = self._unseen()
                if point is None:
                    self.exhausted = True
                    break
                self.study.enqueue_trial(point, skip_if_exists=False)
            trial = self.study.ask(self.distributions)
            point, key = self.canonical(trial.params)
            repeat = key in self.seen
            self._streak = self._streak + 1 if repeat else 0
            if not repeat:
                self.seen.add(key)
                new += 1
            proposals.append(Proposal(params=point, key=key, repeat=repeat, trial=trial))
        return proposals

    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        assert proposal.trial is not None, "an Optuna proposal carries its trial"
        if proposal.repeat or verdict.state is TrialState.FAIL:
            self.study.tell(proposal.trial, state=TrialState.FAIL)
            return
        for name, value in verdict.constraints.items():
            proposal.trial.set_constraint(name, value)
        self.study.tell(proposal.trial, list(verdict.values or ()))

    # ------------------------------------------------------------------ bounded history

    def _bound_history(self) -> None:
        """Restart TPE on its best and most recent trials once its history doubles the bound."""
        trials = self.study.get_trials(deepcopy=False)
        if len(trials) <= 2 * TPE_HISTORY:
            return
        assert not any(t.state is TrialState.RUNNING for t in trials), "asked between generations"
        complete = [t for t in trials if t.state is TrialState.COMPLETE]
        kept = {t.number for t in _best(complete, self.directions, TPE_KEEP_BEST)}
        for trial in reversed(complete):
            if len(kept) >= TPE_HISTORY:
                break
            kept.add(trial.number)
        self._rebuilds += 1
        sampler = _tpe(self.spec.seed + 1_000_003 * self._rebuilds)
        study = create_study(self.spec.name, self.directions, sampler)
        study.add_trials([t for t in complete if t.number in kept])
        self.study = study


def _best(
    trials: list[FrozenTrial], directions: list[StudyDirection], count: int
) -> list[FrozenTrial]:
    """Up to ``count`` trials, feasible first, by non-domination rank (fronts peeled in turn)."""
    feasible = [t for t in trials if all(c <= 0 for c in t.constraints.values())]
    rest = [t for t in trials if t not in feasible]
    chosen: list[FrozenTrial] = []
    for group in (feasible, rest):
        remaining = list(group)
        maximize = [d is StudyDirection.MAXIMIZE for d in directions]
        while remaining and len(chosen) < count:
            values = np.asarray([t.values for t in remaining], dtype=np.float64)
            mask = pareto_mask(np.nan_to_num(values, posinf=1e300, neginf=-1e300), maximize)
            chosen += [t for t, on in zip(remaining, mask, strict=True) if on][
                : count - len(chosen)
            ]
            remaining = [t for t, on in zip(remaining, mask, strict=True) if not on]
    return chosen


def _tpe(seed: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        constant_liar=True,
        n_startup_trials=TPE_STARTUP_TRIALS,
        n_ei_candidates=TPE_EI_CANDIDATES,
    )


class _NSGAII(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II, remembering each generation's parent population.

    Optuna caches a generation's parents as trial ids and finds them again by scanning every
    trial at each ask, so an ask costs O(trials). The same trials, in the order Optuna returns
    them from that cache (by trial id), are kept here, so an ask costs O(population) and the
    proposals are unchanged.
    """

    def __init__(self, *, seed: int, population_size: int) -> None:
        super().__init__(seed=seed, population_size=population_size)
        self._parents: dict[int, list[FrozenTrial]] = {}
        self._study: int | None = None

    def get_parent_population(self, study: optuna.Study, generation: int) -> list[FrozenTrial]:
        if self._study != id(study):
            self._parents.clear()
            self._study = id(study)
        found = self._parents.get(generation)
        if found is not None:
            return found
        parents = super().get_parent_population(study, generation)
        self._parents = {g: p for g, p in self._parents.items() if g >= generation - 2}
        self._parents[generation] = sorted(parents, key=lambda trial: trial._trial_id)
        return parents


def canonical_size(spec: StudySpec, *, moe: bool | None) -> int | None:
    """The number of possible canonical points, ``None`` past :data:`ENUMERATION_LIMIT`."""
    if spec.space.size() > ENUMERATION_LIMIT:
        return None
    points = grid_points(spec.space, spec.workload, spec.constraints, moe=moe)
    return sum(1 for _ in points)


def choose_sampler(
    spec: StudySpec, *, budget: int | None, fast: bool, moe: bool | None
) -> SamplerKind:
    """What a study's sampler kind resolves to (``auto``: see :class:`SamplerKind`)."""
    kind = spec.sampler.kind
    if kind is not SamplerKind.AUTO:
        return kind
    size = canonical_size(spec, moe=moe) if fast else None
    if size is not None and (budget is None or size <= budget):
        return SamplerKind.GRID
    return SamplerKind.TPE if len(spec.objectives) == 1 else SamplerKind.NSGA2


def is_fast(spec: StudySpec, factory: Any) -> bool:
    """Whether the study's search backend is fast enough to enumerate (:data:`FAST_BACKENDS`)."""
    return spec.backend.search_name in FAST_BACKENDS or getattr(factory, "fast", False) is True


def create_search(
    spec: StudySpec,
    *,
    budget: int | None = None,
    fast: bool = False,
    moe: bool | None = None,
) -> BaseSearch:
    """The search of the study's ``[sampler] kind`` (``auto`` resolved), seeded with its seed."""
    seed = spec.seed
    kind = choose_sampler(spec, budget=budget, fast=fast, moe=moe)
    if kind is SamplerKind.GRID:
        return GridSearch(spec, optuna.samplers.RandomSampler(seed=seed), moe=moe)
    if kind is SamplerKind.RANDOM:
        return OptunaSearch(spec, optuna.samplers.RandomSampler(seed=seed), moe=moe)
    if kind is SamplerKind.TPE:
        return OptunaSearch(spec, _tpe(seed), moe=moe, generation=TPE_GENERATION, rebuild=True)
    population = NSGA2_POPULATION
    sampler = _NSGAII(seed=seed, population_size=population)
    return OptunaSearch(spec, sampler, moe=moe, generation=population)


__all__ = [
    "BaseSearch",
    "GridSearch",
    "OptunaSearch",
    "Proposal",
    "canonical_size",
    "choose_sampler",
    "create_search",
    "is_fast",
]
