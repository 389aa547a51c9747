"""A Megatron DDP bucket size stated in a row's text (``BUCKET_SIZE=N``, ``--ddp-bucket-size N``,
``bucket_size: N``; :func:`~stage_explore.validation.infer_buckets.stated_bucket`): the
inferred setup's gradient buckets are N parameters times the gradient bytes, with its
assumption; none stated, Megatron-Core's default rule stays."""

from __future__ import annotations

import pytest

from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import DEFAULT_GRAD_BUCKET_BYTES
from stage_explore.validation.infer import row_cases

BRIDGE = "NVIDIA Megatron-Bridge performance summary (25.11 container)"


def _parallel(notes: str) -> tuple[ParallelConfig, list[str]]:
    row = {
        "id": "X-1", "source": BRIDGE, "source_table": "", "notes": notes,
        "model": "Llama 3 8B", "gpu": "H100-SXM5-80GB", "precision": "BF16",
        "global_batch_seqs": "128", "tp": "1", "pp": "1", "cp": "1", "num_gpus": "8",
        "tokens_per_s_per_gpu": "1000",
    }  # fmt: skip
    (case, *_) = row_cases(row, "extra.csv", 1)
    assert case.parallel is not None, case.reason
    return case.parallel, list(case.assumptions)


@pytest.mark.parametrize(
    "notes",
    [
        "distributed optimizer; BUCKET_SIZE=768000000 (config_x.sh)",
        "launched with --ddp-bucket-size 768000000",
        "ddp: bucket_size: 768000000",
    ],
)
def test_a_stated_bucket_is_that_many_bf16_gradients(notes: str) -> None:
    parallel, said = _parallel(notes)
    assert parallel.grad_fp32 is False  # the 25.11 container reduces in bf16
    assert parallel.grad_bucket_bytes == 768_000_000 * 2
    assert any("768000000 parameters" in a for a in said)


def test_without_a_stated_bucket_the_default_rule_stays() -> None:
    parallel, said = _parallel("distributed optimizer, overlapped gradient reduction")
    assert parallel.grad_bucket_bytes == DEFAULT_GRAD_BUCKET_BYTES
    assert not any("bucket_size" in a for a in said)


def test_a_bucket_named_without_a_number_is_not_read() -> None:
    parallel, _ = _parallel("the BUCKET_SIZE of config_common.sh (not stored)")
    assert parallel.grad_bucket_bytes == DEFAULT_GRAD_BUCKET_BYTES
