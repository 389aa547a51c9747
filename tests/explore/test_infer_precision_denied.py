"""A ``precision`` cell that denies a precision or recipe is not read as it (s27 review of s26's
``infer_precision.py``): ``bf16 (no fp8)``, ``BF16, FP8 off`` and ``w/o FP8`` were FP8 with the
delayed recipe, ``FP16 (not bf16)`` BF16, ``FP8 (delayed; not current scaling)`` tensorwise —
as s26 found ``compiled: no`` read as compiled."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_precision import infer_precision


@pytest.mark.parametrize(
    ("cell", "precision", "recipe"),
    [("bf16 (no fp8)", "bf16", ""), ("BF16, FP8 off", "bf16", ""),
     ("bf16, not fp8", "bf16", ""), ("bf16 (fp8 disabled)", "bf16", ""),
     ("BF16 (w/o FP8)", "bf16", ""), ("bf16 (FP8 not used)", "bf16", ""),
     ("non-fp8 bf16", "bf16", ""), ("bf16 (fp4 off)", "bf16", ""),
     ("FP16 (not bf16)", "fp16", ""), ("FP8 (delayed; not current scaling)", "fp8", "delayed"),
     ("nvfp4 off, mxfp8 on", "fp8", "mxfp8")],
)  # fmt: skip
def test_a_denied_precision_or_recipe_is_not_read(cell: str, precision: str, recipe: str) -> None:
    read = infer_precision(cell, "megatron-core")
    assert (read.precision, read.fp8_recipe) == (precision, recipe)
    assert repr(cell) in read.assumption  # the cell is quoted as written


@pytest.mark.parametrize(
    ("cell", "precision", "recipe"),
    [("FP8 delayed scaling, no FP8 attention", "fp8", "delayed"),
     ("MXFP8 (router not fp8)", "fp8", "mxfp8"), ("FP8-CS", "fp8", "tensorwise"),
     ("fp8 (not blockwise)", "fp8", "delayed"), ("FP8", "fp8", "delayed")],
)  # fmt: skip
def test_an_fp8_run_that_denies_a_part_stays_fp8(cell: str, precision: str, recipe: str) -> None:
    read = infer_precision(cell, "megatron-core")
    assert (read.precision, read.fp8_recipe) == (precision, recipe)


@pytest.mark.parametrize("cell", ["fp8: no", "no fp8", "fp8=0"])
def test_a_cell_that_only_denies_is_not_read(cell: str) -> None:
    with pytest.raises(Uninferable, match="expected bf16, fp16 or an FP8 spelling"):
        infer_precision(cell, "megatron-core")
