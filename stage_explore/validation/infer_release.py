"""What an inferred setup reads of a row's release (:mod:`stage_explore.validation.infer_defaults`):
the NeMo / NGC container ``YY.MM`` or the date its text names, and the :class:`Defaults` a
framework's defaults fill in (model, parallel and framework-option fields, each with its why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from stage_explore.validation.infer_mlperf_round import mlperf_training_round

#: Columns whose text names a release (container, date) or a technique (torch.compile, AsyncTP).
TEXT_COLUMNS = ("source", "source_table", "notes")
#: A NeMo / NGC container version: ``NeMo 24.07``, ``NeMo24.03.01``, ``ngc25.01_nemo``,
#: ``(25.11 container)``, ``26.02 NeMo Container``, an image tag ``nvcr.io/nvidia/nemo:24.05``,
#: and the ``framework`` field of an MLPerf Training system description, ``NVIDIA NeMo Framework
#: Release 25.09`` or, from a partner, ``NeMo Framework NVIDIA Release 25.09``
#: (mlcommons/training_results_v5.1 4da2d1cd: ``NVIDIA/systems/tyche_ngpu72_ngc25.09_nemo.json``,
#: ``Supermicro/systems/AS-8126GS-NB3RT.json``; s24 hidden9: the second spelling dated nothing).
#: A ``PyTorch NVIDIA Release`` names the PyTorch container, not NeMo's, and is not read here
#: (but see :data:`PYTORCH_BASE_ROUNDS`). A patch release's ``YY.MM.PP container``
#: (Megatron-Bridge's ``26.02.01 NeMo Container`` section) names its ``YY.MM`` (7 Dec 2026, s37
#: oomaudit: it was read as no container, so the three 26.02.01 rows kept fp32 gradient buffers
#: and 16-bit parameters).
_CONTAINER = (
    re.compile(r"(?:nemo|ngc)[\s_:-]*(2\d)\.(\d\d)(?!\d)", re.IGNORECASE),
    re.compile(r"\b(2\d)\.(\d\d)(?:\.\d\d)?\s+(?:nemo\s+)?container", re.IGNORECASE),
    re.compile(r"\bnemo\s+framework\s+(?:nvidia\s+)?release\s+(2\d)\.(\d\d)(?!\d)", re.IGNORECASE),
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DATE = (
    re.compile(r"\b(20\d\d)[-/](\d\d)\b"),
    re.compile(r"\b(" + "|".join(_MONTHS) + r")[a-z]*\.?\s+(20\d\d)\b", re.IGNORECASE),
)


@dataclass(slots=True)
class Defaults:
    """The fields an inferred setup takes from its framework's defaults, and why."""

    model: dict[str, Any] = field(default_factory=dict)
    parallel: dict[str, Any] = field(default_factory=dict)
    options: dict[str, bool | int | float | str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def row_text(row: dict[str, str], columns: tuple[str, ...] = TEXT_COLUMNS) -> str:
    """The row's text a rule searches: its ``columns`` (default :data:`TEXT_COLUMNS`) joined
    by spaces."""
    return " ".join(row.get(c, "") for c in columns)


#: Where a row may name its container when :data:`TEXT_COLUMNS` do not: the ``uncertain``
#: column, where a data engineer records what a table's heading leaves open (DGX Cloud's GPT3
#: 175B rows: "the heading's '24.11' is the benchmark release ..., whose container is
#: nvcr.io/nvidia/nemo:24.05").
CONTAINER_COLUMNS = (*TEXT_COLUMNS, "uncertain")


#: The framework release an MLPerf log's SYSJSON / container banner prints (``PyTorch NVIDIA
#: Release 26.04``, HPE's ``NVIDIA Release 26.04 (NeMo, PyTorch)``).
_NVIDIA_RELEASE = re.compile(r"\bnvidia\s+release\s+(2\d)\.(\d\d)(?!\d)", re.IGNORECASE)
#: MLPerf Training rounds whose NVIDIA NeMo implementations build on the PyTorch container of
#: their release: v6.0's gpt_oss_20b and llama31_8b ``implementations/nemo/Dockerfile``
#: (Richardyu114/training_results_v6.0 eabf23a0, a copy of mlcommons/training_results_v6.0)
#: ``FROM nvcr.io/nvidia/pytorch:26.04-py3`` with Megatron-Bridge / Megatron-Core
#: ``26.04-alpha.rc2`` / ``rc1``. So the log's "NVIDIA Release YY.MM" is the run's release, over
#: a results folder's ``ngcYY.MM`` (Lambda's v6.0 ``*_ngc25.09_nemo`` folders hold 26.04 logs;
#: 7 Dec 2026, s29 gptossdef). Earlier rounds' NeMo images carry an older PyTorch base (not read).
PYTORCH_BASE_ROUNDS = ((6, 0),)


def container(row: dict[str, str]) -> tuple[int, int] | None:
    """``(YY, MM)`` of the NeMo / NGC container the row's text names (the first column of
    :data:`CONTAINER_COLUMNS` that names one), else None; for a round of
    :data:`PYTORCH_BASE_ROUNDS` the log's "NVIDIA Release YY.MM" first, wherever it is stated."""
    if mlperf_training_round(row_text(row, CONTAINER_COLUMNS)) in PYTORCH_BASE_ROUNDS:
        for column in CONTAINER_COLUMNS:
            found = _NVIDIA_RELEASE.search(row.get(column, ""))
            if found:
                return int(found.group(1)), int(found.group(2))
    for column in CONTAINER_COLUMNS:
        for pattern in _CONTAINER:
            found = pattern.search(row.get(column, ""))
            if found:
                return int(found.group(1)), int(found.group(2))
    return None


#: PyTorch releases as ``(year, month)`` of their release (pytorch.org/blog/pytorch-2-6 … -2-9:
#: 2.6 on 29 Jan 2025, 2.7 on 23 Apr 2025, 2.8 on 6 Aug 2025, 2.9 on 15 Oct 2025). A run on a
#: stated release ran no earlier: what :func:`torch_dated` reads of a row that names no date.
PYTORCH_RELEASES: dict[tuple[int, int], tuple[int, int]] = {
    (2, 6): (2025, 1),
    (2, 7): (2025, 4),
    (2, 8): (2025, 8),
    (2, 9): (2025, 10),
}
_PYTORCH = re.compile(
    r"\b(?:pytorch|torch)(?:\s+version)?[\s:=_`-]*v?(\d+)\.(\d+)(?:\.\d+)?"
    r"(?:(a\d+)|\.dev(\d{8}))?",  # an alpha (main-branch) build, a dated nightly
    re.IGNORECASE,
)
#: The date a row was entered into a CSV (``added 6 Dec 2026 (s19 …)``, the package's own
#: provenance phrase): not the run's date, so :func:`dated` reads past it.
_ADDED = re.compile(
    r"\badded\s+(?:on\s+)?(?:\d{1,2}\s+)?(?:[a-z]+\.?\s+)?(?:\d{1,2},?\s+)?20\d\d(?:[-/]\d\d)*",
    re.IGNORECASE,
)


def torch_dated(row: dict[str, str]) -> tuple[int, int] | None:
    """``(year, month)`` of the release of the PyTorch version the row's text names
    (``PyTorch 2.9.0+cu128``; :data:`PYTORCH_RELEASES`), the earliest the run can date from;
    None when it names none of those versions. A nightly build states its own date
    (``2.9.0.dev20250815``: 2025-08, two months before 2.9's release); a pre-release built from
    the main branch with no date (``2.7.0a0+gitb98af95``: main names the next release ``a0``
    from the previous one's branch cut on, pytorch/pytorch version.txt) predates its release,
    so it dates nothing (s19 hidden7a: both were read as the release)."""
    for column in TEXT_COLUMNS:
        for found in _PYTORCH.finditer(row.get(column, "")):
            if found.group(4):
                return int(found.group(4)[:4]), int(found.group(4)[4:6])
            if found.group(3):
                continue
            when = PYTORCH_RELEASES.get((int(found.group(1)), int(found.group(2))))
            if when is not None:
                return when
    return None


def dated(row: dict[str, str]) -> tuple[int, int] | None:
    """``(year, month)`` of the first date the row's text states (``2025-06``, ``June
    2025``), else None; the date the row was added to its CSV (``added 6 Dec 2026``) is not
    the run's and is not read (s19 hidden7a: it dated torchtitan runs of 2025 to 2026-12)."""
    for column in TEXT_COLUMNS:
        cell = _ADDED.sub(" ", row.get(column, ""))
        found = _DATE[0].search(cell)
        if found and 1 <= int(found.group(2)) <= 12:
            return int(found.group(1)), int(found.group(2))
        found = _DATE[1].search(cell)
        if found:
            return int(found.group(2)), _MONTHS.index(found.group(1)[:3].lower()) + 1
    return None
