"""Reproducible studies: the same study file and seed give the same trials, in the same order,
on the inline, local and Ray executors, with different batch and chunk sizes, and whatever
order the evaluations finish in."""

from __future__ import annotations

import random
import time
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stage_explore import load_results
from stage_explore.evaluation import Evaluation
from stage_explore.search import LocalExecutor, explore
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


class JitterBackend(support.SyntheticBackend):  # type: ignore[misc,name-defined]
    """The synthetic backend taking a random 0-3 ms per point, so evaluations finish in an
    order that changes from run to run (and from worker to worker)."""

    def evaluate(self, model: Any, parallel: Any, system: Any) -> Evaluation:
        time.sleep(random.random() * 0.003)
        result: Evaluation = super().evaluate(model, parallel, system)
        return result


JITTER = f"{JitterBackend.__module__}:{JitterBackend.__qualname__}"
SPACE = support.SPACE + 'sp = [false, true]\nrecompute = ["none", "selective", "full"]\n'
COLUMNS = ["trial", "num_gpus", "tp", "pp", "sp", "zero", "recompute", "micro_batch", "status"]


def study(tmp_path: Path, sampler: str, *, batch_size: int, chunk_size: int, kind: str) -> Any:
    text = support.study_text(
        sampler=sampler,
        trials=150,
        batch_size=batch_size,
        space=SPACE.replace('recompute = ["none", "full"]\n', ""),
        executor=f'kind = "{kind}"\nworkers = 2\nchunk_size = {chunk_size}',
    ).replace(support.BACKEND, JITTER)
    return parse_study(text, tmp_path / f"{sampler}-{batch_size}-{chunk_size}.toml")


def trials_of(directory: Path) -> pd.DataFrame:
    frame = load_results(directory).sort_values("trial").reset_index(drop=True)
    return frame[[*COLUMNS, "step_time_s", "peak_memory_bytes"]]


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random", "auto"])
def test_same_trials_on_inline_and_local_executors_and_any_batch_size(
    tmp_path: Path, sampler: str
) -> None:
    inline = study(tmp_path, sampler, batch_size=4, chunk_size=1, kind="local")
    first = explore(inline, out=tmp_path / "inline", executor_factory=support.InlineExecutor)
    local = study(tmp_path, sampler, batch_size=64, chunk_size=3, kind="local")
    second = explore(
        local, out=tmp_path / "local", executor_factory=lambda job: LocalExecutor(job, 2)
    )
    expected = trials_of(first.directory)
    assert len(expected) == first.progress.done > 100
    pd.testing.assert_frame_equal(trials_of(second.directory), expected)
    assert second.progress.repeats == first.progress.repeats


@pytest.mark.ray
def test_same_trials_on_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stage_explore.search import create_executor

    monkeypatch.setenv("PYTHONPATH", support.subprocess_env()["PYTHONPATH"])
    inline = study(tmp_path, "tpe", batch_size=16, chunk_size=2, kind="local")
    first = explore(inline, out=tmp_path / "inline", executor_factory=support.InlineExecutor)
    on_ray = study(tmp_path, "tpe", batch_size=48, chunk_size=5, kind="ray")
    second = explore(
        on_ray,
        out=tmp_path / "ray",
        executor_factory=lambda job: create_executor(on_ray.executor, job),
    )
    pd.testing.assert_frame_equal(trials_of(second.directory), trials_of(first.directory))
