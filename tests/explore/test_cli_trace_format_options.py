"""``stage trace`` options a format writes nothing with (s26 review): ``--prefix`` and ``--jobs``
with ``--format json`` / ``symmetric`` (trace.json and symmetric.json are named so, one writer),
``--units stage`` with a symmetric file, ``--for`` outside Chakra traces in bytes, and
``--quiet`` beside ``--progress`` were each taken and ignored; each is now one line. The
defaults still write and check as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main

RUN = ["trace", "--model", "llama3-8b", "--layers", "2", "--dp", "2"]


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--format", "json", "--prefix", "foo"],
         "--prefix applies to --format chakra (the <prefix>.<rank>.et files and their writer "
         "processes), but got --prefix foo with --format json"),
        (["--format", "symmetric", "--jobs", "3"], "but got --jobs 3 with --format symmetric"),
        (["--format", "symmetric", "--units", "stage"],
         "--units stage applies to --format chakra or json (a symmetric file holds bytes and "
         "FLOPs), but got --format symmetric"),
        (["--format", "json", "--for", "astra-sim"],
         "--for astra-sim applies to Chakra traces in bytes (what ASTRA-sim reads), but got "
         "--format json --units bytes"),
        (["--units", "stage", "--for", "any"], "but got --format chakra --units stage"),
        (["--quiet", "--progress"], "--quiet and --progress contradict each other"),
    ],
)  # fmt: skip
def test_an_option_the_format_ignores_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], error: str
) -> None:
    out = tmp_path / "t"
    assert main([*RUN, *extra, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and error in lines[0], lines
    assert not out.exists()  # refused before anything is written


def test_the_defaults_and_the_chakra_options_still_write(tmp_path: Path) -> None:
    assert main([*RUN, "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "comm_group.json", "workload.0.et", "workload.1.et",
    ]  # fmt: skip
    argv = [*RUN, "--out", str(tmp_path / "b"), "--prefix", "foo", "--jobs", "2", "--for", "any"]
    assert main(argv) == 0
    assert (tmp_path / "b" / "foo.1.et").read_bytes() == (
        tmp_path / "a" / "workload.1.et"
    ).read_bytes()
    assert main([*RUN, "--out", str(tmp_path / "c"), "--format", "json", "--units", "stage"]) == 0
    assert main([*RUN, "--out", str(tmp_path / "d"), "--format", "symmetric"]) == 0
