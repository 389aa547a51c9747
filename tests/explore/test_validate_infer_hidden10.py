"""Rows of s24 hidden10 (BigScience's tr11-176B-ml topology benchmarks of 28 Feb 2022, added to
published_runs_no_setup.csv as ``BSPRE-*``): the inference sets them up as the hand-written
``BLOOM`` source sets up BLOOM 176B's training run (setups.toml: the deepspeed profile, ZeRO 1,
full recompute, the embedding and the loss counted in the pipeline split, no position table),
so the prequel's row of BLOOM's final shape and layout (NHIDDEN 14336, NLAYERS 70, NHEADS 112,
TP 4 PP 12 DP 8, MBS 2) is predicted as the BLOOM row is."""

from __future__ import annotations

import math

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import data_dir
from tests.explore.package_cases import package_cases

NO_SETUP = "published_runs_no_setup.csv"
TWIN = "BSPRE-A100-H14336-L70-TP4PP12-MBS2-NH112"


def _prequel() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_csv(data_dir() / NO_SETUP) if r["id"].startswith("BSPRE-")}


def test_the_prequel_rows_read_as_the_bloom_setup() -> None:
    rows = _prequel()
    assert len(rows) == 17
    for row_id, row in rows.items():
        (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
        assert case.framework == "deepspeed", row_id
        assert case.system == "systems/jean-zay-a100.toml", row_id  # Omni-Path named
        assert case.parallel is not None and case.model is not None
        assert case.parallel.zero == 1 and str(case.parallel.recompute) == "full", row_id
        assert str(case.model.position) == "none", row_id  # BLOOM's ALiBi: no table
        # (layers + 2) divides pp: the default split is Megatron's embedding-and-loss one
        assert (case.model.layers + 2) % case.parallel.pp == 0, row_id


def test_the_final_shape_row_is_predicted_as_the_bloom_row() -> None:
    (bloom,) = [c for c in package_cases() if c.id == "BLOOM-176B-384"]
    (twin, *_) = row_cases(_prequel()[TWIN], NO_SETUP, 1, data_dir())
    first, second = evaluate_cases([bloom, twin])
    assert math.isfinite(first.predicted) and math.isfinite(second.predicted)
    assert second.predicted == pytest.approx(first.predicted, rel=1e-6)


def test_the_fp16_prequel_rows_read_as_deepspeed_fp16_with_an_even_split() -> None:
    """The 02-25 rows (``BSPRE25-*``, before the BF16 optimizer; the page's 02-28 section: the
    earlier tests accumulated gradients in fp16): DeepSpeed's fp16 path, ZeRO 1, full recompute,
    and DeepSpeed's transformer-only partition, the layers evenly over the stages."""
    rows = {r["id"]: r for r in read_csv(data_dir() / NO_SETUP) if r["id"].startswith("BSPRE25-")}
    assert len(rows) == 20
    for row_id, row in rows.items():
        (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
        assert case.framework == "deepspeed", row_id
        assert case.parallel is not None and case.model is not None
        assert str(case.parallel.precision) == "fp16", row_id
        assert case.parallel.zero == 1 and str(case.parallel.recompute) == "full", row_id
        assert case.model.layers % case.parallel.pp == 0, row_id


def test_the_tinyllama_row_reads_as_pytorch_fsdp_full_shard_without_recompute() -> None:
    """TinyLlama's README row (lit-gpt on Lightning Fabric's FSDPStrategy, whose default is
    FULL_SHARD): the fsdp profile, ZeRO 3, no recompute, the stated GQA (4 query groups)."""
    (row,) = [r for r in read_csv(data_dir() / NO_SETUP) if r["id"].startswith("TINYLLAMA-")]
    (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert case.framework == "fsdp" and case.system == "a100-40gb"
    assert case.parallel is not None and case.model is not None
    assert case.parallel.zero == 3 and str(case.parallel.recompute) == "none"
    assert case.model.kv_heads == 4 and case.parallel.micro_batch == 8
