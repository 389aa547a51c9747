"""The NeMo 1.x DGX Cloud Grok-1 recipe's experts as Megatron-Core's SequentialMLP, and
BLOOM's ALiBi (5 Dec 2026, s17 infer8): ``grok1/grok1_314b.yaml`` sets ``moe_grouped_gemm:
false``, so an inferred Grok-1 row of that recipe takes ``moe_sequential_mlp`` as its
hand-written setups do (the NeMo 2.0 recipe and other models of the NeMo 1.x recipes do not);
a BLOOM row of any size has no position-embedding table, as the hand-written BLOOM setup."""

from __future__ import annotations

import pytest

from stage_explore.validation.setups import Case
from tests.explore.published_rows import assert_inferred_as_hand
from tests.explore.published_rows import inferred_case as _case

HELD_OUT = "published_runs_held_out.csv"
GSW_2411 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 24.11, NeMo dev container)"
GSW_2502 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.02, NeMo 24.12)"
GSW_2505 = "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.05.04, NeMo 25.04)"


def _grok(source: str, precision: str = "bf16", **cells: str) -> Case:
    return _case(**{
        "source": source, "model": "Grok-1 314B proxy (4 layers)", "layers": "4",
        "hidden": "6144", "ffn": "32768", "heads": "48", "kv_heads": "8", "vocab": "128256",
        "seq_len": "8192", "moe": "8 experts, top-2", "tp": "4", "cp": "1", "dp": "4",
        "ep": "4", "num_gpus": "16", "global_batch_seqs": "64", "micro_batch": "1",
        "precision": precision, **cells,
    })  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_nemo_1_grok_recipe_runs_its_experts_as_sequential_mlps(precision: str) -> None:
    case = _grok(GSW_2502, precision)
    assert dict(case.framework_options)["moe_sequential_mlp"] is True
    said = [a for a in case.assumptions if "moe_grouped_gemm false" in a]
    assert len(said) == 1 and "SequentialMLP" in said[0], case.assumptions


def test_the_nemo_2_grok_recipe_and_nemo_1_dense_models_keep_the_grouped_experts() -> None:
    assert "moe_sequential_mlp" not in dict(_grok(GSW_2505).framework_options)
    dense = _case(source=GSW_2502, model="Nemotron-4 15B", layers="32", hidden="6144",
                  ffn="24576", heads="48", kv_heads="8", tp="4", dp="2", num_gpus="8",
                  global_batch_seqs="64")  # fmt: skip
    assert "moe_sequential_mlp" not in dict(dense.framework_options)


@pytest.mark.parametrize(
    "source", ["DGXC-GROK1-BF16", "DGXC-GROK1-FP8", "DGXC2502-GROK1-BF16", "DGXC2502-GROK1-FP8"]
)
def test_the_package_grok_rows_infer_the_hand_written_experts(source: str) -> None:
    assert_inferred_as_hand(
        HELD_OUT, source, ("parallel.grad_fp32", "model.capacity_factor"),
        ("moe_sequential_mlp", "attention_kernel", "pipeline_outputs_kept"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "position"),
    [("BLOOM 176B", "none"), ("bloom-7b1", "none"), ("GPT-3 175B", "learned"),
     ("Llama 3 8B", "rotary")],
)  # fmt: skip
def test_a_bloom_row_has_no_position_table_at_any_size(model: str, position: str) -> None:
    cells = {"model": model}
    if "bloom" in model.lower():
        cells.update(layers="30", hidden="4096", heads="32", ffn="16384", vocab="250880")
    case = _case(**cells)
    assert case.model is not None and str(case.model.position) == position
    assert any("ALiBi" in a for a in case.assumptions) is (position == "none")


def test_the_package_bloom_row_infers_the_hand_written_position() -> None:
    assert_inferred_as_hand(HELD_OUT, "BLOOM", ("model.position",), ())
