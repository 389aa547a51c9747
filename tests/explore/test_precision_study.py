"""The ``precision`` and ``fp8_recipe`` study knobs: parsing (fixed, list, "auto", bad values),
the canonical pin of ``fp8_recipe`` outside FP8, the ParallelConfig a design point builds, a
precision the system cannot run recorded infeasible with the backend's reason, and a small
grid study end to end (records, ``stage explore``'s per-precision lines, ``stage report``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.parallel import ParallelConfig
from stage_explore import load_results
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.search.design import build_design_point
from stage_explore.study import StudySpec, parse_study
from stage_explore.study.space import canonical_params, grid_points

#: A 1.3B model on one 8-GPU B200 node: bf16 and fp8 run there, fp4 has no grounded NVFP4
#: GEMM rate on b200 (the backend raises), mxfp8 needs Blackwell (b200 is).
STUDY = """\
[study]
name = "formats"
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 16
sequence_length = 2048
[system]
preset = "{system}"
[space]
num_gpus = 8
tp = [1, 2]
{knobs}
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
[executor]
kind = "local"
workers = 1
"""

SEARCHED = 'precision = ["bf16", "fp8", "fp4"]\nfp8_recipe = ["delayed", "mxfp8"]'


def study(tmp_path: Path, knobs: str = SEARCHED, system: str = "b200") -> StudySpec:
    return parse_study(STUDY.format(knobs=knobs, system=system), tmp_path / "precisions.toml")


def _header(report: str) -> list[str]:
    """The column names of a ``stage report`` text's first table."""
    return next(line for line in report.splitlines() if line.startswith("trial ")).split()


def test_the_knobs_default_to_bf16_and_delayed_and_take_fixed_and_listed_values(
    tmp_path: Path,
) -> None:
    choices = study(tmp_path, "").space.choices()
    assert (choices["precision"], choices["fp8_recipe"]) == (("bf16",), ("delayed",))
    fixed = study(tmp_path, 'precision = "fp8"\nfp8_recipe = "blockwise"').space.choices()
    assert (fixed["precision"], fixed["fp8_recipe"]) == (("fp8",), ("blockwise",))
    listed = study(tmp_path).space.choices()
    assert listed["precision"] == ("bf16", "fp8", "fp4")
    assert listed["fp8_recipe"] == ("delayed", "mxfp8")
    every = study(tmp_path, 'precision = "auto"\nfp8_recipe = "auto"').space.choices()
    assert every["precision"] == ("bf16", "fp16", "fp8", "fp4")
    assert every["fp8_recipe"] == ("delayed", "tensorwise", "blockwise", "mxfp8", "rowwise")


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ('precision = ["bf16", "fp6"]', 'precision: expected "bf16", "fp16", "fp8" or "fp4", '
         'got "fp6"'),
        ('precision = "FP8"', 'got "FP8"'),
        ('precision = ["fp8", "fp8"]', "precision: expected distinct values"),
        ("precision = 8", "precision: expected"),
        ("precision = { min = 1, max = 2 }", "precision: expected a value or a list"),
        ('fp8_recipe = "current"', 'fp8_recipe: expected "delayed", "tensorwise", "blockwise", '
         '"mxfp8" or "rowwise", got "current"'),
    ],
)  # fmt: skip
def test_a_bad_value_is_a_one_line_error_naming_it_and_the_choices(
    tmp_path: Path, knobs: str, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        study(tmp_path, knobs)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_inference_study_refuses_the_fp8_recipe_knob(tmp_path: Path) -> None:
    text = """\
[study]
name = "serve"
[model]
flavor = "llama3-8b"
[workload]
kind = "inference"
prompt_len = 512
output_len = 64
[system]
preset = "h100-80gb"
[space]
num_gpus = 8
batch = 64
fp8_recipe = "delayed"
[objectives]
tokens_per_s_per_gpu = "max"
[sampler]
kind = "grid"
"""
    with pytest.raises(ConfigError, match="fp8_recipe: a training knob"):
        parse_study(text, tmp_path / "serve.toml")


def test_the_fp8_recipe_is_pinned_outside_fp8(tmp_path: Path) -> None:
    spec = study(tmp_path)
    choices = spec.space.choices()
    points = list(grid_points(spec.space, spec.workload, spec.constraints, moe=False))
    pairs = sorted({(point["precision"], point["fp8_recipe"]) for point in points})
    assert pairs == [("bf16", "delayed"), ("fp4", "delayed"), ("fp8", "delayed"),
                     ("fp8", "mxfp8")]  # fmt: skip
    assert len(points) == 2 * len(pairs)  # tp 1 and 2
    point = {**points[0], "precision": "bf16", "fp8_recipe": "mxfp8"}
    canonical = canonical_params(point, choices, moe=False)
    assert canonical["fp8_recipe"] == "delayed"
    assert canonical_params(canonical, choices, moe=False) == canonical
    # "delayed" not listed: the pin takes the first listed value, and the design ignores it
    listed = {**choices, "fp8_recipe": ("blockwise", "mxfp8")}
    assert canonical_params(point, listed, moe=False)["fp8_recipe"] == "blockwise"
    fp8 = {**point, "precision": "fp8"}
    assert canonical_params(fp8, listed, moe=False)["fp8_recipe"] == "mxfp8"


@pytest.mark.parametrize(
    ("precision", "recipe", "expected"),
    [("bf16", "mxfp8", "delayed"), ("fp8", "mxfp8", "mxfp8"), ("fp8", "blockwise", "blockwise"),
     ("fp4", "blockwise", "delayed"), ("fp16", "delayed", "delayed")],
)  # fmt: skip
def test_the_design_point_carries_the_precision_and_the_recipe_under_fp8(
    tmp_path: Path, precision: str, recipe: str, expected: str
) -> None:
    spec = study(tmp_path, 'precision = "auto"\nfp8_recipe = "auto"')
    params = {name: values[0] for name, values in spec.space.choices().items()}
    params.update(precision=precision, fp8_recipe=recipe)
    _, parallel, _ = build_design_point(spec, params)
    assert isinstance(parallel, ParallelConfig)
    assert (str(parallel.precision), str(parallel.fp8_recipe)) == (precision, expected)
    default = study(tmp_path, "")
    params = {name: values[0] for name, values in default.space.choices().items()}
    _, parallel, _ = build_design_point(default, params)
    assert parallel == ParallelConfig(dp=8, global_batch=16, seq_len=2048)  # as before the knobs


def _b200_without_nvfp4_fraction(tmp_path: Path) -> str:
    """A study on a user system file: the b200 preset without its NVFP4 GEMM fraction, so that
    fp4 is refused (the preset itself runs fp4 since s18 nvfp4rate)."""
    preset = resources.files("stage_explore").joinpath("system/presets/b200.toml").read_text()
    lines = [line for line in preset.splitlines() if not line.startswith("nvfp4 = 0.")]
    assert len(lines) == len(preset.splitlines()) - 1  # the one gemm_efficiency line
    (tmp_path / "b200-no-nvfp4.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    text = STUDY.format(knobs=SEARCHED, system="b200")
    return text.replace('preset = "b200"', 'file = "b200-no-nvfp4.toml"')


def test_a_grid_study_searching_precision_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "precisions.toml"
    text = _b200_without_nvfp4_fraction(tmp_path)
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["explore", str(path), "--out", str(out), "--executor", "local"]) == 0
    printed = capsys.readouterr().out
    frame = load_results(out / "formats")
    assert len(frame) == 8
    # fp4 on a b200 without an NVFP4 fraction: infeasible with the backend's own one-line
    # reason, never a crash
    spec = parse_study(text, path)
    model, _, system = build_design_point(spec, {**frame.iloc[0].to_dict(), "precision": "fp4"})
    with pytest.raises(ConfigError) as raised:
        AnalyticalBackend().evaluate(
            model, ParallelConfig(dp=8, global_batch=16, seq_len=2048, precision="fp4"), system
        )
    fp4 = frame[frame["precision"] == "fp4"]
    assert len(fp4) == 2 and set(fp4["status"]) == {"infeasible"}
    assert set(fp4["reason"]) == {" ".join(str(raised.value).split())}
    assert "b200" in fp4["reason"].iloc[0] and "nvfp4" in fp4["reason"].iloc[0]
    # every other point is the analytical result of the ParallelConfig its row names
    ok = frame[frame["status"] == "ok"]
    assert len(ok) == 6
    for row in ok.itertuples():
        direct = ParallelConfig(
            dp=int(row.dp), tp=int(row.tp), global_batch=16, seq_len=2048,
            precision=row.precision, fp8_recipe=row.fp8_recipe,
        )  # fmt: skip
        again = AnalyticalBackend().evaluate(model, direct, system)
        assert (again.step_time_s, again.peak_memory_bytes) == (
            row.step_time_s,
            row.peak_memory_bytes,
        )
    for precision in ("bf16", "fp8"):
        rows = ok[ok["precision"] == precision]
        best = rows.loc[rows["step_time_s"].idxmin()]
        assert (
            f"precision {precision}: {len(rows)} ok, 0 infeasible; best step_time_s "
            f"{best['step_time_s']:.6g} (trial {int(best['trial'])})"
        ) in printed
    assert f"precision fp4: 0 ok, 2 infeasible; none feasible: {fp4['reason'].iloc[0]}" in printed
    assert main(["report", str(out / "formats")]) == 0
    header = _header(capsys.readouterr().out)
    assert "precision" in header and "fp8_recipe" in header


def test_a_study_without_the_knob_prints_no_precision_lines_and_records_bf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.toml"
    path.write_text(STUDY.format(knobs="", system="h100-80gb"), encoding="utf-8")
    assert main(["explore", str(path), "--out", str(tmp_path / "out"), "--executor", "local"]) == 0
    assert "precision" not in capsys.readouterr().out
    frame = load_results(tmp_path / "out" / "formats")
    assert set(frame["precision"]) == {"bf16"} and set(frame["fp8_recipe"]) == {"delayed"}
    assert main(["report", str(tmp_path / "out" / "formats")]) == 0
    assert "precision" not in capsys.readouterr().out


def test_a_study_fixed_at_fp8_shows_its_precision_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fp8.toml"
    path.write_text(STUDY.format(knobs='precision = "fp8"', system="h100-80gb"), encoding="utf-8")
    assert main(["explore", str(path), "--out", str(tmp_path / "out"), "--executor", "local"]) == 0
    assert "precision fp8" not in capsys.readouterr().out  # one precision: nothing to compare
    assert main(["report", str(tmp_path / "out" / "formats")]) == 0
    header = _header(capsys.readouterr().out)
    assert "precision" in header and "fp8_recipe" not in header
