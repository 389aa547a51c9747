"""The number checks the hardware records share (:mod:`~stage_explore.system.accelerator` and
:mod:`~stage_explore.system.model`): a finite number above zero, and a fraction in (0, 1]. Each
raises :class:`~stage_core.errors.ConfigError` naming the field it checks.
"""

from __future__ import annotations

import math
from typing import Any

from stage_core.errors import ConfigError


def check_positive(value: float, what: str) -> None:
    """Raise unless ``value`` (the field ``what``) is a finite number above zero."""
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{what} must be a finite number > 0, but got {value!r}")


def check_fraction(value: Any, what: str) -> None:
    """Raise unless ``value`` (the field ``what``) is in (0, 1]."""
    check_positive(value, what)
    if value > 1:
        raise ConfigError(f"{what} must be <= 1, but got {value!r}")
