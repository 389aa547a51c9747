"""The exception hierarchy shared by the whole project.

One root, :class:`StageError`; every domain error also inherits the matching builtin so that
callers who only know Python's exceptions can still catch them.
"""

from __future__ import annotations


class StageError(Exception):
    """Root of every error STAGE raises on purpose."""


class ConfigError(StageError, ValueError):
    """Bad user input: an unknown key, a wrong type, an invalid combination of options."""


class ShardingError(StageError, ValueError):
    """An invalid layout, or a layout change that is impossible or ambiguous."""


class InfeasibleError(StageError):
    """A valid design point that cannot run (out of memory, indivisible sizes).

    Infeasible points are results, not crashes: the explorer records them with ``reason``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
