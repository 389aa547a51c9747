"""The s26 reader of "full recompute of N layers" cells read with fresh eyes (s27 review): the
``N of M layers`` form counts the model's layers, yet a pipelined run took N per stage (10 of
80 layers on 4 stages recomputed 40), and ``--recompute-num-layers 1.5`` read 1."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_recompute import named_num_layers
from stage_explore.validation.setups import Case, data_dir

NO_SETUP = "published_runs_no_setup.csv"
ROW = "YAFSDP-FSDP-A100-LLAMA2-70B-N256-S2048"  # Llama 2 70B, 80 layers, 256 A100s, pp 1


def _case(**cells: str) -> Case:
    (row,) = [r for r in read_csv(data_dir() / NO_SETUP) if r["id"] == ROW]
    (case, *_) = row_cases({**row, **cells}, NO_SETUP, 1, data_dir())
    return case


def test_n_of_m_layers_is_split_over_the_pipeline_stages() -> None:
    found = named_num_layers("full (20 of the 80 layers)", 80, chunks=4)
    assert found is not None and found[0] == 5
    assert "5 of 80 layers only per model chunk, 20 in all" in found[1]
    case = _case(pp="4", dp="64", dp_sharding="", recompute="full (20 of the 80 layers)")
    assert not case.reason and case.parallel is not None
    assert (case.parallel.pp, case.parallel.recompute_num_layers) == (4, 5)


def test_a_flag_count_is_per_stage_already() -> None:
    found = named_num_layers("full (--recompute-num-layers 5)", 80, chunks=4)
    assert found is not None and found[0] == 5
    assert "5 of 80 layers only per model chunk, 20 in all" in found[1]
    case = _case(pp="4", dp="64", dp_sharding="", recompute="full (--recompute-num-layers 5)")
    assert case.parallel is not None and case.parallel.recompute_num_layers == 5


def test_a_count_the_stages_do_not_divide_is_not_evaluated() -> None:
    with pytest.raises(Uninferable, match="10 of 80 layers over 4 pipeline model chunks"):
        named_num_layers("full (10 of 80 layers)", 80, chunks=4)
    case = _case(pp="4", dp="64", dp_sharding="", recompute="full (10 of the 80 layers)")
    assert "not a whole number per chunk" in case.reason and case.parallel is None


def test_one_stage_reads_as_before() -> None:
    found = named_num_layers("full (10 of the 80 layers)", 80)
    assert found is not None and found[0] == 10 and "in all" not in found[1]
    assert _case().parallel is not None and _case().parallel.recompute_num_layers == 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "cell",
    ["full (checkpoint-num-layers: 1.5)", "full (recompute_num_layers=2.5)",
     "full (2.5 of 80 layers)", "full (recompute-num-layers 1,5)"],
)  # fmt: skip
def test_a_count_that_is_not_a_whole_number_is_no_count(cell: str) -> None:
    assert named_num_layers(cell, 80) is None


def test_a_count_at_the_end_of_a_sentence_is_read() -> None:
    found = named_num_layers("full, with --recompute-num-layers 12.", 80)
    assert found is not None and found[0] == 12
