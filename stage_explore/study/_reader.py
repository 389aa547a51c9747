"""Typed access to one table of a parsed TOML file, with one-line errors that name the place.

Contents:
    :class:`Source`
        the file's path and text; finds the line of a key for messages.
    :class:`Table`
        a table of the file (``[space]``, ``[backend.options]`` …): typed getters that raise
        :class:`~stage_core.errors.ConfigError` as ``FILE:LINE: [table] key: expected …, got …``,
        and the check that rejects unknown keys.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError


def choices_text(choices: Collection[str]) -> str:
    """``"a" or "b"`` / ``"a", "b" or "c"``."""
    quoted = [f'"{choice}"' for choice in choices]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def describe(value: Any) -> str:
    """A short, TOML-flavoured rendering of a value for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return (
            "["
            + ", ".join(describe(item) for item in value[:6])
            + (", …]" if len(value) > 6 else "]")
        )
    return repr(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A study file's path and text."""

    path: Path
    text: str

    def line_of(self, table: str, key: str | None) -> int | None:
        """The 1-based line of ``key`` in ``[table]`` (or of the table header), found by search.

        ``table`` is "" for the top level. Keys of inline tables are searched in the whole file.
        """
        lines = self.text.splitlines()
        any_header = re.compile(r"^\s*\[")
        start = None
        if table:
            pattern = r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, table.split("."))) + r"\s*\]"
            header = re.compile(pattern)
            start = next((i for i, line in enumerate(lines) if header.match(line)), None)
            if key is None:
                return None if start is None else start + 1
        if key is None:
            return None
        key_line = re.compile(r'^\s*["\']?' + re.escape(key.split(".")[0]) + r'["\']?\s*[.=]')
        begin = 0 if start is None else start + 1
        bounded = start is not None or not table
        for index in range(begin, len(lines)):
            if bounded and any_header.match(lines[index]):
                break
            if key_line.match(lines[index]) or f'"{key}"' in lines[index]:
                return index + 1
        return None if start is None else start + 1

    def error(self, table: str, key: str | None, message: str) -> ConfigError:
        """A :class:`ConfigError` reading ``FILE:LINE: [table] key: message``."""
        line = self.line_of(table, key)
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        place = f"[{table}]" if table else ""
        if key is not None:
            place = f"{place} {key}" if place else key
        return ConfigError(f"{where}: {place}: {message}" if place else f"{where}: {message}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """One table of the file: its dotted name and its parsed content."""

    source: Source
    name: str
    data: Mapping[str, Any]

    def error(self, key: str | None, message: str) -> ConfigError:
        """A :class:`ConfigError` naming the file, the line, this table and ``key``."""
        return self.source.error(self.name, key, message)

    def expect(self, key: str, expected: str) -> ConfigError:
        """The error for a value of the wrong type or range."""
        return self.error(key, f"expected {expected}, got {describe(self.data[key])}")

    def reject_unknown(self, allowed: Collection[str]) -> None:
        """Raise on the first key not in ``allowed``, suggesting the closest known key."""
        for key in self.data:
            if key == "dp" and self.name == "space" and key not in allowed:
                raise self.error(
                    key,
                    "dp is not searched: it is derived as num_gpus / (tp·pp·cp); "
                    "search num_gpus instead",
                )
            if key not in allowed:
                close = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                known = ", ".join(sorted(allowed))
                raise self.error(key, f"unknown key{hint}; expected one of: {known}")

    def has(self, key: str) -> bool:
        """Whether ``key`` is present."""
        return key in self.data

    def table(self, key: str, *, required: bool = False) -> Table | None:
        """The sub-table ``key``."""
        if key not in self.data:
            if required:
                raise self.error(None, f'missing table "{key}"')
            return None
        value = self.data[key]
        if not isinstance(value, dict):
            raise self.expect(key, "a table")
        name = f"{self.name}.{key}" if self.name else key
        return Table(source=self.source, name=name, data=value)

    def string(
        self,
        key: str,
        *,
        default: str | None = None,
        required: bool = False,
        choices: Collection[str] | None = None,
    ) -> str | None:
        """A string, optionally one of ``choices``."""
        if key not in self.data:
            if required:
                raise self.error(None, f'missing key "{key}"')
            return default
        value = self.data[key]
        if choices is not None:
            options = choices_text(choices)
            if not isinstance(value, str) or value not in choices:
                raise self.expect(key, options)
        elif not isinstance(value, str) or not value:
            raise self.expect(key, "a non-empty string")
        return value

    def integer(
        self, key: str, *, default: int | None = None, required: bool = False, minimum: int = 1
    ) -> int | None:
        """An integer ``>= minimum``."""
        if key not in self.data:
            if required:
                raise self.error(None, f'missing key "{key}"')
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.expect(key, f"an integer >= {minimum}")
        return value

    def number(self, key: str, *, default: float | None = None) -> float | None:
        """A positive number (integer or float)."""
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.expect(key, "a positive number")
        return float(value)
