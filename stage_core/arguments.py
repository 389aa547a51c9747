"""Type checks at the Python API's entry points: a value of the wrong kind is one clear error.

A Python caller who passes a flavor name where a :class:`~stage_core.models.spec.ModelSpec` is
expected, a dict for a :class:`~stage_core.parallel.config.ParallelConfig`, a preset name for a
system or a list for a program set got an ``AttributeError`` from deep inside (s23 review);
:func:`expect` turns that into a one-line :class:`~stage_core.errors.ConfigError` naming the
argument, what was expected (with how to make one) and what was given.
"""

from __future__ import annotations

from typing import Any

from stage_core.errors import ConfigError


def expect(value: Any, kind: type | tuple[type, ...], what: str, hint: str = "") -> None:
    """Raise :class:`~stage_core.errors.ConfigError` unless ``value`` is an instance of
    ``kind``: ``"<what>: expected a <kind> (<hint>), but got <value> (<its type>)"``."""
    if isinstance(value, kind):
        return
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = " or ".join(k.__name__ for k in kinds)
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    how = f" ({hint})" if hint else ""
    article = "an" if names[0] in "AEIOU" else "a"
    raise ConfigError(
        f"{what}: expected {article} {names}{how}, but got {shown} ({type(value).__name__})"
    )
