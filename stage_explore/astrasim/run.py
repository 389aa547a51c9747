"""Running the ASTRA-sim binary on a run directory, with a timeout, and judging the run.

Holds :class:`AstraSimError`, :func:`command_line`, :class:`AstraSimRun` and
:func:`run_astra_sim`. The command line is the one in ASTRA-sim's README::

    <binary> --workload-configuration=<dir>/workload --system-configuration=<dir>/system.json
             --network-configuration=<dir>/network.yml
             --remote-memory-configuration=<dir>/memory.json
             --comm-group-configuration=<dir>/comm_group.json --logging-folder=<dir>/log
             --logging-configuration=<dir>/logging.toml

(the last one written by :mod:`~stage_explore.astrasim.logconfig`: the loggers that print the
results made synchronous, so that a crash at exit cannot drop queued result lines), run with
``<dir>`` as working directory, stdout and stderr together into ``<dir>/astra-sim.log`` (a file,
not a pipe: large runs print a lot). The binary runs in a session of its own, so a timeout kills
it and anything it started.

A run counts only when every rank printed its ``finished`` line. Non-zero exit, death by a
signal (ASTRA-sim aborts with SIGABRT on invalid input), a timeout, or a missing rank (ASTRA-sim
exits 0 without results when ``collective-optimization`` is absent, or when a trace stalls) is an
:class:`AstraSimError` carrying the reason and the tail of the output.

Memory: before starting, the run's memory is estimated (:mod:`~stage_explore.astrasim.memory`)
and a run this host cannot hold is refused (:class:`~stage_explore.astrasim.memory.
HostMemoryError`, an infeasible point for this host). A run killed from outside (SIGKILL,
SIGTERM, SIGINT, SIGHUP) is an infrastructure failure (``AstraSimError.infrastructure``: the
explorer retries it and ``--resume`` re-runs it); SIGKILL is reported as likely the
out-of-memory killer, with the estimate and the memory that was available, unless the estimate
is under a quarter of it (:data:`SMALL_SHARE`): then as killed from outside, the run's own need
being small.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stage_core.errors import StageError
from stage_explore.astrasim.inputs import AstraInputs
from stage_explore.astrasim.logconfig import LOGGING_CONFIG_FILE, write_logging_config
from stage_explore.astrasim.memory import available_bytes, check_memory, gib
from stage_explore.astrasim.parse import AstraSimReport, parse_output

OUTPUT_FILE = "astra-sim.log"
TAIL_LINES = 20
_TAIL_BYTES = 64 * 1024


class AstraSimError(StageError):
    """An ASTRA-sim run that did not complete; the explorer records a failed trial.

    ``reason`` says what went wrong; ``tail`` holds the last lines of ASTRA-sim's output;
    ``infrastructure`` is true when the run was killed from outside (the out-of-memory killer,
    a signal): the explorer then retries the trial instead of recording it failed.
    """

    def __init__(
        self, reason: str, tail: Sequence[str] = (), *, infrastructure: bool = False
    ) -> None:
        self.reason = reason
        self.tail = tuple(tail)
        self.infrastructure = infrastructure
        text = reason
        if self.tail:
            text += f"\n--- last {len(self.tail)} lines of ASTRA-sim's output ---\n"
            text += "\n".join(self.tail)
        super().__init__(text)

    def with_note(self, note: str) -> AstraSimError:
        """The same error with ``note`` appended to its reason."""
        return AstraSimError(
            f"{self.reason}; {note}", self.tail, infrastructure=self.infrastructure
        )


def command_line(binary: Path, inputs: AstraInputs) -> list[str]:
    """The argument vector of one run (absolute paths into ``inputs.directory``)."""
    groups = str(inputs.comm_group_json)
    if "empty" in groups:  # ASTRA-sim reads a group path containing "empty" as "no groups"
        groups = inputs.comm_group_json.name  # relative to the working directory
    return [
        str(binary),
        f"--workload-configuration={inputs.workload_prefix}",
        f"--system-configuration={inputs.system_json}",
        f"--network-configuration={inputs.network_yml}",
        f"--remote-memory-configuration={inputs.memory_json}",
        f"--comm-group-configuration={groups}",
        f"--logging-folder={inputs.logging_folder}",
        f"--logging-configuration={inputs.logging_configuration}",
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class AstraSimRun:
    """A completed run: what was run, what every rank reported, how long it took."""

    command: tuple[str, ...]
    report: AstraSimReport
    seconds: float
    output: Path
    #: Non-empty when ASTRA-sim crashed while freeing memory after every rank had finished
    #: (see :data:`TEARDOWN_CRASH`): the results are complete, the exit status is not 0.
    teardown_crash: str = ""


def tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``path`` (empty if it cannot be read)."""
    try:
        with path.open("rb") as stream:
            size = stream.seek(0, os.SEEK_END)
            stream.seek(max(0, size - _TAIL_BYTES))
            data = stream.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the run's whole session (the binary is its leader), then reap the binary."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


#: Signals that end a run from outside (the OOM killer, an operator, a dying node): not the
#: simulation's fault, so an infrastructure failure.
KILL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


#: A run whose estimate is below this share of the memory available when it started is too
#: small to be the out-of-memory killer's likely target (the killer picks the process with the
#: largest resident memory, Linux ``oom_badness``): its SIGKILL is not put down to memory.
SMALL_SHARE = 0.25


def _small(estimate: int | None, available: int | None) -> bool:
    """Whether a run's memory estimate is known and small against the memory available."""
    return estimate is not None and available is not None and estimate < SMALL_SHARE * available


def _exit_reason(code: int, estimate: int | None = None, available: int | None = None) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (ASTRA-sim aborts on invalid input)" if -code == signal.SIGABRT else ""
        if -code == signal.SIGKILL:
            known = f"estimated {gib(estimate)}" if estimate is not None else "no estimate"
            free = "unknown" if available is None else gib(available)
            if _small(estimate, available):
                hint = (
                    f" from outside (an operator, a job scheduler, or the out-of-memory killer "
                    f"for want of memory elsewhere: the run's own need is small, {known} of "
                    f"{free} available)"
                )
            else:
                hint = f", likely the out-of-memory killer: {known}, available {free}"
        return f"ASTRA-sim was killed by {name}{hint}"
    return f"ASTRA-sim exited with status {code}"


#: ASTRA-sim 518bd51 frees the same collective implementation objects twice when it destroys
#: its communicator groups at exit (valgrind: invalid free in ``CollectivePlan::~CollectivePlan``
#: from ``CommunicatorGroup::~CommunicatorGroup``), which glibc sometimes turns into SIGABRT or
#: SIGSEGV. By then every rank has printed its ``finished`` line and its statistics, so the run's
#: results are complete; such a run is accepted and the crash is reported beside it.
TEARDOWN_CRASH = (
    "ASTRA-sim crashed while freeing memory at exit, after every rank finished (a double free "
    "in its communicator-group teardown); the results are complete"
)
_TEARDOWN_SIGNALS = (-signal.SIGABRT, -signal.SIGSEGV)
#: A report cut short by the crash (killed by one of these signals with ranks missing) is run
#: again, up to this many times in all. The cause of such reports was ASTRA-sim's asynchronous
#: logging: its logging thread lags under CPU load and the abort drops the queued ``finished``
#: and statistics lines (``malloc_consolidate(): unaligned fastbin chunk detected`` after the
#: topology lines). Every run is now given :mod:`~stage_explore.astrasim.logconfig`'s file,
#: which makes the result loggers synchronous (none of 80 runs under 4 busy loops lost a line,
#: against 56 of 80 without it), so this rerun is a remaining safety net. The simulation is
#: deterministic, only the crash is not: an input that really aborts ASTRA-sim fails every
#: attempt and is reported as before.
TEARDOWN_ATTEMPTS = 5


def _cut_short(code: int, report: AstraSimReport, world: int) -> bool:
    """Killed by SIGABRT/SIGSEGV with ranks missing: possibly the teardown crash."""
    return code in _TEARDOWN_SIGNALS and bool(report.missing(world))


def _finished_before_crash(code: int, report: AstraSimReport, world: int) -> bool:
    """Killed by SIGABRT/SIGSEGV after every rank printed ``finished`` and its statistics."""
    if code not in _TEARDOWN_SIGNALS or report.missing(world) or report.unexpected(world):
        return False
    return all(rank.gpu_time_cycles is not None for rank in report.ranks.values())


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f", … ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def run_astra_sim(
    binary: Path,
    inputs: AstraInputs,
    *,
    timeout_s: float | None,
    available: Callable[[], int | None] | None = None,
) -> AstraSimRun:
    """Run ``binary`` on ``inputs``; every rank must finish, else :class:`AstraSimError`.

    A run whose memory estimate exceeds ``available()`` (default: this host's available
    memory) is refused before it starts
    (:class:`~stage_explore.astrasim.memory.HostMemoryError`).
    """
    estimate, free = check_memory(inputs, available or available_bytes)
    try:  # written by write_inputs too; here also for inputs assembled by hand
        write_logging_config(inputs.directory)
    except OSError as error:
        raise AstraSimError(f"cannot write {LOGGING_CONFIG_FILE}: {error}") from error
    command = command_line(binary, inputs)
    output = inputs.directory / OUTPUT_FILE
    world = inputs.world_size
    start = time.perf_counter()
    for _ in range(TEARDOWN_ATTEMPTS):
        code = _execute(binary, command, inputs.directory, output, timeout_s)
        with output.open(encoding="utf-8", errors="replace") as lines:
            report = parse_output(lines)
        if not _cut_short(code, report, world):
            break
    seconds = time.perf_counter() - start
    missing = report.missing(world)
    problems = []
    teardown = _finished_before_crash(code, report, world)
    if code != 0 and not teardown:
        problems.append(_exit_reason(code, estimate, free))
    if missing:
        problems.append(
            f"{len(missing)} of {world} ranks printed no `finished` line (ranks {_ranks(missing)})"
            + _silent_hint(code, output)
        )
    unexpected = report.unexpected(world)
    if unexpected:
        problems.append(f"ranks {_ranks(unexpected)} reported, but the run has {world} ranks")
    if problems:
        killed = code < 0 and -code in KILL_SIGNALS
        raise AstraSimError("; ".join(problems), tail(output), infrastructure=killed)
    return AstraSimRun(
        command=tuple(command), report=report, seconds=seconds, output=output,
        teardown_crash=f"{_exit_reason(code)}: {TEARDOWN_CRASH}" if teardown else "",
    )  # fmt: skip


def _silent_hint(code: int, output: Path) -> str:
    """Why ranks may be missing from a run that exited 0: a binary that printed nothing at all
    is likely no ASTRA-sim (a wrong ``binary``, s24 review: ``/bin/true`` was explained by
    system.json), else ASTRA-sim's own silent exits."""
    if code != 0:
        return ""
    try:
        empty = output.stat().st_size == 0
    except OSError:
        empty = False
    if empty:
        return (
            " — the binary exited 0 without printing a line: is it an ASTRA-sim analytical "
            "build (AstraSim_Analytical_Congestion_Unaware or _Aware)?"
        )
    return (
        " — with exit status 0 ASTRA-sim prints no results when system.json lacks "
        "collective-optimization, or when a trace stalls"
    )


def _execute(
    binary: Path, command: list[str], directory: Path, output: Path, timeout_s: float | None
) -> int:
    """Run ``command`` in ``directory``, its output into the file ``output``; the exit status."""
    with output.open("wb") as log:
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=directory, start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            raise AstraSimError(f"cannot start ASTRA-sim binary {binary}: {error}") from error
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            raise AstraSimError(
                f"ASTRA-sim timed out after {timeout_s:g} s and was killed", tail(output)
            ) from None
        except BaseException:
            _kill(process)
            raise
