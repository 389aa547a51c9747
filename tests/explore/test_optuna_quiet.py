"""A study run from Python does not print Optuna's "A new study created in memory" line (the
s23 review's leftover): the command line silences Optuna's logger, the API left it at Optuna's
default and every run (and every TPE history rebuild) printed the line on stderr. A caller who
asked for Optuna's logging still gets it, and no logging setting is left changed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import optuna
import pytest

from stage_explore.search import explore
from stage_explore.search.optuna_quiet import CREATED, create_study
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)
STORAGE_LOGGER = logging.getLogger(optuna.storages.InMemoryStorage.__module__)


class _Lines(logging.Handler):
    """Collects the messages reaching Optuna's library logger (beside Optuna's own handler,
    whose stream is the stderr of the moment Optuna was imported, which pytest replaced)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def created(self) -> list[str]:
        return [line for line in self.lines if line.startswith(CREATED)]


@pytest.fixture
def optuna_lines() -> Iterator[_Lines]:
    """Optuna's logging as a fresh Python process has it (other tests run the CLI, which sets
    WARNING), with a collecting handler; restored afterwards."""
    root = logging.getLogger("optuna")
    verbosity, propagate = optuna.logging.get_verbosity(), root.propagate
    optuna.logging.set_verbosity(optuna.logging.INFO)
    root.propagate = False
    lines = _Lines()
    root.addHandler(lines)
    yield lines
    root.removeHandler(lines)
    optuna.logging.set_verbosity(verbosity)
    root.propagate = propagate


def _run(tmp_path: Path, sampler: str) -> None:
    path = tmp_path / f"{sampler}.toml"
    path.write_text(support.study_text(name=sampler, sampler=sampler, trials=8))
    spec = parse_study(path.read_text(), path)
    explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_python_run_does_not_print_optunas_creation_line(
    tmp_path: Path, optuna_lines: _Lines, sampler: str
) -> None:
    _run(tmp_path, sampler)
    assert optuna_lines.created() == []
    assert STORAGE_LOGGER.filters == []  # the filter is gone after the creation
    assert optuna.logging.get_verbosity() == optuna.logging.INFO  # nothing set globally


def test_a_caller_who_asked_for_optunas_logging_gets_the_line(optuna_lines: _Lines) -> None:
    sampler = optuna.samplers.RandomSampler(seed=0)
    directions = [optuna.study.StudyDirection.MINIMIZE]
    create_study("quiet", directions, sampler)
    assert optuna_lines.created() == []
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    create_study("asked", directions, sampler)
    assert optuna_lines.created() == ["A new study created in memory with name: asked"]


def test_optuna_itself_still_logs_the_line_by_default(optuna_lines: _Lines) -> None:
    """The filter is scoped to STAGE's creations: the caller's own study is reported as
    Optuna reports it (so the first test is not passing because the line vanished upstream)."""
    optuna.create_study(study_name="theirs")
    assert optuna_lines.created() == ["A new study created in memory with name: theirs"]
