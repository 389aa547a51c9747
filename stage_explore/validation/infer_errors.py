"""The error a published-runs row's reader raises when no rule reads a value
(:class:`Uninferable`); its message is the row's not-evaluated reason. Its own module so that the
readers split across ``infer_*.py`` modules share it without importing one another."""

from __future__ import annotations


class Uninferable(ValueError):
    """A row's value that no rule reads; the message is the row's not-evaluated reason."""
