"""ASTRA-sim's input files for one design point, from the same System the analytical backend uses.

Holds:

- :class:`AstraSettings` — the ``system.json`` knobs STAGE exposes (endpoint delay, chunking,
  collective optimization), checked when built;
- :func:`astra_config` — :func:`~stage_explore.system.astra.astra_config_from_system` for the
  job's world size, with ``direct`` all-to-all on every dim (the reference README's advice);
- :func:`system_json_text`, :func:`memory_json_text` — the file texts;
- :class:`AstraInputs`, :func:`write_inputs` — every file of a run in one directory.

A run directory holds, for N ranks::

    workload.<rank>.et   one Chakra ET per rank (stage_core.lower.emit.write_chakra)
    comm_group.json      communicator groups: {"<id>": [ranks…]}, id > 0
    system.json          scheduling, chunking, one algorithm per network dim per collective,
                         local-mem-bw (GB/s), roofline with peak-perf (TFLOP/s)
    network.yml          per dim: topology, npus_count (product = N), bandwidth (GB/s, GB =
                         2^30), latency (ns per link)
    memory.json          {"memory-type": "NO_MEMORY_EXPANSION"}
    logging.toml         ASTRA-sim's result loggers made synchronous, so a crash at exit cannot
                         drop the results (:mod:`~stage_explore.astrasim.logconfig`)

The network dims are the system's, folded to the job's world size from dim 0 outwards (16 GPUs
on DGX nodes of 8: ``npus_count: [ 8, 2 ]``); a world size that fills no whole number of the
inner dims (12 GPUs on nodes of 8), or one GPU, cannot be described to ASTRA-sim and is a
ConfigError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stage_core.chakra.groups import COMM_GROUP_FILE
from stage_core.chakra.writer import compile_class_columns
from stage_core.errors import ConfigError
from stage_core.lower.emit import class_columns
from stage_core.lower.program import ProgramSet
from stage_explore.astrasim.kernel_times import (
    KERNELS,
    ROOFLINE,
    kernel_seconds,
    parse_compute,
    with_durations,
)
from stage_explore.astrasim.logconfig import LOGGING_CONFIG_FILE, write_logging_config
from stage_explore.astrasim.memory import check_estimate
from stage_explore.system.astra import AstraAlgorithm, AstraConfig, astra_config_from_system
from stage_explore.system.model import System

WORKLOAD_PREFIX = "workload"
SYSTEM_FILE = "system.json"
NETWORK_FILE = "network.yml"
MEMORY_FILE = "memory.json"
LOGGING_FOLDER = "log"
#: ASTRA-sim's remote memory: none (every tensor lives in the GPU's own memory).
MEMORY_JSON: dict[str, str] = {"memory-type": "NO_MEMORY_EXPANSION"}
_OPTIMIZATIONS = ("localBWAware", "baseline")
_POLICIES = ("LIFO", "FIFO")


@dataclass(frozen=True, slots=True, kw_only=True)
class AstraSettings:
    """The ``system.json`` settings that are not hardware: how ASTRA-sim schedules collectives.

    ``preferred_dataset_splits``: chunks per collective; ``active_chunks_per_dimension``: chunks
    a network dim serves at once; ``endpoint_delay_ns``: ns per message hand-off;
    ``collective_optimization``: ``localBWAware`` (hierarchical all-reduce) or ``baseline``;
    ``scheduling_policy``: ``LIFO`` or ``FIFO``, the order in which ASTRA-sim serves the chunks
    of collectives that wait for the network; ``compute``: ``roofline`` (ASTRA-sim's roofline
    at the peak times every compute node) or ``kernels`` (each compute node carries the
    analytical per-kernel timer's ``duration_micros`` and the roofline is off,
    :mod:`~stage_explore.astrasim.kernel_times`).
    """

    endpoint_delay_ns: int = 10
    preferred_dataset_splits: int = 4
    active_chunks_per_dimension: int = 1
    collective_optimization: str = "localBWAware"
    scheduling_policy: str = "LIFO"
    compute: str = ROOFLINE

    def __post_init__(self) -> None:
        for name, minimum in (
            ("endpoint_delay_ns", 0),
            ("preferred_dataset_splits", 1),
            ("active_chunks_per_dimension", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(
                    f"ASTRA-sim `{name}` must be an integer >= {minimum}, but got {value!r}"
                )
        if self.collective_optimization not in _OPTIMIZATIONS:
            raise ConfigError(
                f"ASTRA-sim `collective_optimization` must be one of {_OPTIMIZATIONS}, "
                f"but got {self.collective_optimization!r}"
            )
        if self.scheduling_policy not in _POLICIES:
            raise ConfigError(
                f"ASTRA-sim `scheduling_policy` must be one of {_POLICIES}, "
                f"but got {self.scheduling_policy!r}"
            )
        parse_compute(self.compute)

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint_delay_ns": self.endpoint_delay_ns,
            "preferred_dataset_splits": self.preferred_dataset_splits,
            "active_chunks_per_dimension": self.active_chunks_per_dimension,
            "collective_optimization": self.collective_optimization,
            "scheduling_policy": self.scheduling_policy,
            "compute": self.compute,
        }


def astra_config(
    system: System, *, num_gpus: int, dtype: str, settings: AstraSettings = AstraSettings()
) -> AstraConfig:
    """ASTRA-sim's view of ``system`` for a job of ``num_gpus`` ranks, roofline at ``dtype``.

    The system's own algorithm choices are kept for all-reduce, all-gather and reduce-scatter;
    all-to-all is ``direct`` on every dim, one entry per dim. A job of one rank is a one-line
    ConfigError: ASTRA-sim's analytical network exits ("npus_count (1) should be larger than
    1", s24 review, ASTRA-sim 518bd51) before it simulates anything.
    """
    if num_gpus < 2:
        raise ConfigError(
            f"ASTRA-sim's analytical network needs at least 2 NPUs (it exits with 'npus_count "
            f"(1) should be larger than 1'), but the job has {num_gpus} GPU; a single GPU has "
            "no communication to simulate: use the analytical backend"
        )
    config = astra_config_from_system(
        system,
        num_gpus=num_gpus,
        dtype=dtype,
        endpoint_delay_ns=settings.endpoint_delay_ns,
        preferred_dataset_splits=settings.preferred_dataset_splits,
        active_chunks_per_dimension=settings.active_chunks_per_dimension,
        collective_optimization=settings.collective_optimization,
        scheduling_policy=settings.scheduling_policy,
    )
    config = replace(config, all_to_all_implementation=(AstraAlgorithm.DIRECT,) * len(config.dims))
    if settings.compute == KERNELS:  # the nodes carry their durations (kernel_times.py)
        config = replace(config, roofline_enabled=False)
    if config.total_npus != num_gpus:  # astra_dims_from_system folds exactly or raises
        raise ConfigError(
            f"network.yml would describe {config.total_npus} NPUs for a job of {num_gpus} ranks "
            f"on system {system.name!r}"
        )
    return config


def _plain(value: Any) -> Any:
    """Integral floats as ints (``2039`` rather than ``2039.0``), as in ASTRA-sim's examples."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def system_json_text(config: AstraConfig) -> str:
    """The ``system.json`` text for ``config``."""
    data = {key: _plain(value) for key, value in config.system_json().items()}
    return json.dumps(data, indent=2) + "\n"


def memory_json_text() -> str:
    """The ``memory.json`` text: no remote memory."""
    return json.dumps(MEMORY_JSON) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class AstraInputs:
    """The files of one ASTRA-sim run, all in ``directory``."""

    directory: Path
    world_size: int
    config: AstraConfig
    groups: dict[str, tuple[int, ...]]

    @property
    def workload_prefix(self) -> Path:
        """``--workload-configuration``: ASTRA-sim opens ``<prefix>.<rank>.et``."""
        return self.directory / WORKLOAD_PREFIX

    @property
    def system_json(self) -> Path:
        return self.directory / SYSTEM_FILE

    @property
    def network_yml(self) -> Path:
        return self.directory / NETWORK_FILE

    @property
    def memory_json(self) -> Path:
        return self.directory / MEMORY_FILE

    @property
    def comm_group_json(self) -> Path:
        return self.directory / COMM_GROUP_FILE

    @property
    def logging_folder(self) -> Path:
        return self.directory / LOGGING_FOLDER

    @property
    def logging_configuration(self) -> Path:
        """``--logging-configuration``: the result loggers made synchronous (:mod:`.logconfig`)."""
        return self.directory / LOGGING_CONFIG_FILE

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "world_size": self.world_size,
            "groups": len(self.groups),
            "config": self.config.to_dict(),
        }


def write_inputs(
    programs: ProgramSet,
    system: System,
    directory: Path | str,
    *,
    dtype: str,
    settings: AstraSettings = AstraSettings(),
    seconds: Mapping[int, Mapping[int, float]] | None = None,
    available: Callable[[], int | None] | None = None,
) -> AstraInputs:
    """Write every input file of one run of ``programs`` on ``system`` into ``directory``.

    Under the compute policy ``kernels`` every compute node carries its ``duration_micros``
    from ``seconds`` (per stage, by node id; default: :func:`~stage_explore.astrasim.
    kernel_times.kernel_seconds` with the analytical backend's defaults).

    With ``available`` (the memory this host can give the run, e.g. :func:`~stage_explore.
    astrasim.memory.available_bytes`), the traces are encoded first and their exact size
    counted before any file is written: a run whose memory estimate exceeds ``available()``
    is refused (:class:`~stage_explore.astrasim.memory.HostMemoryError`) and nothing is
    written."""
    world_size = programs.workload.world_size
    config = astra_config(system, num_gpus=world_size, dtype=dtype, settings=settings)
    directory = Path(directory).absolute()
    classes, table = class_columns(programs)
    if settings.compute == KERNELS:
        if seconds is None:
            seconds = kernel_seconds(programs, system)
        classes = with_durations(classes, programs, seconds)
    traces = compile_class_columns(classes, table)
    if available is not None:
        check_estimate(world_size, traces.byte_count(), available)
    written = traces.write(directory, WORKLOAD_PREFIX)
    inputs = AstraInputs(
        directory=directory, world_size=world_size, config=config, groups=dict(written.groups)
    )
    try:
        inputs.system_json.write_text(system_json_text(config))
        inputs.network_yml.write_text(config.network_yml())
        inputs.memory_json.write_text(memory_json_text())
        inputs.logging_folder.mkdir(exist_ok=True)
        write_logging_config(directory)
    except OSError as error:
        raise ConfigError(f"cannot write ASTRA-sim inputs into {directory}: {error}") from error
    return inputs
