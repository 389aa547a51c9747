"""ASTRA-sim's memory guard: the measured estimate, the memory this host has, the refusal of a
run that cannot fit, and a run killed from outside (SIGKILL: likely the OOM killer) classified
as an infrastructure failure."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stage_core.errors import ConfigError, InfeasibleError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.astrasim import (
    AstraSimBackend,
    AstraSimError,
    find_binary,
    memory,
    run_astra_sim,
)
from stage_explore.astrasim.memory import (
    HostMemoryError,
    available_bytes,
    estimate_bytes,
    parse_meminfo,
    trace_bytes,
)
from stage_explore.records import TrialStatus
from stage_explore.search.outcomes import is_infrastructure_error, task_failure_status
from stage_explore.system import load_system

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "results" / "astrasim_memory.json"
A100 = load_system("a100-80gb")
GIB = 1 << 30


def _inputs(directory: Path, dp: int = 8, layers: int = 2, tp: int = 1) -> Any:
    model = get_flavor("gpt3-125m").with_overrides(layers=layers, seq_len=256)
    parallel = ParallelConfig(dp=dp, tp=tp, global_batch=2 * dp)
    return AstraSimBackend().write_inputs(model, parallel, A100, directory)


def _script(path: Path, body: str) -> Path:
    """A stand-in for the binary: a shell script (it ignores ASTRA-sim's arguments)."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ----------------------------------------------------------------------------- the estimate


def test_the_model_is_the_fit_of_the_recorded_measurements() -> None:
    """The constants are the least-squares fit of the runs in the benchmark's results file."""
    recorded = json.loads(MEASURED.read_text())
    runs = [run for run in recorded["runs"] if run["ranks_finished"] == run["world_size"]]
    assert len(runs) >= 6 and max(run["world_size"] for run in runs) >= 512
    design = np.array([[1.0, run["world_size"], run["trace_bytes"]] for run in runs])
    peak = np.array([float(run["peak_rss_bytes"]) for run in runs])
    base, per_rank, per_byte = np.linalg.lstsq(design, peak, rcond=None)[0]
    assert memory.BASE_BYTES == pytest.approx(base, rel=1e-3)
    assert memory.PER_RANK_BYTES == pytest.approx(per_rank, rel=1e-3)
    assert memory.PER_TRACE_BYTE == pytest.approx(per_byte, rel=1e-3)
    for run in runs:  # and it reproduces each measured run within 25 %
        estimate = estimate_bytes(run["world_size"], run["trace_bytes"])
        assert estimate == pytest.approx(run["peak_rss_bytes"], rel=0.25), run


def test_the_estimate_grows_with_ranks_and_traces(tmp_path: Path) -> None:
    small = _inputs(tmp_path / "small", dp=8)
    large = _inputs(tmp_path / "large", dp=32, layers=4)
    assert 0 < trace_bytes(small) < trace_bytes(large)
    assert estimate_bytes(8, trace_bytes(small)) < estimate_bytes(32, trace_bytes(large))
    assert isinstance(estimate_bytes(8, 1000), int)


# ----------------------------------------------------------------------------- available memory


def test_meminfo_is_read_in_bytes() -> None:
    text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   22000000 kB\n"
    assert parse_meminfo(text) == 22_000_000 * 1024
    assert parse_meminfo("MemTotal: 5 kB\n") is None


def test_available_memory_is_bounded_by_the_cgroup_limit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemAvailable: {20 * GIB // 1024} kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    assert available_bytes(meminfo, cgroup) == 20 * GIB  # no cgroup files: MemAvailable
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text(f"{GIB}\n")
    assert available_bytes(meminfo, cgroup) == 20 * GIB  # no limit
    (cgroup / "memory.max").write_text(f"{4 * GIB}\n")
    assert available_bytes(meminfo, cgroup) == 3 * GIB  # limit minus use
    assert available_bytes(tmp_path / "absent", tmp_path / "absent") is None


# ----------------------------------------------------------------------------- the guard


def test_a_run_the_host_cannot_hold_is_refused_before_it_starts(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "run")
    started = tmp_path / "started"
    binary = _script(tmp_path / "astra-sim", f"touch {started}")
    with pytest.raises(HostMemoryError) as caught:
        run_astra_sim(binary, inputs, timeout_s=30, available=lambda: 1 << 20)
    error = caught.value
    assert isinstance(error, InfeasibleError) and not started.exists()
    estimate = estimate_bytes(8, trace_bytes(inputs))
    assert error.estimate_bytes == estimate and error.available_bytes == 1 << 20
    assert error.reason == (
        f"infeasible on this host: ASTRA-sim would need an estimated {estimate / GIB:.2f} GiB "
        f"for 8 ranks ({trace_bytes(inputs) / (1 << 20):.0f} MiB of traces), and 0.00 GiB "
        "is available"
    )
    assert "\n" not in error.reason


def test_the_backend_records_a_refused_run_as_infeasible_for_this_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stage_explore.astrasim import run as run_module

    monkeypatch.setattr(run_module, "available_bytes", lambda: 1 << 20)
    binary = _script(tmp_path / "astra-sim", "exit 0")
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=256)
    backend = AstraSimBackend(binary=str(binary))
    with pytest.raises(HostMemoryError, match="infeasible on this host: ASTRA-sim would need"):
        backend.evaluate(model, ParallelConfig(dp=4, global_batch=8), A100)


# ----------------------------------------------------------------------------- killed runs


@pytest.mark.parametrize(
    ("body", "infrastructure", "reason"),
    [
        (
            "kill -KILL $$",
            True,
            r"ASTRA-sim was killed by SIGKILL from outside \(an operator, a job scheduler, or "
            r"the out-of-memory killer for want of memory elsewhere: the run's own need is "
            r"small, estimated \d+\.\d\d GiB of 16\.00 GiB available\)",
        ),
        ("kill -TERM $$", True, r"ASTRA-sim was killed by SIGTERM"),
        ("kill -ABRT $$", False, r"ASTRA-sim was killed by SIGABRT \(ASTRA-sim aborts on"),
        ("exit 3", False, r"ASTRA-sim exited with status 3"),
    ],
)
def test_a_killed_run_is_an_infrastructure_failure_and_an_abort_is_not(
    tmp_path: Path, body: str, infrastructure: bool, reason: str
) -> None:
    inputs = _inputs(tmp_path / "run")
    binary = _script(tmp_path / "astra-sim", body)
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, inputs, timeout_s=30, available=lambda: 16 * GIB)
    error = caught.value
    assert re.match(reason, error.reason), error.reason
    assert error.infrastructure is infrastructure
    assert error.with_note("a note").infrastructure is infrastructure
    assert is_infrastructure_error(error) is infrastructure
    expected = TrialStatus.INFRASTRUCTURE_FAILED if infrastructure else TrialStatus.FAILED
    assert task_failure_status(error) is expected


def test_the_oom_message_names_the_estimate_and_the_available_memory(tmp_path: Path) -> None:
    """A run that needs a good share of the memory available is likely the OOM killer's."""
    inputs = _inputs(tmp_path / "run")
    binary = _script(tmp_path / "astra-sim", "kill -KILL $$")
    estimate = estimate_bytes(8, trace_bytes(inputs))
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, inputs, timeout_s=30, available=lambda: 2 * estimate)
    assert caught.value.reason.startswith(
        "ASTRA-sim was killed by SIGKILL, likely the out-of-memory killer: "
        f"estimated {estimate / GIB:.2f} GiB, available {2 * estimate / GIB:.2f} GiB"
    )


def test_a_small_run_killed_is_not_put_down_to_memory(tmp_path: Path) -> None:
    """A run of a few MiB killed with GiBs free (s24 review: 0.02 GiB of 22 GiB was reported as
    'likely the out-of-memory killer'): killed from outside, the estimate named, still an
    infrastructure failure the explorer retries."""
    inputs = _inputs(tmp_path / "run")
    binary = _script(tmp_path / "astra-sim", "kill -KILL $$")
    estimate = estimate_bytes(8, trace_bytes(inputs))
    with pytest.raises(AstraSimError) as caught:
        run_astra_sim(binary, inputs, timeout_s=30, available=lambda: 4 * estimate + 1)
    reason = caught.value.reason
    assert reason.startswith("ASTRA-sim was killed by SIGKILL from outside (")
    assert "likely" not in reason and f"estimated {estimate / GIB:.2f} GiB of" in reason
    assert caught.value.infrastructure


# ----------------------------------------------------------------------------- the real binary


def _real_binary() -> tuple[Path | None, str]:
    try:
        return find_binary(), ""
    except ConfigError as error:
        return None, f"ASTRA-sim is not installed here ({error})"


BINARY, WHY = _real_binary()
real = pytest.mark.skipif(BINARY is None, reason=WHY)


def _processes_under(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(directory).encode() in command and b"--workload-configuration" in command:
                found.append(int(entry.name))
    return found


@real
def test_the_real_binary_killed_midway_is_an_infrastructure_failure(tmp_path: Path) -> None:
    assert BINARY is not None
    inputs = _inputs(tmp_path / "run", dp=128)  # several seconds of simulation
    caught: list[BaseException] = []

    def run() -> None:
        try:
            run_astra_sim(BINARY, inputs, timeout_s=300, available=lambda: 64 * GIB)
        except BaseException as error:
            caught.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    victims: list[int] = []
    while not victims and thread.is_alive() and time.monotonic() < deadline:
        victims = _processes_under(inputs.directory)
        time.sleep(0.05)
    time.sleep(0.3)  # let it allocate
    for pid in victims:  # what the kernel's OOM killer does
        os.kill(pid, signal.SIGKILL)
    thread.join(timeout=60)
    assert victims, "the binary finished before it could be killed"
    (error,) = caught
    assert isinstance(error, AstraSimError) and error.infrastructure
    assert error.reason.startswith("ASTRA-sim was killed by SIGKILL from outside (")


@real
@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="needs /usr/bin/time -v")
def test_the_estimate_holds_for_a_run_outside_the_fit(tmp_path: Path) -> None:
    """A configuration not in the benchmark ladder (TP 4, 6 layers, 48 ranks)."""
    assert BINARY is not None
    inputs = _inputs(tmp_path / "run", dp=12, layers=6, tp=4)
    from stage_explore.astrasim.run import command_line

    done = subprocess.run(
        ["/usr/bin/time", "-v", *command_line(BINARY, inputs)],
        cwd=inputs.directory, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    assert match, done.stderr[-1000:]
    measured = int(match.group(1)) * 1024
    estimate = estimate_bytes(inputs.world_size, trace_bytes(inputs))
    assert estimate == pytest.approx(measured, rel=0.35), (estimate, measured)


STUDY = """[study]
name = "oom"
seed = 0

[model]
file = "model.toml"

[workload]
global_batch = 8
sequence_length = 256

[system]
preset = "a100-80gb"

[space]
num_gpus = [4, 8]
tp = [1, 2]

[objectives]
step_time_s = "min"

[sampler]
kind = "grid"
batch_size = 4

[backend]
name = "astra-sim"
options = {{ binary = "{binary}", timeout_s = 300 }}

[executor]
kind = "local"
workers = 1
retries = 1
"""


@real
def test_runs_killed_like_the_oom_killer_are_retried_then_re_run_by_resume(
    tmp_path: Path,
) -> None:
    """The whole path with the ASTRA-sim backend: every run killed by SIGKILL (here by a
    wrapper, as the OOM killer would) is retried, then recorded ``infrastructure_failed`` with
    the estimate; once runs complete again, ``--resume`` evaluates those trials again."""
    from stage_explore import load_results
    from stage_explore.search import Explorer, LocalExecutor
    from stage_explore.search.retry import RetryPolicy
    from stage_explore.study import parse_study

    assert BINARY is not None
    (tmp_path / "model.toml").write_text('base = "gpt3-125m"\nlayers = 2\n')
    wrapper = _script(tmp_path / "astra-sim", "kill -KILL $$")
    spec = parse_study(STUDY.format(binary=wrapper), tmp_path / "study.toml")
    out = tmp_path / "out"

    def run(resume: bool) -> Any:
        return Explorer(
            spec, out=out, executor_factory=lambda job: LocalExecutor(job, 1),
            retry=RetryPolicy(retries=1, backoff_s=0.0), resume=resume,
        ).run()  # fmt: skip

    first = run(resume=False)
    lost = load_results(first.directory)
    assert len(lost) == 4 and (lost["status"] == "infrastructure_failed").all()
    assert (
        lost["reason"]
        .str.match(
            r"AstraSimError: ASTRA-sim was killed by SIGKILL(, likely the out-of-memory killer: "
            r"| from outside \(.* )estimated 0\.\d\d GiB"  # by the host's memory (run.SMALL_SHARE)
        )
        .all()
    ), lost["reason"].tolist()
    assert lost["reason"].str.contains(r"\(gave up after 2 attempts\)").all()

    _script(wrapper, f'exec "{BINARY}" "$@"')  # the host has memory again
    second = run(resume=True)
    again = load_results(second.directory)
    assert second.resumed == 0 and sorted(again["trial"]) == [0, 1, 2, 3]
    assert (again["status"] == "ok").all(), again["reason"].tolist()
    assert (again["step_time_s"] > 0).all()
