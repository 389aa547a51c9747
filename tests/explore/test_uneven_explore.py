"""Uneven pipeline splits in exploration: the ``pp_split`` study knob (parsing, canonical pin,
design points) and the analytical timing of uneven stages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, PipelineSplit
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search.design import build_design_point
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import canonical_params
from stage_explore.system import load_system

STUDY = """\
[study]
name = "split"

[model]
flavor = "llama3.1-405b"

[workload]
kind = "training"
global_batch = 1024
sequence_length = 8192

[system]
preset = "h100-80gb"

[objectives]
step_time_s = "min"

[sampler]
kind = "grid"

[backend]
name = "analytical"

[executor]
kind = "local"

[space]
num_gpus = 8192
tp = 8
pp = [1, 16]
sp = true
recompute = "full"
{split}
"""


def study(tmp_path: Path, split: str) -> StudySpec:
    return parse_study(STUDY.format(split=split), tmp_path / "split.toml")


def test_pp_split_knob_defaults_to_auto_and_lists_policies(tmp_path: Path) -> None:
    assert study(tmp_path, "").space.choices()["pp_split"] == ("auto",)
    assert study(tmp_path, 'pp_split = "auto"').space.choices()["pp_split"] == ("auto",)
    listed = study(tmp_path, 'pp_split = ["auto", "embedding-loss", "even"]')
    assert listed.space.choices()["pp_split"] == ("auto", "embedding-loss", "even")


def test_bad_pp_split_names_the_key_and_the_choices(tmp_path: Path) -> None:
    expected = '[space] pp_split: expected "auto", "even", "ends", "embedding", "loss", '
    expected += '"embedding-loss" or "front", got "middle"'
    with pytest.raises(ConfigError, match=re.escape(expected)) as error:
        study(tmp_path, 'pp_split = "middle"')
    assert "\n" not in str(error.value)


def test_design_points_carry_the_split_and_pp1_pins_it(tmp_path: Path) -> None:
    spec = study(tmp_path, 'pp_split = ["auto", "embedding-loss", "even"]')
    choices = spec.space.choices()
    params = {name: values[0] for name, values in choices.items()}
    params.update(pp=16, pp_split="embedding-loss")
    model, parallel, _ = build_design_point(spec, params)
    assert parallel.pp_split is PipelineSplit.EMBEDDING_LOSS
    assert parallel.stage_layers(model) == (7,) + (8,) * 14 + (7,)
    with pytest.raises(ConfigError, match="must divide `layers` for an even pipeline split"):
        build_design_point(spec, {**params, "pp_split": "even"})
    pinned = canonical_params({**params, "pp": 1}, choices, moe=False)
    assert pinned["pp_split"] == "auto"
    assert canonical_params(params, choices, moe=False)["pp_split"] == "embedding-loss"


def test_the_knob_takes_every_policy_the_config_takes(tmp_path: Path) -> None:
    """NeMo AutoModel's 'front' split (the CLI's --pp-split front) is a study value too: 126
    layers on 16 stages, 8 on the first 14 and 7 on the last 2 (⌊126/16⌋ = 7, 126 mod 16 = 14)."""
    spec = study(tmp_path, 'pp_split = ["ends", "front"]')
    choices = spec.space.choices()
    assert choices["pp_split"] == ("ends", "front")
    params = {name: values[0] for name, values in choices.items()}
    params.update(pp=16, pp_split="front")
    model, parallel, _ = build_design_point(spec, params)
    assert parallel.pp_split is PipelineSplit.FRONT
    base, extra = divmod(model.layers, 16)
    assert parallel.stage_layers(model) == (base + 1,) * extra + (base,) * (16 - extra)


def test_analytical_timing_follows_the_stage_layer_counts() -> None:
    """A stage holding more layers is the slowest and lengthens the step; moving layers off the
    heaviest stage shortens it."""
    # vocabulary 32000: Llama-3's 128256-token output layer and FP32 loss would make the last
    # stage (head + 2 layers in (1, 3, 2, 2)) the slowest, hiding the layers' effect
    model = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=2048, vocab=32000)
    system = load_system("h100-80gb")
    backend = AnalyticalBackend()
    times = {}
    for counts in ((2, 2, 2, 2), (1, 5, 1, 1), (1, 3, 2, 2)):
        parallel = ParallelConfig(pp=4, pp_layers=counts, global_batch=16)
        result = backend.evaluate(model, parallel, system)
        assert result.feasible
        times[counts] = result.step_time_s
        if counts == (1, 5, 1, 1):
            assert result.extra["slowest_stage"] == 1
    assert times[(1, 5, 1, 1)] > times[(1, 3, 2, 2)]
    assert times[(1, 5, 1, 1)] > times[(2, 2, 2, 2)]


def test_automodels_front_split_times_its_own_stages() -> None:
    # 13 layers on 4 stages: AutoModel's split puts the extra layer first (4, 3, 3, 3) with the
    # embedding; STAGE's ends split keeps the end stages light — the two configs differ only in
    # pp_split and must not share a memo; the front split's first stage carries 4 layers and the
    # embedding, the slowest, so its step is the longer
    model = get_flavor("llama3-8b").with_overrides(layers=13, seq_len=2048)
    system = load_system("h100-80gb")
    front = ParallelConfig(pp=4, global_batch=32, pp_split=PipelineSplit.FRONT)
    ends = ParallelConfig(pp=4, global_batch=32, pp_split=PipelineSplit.ENDS)
    assert front.stage_layers(model) == (4, 3, 3, 3)
    assert max(ends.stage_layers(model)) == 4 and ends.stage_layers(model)[0] < 4
    backend = AnalyticalBackend(framework="megatron-core")
    t_front = backend.evaluate(model, front, system).step_time_s
    t_ends = backend.evaluate(model, ends, system).step_time_s
    assert t_front > t_ends
