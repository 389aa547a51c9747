"""The pipeline schedule a row names in words (7 Dec 2026, s32 rowsC; infer_schedule.py).

Synthetic rows (tests, not validation rows) pin that a row naming DeepSeek's DualPipe runs the
model's DualPipe schedule, and that a negated mention, DualPipeV, the "Zero Bubble" paper title
and a row without pipeline parallelism keep the default 1F1B / interleaved schedule."""

from __future__ import annotations

import pytest

from stage_core.parallel import Schedule
from stage_explore.validation.infer_schedule import named_schedule
from tests.explore.infer_helpers import inferred_case

#: A Megatron-Core row of 64 H800 at PP 16 (Llama 3.1 8B: a dense model the reader knows).
BASE = {
    "id": "SCHEDULE-TEST", "source": "Megatron-Core benchmark", "model": "Llama 3.1 8B",
    "gpu": "H800 80GB", "num_gpus": "64", "tp": "1", "pp": "16", "dp": "4", "seq_len": "4096",
    "global_batch_seqs": "128", "micro_batch": "1", "precision": "bf16",
    "tokens_per_s_per_gpu": "1000",
}  # fmt: skip


def test_dualpipe_named_in_the_table_cell_runs_dualpipe() -> None:
    row = {**BASE, "source_table": "PP 16 with DualPipe, EP 64, ZeRO-1"}
    case = inferred_case(row)
    assert case.parallel is not None and case.parallel.schedule is Schedule.DUALPIPE
    assert any("pipeline schedule DualPipe" in a for a in case.assumptions)


@pytest.mark.parametrize("spelling", ["DualPipe", "dual-pipe", "Dual Pipe", "dualpipe"])
def test_spellings_of_dualpipe_are_read(spelling: str) -> None:
    found = named_schedule({**BASE, "notes": f"trained with {spelling} scheduling"}, 16)
    assert found is not None and found[0] == "dualpipe"


@pytest.mark.parametrize(
    "cells",
    [
        {"notes": "1F1B, without DualPipe"},
        {"notes": "no DualPipe: plain 1F1B"},
        {"source_table": "DualPipeV (cut-in-half) schedule"},
        {"source": "Qi et al., 'Zero Bubble (Almost) Pipeline Parallelism', its 1F1B baseline"},
        {"uncertain": "whether DualPipe ran is not stated"},
    ],
)
def test_other_mentions_keep_the_default_schedule(cells: dict[str, str]) -> None:
    case = inferred_case({**BASE, **cells})
    assert case.parallel is not None and case.parallel.schedule is Schedule.ONE_F_ONE_B


def test_no_pipeline_no_schedule() -> None:
    row = {**BASE, "pp": "1", "dp": "64", "source_table": "DualPipe"}
    assert named_schedule(row, 1) is None
    case = inferred_case(row)
    assert case.parallel is not None and case.parallel.schedule is Schedule.ONE_F_ONE_B
