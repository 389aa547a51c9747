"""What the s31 rowsA paper rows (GLM-130B, BloombergGPT) showed the inference misread:
the legacy ``checkpoint_num_layers`` chunk size was read as a count of recomputed layers, and a
shard group written in words (``We shard a model across 128 GPUs``) was not read, so a cell
naming MiCS beside it was refused."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_recompute import named_num_layers
from stage_explore.validation.infer_shard import mics_group, stated_shard_size
from tests.explore.infer_helpers import package_case as _case
from tests.explore.infer_helpers import package_row as _row


@pytest.mark.parametrize(
    "cell",
    ["full (checkpoint_activations True, checkpoint_num_layers 1)",
     "full (--checkpoint-activations --checkpoint-num-layers 2)",
     "full ('checkpoint-activations': true, 'checkpoint-num-layers': 1)"],
)  # fmt: skip
def test_the_legacy_chunk_size_is_no_count(cell: str) -> None:
    """Megatron-LM's / GPT-NeoX's ``checkpoint_num_layers`` is a chunk size: every layer."""
    assert named_num_layers(cell, 70, 8) is None


@pytest.mark.parametrize(
    ("cell", "count"),
    [("full (activations_checkpoint_num_layers=2)", 2),
     ("full, --recompute-method block --recompute-num-layers 4", 4),
     ("full (checkpoint_num_layers 1; 10 of 80 layers)", 10)],
)  # fmt: skip
def test_the_block_counts_are_still_read(cell: str, count: int) -> None:
    """NeMo's ``activations_checkpoint_num_layers`` and Megatron-Core's count stay counts; a
    count stated beside the chunk size is read."""
    found = named_num_layers(cell, 80)
    assert found is not None and found[0] == count


def test_glm130b_recomputes_every_layer() -> None:
    """Table 11's ``checkpoint_activations True, checkpoint_num_layers 1``: full recompute of
    all 70 layers (before: 1 layer per stage, 8 in all)."""
    case = _case(_row("GLM130B-A100-40G-768"))
    assert not case.reason and case.parallel is not None
    assert case.parallel.recompute_num_layers is None
    assert not any("recompute_num_layers" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cell", "size"),
    [("We shard a model across 128 GPUs, and we have 4 copies of the model", 128),
     ("ZeRO-3, the model sharded across 16 GPUs", 16),
     ("sharding across 8 devices", 8)],
)  # fmt: skip
def test_a_shard_group_in_words_is_read(cell: str, size: int) -> None:
    assert stated_shard_size(cell) == size


@pytest.mark.parametrize(
    "cell", ["FULL_SHARD across 4 nodes", "FSDP FULL_SHARD (ZeRO-3)", "sharded across nodes"]
)
def test_no_gpu_count_no_group(cell: str) -> None:
    """A count of nodes, or none, is no shard group."""
    assert stated_shard_size(cell) is None


def test_bloomberggpt_reads_mics_groups_of_128() -> None:
    """SMP's ZeRO-3 with MiCS, 'We shard a model across 128 GPUs': MiCS partition groups of 128
    of the 512 GPUs (before: refused, MiCS without a group size)."""
    row = _row("BLOOMBERGGPT-A100-40G-512")
    assert mics_group(row["dp_sharding"]) == 128
    case = _case(row)
    assert not case.reason and case.parallel is not None
    assert case.parallel.zero == 3 and case.parallel.dp_shard == 128
