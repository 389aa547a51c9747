"""Finding ASTRA-sim, running it, and judging the run — with STAND-IN executables.

These tests must not depend on the real binary, so each writes a small Python script into
``tmp_path``, makes it executable and points the backend at it. A stand-in tests process
handling only: discovery order, the command line, the working directory, timeouts (the whole
process group is killed), signals, exit codes, missing ranks, the output tail in errors, scratch
directories.

One stand-in goes further: it reads the files named on its command line exactly as the reference
describes them and times them with the ASTRA-sim-equivalent trace simulator, printing
ASTRA-sim's output lines. It proves that the command line names a complete, consistent input
set and that the backend turns the printed numbers into the Evaluation correctly. It says
nothing about what the real binary would print or accept: that is the job of
test_astrasim_real.py and test_astrasim_conformance.py, which run the real binary.
"""

from __future__ import annotations

import importlib
import json
import math
import pickle
import re
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError, StageError
from stage_core.lower.program import lower
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.astrasim import (
    AstraInputs,
    AstraSimBackend,
    AstraSimError,
    astra_config,
    check_available,
    find_binary,
    run_astra_sim,
    step_flops,
    write_inputs,
)
from stage_explore.astrasim.logconfig import logging_config_text
from stage_explore.astrasim.run import TEARDOWN_ATTEMPTS
from stage_explore.search.backends import create_backend, resolve_backend
from stage_explore.system import astra_config_from_files, load_system

inputs_tests = importlib.import_module(
    f"{__package__}.test_astrasim_inputs" if __package__ else "test_astrasim_inputs"
)
A100 = load_system("a100-80gb")
UNAWARE = "AstraSim_Analytical_Congestion_Unaware"
AWARE = "AstraSim_Analytical_Congestion_Aware"


def executable(path: Path, body: str) -> Path:
    """Write a Python stand-in at ``path`` and make it executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def stand_in(path: Path, behaviour: str, record: Path | None = None) -> Path:
    """A stand-in that records its argv and cwd, prints sample-run-like lines for 4 ranks as
    ``behaviour`` says, and exits/aborts/sleeps as it says."""
    return executable(
        path,
        f"""
import json, os, subprocess, sys, time
behaviour, record = {behaviour!r}, {None if record is None else str(record)!r}
if record:
    with open(record, "w") as out:
        json.dump({{"argv": sys.argv, "cwd": os.getcwd()}}, out)
ranks = [0, 1, 2, 3]
if behaviour == "omit":
    ranks.remove(2)
if behaviour == "extra":
    ranks.append(7)
for rank in range(4):
    print(f"[info] ring of node {{rank}}, id: 0 dimension: local total nodes in ring: 2")
if behaviour in ("ok", "omit", "extra"):
    for rank in ranks:
        print(f"[2026-12-02 16:39:25.704] [workload] [info] sys[{{rank}}] finished, "
              f"{{1000 + rank}} cycles, exposed communication {{400 + rank}} cycles.")
        print(f"[2026-12-02 16:39:25.704] [statistics] [info] sys[{{rank}}], GPU time: 600")
if behaviour in ("teardown", "cut-short-once", "cut-short-always"):
    # ASTRA-sim's exit-time double free: results printed (all, or cut short), then SIGABRT
    with open("attempts", "a+") as counter:
        counter.write("x")
        counter.seek(0)
        attempt = len(counter.read())
    partial = behaviour == "cut-short-always" or (behaviour == "cut-short-once" and attempt == 1)
    for rank in ranks[:2] if partial else ranks:
        print(f"[workload] [info] sys[{{rank}}] finished, 1000 cycles, "
              "exposed communication 400 cycles.")
        print(f"[statistics] [info] sys[{{rank}}], GPU time: 600")
    print("malloc_consolidate(): unaligned fastbin chunk detected", flush=True)
    if behaviour == "cut-short-once" and not partial:
        sys.exit(0)
    os.abort()
if behaviour == "chatty-fail":
    for line in range(100):
        print(f"line {{line}}")
    sys.exit(1)
if behaviour == "exit":
    print("error: cannot parse system.json", file=sys.stderr)
    sys.exit(3)
if behaviour == "abort":
    sys.stdout.flush()
    os.abort()
if behaviour == "sleep":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(record + ".child", "w") as out:
        out.write(str(child.pid))
    print("started", flush=True)
    time.sleep(60)
""",
    )


def simulating_stand_in(path: Path, record: Path) -> Path:
    """A stand-in that checks its command line and times the inputs it names with the
    ASTRA-sim-equivalent trace simulator, printing ASTRA-sim's lines."""
    return executable(
        path,
        f"""
import json, os, sys
from pathlib import Path
record = Path({str(record)!r})
record.write_text(json.dumps({{"argv": sys.argv, "cwd": os.getcwd()}}))
args = dict(argument.split("=", 1) for argument in sys.argv[1:])
expected = {{"--workload-configuration", "--system-configuration", "--network-configuration",
            "--remote-memory-configuration", "--comm-group-configuration", "--logging-folder",
            "--logging-configuration"}}
if set(args) != expected:
    sys.exit(f"unexpected arguments {{sorted(args)}}")
from stage_core.chakra.groups import read_comm_groups
from stage_core.chakra.reader import read_trace_set
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.system.astra import astra_config_from_files
prefix = Path(args["--workload-configuration"])
memory = json.loads(Path(args["--remote-memory-configuration"]).read_text())
if memory != {{"memory-type": "NO_MEMORY_EXPANSION"}}:
    sys.exit("bad memory.json")
if not Path(args["--logging-folder"]).is_dir():
    sys.exit("no logging folder")
if "[[logger]]" not in Path(args["--logging-configuration"]).read_text():
    sys.exit("no logging configuration")
traces = read_trace_set(prefix.parent, prefix.name)
if read_comm_groups(args["--comm-group-configuration"]) != traces.groups:
    sys.exit("comm groups differ")
config = astra_config_from_files(args["--system-configuration"], args["--network-configuration"])
result = simulate(traces.ranks, AstraTimingModel(config))
for rank, timing in result.ranks.items():
    print(f"[workload] [info] sys[{{rank}}] finished, {{timing.finish}} cycles, "
          f"exposed communication {{timing.exposed_communication}} cycles.")
    print(f"[statistics] [info] sys[{{rank}}], Wall time: {{timing.finish}}")
    print(f"[statistics] [info] sys[{{rank}}], GPU time: {{timing.compute}}")
    print(f"[statistics] [info] sys[{{rank}}], Comm time: {{timing.exposed_communication}}")
""",
    )


def four_rank_inputs(directory: Path) -> AstraInputs:
    """Inputs of a 4-rank run (the stand-ins do not read them)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = astra_config(A100, num_gpus=4, dtype="bf16")
    return AstraInputs(directory=directory, world_size=4, config=config, groups={})


@pytest.fixture
def no_astra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ASTRA_SIM_BIN, and a PATH with nothing but an empty folder."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    return empty


# -- discovery --------------------------------------------------------------------------------


def test_missing_binary_is_a_one_line_config_error_naming_every_way(no_astra: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        find_binary()
    message = str(caught.value)
    assert "\n" not in message
    for needle in (
        UNAWARE,
        "PATH",
        "ASTRA_SIM_BIN",
        "`binary`",
        "[backend.options]",
        "docs/astra-sim.md",
    ):
        assert needle in message
    with pytest.raises(ConfigError, match=AWARE):
        find_binary(variant="aware")


@pytest.mark.parametrize("variant", ["unaware", "aware"])
def test_path_lookup_uses_the_variants_binary_name(variant: str, tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    unaware, aware = stand_in(folder / UNAWARE, "ok"), stand_in(folder / AWARE, "ok")
    found = find_binary(variant=variant, environ={"PATH": str(folder)})
    assert found == (unaware if variant == "unaware" else aware)


def test_order_option_then_environment_then_path(tmp_path: Path) -> None:
    on_path = stand_in(tmp_path / "bin" / UNAWARE, "ok")
    from_env = stand_in(tmp_path / "env" / "astra", "ok")
    from_option = stand_in(tmp_path / "opt" / "astra", "ok")
    environ = {"PATH": str(on_path.parent), "ASTRA_SIM_BIN": str(from_env)}
    assert find_binary(from_option, environ=environ) == from_option
    assert find_binary(environ=environ) == from_env
    assert find_binary(environ={"PATH": str(on_path.parent)}) == on_path
    # an option may be a command name on PATH
    assert find_binary(UNAWARE, environ={"PATH": str(on_path.parent)}) == on_path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", r"from ASTRA_SIM_BIN does not exist: .*/nowhere/astra"),
        ("not-executable", r"from ASTRA_SIM_BIN is not executable: .*plain \(chmod \+x\)"),
        ("directory", r"from ASTRA_SIM_BIN is a directory: .*; name the executable itself"),
        ("other-variant", r"is the congestion-aware build .* but variant='unaware'"),
    ],
)
def test_a_named_binary_that_cannot_run_is_an_error_not_a_fallback(
    kind: str, message: str, tmp_path: Path
) -> None:
    on_path = stand_in(tmp_path / "bin" / UNAWARE, "ok")  # would be found on PATH
    target = {
        "missing": tmp_path / "nowhere" / "astra",
        "directory": tmp_path / "bin",
        "other-variant": stand_in(tmp_path / "elsewhere" / AWARE, "ok"),
    }.get(kind)
    if kind == "not-executable":
        target = tmp_path / "plain"
        target.write_text("#!/bin/sh\n")
    environ = {"PATH": str(on_path.parent), "ASTRA_SIM_BIN": str(target)}
    with pytest.raises(ConfigError, match=message):
        find_binary(environ=environ)


def test_preflight_and_check_available(
    no_astra: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="ASTRA-sim not found"):
        AstraSimBackend().preflight()
    with pytest.raises(ConfigError, match="ASTRA-sim not found"):
        check_available()
    binary = stand_in(tmp_path / "opt" / "astra", "ok")
    assert AstraSimBackend(binary=str(binary)).preflight() == binary
    monkeypatch.setenv("ASTRA_SIM_BIN", str(binary))
    assert AstraSimBackend().preflight() == check_available() == binary


def test_missing_binary_during_evaluation_is_a_failed_run_not_an_infeasible_point(
    no_astra: Path,
) -> None:
    model, parallel = inputs_tests.point("llama-cp-ring")
    with pytest.raises(AstraSimError, match="ASTRA-sim not found") as caught:
        AstraSimBackend().evaluate(model, parallel, A100)
    assert not isinstance(caught.value, ConfigError)  # the explorer reads ConfigError as infeasible


def test_the_explorer_resolves_and_builds_the_backend_by_name(tmp_path: Path) -> None:
    factory = resolve_backend("astra-sim")
    assert factory is AstraSimBackend
    backend = create_backend(
        factory, {"binary": str(tmp_path / "x"), "variant": "aware", "timeout_s": 60}
    )
    assert isinstance(backend, AstraSimBackend) and backend.name == "astra-sim"
    assert backend.to_dict()["variant"] == "aware"
    with pytest.raises(ConfigError, match="unexpected keyword argument 'colour'"):
        create_backend(factory, {"colour": "red"})


# -- running: command line, failures ----------------------------------------------------------


def test_command_line_and_working_directory(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    binary = stand_in(tmp_path / "astra", "ok", record)
    inputs = four_rank_inputs(tmp_path / "run")
    run = run_astra_sim(binary, inputs, timeout_s=30)
    seen = json.loads(record.read_text())
    directory = inputs.directory
    assert seen["argv"] == [
        str(binary),
        f"--workload-configuration={directory}/workload",
        f"--system-configuration={directory}/system.json",
        f"--network-configuration={directory}/network.yml",
        f"--remote-memory-configuration={directory}/memory.json",
        f"--comm-group-configuration={directory}/comm_group.json",
        f"--logging-folder={directory}/log",
        f"--logging-configuration={directory}/logging.toml",
    ]
    assert seen["argv"][1:] == list(run.command[1:])
    assert (directory / "logging.toml").read_text() == logging_config_text()
    assert Path(seen["cwd"]) == directory
    assert sorted(run.report.ranks) == [0, 1, 2, 3]
    assert run.report.makespan_cycles == 1003 and run.report.slowest.gpu_time_cycles == 600
    assert "sys[3] finished" in run.output.read_text()


def test_a_directory_containing_empty_gets_a_relative_comm_group_path(tmp_path: Path) -> None:
    """ASTRA-sim treats a comm-group path containing "empty" as no groups at all."""
    record = tmp_path / "record.json"
    binary = stand_in(tmp_path / "astra", "ok", record)
    run_astra_sim(binary, four_rank_inputs(tmp_path / "empty-run"), timeout_s=30)
    argv = json.loads(record.read_text())["argv"]
    assert "--comm-group-configuration=comm_group.json" in argv
    assert f"--system-configuration={tmp_path}/empty-run/system.json" in argv


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("exit", r"^ASTRA-sim exited with status 3; 4 of 4 ranks printed no `finished` line"),
        ("abort", r"^ASTRA-sim was killed by SIGABRT \(ASTRA-sim aborts on invalid input\)"),
        ("omit", r"^1 of 4 ranks printed no `finished` line \(ranks 2\)"),
        ("silent", r"^4 of 4 ranks printed no `finished` line \(ranks 0, 1, 2, 3\) — with exit "
                   r"status 0 ASTRA-sim prints no results when system.json lacks "
                   r"collective-optimization"),
        ("extra", r"^ranks 7 reported, but the run has 4 ranks$"),
    ],
)  # fmt: skip
def test_a_run_that_does_not_complete_is_an_astra_sim_error(
    behaviour: str, reason: str, tmp_path: Path
) -> None:
    binary = stand_in(tmp_path / "astra", behaviour)
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    error = caught.value
    assert isinstance(error, StageError) and not isinstance(error, ConfigError)
    assert re.search(reason, error.reason), error.reason
    assert "ring of node 3" in "\n".join(error.tail)  # the output's tail is in the error
    assert "--- last" in str(error)
    if behaviour == "exit":
        assert error.tail[-1] == "error: cannot parse system.json"  # stderr is captured too


def test_a_crash_after_every_rank_finished_is_a_complete_run(tmp_path: Path) -> None:
    """ASTRA-sim 518bd51 may abort in its teardown (a double free) after printing every result."""
    binary = stand_in(tmp_path / "astra", "teardown")
    run = run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    assert sorted(run.report.ranks) == [0, 1, 2, 3]
    assert run.teardown_crash.startswith("ASTRA-sim was killed by SIGABRT")
    assert "after every rank finished" in run.teardown_crash
    assert (tmp_path / "run" / "attempts").read_text() == "x"  # not run again


def test_a_teardown_crash_that_cut_the_report_short_is_run_again(tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "astra", "cut-short-once")
    run = run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    assert sorted(run.report.ranks) == [0, 1, 2, 3] and run.teardown_crash == ""
    assert (tmp_path / "run" / "attempts").read_text() == "xx"


def test_a_report_cut_short_every_time_is_an_astra_sim_error(tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "astra", "cut-short-always")
    with pytest.raises(AstraSimError, match=r"killed by SIGABRT.*2 of 4 ranks printed no"):
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    assert (tmp_path / "run" / "attempts").read_text() == "x" * TEARDOWN_ATTEMPTS


def test_the_tail_is_the_last_twenty_lines(tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "astra", "chatty-fail")
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    assert caught.value.tail == tuple(f"line {n}" for n in range(80, 100))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie waits for init to reap it: it no longer runs


def test_a_timeout_kills_the_run_and_everything_it_started(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    binary = stand_in(tmp_path / "astra", "sleep", record)
    start = time.monotonic()
    with pytest.raises(
        AstraSimError, match=r"^ASTRA-sim timed out after 1 s and was killed"
    ) as caught:
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=1)
    assert time.monotonic() - start < 15
    assert caught.value.tail[-1] == "started"
    child = int(Path(str(record) + ".child").read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_a_binary_that_cannot_start_is_an_astra_sim_error(tmp_path: Path) -> None:
    binary = tmp_path / "astra"
    binary.write_bytes(b"\x00\x01 not a program")
    binary.chmod(0o755)
    with pytest.raises(AstraSimError, match="cannot start ASTRA-sim binary .*astra"):
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)


def test_a_binary_that_prints_nothing_is_asked_whether_it_is_astra_sim(tmp_path: Path) -> None:
    """A wrong ``binary`` (s24 review: ``/bin/true``) exits 0 without a line; the reason was
    ASTRA-sim's silent exits (system.json, a stalled trace), which send the user astray."""
    binary = tmp_path / "astra"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, four_rank_inputs(tmp_path / "run"), timeout_s=30)
    reason = caught.value.reason
    assert reason.startswith("4 of 4 ranks printed no `finished` line (ranks 0, 1, 2, 3) — the ")
    assert "exited 0 without printing a line: is it an ASTRA-sim analytical build" in reason
    assert "collective-optimization" not in reason


# -- the backend end to end, with the simulating stand-in -------------------------------------


def expected_timing(name: str, directory: Path) -> tuple[int, int, int, int]:
    """(finish, compute, exposed, rank) of the slowest rank, from the simulator directly."""
    model, parallel = inputs_tests.point(name)
    write_inputs(lower(model, parallel), A100, directory, dtype="bf16")
    config = astra_config_from_files(directory / "system.json", directory / "network.yml")
    result = simulate(read_trace_set(directory).ranks, AstraTimingModel(config))
    rank = min(r for r, t in result.ranks.items() if t.finish == result.makespan)
    slowest = result.ranks[rank]
    return slowest.finish, slowest.compute, slowest.exposed_communication, rank


@pytest.mark.parametrize("name", ["gpt-tp-sp-pp-dp", "mixtral-ep-zero1"])
def test_evaluation_from_the_simulating_stand_in(name: str, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    binary = simulating_stand_in(tmp_path / "astra", record)
    model, parallel = inputs_tests.point(name)
    evaluation = AstraSimBackend(binary=str(binary), timeout_s=120).evaluate(model, parallel, A100)
    finish, compute, exposed, rank = expected_timing(name, tmp_path / "expected")
    gpus = parallel.world_size
    assert evaluation.backend == "astra-sim" and evaluation.feasible and evaluation.num_gpus == gpus
    assert evaluation.step_time_s == finish * 1e-9
    assert evaluation.breakdown["compute"] == compute * 1e-9
    assert evaluation.breakdown["exposed_communication"] == exposed * 1e-9
    assert math.isclose(sum(evaluation.breakdown.values()), evaluation.step_time_s)
    assert evaluation.extra["slowest_rank"] == rank
    model_flops, hardware_flops = step_flops(lower(model, parallel))
    assert evaluation.model_flops_per_step == model_flops
    assert evaluation.mfu == model_flops / (evaluation.step_time_s * gpus * 312e12)
    assert evaluation.hfu == hardware_flops / (evaluation.step_time_s * gpus * 312e12)
    tokens = parallel.global_batch * model.seq_len
    assert evaluation.tokens_per_s_per_gpu == tokens / evaluation.step_time_s / gpus
    assert evaluation.cost_per_step == 1.30 * gpus * evaluation.step_time_s / 3600
    assert 0 < evaluation.peak_memory_bytes <= evaluation.memory_capacity_bytes
    assert not Path(json.loads(record.read_text())["cwd"]).exists()  # scratch removed


def test_keep_dir_keeps_every_input_and_the_output(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    binary = simulating_stand_in(tmp_path / "astra", record)
    model, parallel = inputs_tests.point("llama-cp-ring")
    backend = AstraSimBackend(binary=str(binary), keep_dir=str(tmp_path / "kept"))
    evaluation = backend.evaluate(model, parallel, A100)
    kept = Path(evaluation.extra["astra_sim_dir"])
    assert kept.parent == tmp_path / "kept" and kept.name.startswith("llama3-8b-dp2-tp2-cp2-")
    names = {path.name for path in kept.iterdir()}
    assert {
        "system.json",
        "network.yml",
        "memory.json",
        "comm_group.json",
        "astra-sim.log",
        "log",
    } <= names
    assert {f"workload.{rank}.et" for rank in range(8)} <= names
    assert Path(json.loads(record.read_text())["cwd"]) == kept


@pytest.mark.parametrize("keep", [False, True])
def test_a_failed_run_through_the_backend_says_where_the_inputs_are(
    keep: bool, tmp_path: Path
) -> None:
    record = tmp_path / "record.json"
    binary = stand_in(tmp_path / "astra", "omit", record)
    model, parallel = inputs_tests.point("llama-cp-ring")
    options: dict[str, Any] = {"keep_dir": str(tmp_path / "kept")} if keep else {}
    with pytest.raises(AstraSimError, match=f"binary {binary}") as caught:
        AstraSimBackend(binary=str(binary), **options).evaluate(model, parallel, A100)
    directory = Path(json.loads(record.read_text())["cwd"])
    if keep:
        assert f"inputs kept in {directory}" in caught.value.reason and directory.is_dir()
    else:
        assert "set the backend option keep_dir" in caught.value.reason
        assert not directory.exists()


def test_out_of_memory_points_are_not_simulated_unless_asked(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    binary = simulating_stand_in(tmp_path / "astra", record)
    small = replace(A100, accelerator=replace(A100.accelerator, memory_bytes=2**20))
    model, parallel = inputs_tests.point("llama-cp-ring")
    skipped = AstraSimBackend(binary=str(binary)).evaluate(model, parallel, small)
    assert not skipped.feasible and skipped.reason.startswith("out of memory: peak")
    assert math.isnan(skipped.step_time_s) and skipped.peak_memory_bytes > 2**20
    assert skipped.backend == "astra-sim" and not record.exists()
    simulated = AstraSimBackend(binary=str(binary), simulate_infeasible=True).evaluate(
        model, parallel, small
    )
    assert not simulated.feasible and simulated.reason == skipped.reason
    assert simulated.step_time_s > 0 and record.exists()


def test_more_gpus_than_the_system_has_is_infeasible_without_a_run(tmp_path: Path) -> None:
    binary = stand_in(tmp_path / "astra", "ok", tmp_path / "record.json")
    one_node = replace(A100, network=A100.network[:1])
    model, parallel = inputs_tests.point("gpt-tp-sp-pp-dp")
    evaluation = AstraSimBackend(binary=str(binary)).evaluate(model, parallel, one_node)
    assert not evaluation.feasible and evaluation.reason == "16 GPUs exceed the system's 8"
    assert not (tmp_path / "record.json").exists()


def test_the_backend_pickles_with_its_options(tmp_path: Path) -> None:
    backend = AstraSimBackend(binary="astra", variant="aware", keep_dir=str(tmp_path), timeout_s=5)
    assert pickle.loads(pickle.dumps(backend)).to_dict() == backend.to_dict()


def test_an_fp4_evaluation_divides_by_the_nvfp4_peak_as_the_analytical_backend_does(
    tmp_path: Path,
) -> None:
    """The defect (s19 review2): an FP4 run's MFU / HFU were divided by the FP8 peak here and by
    the NVFP4 peak in the analytical backend."""
    from stage_core.parallel import Precision
    from stage_explore.analytical.backend import AnalyticalBackend

    binary = simulating_stand_in(tmp_path / "astra", tmp_path / "record.json")
    b200 = load_system("b200")
    model, parallel = inputs_tests.point("gpt-tp-sp-pp-dp")
    parallel = replace(parallel, precision=Precision.FP4)
    evaluation = AstraSimBackend(binary=str(binary), timeout_s=120).evaluate(model, parallel, b200)
    assert evaluation.feasible, evaluation.reason
    nvfp4 = b200.accelerator.peak("nvfp4")
    assert nvfp4 > b200.accelerator.peak("fp8")
    gpus = parallel.world_size
    assert evaluation.mfu == pytest.approx(
        evaluation.model_flops_per_step / (evaluation.step_time_s * gpus * nvfp4)
    )
    analytical = AnalyticalBackend().evaluate(model, parallel, b200)
    assert analytical.mfu == pytest.approx(
        analytical.model_flops_per_step / (analytical.step_time_s * gpus * nvfp4)
    )
