"""The kind of peak a memory row measures (allocated / reserved / process): the three peaks the
analytical backend reports from one tensor peak, the reader rule naming a row's kind, and
validation comparing each row with its kind."""

from __future__ import annotations

import math

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.memory_kinds import (
    BLAS_WORKSPACE_BYTES,
    BLAS_WORKSPACES,
    memory_peaks,
)
from stage_explore.system import load_system
from stage_explore.validation.memory_kind import kind_assumption, memory_kind
from stage_explore.validation.run import analytical_factory, evaluate_case
from stage_explore.validation.setup_systems import case_system
from tests.explore.package_cases import package_cases

GIB = 2**30
WORKSPACES = BLAS_WORKSPACES * BLAS_WORKSPACE_BYTES


@pytest.mark.parametrize(
    ("tensors", "runtime", "overhead"), [(40 * GIB, GIB, 0.05), (7 * GIB + 3, 2 * GIB, 0.1)]
)
def test_the_three_peaks_differ_by_the_runtime_outside_and_the_workspaces_inside(
    tensors: int, runtime: int, overhead: float
) -> None:
    peaks = memory_peaks(tensors, 80 * GIB, runtime, overhead)
    reserve = int(tensors * overhead)
    assert peaks.process == tensors + runtime + reserve
    assert peaks.reserved == tensors + reserve + WORKSPACES  # no context, no NCCL buffers
    assert peaks.allocated == tensors + WORKSPACES  # the workspaces are caching-allocator blocks
    assert peaks.allocated < peaks.reserved < peaks.process


def test_a_capped_process_caps_the_reserve_and_an_overflow_is_not_capped() -> None:
    capped = memory_peaks(78 * GIB, 80 * GIB, GIB, 0.05)
    assert capped.process == 80 * GIB  # the cached blocks are given back at a full device
    assert capped.reserved == 80 * GIB - (GIB - WORKSPACES)
    assert capped.allocated == 78 * GIB + WORKSPACES
    over = memory_peaks(80 * GIB, 80 * GIB, GIB, 0.05)
    assert over.process == 81 * GIB + int(80 * GIB * 0.05)


def test_a_profile_without_runtime_memory_reports_the_tensors_as_every_kind() -> None:
    peaks = memory_peaks(50 * GIB + 5, 80 * GIB, 0, 0.0)
    assert peaks.allocated == peaks.reserved == peaks.process == 50 * GIB + 5


def test_a_negative_term_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="allocator overhead -0.1"):
        memory_peaks(GIB, 80 * GIB, GIB, -0.1)


def test_the_backend_reports_the_process_peak_and_the_others_in_extra() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    result = AnalyticalBackend(framework="torchtitan").evaluate(
        model, parallel, load_system("h100-80gb")
    )
    extra = result.extra
    assert extra["peak_process_bytes"] == result.peak_memory_bytes
    assert result.peak_memory_bytes - extra["peak_reserved_bytes"] == GIB - WORKSPACES
    assert extra["peak_allocated_bytes"] < extra["peak_reserved_bytes"]


@pytest.mark.parametrize(
    ("cells", "kind"),
    [
        ({"notes": "Memory as torchtitan's max_reserved_gib"}, "reserved"),
        ({"uncertain": "Memory/GPU as printed by torchtitan (its max reserved GiB)"}, "reserved"),
        ({"source_table": "'154.6 GiB peak allocated memory'"}, "allocated"),
        ({"notes": "torch.cuda.max_memory_allocated of rank 0"}, "allocated"),
        ({"notes": "memory read from nvidia-smi"}, "process"),
        ({"notes": "peak memory per GPU"}, "process"),
        ({"notes": "the reserved peak, not the allocated one: memory_reserved"}, "reserved"),
    ],
)
def test_a_row_s_text_names_its_kind(cells: dict[str, str], kind: str) -> None:
    row = {"id": "R", "source_table": "", "notes": "", "uncertain": "", **cells}
    assert memory_kind(row) == kind
    assert f"the model's {kind} peak" in kind_assumption(kind)


def test_a_row_naming_two_kinds_is_an_error_naming_them() -> None:
    row = {"id": "R2", "notes": "max_memory_allocated and nvidia-smi"}
    with pytest.raises(ConfigError, match=r"R2.*\['allocated', 'process'\]"):
        memory_kind(row)
    with pytest.raises(ValueError, match="'active'"):
        kind_assumption("active")


def test_the_shipped_memory_rows_are_compared_with_their_kind() -> None:
    cases = [c for c in package_cases() if c.metric == "peak_mem_gib"]
    kinds = {c.id: c.memory_kind for c in cases}
    assert kinds["TTITAN-T1-1"] == "reserved"
    assert kinds["TTQWEN3-32B-H100-FSDP4TP8-LBS16"] == "reserved"
    assert kinds["MBREC-GB200-26.10-LLAMA3.1_405B-64-MX"] == "allocated"
    assert kinds["KOR22-F1-22B"] == "process"
    case = next(c for c in cases if c.id == "TTITAN-T1-1")
    assert case.model is not None and case.parallel is not None
    system = case_system(case)
    backend = analytical_factory()(case.backend_key)
    row = evaluate_case(case, backend, system)
    result = backend.evaluate(case.model, case.parallel, system)
    assert math.isclose(row.predicted, result.extra["peak_reserved_bytes"] / GIB)
    assert row.predicted < result.peak_memory_bytes / GIB
