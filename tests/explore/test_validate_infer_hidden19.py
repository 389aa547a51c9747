"""What YaFSDP's FSDP baseline rows (s26 hidden19) showed the inference misread: a recompute cell
naming full recompute of *some* layers (``activation checkpointing of 10 of the 80 transformer
layers (num-ckpt-layers 10)``) was read as full recompute of every layer."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_recompute import named_num_layers
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


@pytest.mark.parametrize(
    ("cell", "layers", "count"),
    [("activation checkpointing of 5 of the 48 transformer layers (num-ckpt-layers 5)", 48, 5),
     ("full (10 of 80 layers)", 80, 10),
     ("full, --recompute-method block --recompute-num-layers 4", 32, 4),
     ("full (activations_checkpoint_num_layers=2)", None, 2),
     ("full (fsdp_num_layers_to_checkpoint: 20)", 80, 20),
     ("full (num-ckpt-layers 50)", 80, 50)],
)  # fmt: skip
def test_a_count_of_checkpointed_layers_is_read(
    cell: str, layers: int | None, count: int
) -> None:
    found = named_num_layers(cell, layers)
    assert found is not None and found[0] == count
    assert f"recompute_num_layers {count}" in found[1]


@pytest.mark.parametrize(
    ("cell", "layers"),
    [("full", 32),
     ("full (the prior blog's 34B / 70B rows: Activation checkpoint Yes)", 48),
     ("full (80 of 80 layers)", 80),
     ("full (num-ckpt-layers 80)", 80),
     ("full, --recompute-method uniform --recompute-num-layers 1", 32),
     ("full (5 of 48 layers, num-ckpt-layers 6)", 48),
     ("full (num-ckpt-layers 0)", 32)],
)  # fmt: skip
def test_every_layer_or_an_unclear_count_stays_full(cell: str, layers: int) -> None:
    """No count, every layer, Megatron's uniform method (N is a chunk size there) or two
    different counts: full recompute of every layer, as before."""
    assert named_num_layers(cell, layers) is None


def test_the_yafsdp_partial_rows_recompute_only_their_layers() -> None:
    """The four rows with num-ckpt-layers > 0 run full recompute of that many layers; the twelve
    with 0 none."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("YAFSDP-FSDP-")]
    assert len(rows) == 16
    partial = {"LLAMA2-34B-N256-S4096": 5, "LLAMA2-70B-N256-S2048": 10,
               "LLAMA2-70B-N256-S4096": 50, "LLAMA3-70B-N256-S2048": 20}  # fmt: skip
    for row in rows:
        case = _case(row)
        assert not case.reason, (row["id"], case.reason)
        assert case.parallel is not None and case.framework == "fsdp"
        count = partial.get(row["id"].removeprefix("YAFSDP-FSDP-A100-"))
        if count is None:
            assert case.parallel.recompute.value == "none", row["id"]
            assert case.parallel.recompute_num_layers is None
        else:
            assert case.parallel.recompute.value == "full", row["id"]
            assert case.parallel.recompute_num_layers == count, row["id"]
            assert any(f"recompute_num_layers {count}" in a for a in case.assumptions)
