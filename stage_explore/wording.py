"""Counts in the command line's words: ``1 file``, ``2 files``, ``1 rank class``.

:func:`counted` is what every line that prints a number of things uses, so a count of one is
never "1 files" (s19 polish: ``stage trace --format json`` printed "1 files", a uniform
symmetric trace "1 rank classes", a study with one Pareto point "front 1 points").
:func:`first_named` is how a note names a list of runs: at most five, then how many more.
"""

from __future__ import annotations

#: Endings whose plural adds ``es`` (``class`` → ``classes``, ``batch`` → ``batches``).
_ES_ENDINGS = ("s", "x", "z", "ch", "sh")


def plural(noun: str) -> str:
    """The plural of ``noun`` by the regular rule (``file`` → ``files``, ``rank class`` →
    ``rank classes``); a noun whose plural is irregular passes its own to :func:`counted`."""
    return noun + ("es" if noun.endswith(_ES_ENDINGS) else "s")


def counted(number: int, noun: str, plural_form: str = "") -> str:
    """``number`` and ``noun`` in the singular when it is 1, else in the plural
    (``plural_form``, or :func:`plural`): ``1 file``, ``0 files``, ``1024 ranks``."""
    return f"{number} {noun if number == 1 else plural_form or plural(noun)}"


def first_named(names: list[str], limit: int = 5) -> str:
    """``a, b, c, d, e and 3 more``: the first ``limit`` of ``names``, then how many are left."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
