"""Whose peak a memory row measures: pipeline rank 0's when the row says the figure is rank 0's
(a trainer logging from rank 0 only), else the largest over the pipeline ranks — the per-rank
peaks the analytical backend reports, the reader rule, and validation comparing with them."""

from __future__ import annotations

import math

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.memory_kinds import RANK0_PREFIX
from stage_explore.system import load_system
from stage_explore.validation.memory_kind import kind_assumption, memory_rank0
from stage_explore.validation.run import analytical_factory, evaluate_case
from stage_explore.validation.setup_systems import case_system
from tests.explore.package_cases import package_cases

GIB = 2**30
KINDS = ("allocated", "reserved", "process")


def _extra(pp: int) -> dict[str, int]:
    """The torchtitan profile's peaks of a 4-layer Llama 3 8B over ``pp`` stages (its eager
    fp32 loss on the 128,256-entry vocabulary makes the last stage the largest)."""
    model = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=2048)
    parallel = ParallelConfig(
        dp=2, pp=pp, zero=3, recompute=Recompute.FULL, micro_batch=1, global_batch=8
    )
    result = AnalyticalBackend(framework="torchtitan").evaluate(
        model, parallel, load_system("h100-80gb")
    )
    return dict(result.extra)


def test_without_pipeline_parallelism_rank_0_s_peaks_are_the_peaks() -> None:
    extra = _extra(1)
    for kind in KINDS:
        assert extra[f"{RANK0_PREFIX}peak_{kind}_bytes"] == extra[f"peak_{kind}_bytes"]


def test_under_pipeline_parallelism_rank_0_s_peak_is_its_own_stage_s() -> None:
    extra = _extra(2)
    for kind in KINDS:  # stage 0 holds no loss: below the last stage's peak, every kind
        assert extra[f"{RANK0_PREFIX}peak_{kind}_bytes"] < extra[f"peak_{kind}_bytes"]
    rank0 = extra[f"{RANK0_PREFIX}peak_allocated_bytes"]
    assert rank0 > 0.5 * GIB  # its states, activations and working set, not nothing


@pytest.mark.parametrize(
    ("cells", "rank0"),
    [
        ({"notes": "torch.cuda.max_memory_allocated(0) / 1024**3 of rank 0"}, True),
        ({"uncertain": "the allocated peak of rank 0; the same 70b configuration"}, True),
        ({"notes": "peak memory 263.25 GiB on rank 0"}, True),
        ({"source_table": "the logging rank is rank 0 (tp rank 0 of fsdp rank 0)"}, True),
        ({"notes": "max_reserved_gib; the table's footnote: the maximum across all GPUs"}, False),
        ({"notes": "read on its device 0 (local rank 0)"}, False),
        ({"notes": "peak memory per GPU"}, False),
    ],
)
def test_a_row_s_text_names_rank_0(cells: dict[str, str], rank0: bool) -> None:
    row = {"id": "R", "source_table": "", "notes": "", "uncertain": "", **cells}
    assert memory_rank0(row) is rank0
    assert ("of pipeline rank 0" in kind_assumption("allocated", rank0)) is rank0


def test_the_shipped_rank_0_rows_are_compared_with_pipeline_rank_0() -> None:
    cases = {c.id: c for c in package_cases() if c.metric == "peak_mem_gib"}
    assert cases["KFCFG-H200-13B-TP4-PP2-FSDP4-32"].memory_rank0
    assert cases["KFWEAK-H200-13B-TP4-FSDP2-8"].memory_rank0
    assert not cases["TTITAN-T5-1"].memory_rank0  # the maximum across all GPUs
    assert not cases["MBREC-GB200-26.10-LLAMA3.1_405B-64-MX"].memory_rank0
    for name, rank0 in (("KFCFG-H200-13B-TP4-PP2-FSDP4-32", True), ("TTITAN-T5-2", False)):
        case = cases[name]
        assert case.model is not None and case.parallel is not None
        system = case_system(case)
        backend = analytical_factory()(case.backend_key)
        row = evaluate_case(case, backend, system)
        extra = backend.evaluate(case.model, case.parallel, system).extra
        key = f"peak_{case.memory_kind}_bytes"
        assert extra[f"{RANK0_PREFIX}{key}"] < extra[key]  # both: stage 0 is not the largest
        expected = extra[f"{RANK0_PREFIX}{key}" if rank0 else key] / GIB
        assert math.isclose(row.predicted, expected)
