"""``--layers`` on a model whose ``layer_pattern`` fixes its layer count (s26 review): the error
named the user's own value as "the model has layers=4" and no way out; it now names the option,
the count the model takes, and the model file that sets another (which works)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "--model", "nemotron-h-8b", "--layers", "4", "--out", "{out}"],
        ["eval", "--phase", "decode", "--model", "nemotron-h-8b", "--layers", "4", "--batch",
         "2", "--context-len", "128", "--system", "h100-80gb"],
    ],
)  # fmt: skip
def test_layers_against_a_fixed_pattern_names_the_option_and_the_way_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main([a.format(out=tmp_path / "t") for a in argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "--layers 4: layer_pattern" in lines[0]
    assert "takes only its 52 layers" in lines[0] and "base = 'nemotron-h-8b'" in lines[0]


def test_the_model_file_the_error_names_sets_another_count(tmp_path: Path) -> None:
    model = tmp_path / "nh4.toml"
    model.write_text(
        'base = "nemotron-h-8b"\nlayers = 4\nlayer_pattern = "mamba, mlp, attn, mlp"\n'
    )
    out = tmp_path / "t"
    assert main(["trace", "--model", str(model), "--tp", "2", "--out", str(out), "--quiet"]) == 0
    assert len(list(out.glob("workload.*.et"))) == 2
