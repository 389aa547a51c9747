"""Helpers shared by the trace-mode tests (``test_trace_mode*.py``)."""

from __future__ import annotations

from stage_core.lower.nodes import OPTIMIZER
from stage_explore.analytical.trace_mode import TraceStep


def optimizer_end(traced: TraceStep) -> float:
    """When the last rank's optimizer ends in a traced step (seconds)."""
    return max(traced.end_of(rank, OPTIMIZER) for rank in traced.result.ranks)
