"""Two readings of a row's parallel cells (6 Dec 2026, s28 readers): a DeepSpeed row with its
global batch and no micro-batch runs DeepSpeed's one micro-batch of global / dp
(stage_explore/validation/infer_batch.py); a ``dp_sharding`` cell saying FSDP does not reshard
after the forward is ZeRO-2, FSDP1's SHARD_GRAD_OP (ZeRO-3 held through the step under
pipeline parallelism) (stage_explore/validation/infer_shard.py ``reshard_never``)."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case, data_dir

#: A dense Llama 2 7B row of 16 GPUs, all data parallel.
BASE = {
    "id": "READERS-TEST", "model": "Llama 2 7B", "gpu": "A100 80GB", "num_gpus": "16",
    "tp": "1", "pp": "1", "seq_len": "2048", "global_batch_seqs": "64", "precision": "bf16",
    "tokens_per_s_per_gpu": "3000",
}  # fmt: skip


def _case(**cells: str) -> Case:
    (case, *_) = row_cases({**BASE, **cells}, "readers.csv", 1, data_dir())
    return case


def _parallel(**cells: str) -> dict[str, object]:
    case = _case(**cells)
    assert case.parallel is not None, case.reason
    return {"micro": case.parallel.micro_batch, "zero": case.parallel.zero, "dp": case.parallel.dp}


def test_a_deepspeed_row_without_micro_batch_runs_global_over_dp() -> None:
    got = _parallel(source="DeepSpeed ZeRO-3 benchmark", dp_sharding="ZeRO-3")
    assert got == {"micro": 4, "zero": 3, "dp": 16}  # before: micro-batch 1 (Megatron's)
    said = " ".join(_case(source="DeepSpeed", dp_sharding="ZeRO-2").assumptions)
    assert "micro-batch 4 = global_batch_seqs 64 / dp 16" in said


def test_a_stated_micro_batch_and_megatron_deepspeed_keep_their_readings() -> None:
    assert _parallel(source="DeepSpeed", dp_sharding="ZeRO-1", micro_batch="2")["micro"] == 2
    mds = _parallel(source="Megatron-DeepSpeed run", dp_sharding="ZeRO stage 1 (DeepSpeed)")
    assert mds["micro"] == 1
    # torchtitan: one step of global / dp (s29 readers2, tests/explore/test_infer_readers2.py)
    assert _parallel(source="torchtitan", dp_sharding="FSDP")["micro"] == 4


def test_a_global_batch_dp_does_not_divide_is_refused() -> None:
    case = _case(source="DeepSpeed", dp_sharding="ZeRO-3", global_batch_seqs="24")
    assert case.parallel is None
    assert "global_batch_seqs 24 is not a multiple of dp 16" in case.reason


@pytest.mark.parametrize(
    "cell",
    ["FSDP2 reshard_after_forward=False", "FSDP2, fsdp_reshard_after_forward = 'never'",
     "FSDP: parameters not resharded after the forward", "FSDP SHARD_GRAD_OP"],
)  # fmt: skip
def test_no_reshard_after_forward_is_zero_2(cell: str) -> None:
    assert _parallel(source="torchtitan", dp_sharding=cell, micro_batch="1")["zero"] == 2


@pytest.mark.parametrize(
    "cell", ["FSDP2 (fully_shard, reshard after forward)", "reshard_after_forward=True FSDP2"]
)
def test_the_default_resharding_stays_zero_3(cell: str) -> None:
    assert _parallel(source="torchtitan", dp_sharding=cell, micro_batch="1")["zero"] == 3


def test_under_pipeline_parallelism_no_reshard_is_zero_3_held() -> None:
    case = _case(source="torchtitan", dp_sharding="FSDP2 reshard_after_forward=False",
                 micro_batch="1", pp="2")  # fmt: skip
    assert case.parallel is not None and case.parallel.zero == 3, case.reason
    assert "held gathered through the step" in " ".join(case.assumptions)


@pytest.mark.parametrize(
    "cells",
    [{"dp_sharding": "ZeRO-3, reshard_after_forward=False", "micro_batch": "2"},
     {"dp_sharding": "ZeRO-3 (reshard_after_forward=False)", "notes": "FSDP2", "micro_batch": "2"}],
)  # fmt: skip
def test_zero3_beside_fsdp2_s_reshard_argument_is_fsdp_not_deepspeed(cells: dict[str, str]) -> None:
    """``reshard_after_forward`` is FSDP2's ``fully_shard`` argument: a cell naming it beside
    ZeRO-3 is FSDP's sharding (s28 review: it was read as DeepSpeed, whose ZeRO-3 has no such
    argument); a cell naming ZeRO-3 alone stays DeepSpeed's."""
    case = _case(**cells)
    assert case.parallel is not None and case.parallel.zero == 2, case.reason
    assert "framework profile fsdp" in " ".join(case.assumptions)
    alone = _case(dp_sharding="ZeRO-3", micro_batch="2")
    assert "framework profile deepspeed" in " ".join(alone.assumptions)
