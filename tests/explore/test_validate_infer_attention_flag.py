"""What Megatron-LM's ``--use-flash-attn`` and ``--attention-backend`` select by the model path
a row ran (s35 attnflag, :mod:`stage_explore.validation.infer_attention_flag`): the flash-attn
package on the legacy transformer and for Megatron-SWIFT; nothing on a Megatron-Core model
(Transformer Engine chooses, the profile's reading); ``--attention-backend flash`` the
flash-attn package on any path."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_attention_flag import (
    FIRST_MCORE_DEFAULT,
    mcore_model,
)
from stage_explore.validation.infer_megatron_lm import named_launch_flags
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"


def _kernel(notes: str) -> object:
    out = Defaults()
    named_launch_flags({"source": "", "source_table": "", "notes": notes}, out)
    return out.options.get("attention_kernel")


def _row(row_id: str, **cells: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == row_id]
    return {**row, **cells}


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        # Megatron-Core models: the flag is not read, Transformer Engine chooses
        ("Megatron-LM core_r0.12.0 pretrain_gpt.py --use-flash-attn", None),
        ("pretrain_gpt.py --use-mcore-models --use-flash-attn", None),
        ("NeMo config use_flash_attn: true", None),
        # Megatron-LM's legacy transformer: FlashSelfAttention over flash-attn
        ("Megatron-LM pretrain_gpt.py --use-flash-attn", "fa2"),
        ("Megatron-LM core_v0.7.0 pretrain_gpt.py --use-flash-attn", "fa2"),
        ("core_r0.12.0 --use-legacy-models --use-flash-attn", "fa2"),
        ("Megatron-Core, --transformer-impl local --use-flash-attn", "fa2"),
        # Megatron-SWIFT: undecided on Hopper+, fa2 kept
        ("Megatron-SWIFT on Megatron-Core: megatron sft --use_flash_attn true", "fa2"),
        # --attention-backend decides wherever it is named
        ("Megatron-Core core_r0.13.0 --attention-backend flash", "fa2"),
        ("megatron sft --attention_backend flash", "fa2"),
        ("Megatron-LM pretrain_gpt.py --use-flash-attn --attention-backend fused", None),
        ("--use-flash-attn --attention-backend auto", None),
    ],
)  # fmt: skip
def test_what_the_flags_select(notes: str, expected: object) -> None:
    """The old rule (any --use-flash-attn: fa2; --attention-backend not read) fails the
    Megatron-Core, fused / auto and backend-flash cases."""
    assert _kernel(notes) == expected


def test_megatron_core_became_the_default_after_v0_7() -> None:
    """``core_v0.7.0``'s ``--use-mcore-models`` is an opt-in store_true: that tag alone is a
    legacy model, the next minor a Megatron-Core one."""
    assert not mcore_model(f"core_v0.{FIRST_MCORE_DEFAULT - 1}.0")
    assert mcore_model(f"core_r0.{FIRST_MCORE_DEFAULT}.0")
    assert mcore_model(f"core_v0.{FIRST_MCORE_DEFAULT - 1}.0 --use-mcore-models")


def test_the_fp8lm_rows_keep_the_legacy_reading() -> None:
    """FP8-LM's baselines ran Megatron-LM's legacy transformer (their notes: "Megatron-LM's
    default (local) transformer") with --use-flash-attn: fa2 through the whole inference; the
    same notes on a Megatron-Core release keep the profile's cuDNN."""
    row = _row("FP8LM-H100-GPT-7B-BF16")
    case = _case(row)
    assert not case.reason and case.framework == "megatron-core"
    assert dict(case.framework_options).get("attention_kernel") == "fa2"
    mcore = row["notes"].replace("Megatron-LM's default (local) transformer", "core_r0.12.0")
    assert mcore != row["notes"]
    options = dict(_case({**row, "notes": mcore}).framework_options)
    assert "attention_kernel" not in options


def test_a_swift_row_naming_the_backend_takes_it() -> None:
    """The Megatron-SWIFT Qwen1.5-MoE row names --attention_backend flash: fa2 named, not the
    A800 preset's fallback from the profile's cuDNN."""
    row = _row("SWIFT-A800-QWEN15-MOE-A27B-MEGATRON-8")
    assert "--attention_backend flash" in row["source_table"]
    case = _case(row)
    assert dict(case.framework_options).get("attention_kernel") == "fa2"
