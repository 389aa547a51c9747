"""Shared piece of the inferred-row tests of Megatron-Bridge's MoE recipes
(test_infer_bridge_moe.py, test_infer_bridge_dispatch.py, test_infer_bridge_hybridep_layouts.py):
the one case a CSV row infers, checked to be evaluable."""

from __future__ import annotations

from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case


def inferred_case(row: dict[str, str]) -> Case:
    """The single case ``row`` (a published-runs CSV row of a file ``extra.csv``) infers; it must
    carry no reason against evaluating it and a parallel layout."""
    (case,) = row_cases(row, "extra.csv", 1)
    assert not case.reason, case.reason
    assert case.parallel is not None
    return case
