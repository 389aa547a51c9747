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


#: An MLPerf v6.0 GPT-OSS 20B row on 8 GB300 in MXFP8 (HPE's layout), whose notes each test sets.
MLPERF = {
    "id": "HIDDEN23-MLPERF", "model": "GPT-OSS 20B", "params_b": "20", "seq_len": "8192",
    "source": "MLPerf Training v6.0, HPE closed division (the NVIDIA NeMo GPT-OSS 20B "
    "implementation, NVIDIA Release 26.04 (NeMo, PyTorch))",
    "source_table": "gpt_oss_20b result_1.txt (HPE-GB300-ngpu8_ngc26.04)",
    "gpu": "GB300 (NVIDIA Blackwell Ultra, 284208 MiB HBM3e)", "num_gpus": "8", "tp": "1",
    "pp": "1", "cp": "1", "ep": "1", "dp": "8", "global_batch_seqs": "24", "micro_batch": "3",
    "precision": "MXFP8", "tokens_per_s_per_gpu": "50000",
}  # fmt: skip


def _options(**cells: str) -> dict[str, object]:
    (case, *_) = row_cases({**MLPERF, **cells}, "hidden23.csv", 1, data_dir())
    assert not case.reason, case.reason
    return dict(case.framework_options)


def test_a_quoted_fp8_param_gather_replaces_the_era_default() -> None:
    # s29 gptossdef: a GPT-OSS row stating nothing takes config_common_mxfp8.sh's False; the
    # 26.04 precision configs' True stays the era default of another MLPerf v6.0 MXFP8 row
    assert _options()["fp8_param_gather"] is False
    assert _options(model="Llama 3.1 8B")["fp8_param_gather"] is True
    quoted = _options(notes="DistributedDataParallelConfig(..., fp8_param_gather=False, ...)")
    assert quoted["fp8_param_gather"] is False  # before: True
    assert _options(notes="fp8_param_gather true")["fp8_param_gather"] is True


def test_a_quoted_fp8_param_gather_both_ways_is_left_to_the_default() -> None:
    both = _options(notes="fp8_param_gather False here, fp8_param_gather True there")
    assert both["fp8_param_gather"] is True


def test_a_printed_cross_entropy_fusion_impl_is_the_rows_loss() -> None:
    # s29 gptossdef: conf/gpt_oss.yaml's cross_entropy_fusion_impl default 'te' for a GPT-OSS
    # row stating nothing; a printed 'native' stays the row's
    assert _options().get("te_cross_entropy") is True
    assert _options(notes="cross_entropy_fusion_impl native").get("native_cross_entropy") is True
    te = _options(notes="printed configuration: cross_entropy_fusion_impl 'te'")
    assert te.get("te_cross_entropy") is True  # before: native
    assert "native_cross_entropy" not in te
    llama = {"model": "Llama 3.1 8B", "ep": "1", "precision": "FP8 (tensorwise)"}
    native = _options(**llama, notes="cross_entropy_fusion_impl: native")
    assert native.get("native_cross_entropy") is True  # before: te (config_common_8b.sh)
