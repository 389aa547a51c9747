"""ASTRA-sim's memory: an estimate of a run before it starts, and what this host has free.

Contents:
    :data:`BASE_BYTES`, :data:`PER_RANK_BYTES`, :data:`PER_TRACE_BYTE`
        the measured model: peak resident memory of the binary = base + per rank × ranks +
        per trace byte × bytes of the ``.et`` files.
    :func:`trace_bytes`, :func:`estimate_bytes`
        the size of a run's traces, and the model's estimate for a run.
    :func:`parse_meminfo`, :func:`available_bytes`
        the memory this host can give a new process (``MemAvailable``, bounded by the cgroup's
        limit when there is one).
    :class:`HostMemoryError`, :func:`check_estimate`, :func:`check_memory`
        refuse a run whose estimate exceeds the available memory: an infeasible point *for
        this host* (recorded with both numbers), not a crash. The backend checks twice: before
        the traces are written, from their exact size counted from the encoded rank templates
        (:meth:`~stage_core.chakra.writer.CompiledTraceSet.byte_count`, in
        :func:`~stage_explore.astrasim.inputs.write_inputs`), so that a run this host cannot
        hold fills no disk; and before starting the binary, from the files on disk
        (:func:`check_memory`, which also covers inputs assembled by hand).

The model was fitted by ``benchmarks/bench_astrasim_memory.py`` on the real binary (ASTRA-sim
518bd51, analytical congestion-unaware backend, x86-64 Linux): peak RSS from
``/usr/bin/time -v`` for GPT-3 125M traces of 2 to 8 layers on 8 to 1,024 ranks, a least-squares
fit; the runs, the fit and its worst relative error are in
``benchmarks/results/astrasim_memory.json``. ASTRA-sim holds every rank's system, its
collective plans and the trace nodes it has decoded, so memory grows with the rank count and
with the traces; a different ASTRA-sim build or backend may differ (re-run the benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stage_core.errors import InfeasibleError

if TYPE_CHECKING:  # inputs.py checks the estimate before writing: no import cycle at run time
    from stage_explore.astrasim.inputs import AstraInputs

# Least-squares fit of the 10 runs in benchmarks/results/astrasim_memory.json (8 to 1,024 ranks,
# 0.4 to 47 MB of traces, peak RSS 16 to 420 MiB); worst error 20 % (8 ranks, over), the other
# nine within 5 %.
#: Fixed cost of a run (binary, libraries, network and system set-up): 15.5 MiB.
BASE_BYTES = 16_290_269
#: Per rank (its system, queues and collective plans): 94 KiB.
PER_RANK_BYTES = 95_921
#: Per byte of Chakra trace (the decoded nodes held in memory are ~6.9 times the protobuf).
PER_TRACE_BYTE = 6.8623

_GIB = float(1 << 30)
_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def gib(count: float) -> str:
    """``count`` bytes in GiB, for messages (two decimals)."""
    return f"{count / _GIB:.2f} GiB"


def trace_bytes(inputs: AstraInputs) -> int:
    """Total bytes of the run's ``<prefix>.<rank>.et`` files."""
    prefix = inputs.workload_prefix
    return sum(path.stat().st_size for path in prefix.parent.glob(f"{prefix.name}.*.et"))


def estimate_bytes(world_size: int, traces_bytes: int) -> int:
    """The model's peak resident memory of one ASTRA-sim run, in bytes."""
    return int(math.ceil(BASE_BYTES + PER_RANK_BYTES * world_size + PER_TRACE_BYTE * traces_bytes))


def parse_meminfo(text: str) -> int | None:
    """``MemAvailable`` of a ``/proc/meminfo`` text, in bytes (``None`` if absent)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            number, *unit = value.split()
            return int(number) * (1024 if unit == ["kB"] else 1)
    return None


def _cgroup_room(root: Path) -> int | None:
    """Room left under a cgroup v2 memory limit (``None`` without a limit)."""
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return max(0, int(limit) - used)


def available_bytes(meminfo: Path | None = None, cgroup: Path | None = None) -> int | None:
    """The memory a new process may use here: ``MemAvailable`` (of ``/proc/meminfo``), bounded
    by the room under the cgroup's limit (``/sys/fs/cgroup``); ``None`` when neither is known
    (then nothing is refused)."""
    try:
        free = parse_meminfo((meminfo or _MEMINFO).read_text())
    except OSError:
        free = None
    room = _cgroup_room(cgroup or _CGROUP)
    known = [value for value in (free, room) if value is not None]
    return min(known) if known else None


class HostMemoryError(InfeasibleError):
    """A run this host cannot hold: its estimate exceeds the available memory."""

    def __init__(self, estimate: int, available: int, world_size: int, traces: int) -> None:
        self.estimate_bytes = estimate
        self.available_bytes = available
        super().__init__(
            f"infeasible on this host: ASTRA-sim would need an estimated {gib(estimate)} for "
            f"{world_size} ranks ({traces / (1 << 20):.0f} MiB of traces), and {gib(available)} "
            "is available"
        )


def check_estimate(
    world_size: int, traces: int, available: Callable[[], int | None] = available_bytes
) -> tuple[int, int | None]:
    """The estimate of a run of ``world_size`` ranks on ``traces`` bytes of ``.et`` files, and
    the available memory; :class:`HostMemoryError` if it cannot fit."""
    estimate = estimate_bytes(world_size, traces)
    free = available()
    if free is not None and estimate > free:
        raise HostMemoryError(estimate, free, world_size, traces)
    return estimate, free


def check_memory(
    inputs: AstraInputs, available: Callable[[], int | None] = available_bytes
) -> tuple[int, int | None]:
    """:func:`check_estimate` on the ``.et`` files written in the run's directory."""
    return check_estimate(inputs.world_size, trace_bytes(inputs), available)
