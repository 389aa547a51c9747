"""s31 dsv3pp: the MXFP8 LM head (framework option ``fp8_output_proj``, Megatron-Core's
``fp8_output_proj``: the output layer as a Transformer Engine linear under MXFP8, only with the
``mxfp8`` recipe), and where it is read — the MLPerf v6.0 GB300 DeepSeek-V3 configs'
``FP8_OUTPUT_PROJ=True`` and Megatron-Bridge's DeepSeek-V3 / GPT-OSS-120B full-iteration MXFP8
recipes (``infer_bridge_graphs.FullIterationRecipe.output_proj``)."""

from __future__ import annotations

import pytest

from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_bridge_graphs import FULL_ITERATION
from stage_explore.validation.infer_mlperf_moe import mlperf_moe_switches
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"


def _step(mtp: int, recipe: str = "mxfp8", precision: str = "fp8", **options: object) -> float:
    """A 2-layer Llama-3-8B (its 128,256-token head) on 8 GB300 GPUs, data parallel; ``mtp``
    multi-token-prediction layers."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048, mtp_layers=mtp)
    parallel = ParallelConfig(
        dp=8, micro_batch=1, global_batch=16, precision=precision, fp8_recipe=recipe
    )
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, parallel, load_system("gb300-nvl72")).step_time_s


@pytest.mark.parametrize("mtp", [0, 1])
def test_the_mxfp8_head_is_faster_and_more_so_with_an_mtp_head(mtp: int) -> None:
    saved = _step(mtp) - _step(mtp, fp8_output_proj=True)
    assert saved > 0.0
    if mtp:  # the MTP loss runs the shared output layer a second time
        assert saved > 1.5 * (_step(0) - _step(0, fp8_output_proj=True))


@pytest.mark.parametrize(("recipe", "precision"), [("tensorwise", "fp8"), ("delayed", "bf16")])
def test_no_effect_outside_the_mxfp8_recipe(recipe: str, precision: str) -> None:
    """Megatron-Core's ``is_te_mxfp8_output_proj_active``: the TE head only under mxfp8."""
    base = _step(1, recipe, precision)
    assert _step(1, recipe, precision, fp8_output_proj=True) == pytest.approx(base, rel=1e-12)


@pytest.mark.parametrize(("notes", "recipe", "taken"), [
    ("FP8_DPA=True; FP8_OUTPUT_PROJ=True (MXFP8 LM head)", "mxfp8", True),
    ("FP8_OUTPUT_PROJ=1", "mxfp8", True),
    ("FP8_OUTPUT_PROJ=False", "mxfp8", False),
    ("FP8_DPA=True", "mxfp8", False),  # not stated (the GB200 configs)
    ("FP8_OUTPUT_PROJ=True", "blockwise", False),  # not the mxfp8 recipe: noted, not taken
    ("FP8_OUTPUT_PROJ=True", "", False),  # a BF16 row
])  # fmt: skip
def test_the_mlperf_flag_only_as_stated_under_mxfp8(notes: str, recipe: str, taken: bool) -> None:
    out = Defaults()
    mlperf_moe_switches({"notes": notes}, {"pp": 4, "ep": 32}, out, True, recipe)
    assert out.options.get("fp8_output_proj", False) is taken
    if "FP8_OUTPUT_PROJ=True" in notes and not taken:
        assert any("FP8_OUTPUT_PROJ=True not read" in note for note in out.notes)


@pytest.mark.parametrize(("row_id", "taken"), [
    ("MLPERF-DSV3-GB300-V60-256", True),
    ("MLPERF-DSV3-GB300-V60-COREWEAVE-4096", True),
    ("MLPERF-DSV3-GB200-V60-512", False),  # the GB200 configs leave 671b.yaml's default False
])  # fmt: skip
def test_the_mlperf_deepseek_v3_rows(row_id: str, taken: bool) -> None:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    (case,) = row_cases(row, FILE, 1)
    assert ("fp8_output_proj=true" in case.backend_key) is taken


def test_the_bridge_recipes_that_set_it() -> None:
    """DeepSeek-V3 (GB200 / GB300) and GPT-OSS-120B recipes set it; the Qwen3 helper does not."""
    setting = {(e.flavor, e.system) for e in FULL_ITERATION if e.output_proj}
    assert setting == {
        ("deepseek-v3", "gb200-nvl72"), ("deepseek-v3", "gb300-nvl72"),
        ("gpt-oss-120b", "gb200-nvl72"), ("gpt-oss-120b", "gb300-nvl72"),
    }  # fmt: skip
    for row_id in ("MBX-GB300-26.06-DSV3-MX", "MBX-GB200-26.06-DSV3-MX"):
        (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
        (case,) = row_cases(row, FILE, 1)
        assert "fp8_output_proj=true" in case.backend_key
