"""Creating STAGE's in-memory Optuna studies without Optuna's "A new study created" line.

Contents:
    :func:`create_study`
        ``optuna.create_study`` with the creation record dropped while Optuna's logging is in
        its default state.

A study run keeps its proposals in an in-memory Optuna study (and TPE rebuilds one when its
history is bounded), an implementation detail the caller never named: Optuna's INFO line
"A new study created in memory with name: …" on stderr says nothing the caller can use, and
came again mid-run at each TPE rebuild. The command line sets Optuna's verbosity to WARNING;
a Python caller of :func:`~stage_explore.search.explore` keeps Optuna's logging as it is, so
the line is dropped here by a filter on the in-memory storage's logger, present only while
the study is created (no logger's level, handler or propagation is changed). A caller who
asked for Optuna's logging — ``optuna.logging.set_verbosity(optuna.logging.DEBUG)``, or
``optuna.logging.enable_propagation()`` to route it through their own handlers — gets the
line as Optuna gives it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import optuna
from optuna.study import StudyDirection

#: The message prefix of Optuna's study-creation record.
CREATED = "A new study created"


def _asked_for_optuna_logging() -> bool:
    """Whether the caller changed Optuna's logging from its default (INFO, not propagated)."""
    return optuna.logging.get_verbosity() <= logging.DEBUG or logging.getLogger("optuna").propagate


def _not_a_creation(record: logging.LogRecord) -> bool:
    """The filter: keep every record but Optuna's study-creation line."""
    return not record.getMessage().startswith(CREATED)


def create_study(
    name: str, directions: Sequence[StudyDirection], sampler: optuna.samplers.BaseSampler
) -> optuna.Study:
    """An in-memory ``optuna.Study`` named ``name``, created without the creation line unless
    the caller asked for Optuna's logging (see the module docstring)."""
    storage_logger = logging.getLogger(optuna.storages.InMemoryStorage.__module__)
    quiet = not _asked_for_optuna_logging()
    if quiet:
        storage_logger.addFilter(_not_a_creation)
    try:
        return optuna.create_study(study_name=name, directions=list(directions), sampler=sampler)
    finally:
        if quiet:
            storage_logger.removeFilter(_not_a_creation)
