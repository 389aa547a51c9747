"""The Vocabulary Parallelism Baseline rows' precision (s37 vocab2): the paper does not state it;
the repository's launch script ``pretrain_gpt.sh`` passes ``--fp16`` unless ``FP32`` is set, so
the ``precision`` cell says fp16 and the ``uncertain`` cell records where it was read. Read as
Megatron-LM fp16 mixed precision: fp16 gradient buffers (``--accumulate-allreduce-grads-in-fp32``
is forced for bf16 only)."""

from __future__ import annotations

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer_precision import infer_precision
from stage_explore.validation.setups import data_dir
from tests.explore.infer_helpers import NO_SETUP, package_case


def _rows() -> list[dict[str, str]]:
    rows = [r for r in read_csv(data_dir() / NO_SETUP) if r["id"].startswith("VOCABPAR-A100-")]
    assert len(rows) == 24
    return rows


def test_the_cell_is_read_from_the_launch_script_and_says_so() -> None:
    for row in _rows():
        assert infer_precision(row["precision"], "megatron-lm-2021").precision == "fp16", row["id"]
        assert "--fp16" in row["precision"], row["id"]
        uncertain = row["uncertain"]
        assert "pretrain_gpt.sh" in uncertain and "precision not stated in the paper" in uncertain
        assert " precision, " not in uncertain  # no longer listed among the unstated settings


def test_the_rows_run_fp16_with_fp16_gradient_buffers() -> None:
    for row in _rows()[:4]:
        case = package_case(row)
        assert case.parallel is not None and str(case.parallel.precision) == "fp16", row["id"]
        assert case.parallel.grad_fp32 is False, row["id"]
        assert any("fp16 mixed precision" in a for a in case.assumptions), row["id"]
