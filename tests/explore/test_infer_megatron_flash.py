"""A Megatron-LM GPT row whose text names FlashAttention as its own runs fused attention
(7 Dec 2026, s37 vocab).

Megatron-LM's ``--use-flash-attn`` (off unless passed) makes the legacy ``ParallelAttention`` call
flash-attn's ``FlashSelfAttention`` in place of ``CoreAttention`` (NVIDIA/Megatron-LM 00caa53a
``megatron/legacy/model/transformer.py``). Until s37 the megatron-lm-2021 (and deepspeed) GPT
blocks stayed unfused whatever the text said; the Vocabulary Parallelism baseline rows, whose
repository's launch script passes the flag, were then predicted out of memory (84-279 GiB of 80)
although they ran. The Zero Bubble rows, whose text names no FlashAttention as used (only a later
example script, hedged in ``uncertain``), keep Megatron's unfused attention."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer_defaults import MEGATRON_FLASH_NOTE, recipe_defaults
from stage_explore.validation.setups import data_dir
from tests.explore.infer_helpers import NO_SETUP, package_case

_PARALLEL = {"recompute": "none"}
_STATED = {"tp": 1, "pp": 8, "dp": 1}


def _attention(notes: str, framework: str = "megatron-lm-2021") -> str:
    """The core attention ``recipe_defaults`` gives a GPT row with ``notes`` ('' = the flavor's)."""
    row = {"id": "X", "source": "a paper", "notes": notes}
    out = recipe_defaults(row, framework, "bf16", "megatron-gpt-22b", dict(_PARALLEL), _STATED)
    if out.model.get("core_attention") == "fused":
        assert MEGATRON_FLASH_NOTE in out.notes
    return str(out.model.get("core_attention", ""))


@pytest.mark.parametrize("framework", ["megatron-lm-2021", "deepspeed"])
@pytest.mark.parametrize(
    "notes",
    [
        "pretrain_gpt.py with --use-flash-attn, --sequence-parallel and --fp16",
        "Megatron-DeepSpeed with --use-flash-attn-v2",
        "attention on FlashAttention-2",
    ],
)
def test_flash_attention_named_as_used_is_fused(framework: str, notes: str) -> None:
    """The flag or the kernel named as the run's own: fused core attention, with the reason."""
    assert _attention(notes, framework) == "fused"


@pytest.mark.parametrize(
    "notes",
    [
        "",
        "the paper: 'We base our implementation on the open-source Megatron-LM project "
        "(Narayanan et al., 2021)'",
        "without FlashAttention",
        "flash attention disabled",
        "3x faster than flash attention",
    ],
)
def test_no_flash_attention_of_its_own_keeps_the_profile_attention(notes: str) -> None:
    """No mention, a negated one or a comparison: the flavor's own (unfused) attention."""
    assert _attention(notes) == ""


def test_the_vocabulary_parallelism_rows_run_flash_and_the_zero_bubble_rows_do_not() -> None:
    """The 24 VOCABPAR rows (their notes record the launch script's --use-flash-attn): fused
    attention on the megatron-lm-2021 profile; the 25 ZB / ZBH rows: unfused as before."""
    rows = read_csv(data_dir() / NO_SETUP)
    vocab = [r for r in rows if r["id"].startswith("VOCABPAR-A100-")]
    zero_bubble = [r for r in rows if r["id"].startswith(("ZB-A100-", "ZBH-A100-"))]
    assert len(vocab) == 24 and len(zero_bubble) == 25
    for row in vocab:
        case = package_case(row)
        assert case.model is not None and case.framework == "megatron-lm-2021", row["id"]
        assert case.model.core_attention == "fused", row["id"]
        assert any("--use-flash-attn" in a for a in case.assumptions), row["id"]
    for row in zero_bubble:
        case = package_case(row)
        assert case.model is not None and case.model.core_attention == "", row["id"]
