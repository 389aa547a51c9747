"""STAGE explorer: system model, evaluation backends, study files, search, records, analysis, CLI.

The analysis API is importable from here (loaded on first use, so the CLI starts fast):
    :func:`load_results`  a study's records as a pandas DataFrame.
    :func:`pareto_front`  the non-dominated rows of such a DataFrame.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stage_explore.pareto import pareto_front
    from stage_explore.records import load_results

__version__ = "0.1.0"

__all__ = ["__version__", "load_results", "pareto_front"]

_LAZY = {"load_results": "stage_explore.records", "pareto_front": "stage_explore.pareto"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stage_explore' has no attribute {name!r}")
