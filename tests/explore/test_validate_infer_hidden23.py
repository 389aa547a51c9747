"""What adding Megatron-Bridge 25.09's MoE rows (s28 hidden23) showed the inferred reader
misread: a row the table labels ``(tokendrop)`` ran as dropless routing. Megatron-Bridge's
performance scripts drop tokens with ``apply_moe_token_drop`` (capacity factor 1.0, padded to
capacity), so such a row now pads its experts to capacity factor 1.0; a dropless row, a row that
only mentions a token-drop run in a caveat, a denied token drop and a dense model do not."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_bridge_drop import CAPACITY_FACTOR, states_token_drop
from stage_explore.validation.setups import Case, data_dir

#: A Megatron-Bridge Qwen3-30B-A3B row of 8 GB200 (the 25.09 table's layout), whose model / moe /
#: uncertain cells each test sets.
BASE = {
    "id": "HIDDEN23-TEST",
    "source": "NVIDIA Megatron-Bridge performance summary (25.09 container), MoE pre-training",
    "model": "Qwen3_30B_a3B", "seq_len": "4096", "gpu": "GB200 (B200 in NVL72)",
    "num_gpus": "8", "tp": "1", "pp": "1", "cp": "1", "ep": "8", "vpp": "1", "dp": "8",
    "global_batch_seqs": "512", "micro_batch": "4", "precision": "FP8-CS",
    "dp_sharding": "DDP (FSDP 0)", "tokens_per_s_per_gpu": "20000",
}  # fmt: skip


def _case(**cells: str) -> Case:
    (case, *_) = row_cases({**BASE, **cells}, "hidden23.csv", 1, data_dir())
    assert not case.reason, case.reason
    return case


@pytest.mark.parametrize(
    "cells",
    [{"model": "Qwen3_30B_a3B (tokendrop)"},
     {"moe": "token drop (the table's 'tokendrop' label)"},
     {"moe": "token-dropping"}],
)  # fmt: skip
def test_a_bridge_token_drop_row_pads_experts_to_capacity(cells: dict[str, str]) -> None:
    case = _case(**cells)
    assert case.model is not None
    assert case.model.capacity_factor == CAPACITY_FACTOR  # before: None (dropless)
    assert any("apply_moe_token_drop" in a for a in case.assumptions)


def test_the_fp8_rows_padding_follows_the_aligned_capacity() -> None:
    # 4 x 4096 tokens x top-8 / 128 experts = 1024 rows per expert, a multiple of 16
    case = _case(model="Qwen3_30B_a3B (tokendrop)")
    assert ("moe_fp8_padding", False) in case.framework_options


@pytest.mark.parametrize(
    "cells",
    [{},
     {"moe": "force-balanced, token-dropless"},
     {"moe": "token dropless"},
     {"moe": "no token drop"},
     {"uncertain": "the 25.09 table ran this layout with tokendrop rather than dropless"}],
)  # fmt: skip
def test_other_bridge_rows_stay_dropless(cells: dict[str, str]) -> None:
    case = _case(**cells)
    assert case.model is not None
    assert case.model.capacity_factor is None


def test_a_row_not_naming_megatron_bridge_is_not_read_by_this_rule() -> None:
    case = _case(source="a Megatron-Core MoE benchmark", model="Qwen3_30B_a3B (tokendrop)")
    assert case.model is not None
    assert case.model.capacity_factor is None


def test_states_token_drop_reads_only_the_model_and_moe_cells() -> None:
    assert states_token_drop({"model": "DeepSeekV3 (tokendrop)"}) == "DeepSeekV3 (tokendrop)"
    assert states_token_drop({"notes": "tokendrop", "uncertain": "token drop"}) == ""
    assert states_token_drop({"moe": "w/o token drop"}) == ""
