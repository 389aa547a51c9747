"""A pipeline schedule a row names in words (7 Dec 2026, s32 rowsC).

The CSV has no schedule column: :func:`~stage_explore.validation.setups.make_case` runs a row as
1F1B, or as interleaved 1F1B when its ``vpp`` is above 1. A row whose text names DeepSeek's
**DualPipe** ran neither: the DeepSeek-V3 report (arXiv 2412.19437, Section 3.2.1 and Table 2)
describes a bidirectional schedule that "feeds micro-batches from both ends of the pipeline
simultaneously", overlaps a forward and a backward chunk of two micro-batches with their
all-to-all and PP communication, keeps two copies of the parameters and needs an even number of
pipeline stages and of micro-batches; the model's ``Schedule.DUALPIPE``
(:mod:`stage_explore.analytical.pipeline`) is that schedule, so the row now reads it.

Only the name is read. "DualPipeV" (DeepSeek's later one-copy "cut-in-half" variant,
deepseek-ai/DualPipe) is not DualPipe and is not read as it; "without / no DualPipe" keeps the
default; a row without pipeline parallelism has no schedule to name. "Zero Bubble" is not read:
the Sea AI Lab paper's title stands on rows that report its 1F1B baselines.
"""

from __future__ import annotations

import re

#: The columns whose text describes the run (not ``uncertain``, which says what is not known).
SCHEDULE_COLUMNS = ("source", "source_table", "notes")
#: DeepSeek's DualPipe, not its DualPipeV variant.
_DUALPIPE = re.compile(r"\bdual[\s_-]?pipe(?![\s_-]?v\b)\b", re.IGNORECASE)
#: A negated mention ("without DualPipe", "no DualPipe", "w/o DualPipe").
_NEGATED = re.compile(r"\b(?:without|no|not|w/o)\s+(?:the\s+)?dual[\s_-]?pipe\b", re.IGNORECASE)


def named_schedule(row: dict[str, str], pp: int) -> tuple[str, str] | None:
    """``("dualpipe", assumption)`` when a column of :data:`SCHEDULE_COLUMNS` names DualPipe
    (not negated, not DualPipeV) and the row is pipeline parallel (``pp`` > 1); else None."""
    if pp <= 1:
        return None
    for column in SCHEDULE_COLUMNS:
        text = row.get(column, "")
        found = _DUALPIPE.search(text)
        if found and not _NEGATED.search(text):
            return "dualpipe", (
                f"pipeline schedule DualPipe (the {column} column names {found.group(0)!r}): "
                "DeepSeek's bidirectional schedule, a forward and a backward chunk of two "
                "micro-batches overlapped with their communication, two parameter copies per "
                "rank (DeepSeek-V3 report, arXiv 2412.19437, Section 3.2.1, Table 2)"
            )
    return None
