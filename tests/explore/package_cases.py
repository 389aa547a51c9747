"""The package data folder's cases, read once per test session.

:func:`~stage_explore.validation.setups.load_cases` on the package data reads every CSV row and
infers the setup of each row no ``setups.toml`` source claims, loading its system files: several
seconds each time. Tests that only read the package's cases share one read here. Every
:class:`~stage_explore.validation.setups.Case` is a frozen dataclass of frozen parts (model,
parallel layout, tuples), so no test can change a shared case; each call returns a new list, so
a test may filter, sort or extend its own. Tests of ``load_cases`` itself (other folders, bad
input, a monkeypatched reader) keep calling it."""

from __future__ import annotations

import functools

from stage_explore.validation.setups import Case, load_cases


@functools.cache
def _package_cases() -> tuple[Case, ...]:
    return tuple(load_cases())


def package_cases() -> list[Case]:
    """What ``package_cases()`` returns for the package data folder (a new list of the shared,
    immutable cases)."""
    return list(_package_cases())
