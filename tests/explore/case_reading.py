"""A test helper for the inferred reader's tests: what a validation case sets up, without the
wording of its assumptions or where its row came from, so that two spellings of one row can be
compared field by field."""

from __future__ import annotations

import dataclasses
from typing import Any

from stage_explore.validation.setups import Case

#: The fields that say where a case came from or how its assumptions were worded.
PROVENANCE = ("assumptions", "in_sample_why", "file", "line", "system_file")


def case_reading(case: Case) -> dict[str, Any]:
    """``case`` as a dict without :data:`PROVENANCE`; the case must have been set up."""
    assert not case.reason, case.reason
    kept = dataclasses.asdict(case)
    for field in PROVENANCE:
        kept.pop(field)
    return kept
