"""Writing trace sets: round trips, determinism, rank classes, units, JSON form, golden dump.

:func:`golden_chakra_dump` renders ``golden/chakra_small_trace_set.txt`` (for
``tests/regenerate_golden.py``).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.chakra.dump import dump_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.chakra.reference import parse_stream
from stage_core.chakra.writer import (
    RankClass,
    RankMember,
    expand_rank_classes,
    trace_set_json,
    write_rank_classes,
    write_trace_json,
    write_trace_set,
)
from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

GOLDEN = Path(__file__).parent / "golden" / "chakra_small_trace_set.txt"
AR, AG, RS, A2A = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER,
                   CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL)


def small_program(rank: int) -> tuple[TraceNode, ...]:
    """Rank ``rank`` of a 2 (tp) × 2 (pp) trace set using every node and collective kind."""
    tp_group = (0, 1) if rank < 2 else (2, 3)
    cross_group = (rank % 2, rank % 2 + 2)
    first_stage = rank < 2
    peer = rank + 2 if first_stage else rank - 2
    forward = NodeKind.SEND if first_stage else NodeKind.RECV
    backward = NodeKind.RECV if first_stage else NodeKind.SEND
    return (
        TraceNode(1, "embed", NodeKind.COMP, flops=2 * 1024 * 4096, tensor_bytes=6 << 20,
                  outputs=(("act", 4096),)),
        TraceNode(2, "moe_dispatch", NodeKind.COLL, data_deps=(1,), collective=A2A,
                  comm_bytes=2048, group=cross_group),
        TraceNode(3, "attn", NodeKind.COMP, data_deps=(2,), flops=12345, tensor_bytes=4096,
                  inputs=(("act", 4096), ("w_qkv", 1 << 20))),
        TraceNode(4, "sp_reduce_scatter", NodeKind.COLL, data_deps=(3,), collective=RS,
                  comm_bytes=8192, group=tp_group),
        TraceNode(5, "pp_fwd", forward, data_deps=(4,), comm_bytes=1 << 16, peer=peer, tag=11),
        TraceNode(6, "dp_all_gather", NodeKind.COLL, data_deps=(5,), ctrl_deps=(2,),
                  collective=AG, comm_bytes=1024, group=None),
        TraceNode(7, "pp_bwd", backward, data_deps=(6,), comm_bytes=1 << 16, peer=peer, tag=12),
        TraceNode(8, "tp_all_reduce", NodeKind.COLL, data_deps=(7,), collective=AR,
                  comm_bytes=1 << 20, group=tp_group),
    )


def small_programs() -> dict[int, tuple[TraceNode, ...]]:
    return {rank: small_program(rank) for rank in range(4)}


def small_classes() -> list[RankClass]:
    """The same trace set as two classes (one per pipeline stage), written for ranks 0 and 2."""
    return [
        RankClass(small_program(0), 0, [
            RankMember(0),
            RankMember(1, groups={(0, 1): (0, 1), (0, 2): (1, 3)}, peers={2: 3}),
        ]),
        RankClass(small_program(2), 2, [
            RankMember(3, groups={(2, 3): (2, 3), (0, 2): (1, 3)}, peers={0: 1}),
            RankMember(2),
        ]),
    ]


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_round_trip_gives_identical_nodes_and_first_use_group_ids(tmp_path: Path) -> None:
    written = write_trace_set(tmp_path, small_programs())
    trace_set = read_trace_set(tmp_path)
    assert trace_set.ranks == small_programs()
    expected_groups = {"1": (0, 2), "2": (0, 1), "3": (1, 3), "4": (2, 3)}
    assert trace_set.groups == written.groups == expected_groups
    assert json.loads((tmp_path / "comm_group.json").read_text()) == {
        key: list(value) for key, value in expected_groups.items()
    }
    assert (written.world_size, written.node_count) == (4, 32)
    assert written.byte_count == sum(len(data) for name, data in _files(tmp_path).items()
                                     if name.endswith(".et"))


def test_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    write_trace_set(tmp_path / "a", small_programs())
    write_trace_set(tmp_path / "b", small_programs())
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_rank_classes_write_the_same_bytes_as_per_rank_programs(tmp_path: Path) -> None:
    assert expand_rank_classes(small_classes()) == small_programs()
    progress: list[tuple[int, int]] = []
    write_rank_classes(tmp_path / "classes", small_classes(),
                       progress=lambda done, total: progress.append((done, total)))
    write_trace_set(tmp_path / "ranks", small_programs())
    assert _files(tmp_path / "classes") == _files(tmp_path / "ranks")
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        ([RankClass(small_program(0), 0, [RankMember(0), RankMember(0)])], "ranks \\[0\\] repeat"),
        ([RankClass(small_program(0), 0, [RankMember(1)])], "ranks \\[0\\] are missing"),
        ([RankClass(small_program(0), 0, [RankMember(0, groups={(5, 6): (0, 1)})])],
         "does not use"),
    ],
)
def test_bad_rank_classes_are_refused(
    tmp_path: Path, classes: list[RankClass], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        write_rank_classes(tmp_path, classes)


def test_group_of_all_ranks_is_written_without_pg_name(tmp_path: Path) -> None:
    programs = small_programs()
    programs[0] = tuple(replace(node, group=(0, 1, 2, 3)) if node.id == 6 else node
                        for node in programs[0])
    write_trace_set(tmp_path, programs)
    assert read_trace_set(tmp_path).ranks == small_programs()
    _, nodes = parse_stream((tmp_path / "workload.0.et").read_bytes())
    assert [attribute.name for attribute in nodes[5].attr] == [
        "is_cpu_op", "comm_type", "comm_size"]


def test_progress_and_stale_files(tmp_path: Path) -> None:
    (tmp_path / "workload.7.et").write_bytes(b"old")
    (tmp_path / "notes.txt").write_bytes(b"keep")
    calls: list[tuple[int, int]] = []
    write_trace_set(tmp_path, small_programs(), progress=lambda *call: calls.append(call))
    assert calls[-1] == (4, 4) and len(calls) == 4
    assert not (tmp_path / "workload.7.et").exists() and (tmp_path / "notes.txt").exists()
    assert read_trace_set(tmp_path).world_size == 4


def test_another_prefixs_set_is_kept_and_refused(tmp_path: Path) -> None:
    """One comm_group.json serves a folder: a set of another prefix beside it would be left
    with the new set's groups (s24 review), so the write is refused and nothing is removed."""
    (tmp_path / "other.7.et").write_bytes(b"keep")
    with pytest.raises(ConfigError, match=r"holds another trace set \(other\.7\.et …, prefix "):
        write_trace_set(tmp_path, small_programs())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.7.et"]


def test_involved_dim_is_computed_once_per_group(tmp_path: Path) -> None:
    seen: list[tuple[int, ...] | None] = []

    def involved(group: tuple[int, ...] | None) -> tuple[bool, ...]:
        seen.append(group)
        return (True, False) if group in ((0, 1), (2, 3)) else (True, True)

    write_trace_set(tmp_path, small_programs(), involved_dim=involved)
    assert sorted(seen, key=str) == sorted([(0, 2), (0, 1), (1, 3), (2, 3), None], key=str)
    _, nodes = parse_stream((tmp_path / "workload.2.et").read_bytes())
    dims = {node.name: [list(attribute.bool_list.values) for attribute in node.attr
                        if attribute.name == "involved_dim"] for node in nodes}
    assert dims["tp_all_reduce"] == [[True, False]] and dims["dp_all_gather"] == [[True, True]]
    assert dims["attn"] == []


def test_stage_units(tmp_path: Path) -> None:
    write_trace_set(tmp_path, small_programs(), units="stage", bytes_per_element=2)
    nodes = read_trace_set(tmp_path).ranks[0]
    assert (nodes[0].flops, nodes[0].tensor_bytes, nodes[0].outputs) == (
        1024 * 4096, 3 << 20, (("act", 2048),))
    assert [node.comm_bytes for node in nodes[1:] if node.kind is not NodeKind.COMP] == [
        1024, 4096, 1 << 15, 512, 1 << 15, 1 << 19]


def test_programs_must_cover_ranks_from_zero(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must cover ranks 0..1 exactly"):
        write_trace_set(tmp_path, {0: small_program(0), 2: small_program(2)})
    with pytest.raises(ConfigError, match="outside 0..1"):
        write_trace_set(tmp_path, [small_program(0), small_program(1)])


def test_json_form_holds_the_same_information_as_the_et_files(tmp_path: Path) -> None:
    write_trace_set(tmp_path, small_programs())
    path = write_trace_json(tmp_path / "trace.json", small_programs())
    document = json.loads(path.read_text())
    assert document["format"] == "chakra-et-json" and document["units"] == "bytes"
    assert document["comm_groups"] == json.loads((tmp_path / "comm_group.json").read_text())
    for rank in range(4):
        _, messages = parse_stream((tmp_path / f"workload.{rank}.et").read_bytes())
        entries = document["ranks"][str(rank)]
        assert len(entries) == len(messages)
        for entry, message in zip(entries, messages, strict=True):
            assert (entry["id"], entry["name"], entry["data_deps"], entry["ctrl_deps"]) == (
                message.id, message.name, list(message.data_deps), list(message.ctrl_deps))
            attributes = {}
            for attribute in message.attr:
                field = attribute.WhichOneof("value")
                value = getattr(attribute, field)
                is_list = field.endswith("_list")
                attributes[attribute.name] = list(value.values) if is_list else value
            assert entry["attr"] == attributes
            assert list(entry["attr"]) == [attribute.name for attribute in message.attr]
    stage = json.loads(trace_set_json(small_programs(), units="stage", bytes_per_element=4))
    assert stage["bytes_per_element"] == 4
    assert stage["ranks"]["0"][0]["attr"]["tensor_size"] == (6 << 20) // 4


def golden_chakra_dump() -> str:
    """The text dump of the small trace set after a write and a read."""
    with tempfile.TemporaryDirectory() as directory:
        write_trace_set(directory, small_programs())
        return dump_trace_set(read_trace_set(directory))


def test_golden_dump_of_the_small_trace_set() -> None:
    assert golden_chakra_dump() == GOLDEN.read_text(encoding="utf-8")
