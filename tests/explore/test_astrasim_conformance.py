"""The conformance matrix through the real ASTRA-sim binary (skipped, with the reason, without it).

For every case of :data:`tests.explore.astrasim_matrix.CASES` (DP, TP, TP+SP, CP all-gather
and ring, PP GPipe / 1F1B / interleaved, EP on an MoE, ZeRO-1/2/3, full and selective
recompute, tied embeddings across pipeline ends, fp8, 1-D ring / switch / fully connected and
2-D networks, LIFO and FIFO, up to 64 ranks):

- STAGE writes the run directory, ``stage check --for astra-sim`` finds nothing, and the binary
  runs with every rank printing its ``finished`` line;
- the ASTRA-sim-exact model (:mod:`stage_explore.analytical.tracesim`, timing read from the
  written ``system.json``/``network.yml`` only, so no calibrated constant enters) gives every
  rank's ``finished`` cycles and exposed communication exactly, to the nanosecond, including
  the ranks of a collective whose members issue it at different times (the tied-embedding
  all-reduce between pipeline ends), where ASTRA-sim lets the early members finish first.

The binary is found as the backend finds it (``ASTRA_SIM_BIN``, else ``PATH``); ``.ci/run``
exports ``ASTRA_SIM_BIN`` when the prebuilt binary sits beside the clone.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.encode import CHAKRA_VERSION
from stage_core.chakra.reader import read_trace_set
from stage_core.chakra.reference import node_message
from stage_core.chakra.schema import GlobalMetadata
from stage_core.chakra.wire import encode_varint
from stage_core.chakra.writer import write_trace_set
from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import SimulationResult, simulate
from stage_explore.astrasim import (
    AstraInputs,
    AstraSimBackend,
    AstraSimError,
    astra_config,
    find_binary,
    memory_json_text,
    run_astra_sim,
    system_json_text,
)
from stage_explore.astrasim.parse import AstraSimReport
from stage_explore.cli import main
from stage_explore.system import astra_config_from_files, load_system
from tests.explore.astrasim_matrix import CASES, Case, system_for, write_case

#: Where ``.ci/run`` names the congestion-aware binary (``ASTRA_SIM_BIN`` holds the unaware one).
AWARE_ENV_VAR = "ASTRA_SIM_AWARE_BIN"


def _binary(variant: str = "unaware") -> tuple[Path | None, str]:
    environ = dict(os.environ)
    if variant == "aware":  # its own variable, else PATH
        environ.pop("ASTRA_SIM_BIN", None)
        if environ.get(AWARE_ENV_VAR):
            environ["ASTRA_SIM_BIN"] = environ[AWARE_ENV_VAR]
    try:
        return find_binary(None, variant, environ=environ), ""
    except ConfigError as error:
        return None, f"the real ASTRA-sim {variant} binary is not available here ({error})"


BINARY, WHY = _binary()
needs_binary = pytest.mark.skipif(BINARY is None, reason=WHY)


def _compare(report: AstraSimReport, sim: SimulationResult[int]) -> list[str]:
    """Every rank whose finish or exposed communication differs (an empty list when none)."""
    problems = []
    for rank, timing in sim.ranks.items():
        real = report.ranks[rank]
        pairs = (
            ("finished", real.finished_cycles, timing.finish),
            ("exposed communication", real.exposed_communication_cycles,
             timing.exposed_communication),
        )  # fmt: skip
        for what, measured, modelled in pairs:
            if measured != modelled:
                problems.append(f"rank {rank} {what}: ASTRA-sim {measured}, tracesim {modelled}")
    return problems


@needs_binary
@pytest.mark.parametrize("name", sorted(CASES))
def test_matrix_case_runs_in_astra_sim_and_tracesim_matches(name: str, tmp_path: Path) -> None:
    assert BINARY is not None
    case: Case = CASES[name]
    inputs = write_case(case, tmp_path)
    trace_set = read_trace_set(tmp_path)
    assert check_trace_set(trace_set, for_astra_sim=True).violations == ()
    run = run_astra_sim(BINARY, inputs, timeout_s=300)  # every rank finished, or it raises
    assert sorted(run.report.ranks) == list(range(inputs.world_size))
    config = astra_config_from_files(inputs.system_json, inputs.network_yml)
    assert config.scheduling_policy == case.scheduling
    sim = simulate(trace_set.ranks, AstraTimingModel(config), record_nodes=True)
    problems = _compare(run.report, sim)
    assert not problems, f"{case.what}: " + "; ".join(problems[:5])


@needs_binary
def test_a_collective_issued_at_different_times_finishes_early_for_early_members(
    tmp_path: Path,
) -> None:
    """The tied-embedding all-reduce between pipeline ends: the first stage's ranks issue it
    before the last stage's, and ASTRA-sim lets them finish earlier than the last member; the
    model runs each member from its own issue and matches every rank exactly."""
    assert BINARY is not None
    inputs = write_case(CASES["tied-embeddings-pp"], tmp_path)
    run = run_astra_sim(BINARY, inputs, timeout_s=300)
    config = astra_config_from_files(inputs.system_json, inputs.network_yml)
    trace_set = read_trace_set(tmp_path)
    sim = simulate(trace_set.ranks, AstraTimingModel(config), record_nodes=True)
    names = {
        (rank, node.id): node.name for rank, nodes in trace_set.ranks.items() for node in nodes
    }
    tied = {
        key: issued for key, issued in sim.issued.items()
        if "embedding_grad_all_reduce" in names[key]
    }  # fmt: skip
    last_issue = max(tied.values())
    early = {rank for (rank, _), issued in tied.items() if issued < last_issue}
    late = {rank for (rank, _), issued in tied.items() if issued == last_issue}
    assert early and late, "the case must issue the collective at different times"
    ends = {key[0]: sim.node_times[key][1] for key in tied}
    assert max(ends[rank] for rank in early) < min(ends[rank] for rank in late)
    assert _compare(run.report, sim) == []


AWARE, WHY_AWARE = _binary("aware")


@pytest.mark.skipif(AWARE is None, reason=WHY_AWARE)
def test_congestion_aware_binary_runs_a_1d_case(tmp_path: Path) -> None:
    case = CASES["ring-1d"]
    backend = AstraSimBackend(binary=str(AWARE), variant="aware", timeout_s=300)
    evaluation = backend.evaluate(case.model(), case.parallel_config(), system_for(case))
    assert evaluation.extra["astra_sim_variant"] == "aware"
    assert evaluation.step_time_s > 0 and evaluation.breakdown["compute"] > 0


def test_congestion_aware_variant_rejects_a_2d_network() -> None:
    case = CASES["switch-ring-2d"]
    backend = AstraSimBackend(binary=None, variant="aware")
    with pytest.raises(ConfigError, match=r"1-D networks only.*2 network dims \(4 x 4\)"):
        backend.evaluate(case.model(), case.parallel_config(), system_for(case))


@needs_binary
def test_backend_reports_the_real_binary_step_on_a100(tmp_path: Path) -> None:
    """The issue's first failing command, end to end: GPT-3 1.3B, 2 layers, dp 4."""
    from stage_core.models import get_flavor
    from stage_core.parallel import ParallelConfig

    model = get_flavor("gpt3-1.3b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=4, tp=1, micro_batch=1, global_batch=4)
    backend = AstraSimBackend(binary=str(BINARY), keep_dir=tmp_path, timeout_s=300)
    evaluation = backend.evaluate(model, parallel, load_system("a100-80gb"))
    kept = Path(evaluation.extra["astra_sim_dir"])
    config = astra_config_from_files(kept / "system.json", kept / "network.yml")
    expected = simulate(read_trace_set(kept).ranks, AstraTimingModel(config)).makespan
    assert evaluation.step_time_s == expected * 1e-9


@pytest.mark.skipif(AWARE is None, reason=WHY_AWARE)
def test_stage_eval_runs_the_congestion_aware_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRA_SIM_BIN", str(AWARE))
    point = [
        "eval", "--model", "gpt3-125m", "--layers", "2", "--tp", "2", "--global-batch", "8",
        "--system", "a100-80gb", "--backend", "astra-sim", "--astra-sim-variant", "aware",
    ]  # fmt: skip
    assert main([*point, "--dp", "4", "--json"]) == 0  # 8 GPUs: one NVSwitch node, 1-D
    result = json.loads(capsys.readouterr().out)
    assert result["extra"]["astra_sim_variant"] == "aware" and result["step_time_s"] > 0
    assert main([*point, "--dp", "8"]) == 2  # 16 GPUs: two network dims
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "simulates 1-D networks only" in err and "(8 x 2)" in err


@needs_binary
def test_stage_trace_output_runs_unmodified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stage trace … --out DIR`` (traces and comm_group.json) plus ASTRA-sim's settings
    files: the binary runs the directory as written, and every rank finishes."""
    assert BINARY is not None
    argv = ["trace", "--model", "gpt3-125m", "--layers", "2", "--tp", "2", "--pp", "2",
            "--dp", "2", "--sp", "--global-batch", "8", "--seq-len", "256"]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    config = astra_config(load_system("a100-80gb"), num_gpus=8, dtype="bf16")
    (tmp_path / "system.json").write_text(system_json_text(config))
    (tmp_path / "network.yml").write_text(config.network_yml())
    (tmp_path / "memory.json").write_text(memory_json_text())
    (tmp_path / "log").mkdir()
    groups = json.loads((tmp_path / "comm_group.json").read_text())
    inputs = AstraInputs(directory=tmp_path, world_size=8, config=config, groups=groups)
    run = run_astra_sim(BINARY, inputs, timeout_s=300)
    assert sorted(run.report.ranks) == list(range(8))


def write_raw_trace_set(directory: Path, programs: dict[int, tuple[TraceNode, ...]]) -> None:
    """Compute-only ranks written through the protobuf classes with each node's ``num_ops`` as
    its FLOPs, even 0 (as a generator without STAGE's adjustment writes it)."""
    for rank, program in programs.items():
        parts = [delimited(GlobalMetadata(version=CHAKRA_VERSION))]
        for node in program:
            message = node_message(node, rank)
            for attribute in message.attr:
                if attribute.name == "num_ops":
                    attribute.int64_val = node.flops
            parts.append(delimited(message))
        (directory / f"workload.{rank}.et").write_bytes(b"".join(parts))
    (directory / "comm_group.json").write_text("{}")


def delimited(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return encode_varint(len(data)) + data


def _trap_programs(trap: str) -> dict[int, tuple[TraceNode, ...]]:
    """Four ranks that each run a compute node, then the trap ``stage check`` must flag."""

    def comp(flops: int, tensor_bytes: int) -> TraceNode:
        return TraceNode(0, "op", NodeKind.COMP, flops=flops, tensor_bytes=tensor_bytes)

    def then(node: TraceNode) -> TraceNode:
        return replace(node, id=1, data_deps=(0,))

    work = comp(10**9, 10**6)
    # a 0/0 roofline time is cast to 2^63 ns: first in a trace the rank "finishes" then; after
    # other work the event is never reached (no `finished`), or, with more pending, SIGABRT
    if trap == "zero-flops":
        return {rank: (work, then(comp(0, 10**6))) for rank in range(4)}
    if trap == "empty-parent":  # skipped, but its dependent is never released
        last = replace(work, id=2, data_deps=(1,))
        return {rank: (work, then(comp(0, 0)), last) for rank in range(4)}
    if trap == "empty-send":
        send = TraceNode(1, "send", NodeKind.SEND, peer=1, comm_bytes=0, tag=1)
        recv = TraceNode(1, "recv", NodeKind.RECV, peer=0, comm_bytes=0, tag=1)
        return {0: (work, then(send)), 1: (work, then(recv)), 2: (work,), 3: (work,)}
    kind, size = {
        "one-rank-group": (CollectiveKind.ALL_REDUCE, 1024),
        "tiny-all-gather": (CollectiveKind.ALL_GATHER, 3),
    }[trap]
    programs: dict[int, tuple[TraceNode, ...]] = {}
    for rank in range(4):
        group = (rank,) if trap == "one-rank-group" else (0, 1, 2, 3)
        node = TraceNode(1, "coll", NodeKind.COLL, collective=kind, comm_bytes=size, group=group)
        programs[rank] = (work, then(node))
    return programs


@needs_binary
@pytest.mark.parametrize(
    ("trap", "failure"),
    [
        ("zero-flops", r"killed by SIGABRT|4 of 4 ranks printed no `finished` line"),
        ("empty-parent", r"4 of 4 ranks printed no `finished` line"),
        ("empty-send", r"killed by SIGABRT"),
        ("one-rank-group", r"4 of 4 ranks printed no `finished` line"),
        ("tiny-all-gather", r"timed out after 5 s"),
    ],
)
def test_what_check_for_astra_sim_flags_does_fail_in_astra_sim(
    trap: str, failure: str, tmp_path: Path
) -> None:
    """Each ``--for astra-sim`` rule stands for a real failure of the binary. The traces are
    written node by node, so the zero-FLOP node keeps num_ops 0 here (STAGE's writer would
    write 1)."""
    assert BINARY is not None
    programs = _trap_programs(trap)
    if trap == "zero-flops":
        write_raw_trace_set(tmp_path, programs)
    else:
        write_trace_set(tmp_path, programs)
    violations = check_trace_set(read_trace_set(tmp_path), for_astra_sim=True).violations
    assert violations, f"stage check --for astra-sim must flag {trap}"
    config = astra_config(load_system("a100-80gb"), num_gpus=4, dtype="bf16")
    (tmp_path / "system.json").write_text(system_json_text(config))
    (tmp_path / "network.yml").write_text(config.network_yml())
    (tmp_path / "memory.json").write_text(memory_json_text())
    (tmp_path / "log").mkdir()
    groups = json.loads((tmp_path / "comm_group.json").read_text())
    inputs = AstraInputs(directory=tmp_path, world_size=4, config=config, groups=groups)
    with pytest.raises(AstraSimError, match=failure):
        run_astra_sim(BINARY, inputs, timeout_s=5)
