"""Files that are not UTF-8 text (s24 review): a system TOML, a model TOML, a Hugging Face
``config.json``, a trace folder's ``comm_group.json`` and ASTRA-sim's ``system.json`` /
``network.yml`` ended in a ``UnicodeDecodeError`` traceback; each is now one line naming the
file, the byte and what was expected (runs CSVs, ``setups.toml`` and study files already were)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.groups import read_comm_groups
from stage_core.errors import ConfigError
from stage_explore.cli import main
from stage_explore.system import astra_config_from_files

BINARY = b"\xff\xfe not text"


def _binary(path: Path) -> Path:
    path.write_bytes(BINARY)
    return path


@pytest.mark.parametrize(
    ("name", "flag", "expected"),
    [
        ("system.toml", "--system", "cannot read system file {path!r}: not UTF-8 text (byte 0xff "
         "at offset 0); expected a TOML file"),
        ("model.toml", "--model", "cannot read model file {path!r}: not UTF-8 text (byte 0xff at "
         "offset 0); expected a TOML file"),
        ("config.json", "--model", "cannot read model file {path!r}: not UTF-8 text (byte 0xff "
         "at offset 0); expected a Hugging Face config.json"),
    ],
)  # fmt: skip
def test_a_binary_system_or_model_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, flag: str, expected: str
) -> None:
    path = str(_binary(tmp_path / name))
    argv = {"--system": "h100-80gb", "--model": "llama3-8b", flag: path}
    assert main(["eval", *(item for pair in argv.items() for item in pair)]) == 2
    assert capsys.readouterr().err == f"stage eval: error: {expected.format(path=path)}\n"


@pytest.mark.parametrize(
    ("name", "flag", "what"),
    [("system.toml", "--system", "system file"), ("model.toml", "--model", "model file")],
)
def test_a_missing_system_or_model_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, flag: str, what: str
) -> None:
    """The three readers are one (:func:`stage_core.text_files.read_text_file`, s33
    simplify): a missing system file is now said as a missing model file is."""
    path = str(tmp_path / name)
    argv = {"--system": "h100-80gb", "--model": "llama3-8b", flag: path}
    assert main(["eval", *(item for pair in argv.items() for item in pair)]) == 2
    assert capsys.readouterr().err == f"stage eval: error: {what} {path!r} does not exist\n"


def test_a_binary_comm_group_file_is_one_line(tmp_path: Path) -> None:
    path = _binary(tmp_path / "comm_group.json")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xff at offset 0\); expected"):
        read_comm_groups(path)


def test_binary_astra_sim_files_are_one_line(tmp_path: Path) -> None:
    network = tmp_path / "network.yml"
    network.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    system = tmp_path / "system.json"
    with pytest.raises(ConfigError, match=r"system\.json: cannot read ASTRA-sim system\.json: not"):
        astra_config_from_files(_binary(system), network)
    sample = Path(__file__).parents[1] / "fixtures" / "astra-sim" / "sample-run" / "system.json"
    with pytest.raises(ConfigError, match=r"network\.yml: cannot read ASTRA-sim network\.yml: not"):
        astra_config_from_files(sample, _binary(network))
