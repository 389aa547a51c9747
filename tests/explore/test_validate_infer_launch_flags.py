"""Megatron-LM flags a row's text names that override the megatron-core profile's defaults
(s30 fp8lm): ``--no-gradient-accumulation-fusion`` (a config's ``gradient_accumulation_fusion
false``) makes every linear layer's weight gradient a fresh tensor added into ``main_grad`` each
micro-batch (``grad_accumulation`` ``add``), and ``--use-flash-attn`` runs the flash-attn
package (``attention_kernel`` ``fa2``) instead of cuDNN's fused attention."""

from __future__ import annotations

import pytest

from stage_explore.analytical.frameworks import get_framework
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_megatron_lm import (
    NO_GRAD_ACCUMULATION_FUSION,
    USE_FLASH_ATTN,
    named_launch_flags,
)
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"


def _row(row_id: str, **cells: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == row_id]
    return {**row, **cells}


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


def _options(notes: str) -> dict[str, object]:
    out = Defaults()
    named_launch_flags({"source": "", "source_table": "", "notes": notes}, out)
    return out.options


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ("--use-flash-attn --no-gradient-accumulation-fusion", {"grad_accumulation": "add",
                                                                "attention_kernel": "fa2"}),
        ("config: gradient_accumulation_fusion false", {"grad_accumulation": "add"}),
        ("gradient_accumulation_fusion: False", {"grad_accumulation": "add"}),
        ("config: gradient_accumulation_fusion true, use_flash_attn false", {}),
        ("--gradient-accumulation-fusion", {}),
        ("USE_FLASH_ATTN=1", {"attention_kernel": "fa2"}),
        ("flash attention", {}),
    ],
)  # fmt: skip
def test_only_a_flag_named_as_such_overrides(notes: str, expected: dict[str, object]) -> None:
    """The fusion named on, the flash flag named off, or flash attention named without the
    flag leave the profile's values (fused-linear, cuDNN)."""
    assert _options(notes) == expected


def test_the_patterns_read_lowercased_text() -> None:
    """:func:`named_launch_flags` lowercases the row's text before matching."""
    assert not any(c.isupper() for c in NO_GRAD_ACCUMULATION_FUSION + USE_FLASH_ATTN)


def test_the_profile_default_is_the_fused_wgrad() -> None:
    """What a row that names neither flag keeps: Megatron's --gradient-accumulation-fusion on
    (the wgrad GEMM accumulates into main_grad) and cuDNN's fused attention."""
    profile = get_framework("megatron-core")
    assert profile.grad_accumulation == "fused-linear"
    assert profile.attention_kernel == "cudnn"


def test_a_megatron_lm_row_naming_the_flags_takes_them() -> None:
    """The FP8-LM 7B BF16 row through the whole inference, its notes citing the authors' launch
    script's flags: the framework options carry both; without those words neither."""
    row = _row("FP8LM-H100-GPT-7B-BF16")
    case = _case(row)
    assert not case.reason and case.framework == "megatron-core"
    options = dict(case.framework_options)
    assert options.get("grad_accumulation") == "add"
    assert options.get("attention_kernel") == "fa2"
    plain = (
        row["notes"]
        .replace("--no-gradient-accumulation-fusion", "")
        .replace("--use-flash-attn", "")
    )
    bare = dict(_case({**row, "notes": plain}).framework_options)
    assert "grad_accumulation" not in bare and "attention_kernel" not in bare


def test_other_frameworks_do_not_read_them() -> None:
    """A Megatron-LM 2021 row (Zero Bubble's) whose notes mention --use-flash-attn of a later
    script keeps its own unfused core and local-DDP add: the rule is the megatron-core
    profile's."""
    row = _row("ZB-A100-1.5B-1F1B-PP8-MB24")
    assert "--use-flash-attn" in row["uncertain"] + row["notes"]
    case = _case(row)
    assert case.framework == "megatron-lm-2021"
    options = dict(case.framework_options)
    assert "attention_kernel" not in options and "grad_accumulation" not in options
