"""Communicator-group ids and comm_group.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.groups import (
    GroupRegistry,
    comm_groups_json,
    parse_comm_groups,
    read_comm_groups,
    write_comm_groups,
)
from stage_core.errors import ConfigError


def test_ids_follow_first_use_and_repeat_for_known_groups() -> None:
    registry = GroupRegistry(8)
    assert [registry.pg_name(group) for group in [(4, 5), (0, 1), (4, 5), (0, 4), (0, 1)]] == [
        "1", "2", "1", "3", "2"]
    assert registry.groups == {"1": (4, 5), "2": (0, 1), "3": (0, 4)}


def test_all_ranks_has_no_id() -> None:
    registry = GroupRegistry(4)
    assert registry.pg_name(None) is None
    assert registry.pg_name((0, 1, 2, 3)) is None
    assert registry.pg_name((1, 2)) == "1"
    assert registry.groups == {"1": (1, 2)}


@pytest.mark.parametrize(
    ("group", "message"),
    [((), "must not be empty"), ((1, 0), "ascending"), ((1, 1), "distinct"),
     ((0, 4), "outside 0..3"), ((-1, 2), "outside 0..3")],
)
def test_bad_groups_are_refused(group: tuple[int, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GroupRegistry(4).pg_name(group)


def test_json_round_trip_in_numeric_id_order(tmp_path: Path) -> None:
    groups = {"10": (6, 7), "2": (2, 3), "1": (0, 1)}
    assert comm_groups_json(groups) == '{"1": [0, 1], "2": [2, 3], "10": [6, 7]}\n'
    write_comm_groups(tmp_path / "comm_group.json", groups)
    assert read_comm_groups(tmp_path / "comm_group.json") == groups


def test_parse_sorts_ranks_written_by_other_tools() -> None:
    assert parse_comm_groups('{"3": [5, 1]}') == {"3": (1, 5)}


@pytest.mark.parametrize(
    ("text", "message"),
    [("[1, 2]", "expected an object"), ('{"0": [0]}', "decimal string > 0"),
     ('{"a": [0]}', "decimal string > 0"), ('{"1": [0, true]}', "must list ranks >= 0"),
     ('{"1": [0, -1]}', "must list ranks >= 0"), ('{"1": [2, 2]}', "distinct"),
     ('{"1": []}', "distinct"), ("{", "not valid JSON")],
)
def test_bad_json_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_comm_groups(text, "groups.json")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_comm_groups(tmp_path / "absent.json")


def test_world_size_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="world_size"):
        GroupRegistry(0)
