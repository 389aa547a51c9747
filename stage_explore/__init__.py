"""STAGE explorer: system model, evaluation backends, study files, search, records, analysis, CLI."""

from __future__ import annotations

__version__ = "0.1.0"
