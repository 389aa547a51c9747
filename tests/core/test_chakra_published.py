"""Reading traces of the published STAGE generator: accepted with warnings, real errors kept.

The trace sets come from :mod:`tests.core.published_stage_traces`, constructed to mirror that
generator's format (float tensor sizes, ``inputs``/``outputs`` attributes without a value).
Expected counts and sizes are computed here from the files with the protobuf reference classes,
independently of the reader under test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.reader import _whole_float, read_trace_set
from stage_core.chakra.reference import parse_stream
from stage_core.errors import ConfigError
from stage_core.lower.emit import write_chakra
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.cli import main
from tests.core.published_stage_traces import LEGACY, write_published_trace_set


def _nodes(directory: Path) -> dict[int, list[Any]]:
    return {
        rank: parse_stream((directory / f"workload.{rank}.et").read_bytes())[1] for rank in range(4)
    }


def _count(directory: Path, name: str, valueless: bool) -> tuple[int, int]:
    """Nodes (and ranks) whose attribute ``name`` has no value / has float sizes."""
    nodes = ranks = 0
    for messages in _nodes(directory).values():
        hits = 0
        for node in messages:
            for attribute in node.attr:
                if attribute.name != name:
                    continue
                if valueless and attribute.WhichOneof("value") is None:
                    hits += 1
                elif not valueless and any(
                    "." in size for size in attribute.string_list.values[1::2]
                ):
                    hits += 1
        nodes += hits
        ranks += hits > 0
    return nodes, ranks


@pytest.fixture
def published(tmp_path: Path) -> Path:
    return write_published_trace_set(tmp_path / "published")


def test_published_traces_are_read_with_one_warning_per_leniency(published: Path) -> None:
    trace_set = read_trace_set(published)
    expected = []
    for kind, valueless in (("float", False), ("valueless", True)):
        for name in ("inputs", "outputs"):
            nodes, ranks = _count(published, name, valueless)
            assert nodes > 0  # the fixture exercises every case
            expected.append((nodes, ranks, kind, name))
    assert len(trace_set.warnings) == len(expected)
    for nodes, ranks, kind, name in expected:
        phrase = "floating-point" if kind == "float" else "without a value"
        (line,) = [w for w in trace_set.warnings if f"'{name}'" in w and phrase in w]
        assert line.startswith(f"{nodes} node(s) in {ranks} rank(s) ")
        assert "published STAGE generator" in line


def test_float_sizes_are_read_as_the_integers_they_equal(published: Path) -> None:
    trace_set = read_trace_set(published)
    for rank, messages in _nodes(published).items():
        for message, node in zip(messages, trace_set.ranks[rank], strict=True):
            for attribute_name, pairs in (("inputs", node.inputs), ("outputs", node.outputs)):
                (attribute,) = [a for a in message.attr if a.name == attribute_name]
                values = list(attribute.string_list.values)
                assert pairs == tuple(
                    (tensor, int(float(size)))
                    for tensor, size in zip(values[::2], values[1::2], strict=True)
                )


def test_stage_check_accepts_them_with_warnings_on_stderr(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(published)]) == 0
    out, err = capsys.readouterr()
    assert "sound: 4 ranks, no violations" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == len(read_trace_set(published).warnings) == 4
    assert main(["check", str(published), "--json"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("{")  # stdout stays pure JSON


@pytest.mark.parametrize(
    ("defect", "code", "message"),
    [
        ("fractional-size", 2, r"'inputs' size '4096\.5' is not an integer"),
        ("unknown-group", 2, r"pg_name '9', which is not in the group table"),
        ("unmatched-recv", 1, r"rank 3 posts 1 receive\(s\) .* with tag 1101"),
        ("collective-size", 1, r"group \"2\" \[2, 3\]: collective #1 is all_reduce of 8388610 B"),
    ],
)
def test_real_errors_in_published_traces_are_still_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], defect: str, code: int, message: str
) -> None:
    directory = write_published_trace_set(tmp_path / defect, defect)
    if code == 2:
        with pytest.raises(ConfigError, match=message):
            read_trace_set(directory)
    assert main(["check", str(directory)]) == code
    out, err = capsys.readouterr()
    assert re.search(message, out + err)


def test_traces_stage_writes_need_no_leniency(tmp_path: Path) -> None:
    model = get_flavor("gpt3-1.3b").with_overrides(layers=2, seq_len=256)
    programs = lower(model, ParallelConfig(dp=2, tp=2, pp=2, sp=True, global_batch=4))
    write_chakra(programs, tmp_path)
    assert read_trace_set(tmp_path).warnings == ()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4096.0", 4096),
        ("4096.00000000000", 4096),
        ("1e+16", 10**16),
        ("8.192E3", 8192),
        (".5e1", 5),
        ("4096.5", None),
        ("-1.0", None),
        ("nan", None),
        ("inf", None),
        ("1,0", None),
        ("", None),
    ],
)
def test_whole_float_accepts_only_exact_integers(text: str, value: int | None) -> None:
    assert _whole_float(text) == value


def test_legacy_integer_comm_group_is_read_as_the_group_id(
    tmp_path: Path, published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = read_trace_set(write_published_trace_set(tmp_path / "legacy", LEGACY))
    current = read_trace_set(published)
    assert legacy.ranks == current.ranks  # the same groups, however they are named
    (line,) = [w for w in legacy.warnings if "'comm_group'" in w]
    collectives = sum(
        1
        for messages in _nodes(tmp_path / "legacy").values()
        for node in messages
        if any(attribute.name == "comm_group" for attribute in node.attr)
    )
    assert line.startswith(f"{collectives} node(s) in 4 rank(s) name their group")
    assert main(["check", str(tmp_path / "legacy")]) == 0
