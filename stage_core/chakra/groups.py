"""Communicator groups: deterministic ids and the ``comm_group.json`` file ASTRA-sim reads.

Holds :class:`GroupRegistry` (assigns ids to groups as they are first used), and
:func:`write_comm_groups` / :func:`read_comm_groups` for the JSON file
(``{"1": [0, 1], "2": [2, 3]}``: group id, a decimal string > 0, → its ranks).

Id assignment. Ids are "1", "2", … in order of *first use*: the writers visit ranks in
ascending order and each rank's nodes in program order, and the first collective naming a group
gives it the next id. So ids depend only on the programs, and a trace set is byte-identical
across runs. A group equal to all ranks gets no id: it is written with no ``pg_name``, which
means all ranks, and so is read back as ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from stage_core.errors import ConfigError

#: The file name ASTRA-sim is pointed at with ``--comm-group-configuration``.
COMM_GROUP_FILE = "comm_group.json"


class GroupRegistry:
    """Assigns group ids in order of first use (see the module docstring)."""

    def __init__(self, world_size: int) -> None:
        if world_size < 1:
            raise ConfigError(f"`world_size` must be >= 1, but got {world_size}")
        self.world_size = world_size
        self._ids: dict[tuple[int, ...], str | None] = {}
        self._groups: dict[str, tuple[int, ...]] = {}

    def pg_name(self, group: tuple[int, ...] | None) -> str | None:
        """The id of ``group`` (registering it on first use); ``None`` for all ranks."""
        if group is None:
            return None
        known = self._ids.get(group, "")
        if known != "":
            return known
        self._validate(group)
        if len(group) == self.world_size:
            self._ids[group] = None
            return None
        pg_name = str(len(self._groups) + 1)
        self._ids[group] = pg_name
        self._groups[pg_name] = group
        return pg_name

    def _validate(self, group: tuple[int, ...]) -> None:
        if not group:
            raise ConfigError("a communicator group must not be empty")
        if any(b <= a for a, b in zip(group, group[1:], strict=False)):
            raise ConfigError(f"a group must list distinct ranks in ascending order, got {group}")
        if group[0] < 0 or group[-1] >= self.world_size:
            raise ConfigError(
                f"group {group} has ranks outside 0..{self.world_size - 1} "
                f"(world_size={self.world_size})"
            )

    @property
    def groups(self) -> dict[str, tuple[int, ...]]:
        """Every registered group by id, in id order (a copy)."""
        return dict(self._groups)


def comm_groups_json(groups: Mapping[str, Sequence[int]]) -> str:
    """The text of ``comm_group.json``: ids in numeric order, one line."""
    ordered = sorted(groups.items(), key=lambda item: int(item[0]))
    return json.dumps({key: list(ranks) for key, ranks in ordered}) + "\n"


def write_comm_groups(path: Path | str, groups: Mapping[str, Sequence[int]]) -> None:
    """Write ``comm_group.json`` at ``path``."""
    Path(path).write_text(comm_groups_json(groups), encoding="utf-8")


def _is_group_id(key: str) -> bool:
    return key.isascii() and key.isdigit() and int(key) > 0


def parse_comm_groups(text: str, source: str = COMM_GROUP_FILE) -> dict[str, tuple[int, ...]]:
    """Parse and validate ``comm_group.json`` text; ranks come back sorted."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source}: not valid JSON ({error})") from error
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError(f"{source}: expected an object of group id -> ranks, got {kind}")
    groups: dict[str, tuple[int, ...]] = {}
    for key, ranks in data.items():
        if not _is_group_id(key):
            raise ConfigError(f"{source}: group id must be a decimal string > 0, but got {key!r}")
        if not isinstance(ranks, list) or not all(
            isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 for rank in ranks
        ):
            raise ConfigError(f"{source}: group {key!r} must list ranks >= 0, got {ranks!r}")
        members = tuple(sorted(ranks))
        if len(set(members)) != len(members) or not members:
            raise ConfigError(f"{source}: group {key!r} must list distinct ranks, got {ranks!r}")
        groups[key] = members
    return groups


def read_comm_groups(path: Path | str) -> dict[str, tuple[int, ...]]:
    """Read ``comm_group.json``; see :func:`parse_comm_groups`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"cannot read {path}: not UTF-8 text (byte {error.object[error.start]:#04x} at "
            f"offset {error.start}); expected a JSON object of communicator groups"
        ) from None
    return parse_comm_groups(text, str(path))
