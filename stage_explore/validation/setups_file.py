"""Reading ``setups.toml`` into its two kinds of table, ``[sources.NAME]`` and ``[rows.ID]``,
for :func:`~stage_explore.validation.setups.load_setups`: a file that cannot be read or is not
UTF-8, TOML that does not parse, a key beside those two, or a value that is not a table is a
one-line :class:`ConfigError` naming it (s22 review: ``sources = 1`` in the ``setups.toml`` of
a ``stage validate --data`` folder was an ``AttributeError`` traceback, and an unknown
top-level key was ignored without a word)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError

#: The top-level tables of ``setups.toml``.
KINDS = ("sources", "rows")

Tables = dict[str, dict[str, Any]]


def read_setup_tables(path: Path) -> tuple[Tables, Tables]:
    """The ``[sources.NAME]`` tables (in file order) and the ``[rows.ID]`` tables of ``path``."""
    where = f"setups {str(path)!r}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read {where}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where}: not UTF-8 text (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: {error}") from None
    for kind, value in data.items():
        if kind not in KINDS:
            raise ConfigError(
                f"{where}: unknown key {kind!r}; expected [sources.NAME] and [rows.ID] tables"
            )
        if not isinstance(value, dict):
            raise ConfigError(
                f"{where}: `{kind}` must hold [{kind}.NAME] tables, but got {value!r}"
            )
        for name, table in value.items():
            if not isinstance(table, dict):
                raise ConfigError(
                    f'{where}: `{kind}.{name}` must be a table ([{kind}."{name}"]), but got '
                    f"{table!r}"
                )
    return data.get("sources", {}), data.get("rows", {})
