"""``stage explore`` names the ``[space]`` values a finished grid never reached: a value no
structurally possible point has (12 GPUs that no tp·pp divides into a dp dividing the batch)
is never proposed, so without the note a study listing it says nothing about it."""

from __future__ import annotations

import importlib
from pathlib import Path

from stage_explore.cli.explore import unreached_values
from stage_explore.search import explore
from stage_explore.study import parse_study

support = importlib.import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def test_a_value_no_point_can_have_is_named_once_the_grid_ends(tmp_path: Path) -> None:
    # s19 usertour: num_gpus = [8, 12] with a batch of 64 ran 8 GPUs only, silently.
    space = 'num_gpus = [8, 12]\ntp = [1, 2]\npp = [1]\nrecompute = ["none", "full"]\n'
    text = support.study_text(sampler="grid", trials=None, space=space)
    spec = parse_study(text, tmp_path / "study.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    assert summary.stopped_by == "grid"
    notes = unreached_values(spec, summary.directory)
    assert len(notes) == 1 and notes[0].startswith("note: [space] num_gpus = 12: in no record")
    reachable = support.study_text(name="all", sampler="grid", trials=None,
                                   space=space.replace("12", "16"))  # fmt: skip
    spec = parse_study(reachable, tmp_path / "all.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    assert unreached_values(spec, summary.directory) == []
