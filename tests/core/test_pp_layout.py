"""Megatron-Core's pipeline layout string (``pp_layout``): parsing, its one-line errors and the
per-stage layer counts it gives."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, PipelineSplit
from stage_core.parallel.layout import layout_layers, layout_mtp, parse_layout

DSV3 = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge's DeepSeek-V3 layout on 16 stages


def test_repeats_groups_and_commas_unroll_as_megatron_reads_them() -> None:
    stages = parse_layout(DSV3)
    assert len(stages) == 16
    assert stages[0] == ("E", "t", "t", "t", "t")
    assert stages[1:15] == (("t",) * 4,) * 14
    assert stages[-1] == ("t", "m", "L")
    # Megatron-Core's own docstring example: "Ettt|(tt|)*29,m|L"
    example = parse_layout("Ettt|(tt|)*29,m|L")
    assert len(example) == 32 and example[-2:] == (("m",), ("L",))
    assert layout_layers("Et|(tt|)*30mL") == (1,) + (2,) * 30 + (0,)
    assert layout_mtp(DSV3) == 1 and layout_mtp("Et*4|(t*4|)*14tL") == 0


def test_the_layout_sets_every_stage_and_differs_from_the_default_split() -> None:
    model = get_flavor("deepseek-v3")
    default = ParallelConfig(pp=16, dp=16, ep=8, global_batch=256)
    layout = ParallelConfig(pp=16, dp=16, ep=8, global_batch=256, pp_layout=DSV3)
    assert layout.violations(model) == ()
    assert default.stage_layers(model) == (3,) + (4,) * 14 + (2,)
    assert layout.stage_layers(model) == (4,) + (4,) * 14 + (1,)
    interleaved = ParallelConfig(
        pp=4, vpp=4, dp=64, ep=64, global_batch=256, schedule="interleaved", pp_layout=DSV3
    )
    assert interleaved.stage_layers(model) == layout.stage_layers(model)


def test_the_lowering_places_the_layout_s_layers_with_embedding_and_mtp_at_the_ends() -> None:
    model = get_flavor("deepseek-v3").with_overrides(layers=6, seq_len=256)
    program = lower(model, ParallelConfig(pp=3, global_batch=3, pp_layout="Et|tttt|tmL"))
    kinds = [[str(block.kind) for block in s.chunks[0].blocks] for s in program.stages]
    assert [len(s.chunks[0].layers) for s in program.stages] == [1, 4, 1]
    assert kinds[0][0] == "embedding" and "embedding" not in kinds[1] + kinds[2]
    assert kinds[2][-3:] == ["mtp_" + kinds[2][0], "head", "mtp_head"]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("Et*4|(t*4|)*14txL", "takes the layer characters E (embedding)"),
        ("Et*4|(t*4|)*14tmL(", "but got '('"),
        ("Et*4|(t*4|)*13tmL", "must list pp·vpp = 16 stages (pp=16, vpp=1), but got 15"),
        ("t*4E|(t*4|)*14tmL", "must open its first stage with the one 'E'"),
        ("EEt*3|(t*4|)*14tmL", "must open its first stage with the one 'E'"),
        ("Et*4|(t*4|)*14tm", "must end its last stage with the one 'L'"),
        ("Et*4|(t*4|)*14tLm", "must end its last stage with the one 'L'"),
        ("Et*4|(t*4|)*14mtL", "every 't' before the first 'm'"),
        ("Et*4|(t*4|)*13t*4m|tL", "standalone MTP, is not modelled"),
    ],
)
def test_bad_layouts_are_one_line_config_errors(layout: str, message: str) -> None:
    with pytest.raises(ConfigError, match="pp_layout") as error:
        ParallelConfig(pp=16, dp=16, ep=8, global_batch=256, pp_layout=layout)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_model_s_layers_and_mtp_layers_must_match() -> None:
    model = get_flavor("deepseek-v3")
    extra = ParallelConfig(pp=16, dp=16, ep=8, global_batch=256, pp_layout="Et*4|(t*4|)*14ttmL")
    assert extra.violations(model) == (
        "`pp_layout` must place the model's 61 decoder layers ('t'), but got 62 in "
        "pp_layout='Et*4|(t*4|)*14ttmL'",
    )
    no_mtp = ParallelConfig(pp=16, dp=16, ep=8, global_batch=256, pp_layout="Et*4|(t*4|)*14tL")
    assert no_mtp.violations(model) == (
        "`pp_layout` must place the model's 1 MTP layers ('m'), but got 0 in "
        "pp_layout='Et*4|(t*4|)*14tL'",
    )
    assert no_mtp.violations(model.with_overrides(mtp_layers=0)) == ()


def test_a_layout_takes_no_other_split_option() -> None:
    for extra in (
        {"pp_layers": (4,) * 15 + (1,)},
        {"pp_first_layers": 4},
        {"pp_split": PipelineSplit.EMBEDDING_LOSS},
    ):
        with pytest.raises(ConfigError, match="takes no other split option") as error:
            ParallelConfig(pp=16, dp=16, ep=8, global_batch=256, pp_layout=DSV3, **extra)  # type: ignore[arg-type]
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="`pp_layout` must be a layout string"):
        ParallelConfig(pp=2, pp_layout=3)  # type: ignore[arg-type]
