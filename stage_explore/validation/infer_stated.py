"""Two reads of a row that many framework rules of the inferred setup share
(:mod:`stage_explore.validation.infer_defaults`): a layout integer as the row states it or as
inferred so far (:func:`stated_or_inferred`), and whether the row's text names the KempnerForge
trainer (:func:`names_kempnerforge`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from stage_explore.validation.infer_release import TEXT_COLUMNS, row_text

#: A row naming the KempnerForge trainer (KempnerInstitute/KempnerForge).
KEMPNERFORGE = re.compile(r"\bKempnerForge\b", re.IGNORECASE)


def stated_or_inferred(
    stated: Mapping[str, int], inferred: Mapping[str, Any], key: str, default: int = 1
) -> int:
    """The row's ``key`` (``tp``, ``dp``, ``micro_batch`` …) as an integer: its cell as stated
    (``stated``: the row's integer cells), else as inferred so far (``inferred``: the layout
    fields filled in), else ``default``."""
    return int(stated.get(key, inferred.get(key, default)))


def names_kempnerforge(row: dict[str, str]) -> bool:
    """Whether the row's text (:data:`~stage_explore.validation.infer_release.TEXT_COLUMNS`)
    names KempnerForge (:data:`KEMPNERFORGE`)."""
    return KEMPNERFORGE.search(row_text(row, TEXT_COLUMNS)) is not None
