"""ASTRA-sim's view of a system: its network dims and system settings, both ways.

Holds:

- :class:`AstraTopology`, :class:`AstraAlgorithm` — ASTRA-sim's names (``Ring``, ``ring`` …);
- :class:`AstraDim` — one network dim as ASTRA-sim's analytical network reads it (bandwidth in
  GB/s with GB = 2^30 bytes, latency in ns per link), with its hop count and message time;
- :class:`AstraConfig` — the dims plus the ``system.json`` settings that change timing;
- :func:`astra_config_from_files` — from an ASTRA-sim ``system.json`` and ``network.yml``;
- :func:`astra_config_from_system` — from a :class:`~stage_explore.system.model.System`, so the
  analytical and the ASTRA-sim backends share one description;
- :meth:`AstraConfig.network_yml` and :meth:`AstraConfig.system_json` — the files back.
Message time follows ASTRA-sim's congestion-unaware network (``astra-network-analytical``):
``n(m) = floor(h·L + m/B)`` with ``B = bw·2^30/1e9`` bytes/ns, ``h`` hops (the shorter way
round a bidirectional ring, 2 through a switch, 1 fully connected), in IEEE double arithmetic
evaluated in the same order so that results agree to the nanosecond.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind
from stage_explore.system.model import System, Topology


class AstraTopology(StrEnum):
    """ASTRA-sim's topology names; members share the names of :class:`Topology`'s."""

    RING = "Ring"
    SWITCH = "Switch"
    FULLY_CONNECTED = "FullyConnected"


class AstraAlgorithm(StrEnum):
    """ASTRA-sim's algorithm names; members share the names of :class:`CollectiveAlgorithm`'s."""

    RING = "ring"
    DIRECT = "direct"
    HALVING_DOUBLING = "halvingDoubling"


_SYSTEM_JSON_KEYS = frozenset({
    "scheduling-policy", "collective-optimization", "endpoint-delay",
    "active-chunks-per-dimension", "preferred-dataset-splits", "all-reduce-implementation",
    "all-gather-implementation", "reduce-scatter-implementation", "all-to-all-implementation",
    "local-mem-bw", "roofline-enabled", "peak-perf", "L", "o", "g", "G", "model-shared-bus",
    "local-reduction-delay", "trace-enabled", "replay-only", "intra-dimension-scheduling",
    "inter-dimension-scheduling",
})  # fmt: skip
_NETWORK_YML_KEYS = ("topology", "npus_count", "bandwidth", "latency")


@dataclass(frozen=True, slots=True, kw_only=True)
class AstraDim:
    """One network dim in ASTRA-sim's units."""

    topology: AstraTopology
    npus: int
    bandwidth_gbps: float
    latency_ns: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "topology", AstraTopology(self.topology))
        if self.npus < 1:
            raise ConfigError(f"ASTRA-sim dim `npus_count` must be >= 1, but got {self.npus}")
        if not self.bandwidth_gbps > 0:
            raise ConfigError(
                f"ASTRA-sim dim `bandwidth` must be > 0, but got {self.bandwidth_gbps}"
            )
        if not self.latency_ns >= 0:
            raise ConfigError(f"ASTRA-sim dim `latency` must be >= 0, but got {self.latency_ns}")

    @property
    def bytes_per_ns(self) -> float:
        return self.bandwidth_gbps * (1 << 30) / 1_000_000_000

    def hops(self, source: int, destination: int) -> int:
        """Links crossed between local ids ``source`` and ``destination`` of this dim."""
        if self.topology is AstraTopology.SWITCH:
            return 2
        if self.topology is AstraTopology.FULLY_CONNECTED:
            return 1
        clockwise = (destination - source) % self.npus
        return min(clockwise, self.npus - clockwise)

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "topology": self.topology.value,
        }

    def message_ns(self, size_bytes: int, hops: int) -> int:
        """``floor(hops·latency + size/bandwidth)``, as ASTRA-sim computes it."""
        return int(hops * self.latency_ns + size_bytes / self.bytes_per_ns)


@dataclass(frozen=True, slots=True, kw_only=True)
class AstraConfig:
    """The inputs of ASTRA-sim's congestion-unaware analytical timing.

    ``implementations`` hold one algorithm per dim for each collective kind (a shorter list
    makes ASTRA-sim ignore the remaining dims for that kind, and so does this model).
    ``local_mem_bw_gbps`` is in GB/s = bytes/ns; ``peak_perf_tflops`` in TFLOP/s.
    """

    dims: tuple[AstraDim, ...]
    all_reduce_implementation: tuple[AstraAlgorithm, ...]
    all_gather_implementation: tuple[AstraAlgorithm, ...]
    reduce_scatter_implementation: tuple[AstraAlgorithm, ...]
    all_to_all_implementation: tuple[AstraAlgorithm, ...]
    local_mem_bw_gbps: float
    peak_perf_tflops: float = 0.0
    roofline_enabled: bool = True
    endpoint_delay_ns: int = 10
    active_chunks_per_dimension: int = 1
    preferred_dataset_splits: int = 1
    collective_optimization: str = "localBWAware"
    scheduling_policy: str = "LIFO"

    def __post_init__(self) -> None:
        if self.scheduling_policy not in ("LIFO", "FIFO"):
            raise ConfigError(
                f"`scheduling-policy` must be LIFO or FIFO, but got {self.scheduling_policy!r}"
            )
        if not self.dims:
            raise ConfigError("ASTRA-sim config needs at least one network dim")
        if self.collective_optimization not in ("localBWAware", "baseline"):
            raise ConfigError(
                "`collective-optimization` must be localBWAware or baseline, "
                f"but got {self.collective_optimization!r}"
            )
        for name, minimum in (
            ("endpoint_delay_ns", 0),
            ("active_chunks_per_dimension", 1),
            ("preferred_dataset_splits", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(
                    f"ASTRA-sim `{name}` must be an integer >= {minimum}, got {value!r}"
                )
        if not self.local_mem_bw_gbps > 0:
            raise ConfigError(f"`local-mem-bw` must be > 0, but got {self.local_mem_bw_gbps}")
        if self.roofline_enabled and not self.peak_perf_tflops > 0:
            raise ConfigError(f"`peak-perf` must be > 0 with roofline, got {self.peak_perf_tflops}")

    @property
    def total_npus(self) -> int:
        return math.prod(dim.npus for dim in self.dims)

    def implementations(self, kind: CollectiveKind) -> tuple[AstraAlgorithm, ...]:
        implementations: tuple[AstraAlgorithm, ...] = getattr(self, f"{kind.value}_implementation")
        return implementations

    def network_yml(self) -> str:
        """The ``network.yml`` text ASTRA-sim reads."""
        rows = {
            "topology": ", ".join(dim.topology.value for dim in self.dims),
            "npus_count": ", ".join(str(dim.npus) for dim in self.dims),
            "bandwidth": ", ".join(repr(float(dim.bandwidth_gbps)) for dim in self.dims),
            "latency": ", ".join(repr(float(dim.latency_ns)) for dim in self.dims),
        }
        return "".join(f"{key}: [ {value} ]\n" for key, value in rows.items())

    def system_json(self) -> dict[str, Any]:
        """The ``system.json`` content ASTRA-sim reads."""
        return {
            "scheduling-policy": self.scheduling_policy,
            "endpoint-delay": self.endpoint_delay_ns,
            "active-chunks-per-dimension": self.active_chunks_per_dimension,
            "preferred-dataset-splits": self.preferred_dataset_splits,
            **{
                f"{kind.value.replace('_', '-')}-implementation": [
                    algorithm.value for algorithm in self.implementations(kind)
                ]
                for kind in CollectiveKind
            },
            "collective-optimization": self.collective_optimization,
            "local-mem-bw": self.local_mem_bw_gbps,
            "roofline-enabled": int(self.roofline_enabled),
            "peak-perf": self.peak_perf_tflops,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"network_yml": self.network_yml(), "system_json": self.system_json()}


def _algorithms(values: Any, key: str, source: str) -> tuple[AstraAlgorithm, ...]:
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ConfigError(f"{source}: key `{key}` must be a list of strings, but got {values!r}")
    try:
        return tuple(AstraAlgorithm(value) for value in values)
    except ValueError:
        known = ", ".join(a.value for a in AstraAlgorithm)
        raise ConfigError(
            f"{source}: key `{key}` has an unsupported algorithm in {values!r}; supported: {known}"
        ) from None


def _parse_system_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: cannot read ASTRA-sim system.json: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: cannot read ASTRA-sim system.json: not UTF-8 text (byte "
            f"{error.object[error.start]:#04x} at offset {error.start})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, but got {type(data).__name__}")
    for key in data:
        if key not in _SYSTEM_JSON_KEYS:
            raise ConfigError(f"{path}: unknown key `{key}`; expected ASTRA-sim system keys")
    for key in ("collective-optimization", "preferred-dataset-splits", "local-mem-bw"):
        if key not in data:
            raise ConfigError(f"{path}: missing key `{key}` (ASTRA-sim needs it)")
    if data.get("model-shared-bus", 0) not in (0, False):
        raise ConfigError(
            f"{path}: key `model-shared-bus` must be 0 (the shared bus is not modelled)"
        )
    for key, allowed in (
        ("intra-dimension-scheduling", ("FIFO",)),
        ("inter-dimension-scheduling", ("baseline", "ascending")),
    ):
        if key in data and data[key] not in allowed:
            raise ConfigError(
                f"{path}: key `{key}` must be one of {allowed}, but got {data[key]!r}"
            )
    return data


def _parse_network_yml(path: Path) -> dict[str, list[str]]:
    """The flat ``key: [a, b]`` (or block ``- a`` list) YAML that ASTRA-sim's network uses."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ASTRA-sim network.yml: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: cannot read ASTRA-sim network.yml: not UTF-8 text (byte "
            f"{error.object[error.start]:#04x} at offset {error.start})"
        ) from None
    values: dict[str, list[str]] = {}
    current: str | None = None
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].rstrip()
        if not text.strip():
            continue
        item = re.fullmatch(r"\s*-\s*(.+)", text)
        if item and current is not None:
            values[current].append(item.group(1).strip().strip("'\""))
            continue
        match = re.fullmatch(r"([A-Za-z_][\w-]*)\s*:\s*(.*)", text)
        if match is None:
            raise ConfigError(f"{path}:{number}: cannot read line {line.strip()!r}")
        key, raw = match.group(1), match.group(2)
        if key not in _NETWORK_YML_KEYS:
            raise ConfigError(
                f"{path}:{number}: unknown key `{key}`; "
                f"expected one of: {', '.join(_NETWORK_YML_KEYS)}"
            )
        if raw and not (raw.startswith("[") and raw.endswith("]")):
            raise ConfigError(f"{path}:{number}: key `{key}` must be a list like [ a, b ]")
        values[key] = [item.strip().strip("'\"") for item in raw[1:-1].split(",") if item.strip()]
        current = None if raw else key
    for key in _NETWORK_YML_KEYS:
        if key not in values:
            raise ConfigError(f"{path}: missing key `{key}`")
    return values


def _number(text: str, key: str, source: str) -> float:
    if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text) is None:
        raise ConfigError(f"{source}: key `{key}` must hold numbers, but got {text!r}")
    return float(text)


def astra_config_from_files(system_json: str | Path, network_yml: str | Path) -> AstraConfig:
    """An :class:`AstraConfig` from ASTRA-sim's ``system.json`` and ``network.yml`` files."""
    system_path, network_path = Path(system_json), Path(network_yml)
    system = _parse_system_json(system_path)
    network = _parse_network_yml(network_path)
    counts = {key: len(network[key]) for key in _NETWORK_YML_KEYS}
    if len(set(counts.values())) != 1:
        raise ConfigError(f"{network_path}: the lists must have the same length, but got {counts}")
    dims = []
    for index, topology in enumerate(network["topology"]):
        try:
            astra_topology = AstraTopology(topology)
        except ValueError:
            known = ", ".join(t.value for t in AstraTopology)
            raise ConfigError(
                f"{network_path}: key `topology` entry {topology!r} is not one of {known}"
            ) from None
        npus = network["npus_count"][index]
        if not npus.isdigit():
            raise ConfigError(f"{network_path}: key `npus_count` must hold integers, got {npus!r}")
        dims.append(
            AstraDim(
                topology=astra_topology,
                npus=int(npus),
                bandwidth_gbps=_number(network["bandwidth"][index], "bandwidth", str(network_path)),
                latency_ns=_number(network["latency"][index], "latency", str(network_path)),
            )
        )
    source = str(system_path)

    def algorithms(kind: CollectiveKind) -> tuple[AstraAlgorithm, ...]:
        key = f"{kind.value.replace('_', '-')}-implementation"
        return _algorithms(system.get(key, []), key, source)

    def integer(key: str, default: int) -> int:
        value = system.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: key `{key}` must be an integer, but got {value!r}")
        return value

    try:
        return AstraConfig(
            dims=tuple(dims),
            all_reduce_implementation=algorithms(CollectiveKind.ALL_REDUCE),
            all_gather_implementation=algorithms(CollectiveKind.ALL_GATHER),
            reduce_scatter_implementation=algorithms(CollectiveKind.REDUCE_SCATTER),
            all_to_all_implementation=algorithms(CollectiveKind.ALL_TO_ALL),
            local_mem_bw_gbps=float(system["local-mem-bw"]),
            peak_perf_tflops=float(system.get("peak-perf", 0.0)),
            roofline_enabled=bool(system.get("roofline-enabled", 0)),
            endpoint_delay_ns=integer("endpoint-delay", 10),
            active_chunks_per_dimension=integer("active-chunks-per-dimension", 1),
            preferred_dataset_splits=integer("preferred-dataset-splits", 1),
            collective_optimization=str(system["collective-optimization"]),
            scheduling_policy=str(system.get("scheduling-policy", "LIFO")),
        )
    except (ConfigError, TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {error}") from None


def astra_dims_from_system(system: System, num_gpus: int | None = None) -> tuple[AstraDim, ...]:
    """The system's network dims in ASTRA-sim's units, trimmed to ``num_gpus`` ranks.

    Dims fill from dim 0 outwards: ``num_gpus`` must be a multiple of every filled dim's size,
    and the last dim used may be partly filled (16 GPUs on dims (8, 16384) give (8, 2)).
    Bandwidth becomes GB/s with GB = 2^30; latency becomes ns per link (half a switch message).
    """
    remaining = system.max_gpus if num_gpus is None else num_gpus
    if not 1 <= remaining <= system.max_gpus:
        raise ConfigError(
            f"num_gpus must be in 1..{system.max_gpus} for system {system.name!r}, "
            f"but got {remaining}"
        )
    dims: list[AstraDim] = []
    for dim in system.network:
        if remaining == 1 and dims:
            break
        if remaining >= dim.size and remaining % dim.size:
            raise ConfigError(
                f"num_gpus={num_gpus} does not fill network dim {dim.name!r} of size {dim.size} "
                f"of system {system.name!r}"
            )
        npus = min(dim.size, remaining)
        remaining //= npus
        dims.append(
            AstraDim(
                topology=AstraTopology[dim.topology.name],
                npus=npus,
                bandwidth_gbps=dim.bandwidth_bytes_per_s / (1 << 30),
                # a message between two ranks crosses two links of a switch (up and down)
                latency_ns=dim.latency_s * 1e9 / (2 if dim.topology is Topology.SWITCH else 1),
            )
        )
    return tuple(dims)


def astra_config_from_system(
    system: System,
    *,
    num_gpus: int | None = None,
    dtype: str = "bf16",
    endpoint_delay_ns: int = 10,
    preferred_dataset_splits: int = 4,
    active_chunks_per_dimension: int = 1,
    collective_optimization: str = "localBWAware",
    scheduling_policy: str = "LIFO",
) -> AstraConfig:
    """The ASTRA-sim settings that describe ``system`` (roofline on, at the ``dtype`` peak)."""
    dims = astra_dims_from_system(system, num_gpus)
    used = system.network[: len(dims)]

    def algorithms(kind: CollectiveKind) -> tuple[AstraAlgorithm, ...]:
        return tuple(AstraAlgorithm[dim.algorithms.for_kind(kind).name] for dim in used)

    return AstraConfig(
        dims=dims,
        all_reduce_implementation=algorithms(CollectiveKind.ALL_REDUCE),
        all_gather_implementation=algorithms(CollectiveKind.ALL_GATHER),
        reduce_scatter_implementation=algorithms(CollectiveKind.REDUCE_SCATTER),
        all_to_all_implementation=algorithms(CollectiveKind.ALL_TO_ALL),
        local_mem_bw_gbps=system.accelerator.memory_bandwidth_bytes_per_s / 1e9,
        peak_perf_tflops=system.accelerator.peak(dtype) / 1e12,
        roofline_enabled=True,
        endpoint_delay_ns=endpoint_delay_ns,
        preferred_dataset_splits=preferred_dataset_splits,
        active_chunks_per_dimension=active_chunks_per_dimension,
        collective_optimization=collective_optimization,
        scheduling_policy=scheduling_policy,
    )
