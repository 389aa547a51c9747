"""The inferred setup of the Megatron-Core MoE model zoo's rows
(:mod:`stage_explore.validation.infer_modelzoo`, 6 Dec 2026, s23 zooaudit)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case

ZOO = (
    "Megatron-MoE-ModelZoo (NVIDIA Megatron-Core MoE team), best_practice/qwen3/readme.md, "
    "Qwen3-235B-A22B on 256 H100"
)
ROW = dict(model="Qwen3-235B-A22B", num_gpus="256", moe="128 experts, top-8", tp="2", ep="8",
           pp="8", gpu="H100-SXM5-80GB", precision="bf16")  # fmt: skip


def test_the_model_zoo_rows_run_without_tp_communication_overlap() -> None:
    """Every Qwen3-235B H100 row of the zoo (published_runs_no_setup.csv; TP 2 or 4) runs
    Megatron-LM's default, no --tp-comm-overlap, which the megatron-core profile turns on; the
    assumption cites the zoo's run script of that table."""
    rows = [
        r for r in read_csv(data_dir() / "published_runs_no_setup.csv")
        if r["id"].startswith("MOEZOO-H100-QWEN3-235B-")
    ]  # fmt: skip
    assert len(rows) == 5
    for row in rows:
        (case,) = row_cases(row, "published_runs_no_setup.csv", 1, data_dir())
        assert case.parallel is not None and case.parallel.tp > 1
        assert dict(case.framework_options).get("tp_comm_overlap") is False, row["id"]
        (said,) = [a for a in case.assumptions if "tp_comm_overlap false" in a]
        assert "examples/qwen3/run_235b.sh" in said


@pytest.mark.parametrize(
    ("cells", "overlap"),
    [
        ({"source": ZOO}, False),
        ({"source": ZOO, "notes": "run with --tp-comm-overlap"}, None),
        ({"source": ZOO, "notes": "tp_comm_overlap=False"}, False),
        ({"source": ZOO, "tp": "1", "ep": "8"}, None),  # no tensor parallelism: nothing to say
        ({"source": "a Megatron-Core cluster of ours"}, None),  # not the zoo: the profile's
    ],
)
def test_only_a_zoo_row_with_tp_that_names_no_overlap_loses_it(
    cells: dict[str, str], overlap: bool | None
) -> None:
    case = inferred_case(**{**ROW, **cells})
    assert dict(case.framework_options).get("tp_comm_overlap") is overlap
