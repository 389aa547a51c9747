"""Trace sets of small configurations: golden text dumps, byte-identical reruns, round trips.

Each configuration is written as Chakra files by ``stage_core.lower.emit.write_chakra``, read
back with the reader, and dumped with ``dump_trace_set``; the dump must equal the golden file
(regenerate with ``make golden`` after an intended change and review the diff). The nodes read
back must equal the nodes the generator materialised, rank by rank, and a second write must be
byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.dump import dump_trace_set
from stage_core.chakra.mapping import as_written
from stage_core.chakra.reader import read_trace_set
from stage_core.lower.emit import write_chakra
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

GOLDEN = Path(__file__).parent / "golden"

CONFIGS: dict[str, tuple[str, dict[str, object], dict[str, object]]] = {
    "trace_gpt_tp_sp_pp_1f1b": (
        "gpt3-1.3b",
        {"layers": 2, "seq_len": 256},
        {"dp": 2, "tp": 2, "pp": 2, "sp": True, "micro_batch": 1, "global_batch": 4},
    ),
    "trace_llama_cp_ring_zero3": (
        "llama3-8b",
        {"layers": 2, "seq_len": 256},
        {
            "dp": 2,
            "cp": 2,
            "pp": 1,
            "cp_style": "ring",
            "zero": 3,
            "recompute": "full",
            "micro_batch": 1,
            "global_batch": 2,
        },
    ),
    "trace_mixtral_ep_interleaved": (
        "mixtral-8x7b",
        {"layers": 4, "seq_len": 128},
        {
            "dp": 2,
            "ep": 2,
            "pp": 2,
            "vpp": 2,
            "schedule": "interleaved",
            "micro_batch": 1,
            "global_batch": 4,
            "zero": 1,
        },
    ),
}


def programs_for(name: str) -> ProgramSet:
    flavor, overrides, parallel = CONFIGS[name]
    model = get_flavor(flavor).with_overrides(**overrides)
    return lower(model, ParallelConfig(**parallel))  # type: ignore[arg-type]


def golden_trace_dump(name: str, directory: Path) -> str:
    write_chakra(programs_for(name), directory)
    return dump_trace_set(read_trace_set(directory)) + "\n"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_golden_dump(name: str, tmp_path: Path) -> None:
    expected = (GOLDEN / f"{name}.txt").read_text()
    assert golden_trace_dump(name, tmp_path) == expected


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_round_trip_and_check(name: str, tmp_path: Path) -> None:
    programs = programs_for(name)
    write_chakra(programs, tmp_path)
    trace_set = read_trace_set(tmp_path)
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        for rank in programs.ranks(stage.stage):
            assert trace_set.ranks[rank] == tuple(
                map(as_written, materialize(template, rank, programs.workload.mesh))
            )
    report = check_trace_set(trace_set)
    assert report.violations == ()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rerun_is_byte_identical(name: str, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_chakra(programs_for(name), first)
    write_chakra(programs_for(name), second)
    files = sorted(p.name for p in first.iterdir())
    assert files == sorted(p.name for p in second.iterdir())
    for file in files:
        assert (first / file).read_bytes() == (second / file).read_bytes()
