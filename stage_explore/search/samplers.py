"""Proposing candidates with an in-memory Optuna study (ask/tell), grid or model-based.

Contents:
    :class:`Proposal`
        one proposed point: its parameters and the Optuna handle to tell it with.
    :class:`BaseSearch`
        the contract the driver uses: ``propose``, ``tell``, ``add_finished`` (resume).
    :class:`OptunaSearch`
        random, TPE and NSGA-II samplers through ``study.ask`` / ``study.tell``; every
        parameter is a categorical distribution over the study's values.
    :class:`GridSearch`
        every structurally possible point once, in the space's order; finished points are
        added to the study with ``add_trial`` so it holds every trial whichever the sampler.
    :func:`create_search`
        the search a study asks for.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import StudyDirection
from optuna.trial import Trial, TrialState, create_trial

from stage_explore.search.outcomes import Verdict
from stage_explore.study.space import grid_points
from stage_explore.study.spec import Direction, SamplerKind, StudySpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """A proposed point: its parameters, and the asked Optuna trial (``None`` for the grid)."""

    params: Mapping[str, Any]
    trial: Trial | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "params": dict(self.params),
            "optuna_trial": None if self.trial is None else self.trial.number,
        }


def _key(params: Mapping[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(params[name] for name in names)


class BaseSearch(abc.ABC):
    """A source of candidates backed by an in-memory Optuna study.

    Contract:
        ``propose(count)`` returns at most ``count`` proposals; fewer (possibly none) only when
        the space is exhausted, after which ``exhausted`` is true. Every proposal is finished
        exactly once with ``tell``. ``add_finished`` records a trial finished in an earlier
        run, before any ``propose``; the search neither repeats nor forgets it.
    """

    def __init__(self, spec: StudySpec, sampler: optuna.samplers.BaseSampler) -> None:
        self.spec = spec
        self.names = spec.space.names()
        self.distributions: dict[str, BaseDistribution] = {
            name: CategoricalDistribution(values) for name, values in spec.space.choices().items()
        }
        directions = [
            StudyDirection.MINIMIZE
            if objective.direction is Direction.MIN
            else StudyDirection.MAXIMIZE
            for objective in spec.objectives
        ]
        self.study = optuna.create_study(
            study_name=spec.name, directions=directions, sampler=sampler
        )
        self.exhausted = False

    @abc.abstractmethod
    def propose(self, count: int) -> list[Proposal]:
        """Up to ``count`` new points."""

    @abc.abstractmethod
    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        """Finish a proposal with its verdict."""

    def add_finished(self, params: Mapping[str, Any], verdict: Verdict) -> None:
        """Add a trial finished earlier (resume) to the study."""
        self.study.add_trial(
            create_trial(
                state=verdict.state,
                values=None if verdict.values is None else list(verdict.values),
                params={name: params[name] for name in self.names},
                distributions=self.distributions,
                constraints=None if verdict.state is TrialState.FAIL else dict(verdict.constraints),
            )
        )


class OptunaSearch(BaseSearch):
    """Random, TPE or NSGA-II proposals through ask/tell."""

    def propose(self, count: int) -> list[Proposal]:
        proposals = []
        for _ in range(count):
            trial = self.study.ask(self.distributions)
            proposals.append(Proposal(params=dict(trial.params), trial=trial))
        return proposals

    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        assert proposal.trial is not None, "an Optuna proposal carries its trial"
        if verdict.state is TrialState.FAIL:
            self.study.tell(proposal.trial, state=TrialState.FAIL)
            return
        for name, value in verdict.constraints.items():
            proposal.trial.set_constraint(name, value)
        self.study.tell(proposal.trial, list(verdict.values or ()))


class GridSearch(BaseSearch):
    """Every structurally possible point once; impossible points are never proposed."""

    def __init__(self, spec: StudySpec, sampler: optuna.samplers.BaseSampler) -> None:
        super().__init__(spec, sampler)
        self._points: Iterator[dict[str, Any]] = grid_points(
            spec.space, spec.workload, spec.constraints
        )
        self._visited: set[tuple[Any, ...]] = set()

    def add_finished(self, params: Mapping[str, Any], verdict: Verdict) -> None:
        super().add_finished(params, verdict)
        self._visited.add(_key(params, self.names))

    def propose(self, count: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        while len(proposals) < count:
            point = next(self._points, None)
            if point is None:
                self.exhausted = True
                break
            key = _key(point, self.names)
            if key not in self._visited:
                self._visited.add(key)
                proposals.append(Proposal(params=point))
        return proposals

    def tell(self, proposal: Proposal, verdict: Verdict) -> None:
        BaseSearch.add_finished(self, proposal.params, verdict)


def create_search(spec: StudySpec) -> BaseSearch:
    """The search of the study's ``[sampler] kind``, seeded with ``[study] seed``."""
    seed = spec.seed
    if spec.sampler.kind is SamplerKind.GRID:
        return GridSearch(spec, optuna.samplers.RandomSampler(seed=seed))
    if spec.sampler.kind is SamplerKind.RANDOM:
        return OptunaSearch(spec, optuna.samplers.RandomSampler(seed=seed))
    if spec.sampler.kind is SamplerKind.TPE:
        return OptunaSearch(spec, optuna.samplers.TPESampler(seed=seed, constant_liar=True))
    return OptunaSearch(spec, optuna.samplers.NSGAIISampler(seed=seed))
