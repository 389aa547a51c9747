"""The fast Chakra path: column-form rank classes and files written over forked workers.

Every way of writing a trace set must give the same bytes: per-rank programs
(:func:`write_trace_set` on materialised programs), rank classes with one member object per
rank (:func:`write_rank_classes`), the column form (:func:`write_chakra`), and the column form
over 1, 2 or 3 processes. Errors in a worker process reach the caller as one ConfigError.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stage_core.chakra import filesink
from stage_core.chakra.filesink import write_rank_files
from stage_core.chakra.writer import (
    ClassColumns,
    compile_class_columns,
    write_class_columns,
    write_rank_classes,
    write_trace_set,
)
from stage_core.errors import ConfigError
from stage_core.lower.emit import class_columns, rank_classes, write_chakra
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind, NodeKind, TraceNode

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

CONFIGS = {
    # tp + sp + cp + pp with 1F1B: dp/tp/cp groups, pipeline peers.
    "llama_tp_cp_pp": (
        "llama3-8b",
        {"layers": 4, "seq_len": 256},
        {"dp": 2, "tp": 2, "cp": 2, "pp": 4, "sp": True, "micro_batch": 1, "global_batch": 8},
    ),
    # ring attention: peers along cp besides pp; ZeRO-3 gathers.
    "llama_ring_zero3": (
        "llama3-8b",
        {"layers": 2, "seq_len": 256},
        {
            "dp": 2,
            "cp": 2,
            "pp": 2,
            "cp_style": "ring",
            "zero": 3,
            "micro_batch": 1,
            "global_batch": 4,
        },
    ),
    # tied embeddings: the pseudo-axis pp_ends between the first and last pipeline stage.
    "gpt_tied_pp": (
        "gpt3-1.3b",
        {"layers": 4, "seq_len": 256},
        {"dp": 2, "tp": 2, "pp": 4, "micro_batch": 1, "global_batch": 8},
    ),
}


def _programs(name: str) -> ProgramSet:
    flavor, overrides, parallel = CONFIGS[name]
    model = get_flavor(flavor).with_overrides(**overrides)
    return lower(model, ParallelConfig(**parallel))  # type: ignore[arg-type]


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture
def always_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork workers even for the few ranks of a test configuration."""
    monkeypatch.setattr(filesink, "PARALLEL_MIN_RANKS", 0)


@needs_fork
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_writer_and_worker_count_gives_the_same_bytes(
    name: str, tmp_path: Path, always_fork: None
) -> None:
    programs = _programs(name)
    per_rank = {}
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        for rank in programs.ranks(stage.stage):
            per_rank[rank] = tuple(materialize(template, rank, programs.workload.mesh))
    reference = write_trace_set(tmp_path / "ranks", dict(sorted(per_rank.items())))
    expected = _files(tmp_path / "ranks")
    assert len(expected) == programs.workload.world_size + 1  # + comm_group.json
    write_rank_classes(tmp_path / "members", rank_classes(programs), workers=1)
    assert _files(tmp_path / "members") == expected
    for workers in (1, 2, 3):
        written = write_chakra(programs, tmp_path / f"w{workers}", workers=workers)
        assert _files(tmp_path / f"w{workers}") == expected, workers
        assert (written.byte_count, written.node_count, written.groups) == (
            reference.byte_count,
            reference.node_count,
            reference.groups,
        )


@needs_fork
def test_parallel_progress_is_monotonic_and_ends_at_the_total(
    tmp_path: Path, always_fork: None
) -> None:
    seen: list[tuple[int, int]] = []
    programs = _programs("llama_tp_cp_pp")
    world = programs.workload.world_size
    write_chakra(
        programs, tmp_path, workers=2, progress=lambda done, total: seen.append((done, total))
    )
    assert seen[-1] == (world, world)
    assert all(total == world for _, total in seen)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert all(done < world for done, _ in seen[:-1])


@needs_fork
@pytest.mark.parametrize("fork", [False, True])
def test_an_error_while_writing_is_one_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: bool
) -> None:
    if fork:
        monkeypatch.setattr(filesink, "PARALLEL_MIN_RANKS", 0)

    def emit(rank: int) -> bytes:
        if rank == 37:  # in the second worker's block
            raise ConfigError("rank 37 cannot be encoded")
        return bytes([rank % 256]) * 10

    with pytest.raises(ConfigError, match="^rank 37 cannot be encoded$"):
        write_rank_files(tmp_path, lambda rank: f"f.{rank}", emit, 40, workers=2)
    assert (tmp_path / "f.0").read_bytes() == b"\x00" * 10  # the first block was written


def test_a_file_that_cannot_be_written_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "f.1").mkdir()  # a directory where rank 1's file should go
    with pytest.raises(ConfigError, match=r"cannot write .*f\.1"):
        write_rank_files(tmp_path, lambda rank: f"f.{rank}", lambda rank: b"x", 3, workers=1)


@pytest.mark.parametrize("workers", [0, -1, True])
def test_bad_worker_counts_are_refused(tmp_path: Path, workers: int) -> None:
    with pytest.raises(ConfigError, match="`workers` must be an integer >= 1"):
        write_rank_files(tmp_path, str, lambda rank: b"", 2, workers=workers)


def _coll(group: tuple[int, ...] | None) -> tuple[TraceNode, ...]:
    return (
        TraceNode(
            1, "ar", NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE, comm_bytes=64, group=group
        ),
    )


def test_column_classes_assign_group_ids_in_first_use_order(tmp_path: Path) -> None:
    table = [None, (0, 1), (2, 3)]
    classes = [
        ClassColumns(_coll((2, 3)), 2, [3, 2], {(2, 3): [2, 2]}, {}),
        ClassColumns(_coll((0, 1)), 0, [1, 0], {(0, 1): [1, 1]}, {}),
    ]
    written = write_class_columns(tmp_path, classes, table)
    assert written.groups == {"1": (0, 1), "2": (2, 3)}  # rank 0 uses (0, 1) first


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        ([ClassColumns(_coll((0, 1)), 0, [0, 1], {}, {})], "needs a column of 2 entries"),
        ([ClassColumns(_coll((0, 1)), 0, [0, 1], {(0, 1): [1]}, {})], "but got 1"),
        (
            [ClassColumns(_coll((0, 1)), 0, [0, 1], {(0, 1): [1, 7]}, {})],
            "group index 7 is outside the group table",
        ),
        ([ClassColumns(_coll((0, 1)), 0, [0, 0], {(0, 1): [1, 1]}, {})], r"ranks \[0\] repeat"),
    ],
)
def test_bad_column_classes_are_refused(
    tmp_path: Path, classes: list[ClassColumns], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        write_class_columns(tmp_path, classes, [None, (0, 1)])


def test_stage_trace_jobs_option(
    tmp_path: Path, always_fork: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from stage_explore.cli import main

    flags = ["trace", "--model", "gpt3-1.3b", "--layers", "2", "--dp", "2", "--tp", "2"]
    flags += ["--pp", "2", "--global-batch", "4", "--quiet"]
    assert main([*flags, "--out", str(tmp_path / "one"), "--jobs", "1"]) == 0
    assert main([*flags, "--out", str(tmp_path / "two"), "--jobs", "2"]) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    capsys.readouterr()
    assert main([*flags, "--out", str(tmp_path / "bad"), "--jobs", "0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--jobs must be an integer >= 1, but got 0" in line


@needs_fork
def test_a_worker_that_dies_is_reported(tmp_path: Path, always_fork: None) -> None:
    parent = os.getpid()

    def emit(rank: int) -> bytes:
        if rank == 37 and os.getpid() != parent:  # only ever in the forked worker
            os._exit(3)
        return b"x"

    with pytest.raises(ConfigError, match=r"worker process stopped unexpectedly \(exit code 3\)"):
        write_rank_files(tmp_path, lambda rank: f"f.{rank}", emit, 40, workers=2)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_compiled_trace_set_knows_its_bytes_before_writing(name: str, tmp_path: Path) -> None:
    """``CompiledTraceSet.byte_count`` (counted from the templates, nothing assembled) is the
    exact size of the ``.et`` files written afterwards, rank by rank and in total."""
    programs = _programs(name)
    compiled = compile_class_columns(*class_columns(programs))
    sizes = [len(compiled.emit(rank)) for rank in range(compiled.world_size)]
    counted = compiled.byte_count()
    assert not (tmp_path / "out").exists()
    written = compiled.write(tmp_path / "out")
    on_disk = {p.name: p.stat().st_size for p in (tmp_path / "out").glob("*.et")}
    assert counted == sum(sizes) == written.byte_count == sum(on_disk.values())
    assert [on_disk[f"workload.{rank}.et"] for rank in range(len(sizes))] == sizes
    assert _files(tmp_path / "out") == _files(write_chakra(programs, tmp_path / "w").directory)


def test_file_sizes_hold_past_one_byte_ranks_and_group_ids() -> None:
    """256 ranks: ranks from 128 on take a two-byte varint, group ids grow a digit, so files of
    one template differ in length; each rank's counted size is its file's length."""
    model = get_flavor("gpt3-125m").with_overrides(layers=1, seq_len=128)
    programs = lower(model, ParallelConfig(dp=64, tp=2, pp=2, global_batch=128))
    compiled = compile_class_columns(*class_columns(programs))
    sizes = [len(compiled.emit(rank)) for rank in range(256)]
    assert len(set(sizes)) > 2  # the lengths do vary
    assert compiled.byte_count() == sum(sizes)
    for rank in (0, 127, 128, 255):
        template, names, peers, dims = compiled._arguments(rank)
        assert template.file_size(rank, names, peers, dims) == sizes[rank]
