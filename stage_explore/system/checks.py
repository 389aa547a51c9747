"""The number checks the hardware records share (:mod:`~stage_explore.system.accelerator` and
:mod:`~stage_explore.system.model`): a finite number above zero, a fraction in (0, 1], and a
fixed time in seconds with a ceiling (a per-call or per-launch time given in microseconds, ``20``
for 20e-6, would otherwise cost seconds per kernel and return a wrong result without a word), and
a rate in units per second with a floor (a peak given in TFLOP/s, ``312`` for 312e12, or a
bandwidth in GB/s or Gb/s, would make every kernel or transfer take days, s28 review). Each
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


#: The largest fixed time a kernel launch or a grouped GEMM's group may be stated to cost: the
#: presets' values are microseconds (3.3e-6 ... 53e-6 s); a millisecond is far above any kernel's
#: launch and tail, and far below a value typed in microseconds.
KERNEL_SECONDS_CEILING = 1e-3

#: The largest fixed time a network dim's latency or a collective call's overhead may be stated to
#: cost: 100 ms is above any link or NCCL call in a cluster (microseconds) or between data centres
#: (milliseconds), and below a latency typed in microseconds (``5`` for 5e-6).
LINK_SECONDS_CEILING = 0.1


def check_seconds(value: Any, what: str, ceiling: float) -> None:
    """Raise unless ``value`` (the field ``what``) is a finite time in seconds in [0, ceiling]."""
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value >= 0
    ):
        raise ConfigError(f"{what} must be >= 0, but got {value!r}")
    if value > ceiling:
        raise ConfigError(
            f"{what} is in seconds, and must be <= {ceiling:g}, but got {value!r} "
            f"(was it given in microseconds? {value!r} us is {value * 1e-6:g} s)"
        )


#: The smallest peak FLOP/s an accelerator may state: 1 GFLOP/s is below any GPU or CPU core
#: (the presets' smallest entry is the A100's fp32 19.5e12), and far above a peak typed in
#: TFLOP/s (``312`` for 312e12: at most a few thousand).
FLOPS_FLOOR = 1e9

#: The smallest bandwidth in bytes per second a memory or network dim may state: 1 MB/s is
#: below any HBM, DRAM or network link (1 Gb Ethernet is 1.25e8 B/s), and far above a rate
#: typed in GB/s or Gb/s (``300`` for 300e9, ``100`` for 100 Gb/s: at most a few tens of
#: thousands).
BYTES_PER_S_FLOOR = 1e6


def check_rate(value: Any, what: str, floor: float, unit: str, typed: str, factor: float) -> None:
    """Raise unless ``value`` (the field ``what``) is a finite rate in ``unit`` (``FLOP/s``,
    ``bytes/s``) of at least ``floor``; the error reads a value below it as given in ``typed``
    (``TFLOP/s``, ``GB/s``), ``factor`` ``unit`` each."""
    check_positive(value, what)
    if value < floor:
        raise ConfigError(
            f"{what} is in {unit}, and must be >= {floor:g}, but got {value!r} (was it given "
            f"in {typed}? {value!r} {typed} is {value * factor:g} {unit})"
        )
