"""The system-file parse memo (s35 testspeed2, ``stage_explore.system.loading._parse``): one
parse per distinct text, an edited file read afresh whatever its path and mtime say, an
invalid file the same one-line error on every load, and a preset the same system object."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from tests.explore.test_system import MINIMAL, write


def test_an_edited_file_is_read_afresh_even_with_its_old_mtime(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    first = load_system(path)
    assert first.accelerator.memory_bytes == 1024
    stamp = os.stat(path)
    # Same length, same path, same mtime: only the text tells the two files apart.
    path.write_text(MINIMAL.replace("memory_bytes = 1024", "memory_bytes = 2048"))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    second = load_system(path)
    assert second.accelerator.memory_bytes == 2048
    path.write_text(MINIMAL)
    assert load_system(path).accelerator.memory_bytes == 1024


def test_the_same_text_is_parsed_once(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    assert load_system(path) is load_system(path)
    assert load_system("h100-80gb") is load_system("h100-80gb")
    # The same text in another file is another system: its name defaults to the file's stem.
    unnamed = MINIMAL.replace('name = "tiny"\n', "")
    (tmp_path / "one.toml").write_text(unnamed)
    (tmp_path / "two.toml").write_text(unnamed)
    assert load_system(tmp_path / "one.toml").name == "one"
    assert load_system(tmp_path / "two.toml").name == "two"


def test_an_invalid_file_is_the_same_error_every_time_and_then_fixed(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("size = 4", "sise = 4"))
    messages = []
    for _ in range(2):
        with pytest.raises(ConfigError, match=r":12: key `network\[0\].sise` is unknown") as caught:
            load_system(path)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "\n" not in messages[0]
    path.write_text(MINIMAL)
    assert load_system(path).dim_sizes == (4, 2)
