"""fms-fsdp's sharding when a row's cell leaves it open (s37 ivs): a cell naming FULL_SHARD and
HYBRID_SHARD as alternatives, or an empty one, read as FULL_SHARD over all GPUs; fms-fsdp's
default (hsdp) and its docs/configurations.md (HSDP for 7b / 13b, FSDP for 34b / 70b) decide
it."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fms_shard import fms_open_sharding, open_strategy
from stage_explore.validation.setups import Case, data_dir

OPEN_CELL = "PyTorch FSDP (FULL_SHARD or HYBRID_SHARD, not stated), bf16 MixedPrecision"

#: A dense fms-fsdp row of 128 GPUs, all data parallel; each test sets the size and the cell.
BASE = {
    "id": "IVS-TEST", "source": "fms-fsdp (IBM Foundation Model Stack) on PyTorch FSDP",
    "model": "Llama 2 7B", "params_b": "6.74", "layers": "32", "hidden": "4096",
    "ffn": "11008", "heads": "32", "kv_heads": "32", "vocab": "32000", "gpu": "A100 80GB",
    "num_gpus": "128", "tp": "1", "pp": "1", "dp": "128", "seq_len": "4096",
    "global_batch_seqs": "256", "micro_batch": "2", "precision": "bf16",
    "tokens_per_s_per_gpu": "3000",
}  # fmt: skip


def _case(**cells: str) -> Case:
    (case, *_) = row_cases({**BASE, **cells}, "ivs.csv", 1, data_dir())
    return case


def test_an_open_cell_on_a_small_model_is_fms_fsdp_hsdp() -> None:
    case = _case(dp_sharding=OPEN_CELL)
    assert case.framework == "fms-fsdp" and case.parallel is not None
    assert case.parallel.zero == 3 and case.parallel.dp_shard == 8  # before: dp_shard None


def test_an_open_cell_on_a_34b_model_stays_full_shard() -> None:
    case = _case(
        dp_sharding=OPEN_CELL, model="Llama 2 34B", params_b="33.7", layers="48",
        hidden="8192", ffn="22016", heads="64", kv_heads="8",
    )  # fmt: skip
    assert case.parallel is not None
    assert case.parallel.zero == 3 and case.parallel.dp_shard is None


@pytest.mark.parametrize(
    "cell", ["PyTorch FSDP FULL_SHARD", "PyTorch FSDP HYBRID_SHARD (HSDP: shard within a node)",
             "FSDP"],
)  # fmt: skip
def test_a_cell_naming_one_strategy_is_not_read_here(cell: str) -> None:
    assert not open_strategy(cell)
    assert fms_open_sharding(cell, "fms-fsdp", "6.74") is None


def test_an_empty_cell_is_fms_fsdp_default_hsdp() -> None:
    case = _case(dp_sharding="")
    assert case.parallel is not None  # before: dp_shard None (the FSDP profiles' ZeRO-3)
    assert case.parallel.zero == 3 and case.parallel.dp_shard == 8


def test_other_profiles_keep_their_reading() -> None:
    assert fms_open_sharding(OPEN_CELL, "fsdp", "6.74") is None
    assert fms_open_sharding(OPEN_CELL, "fms-fsdp", "") is None
