"""``pp_layout`` in exploration: the ``--pp-layout`` option, the analytical timing of the stages
it sets, and Megatron-Bridge's DeepSeek-V3 layouts on inferred rows."""

from __future__ import annotations

import json

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.infer_bridge_layout import bridge_deepseek_layout, recipe_layout
from stage_explore.validation.infer_release import Defaults

SMALL = ("--model", "llama3-8b", "--layers", "6", "--seq-len", "256", "--global-batch", "4")


def test_the_option_reaches_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", *SMALL, "--pp", "4", "--pp-layout", "Et|tt|tt|tL", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["parallel"]["pp_layout"] == "Et|tt|tt|tL"
    assert main(["memory", *SMALL, "--pp", "4", "--pp-layers", "1,2,2,1", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["weights_bytes"] for r in document["ranks"]] == [
        r["weights_bytes"] for r in listed["ranks"]
    ]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("Et|tt|tt|tX", "takes the layer characters"),
        ("Et|tt|ttL", "must list pp·vpp = 4 stages"),
        ("Et|tt|tt|ttL", "must place the model's 6 decoder layers ('t'), but got 7"),
    ],
)
def test_bad_layouts_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], layout: str, message: str
) -> None:
    assert main(["memory", *SMALL, "--pp", "4", "--pp-layout", layout]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_heaviest_stage_of_a_layout_sets_the_step() -> None:
    """The same 8 layers on 4 stages: a layout that loads stage 1 with 5 is slower than one
    that spreads them, and times exactly as the same counts given as ``pp_layers``."""
    model = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=2048, vocab=32000)
    system = load_system("h100-80gb")
    backend = AnalyticalBackend()
    heavy = backend.evaluate(
        model, ParallelConfig(pp=4, global_batch=16, pp_layout="Et|t*5|t|tL"), system
    )
    spread = backend.evaluate(
        model, ParallelConfig(pp=4, global_batch=16, pp_layout="Et|ttt|tt|ttL"), system
    )
    listed = backend.evaluate(
        model, ParallelConfig(pp=4, global_batch=16, pp_layers=(1, 3, 2, 2)), system
    )
    assert heavy.feasible and spread.feasible
    assert heavy.extra["slowest_stage"] == 1
    assert heavy.step_time_s > spread.step_time_s
    assert spread.step_time_s == listed.step_time_s


def test_deepseek_v3_takes_megatron_bridge_s_layout_by_its_sizes() -> None:
    out = Defaults()
    assert bridge_deepseek_layout("deepseek-v3", "b200", 1, {"pp": 16, "ep": 8}, out)
    assert out.parallel["pp_layout"] == "Et*4|(t*4|)*14tmL"
    assert "set_deepseek_v3_pipeline_model_parallel_layout" in out.notes[0]
    # without MTP ("w/o MTP" rows) the recipe's last stage is one layer and the loss
    assert recipe_layout(4, 4, 0) == "Et*4|(t*4|)*14tL"
    assert recipe_layout(8, 1, 1) == "Et*8|(t*8|)*6t*5mL"
    # GB300's PP 2 VP 8 is the workload config's own layout
    out = Defaults()
    assert bridge_deepseek_layout("deepseek-v3", "gb300-nvl72", 1, {"pp": 2, "vpp": 8}, out)
    assert out.parallel["pp_layout"] == "Et*4|(t*4|)*14tmL"
    assert "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1" in out.notes[0]
    # sizes neither the recipe nor a config names, and other models, are left alone
    for flavor, stated in (("deepseek-v3", {"pp": 2, "vpp": 4}), ("qwen3-235b-a22b", {"pp": 16})):
        out = Defaults()
        assert not bridge_deepseek_layout(flavor, "gb300-nvl72", 1, stated, out)
        assert out.parallel == {} and out.notes == []
