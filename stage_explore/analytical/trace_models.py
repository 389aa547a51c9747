"""Timing models of the trace simulator (:func:`~stage_explore.analytical.tracesim.simulate`):
what each node of a rank's trace costs.

Holds :class:`BaseTimingModel` — the contract — and its implementations:
:class:`AstraTimingModel` (integer ns, reproduces ASTRA-sim's congestion-unaware analytical run),
:class:`AlphaBetaTimingModel` (float seconds, roofline with efficiencies and α–β) and
:class:`InstructionTimingModel` (the analytical backend's per-instruction costs on a block's
trace, :func:`instruction_trace`). The analytical backend's costs on a whole step's trace are
:class:`~stage_explore.analytical.trace_mode.ProgramTimingModel`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from stage_core.chakra.mapping import emitted_num_ops
from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.astra_collectives import (
    astra_collective_member_ns,
    astra_point_to_point_ns,
    astra_skewed_collective_ns,
)
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
)
from stage_explore.system.astra import AstraConfig
from stage_explore.system.model import System

T = TypeVar("T", int, float)


class BaseTimingModel(abc.ABC, Generic[T]):
    """What each node of a trace costs.

    Contract:
        ``compute`` is the duration of a compute node; ``collective`` maps every member of
        ``group`` (sorted global ranks) to its duration from the common start;
        ``point_to_point`` is the time from a send's issue to its arrival, of which
        ``point_to_point_flight`` (by default zero) is the last part, after the send has ended:
        the message's flight, which holds neither rank. Durations are in the
        model's unit (:class:`AstraTimingModel`: int ns; :class:`AlphaBetaTimingModel`: float
        s) and never negative. Bad input raises :class:`~stage_core.errors.ConfigError`.
        ``zero`` is the model's zero duration.
    """

    zero: T

    def prepare(self, world: tuple[int, ...]) -> None:
        """Check the ranks that have traces before a simulation (by default: nothing)."""

    @abc.abstractmethod
    def compute(self, node: TraceNode) -> T:
        """Duration of the compute node ``node``."""

    @abc.abstractmethod
    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> Mapping[int, T]:
        """Duration of a collective for every member of ``group``."""

    @abc.abstractmethod
    def point_to_point(self, source: int, destination: int, size_bytes: int) -> T:
        """Time from the issue of a send to the arrival of its message."""

    def point_to_point_flight(self, source: int, destination: int, size_bytes: int) -> T:
        """How long a message flies after its send has ended (the send lasts
        :meth:`point_to_point`; the message arrives this much later): by default ``zero``, a
        send holds its rank until its message arrives (ASTRA-sim)."""
        return self.zero

    def skewed_collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...], issued: dict[int, T]
    ) -> Mapping[int, T] | None:
        """Each member's finish (absolute) when the members issued the collective at the times
        ``issued``, or None to start every member at the last issue (by default: None)."""
        return None

    def beside_share(self, compute: TraceNode, collective: TraceNode) -> float:
        """The share of its rate the GPU compute node ``compute`` loses while the collective
        node ``collective`` runs on the same rank (the SMs and HBM bandwidth its NCCL kernels
        hold: :mod:`~stage_explore.analytical.contention`), in [0, 1): by default 0.0, the
        collective takes nothing from compute. A model that returns a share must time in
        float seconds (the contended node's end is a quotient)."""
        return 0.0

    def node_collective(self, node: TraceNode, group: tuple[int, ...]) -> Mapping[int, T]:
        """Duration of the collective ``node`` for every member of ``group``: by default
        :meth:`collective` of its kind and bytes; a model that costs each node on its own
        (:class:`InstructionTimingModel`) overrides it."""
        assert node.collective is not None
        return self.collective(node.collective, node.comm_bytes, group)


class AstraTimingModel(BaseTimingModel[int]):
    """ASTRA-sim's congestion-unaware analytical timing, in integer ns.

    Compute (roofline): ``floor(num_ops / min(peak, local_mem_bw · num_ops/tensor_size) · 1e9)``
    with peak in FLOP/s and local_mem_bw in bytes/s; a node with ``tensor_bytes == 0`` is
    skipped (0 ns), as ASTRA-sim skips it. A node with no FLOPs is timed with ``num_ops`` 1, as
    STAGE writes it (:func:`stage_core.chakra.mapping.emitted_num_ops`): its memory time.
    """

    zero = 0

    def __init__(self, config: AstraConfig) -> None:
        if not config.roofline_enabled:
            raise ConfigError(
                "the trace simulator needs `roofline-enabled` (nodes carry no durations)"
            )
        self.config = config
        self._peak_flops_per_s = config.peak_perf_tflops * 1e12
        self._memory_bytes_per_s = config.local_mem_bw_gbps * 1e9
        self._collectives: dict[tuple[CollectiveKind, int, tuple[int, ...]], dict[int, int]] = {}

    def prepare(self, world: tuple[int, ...]) -> None:
        if world != tuple(range(self.config.total_npus)):
            raise ConfigError(
                f"ASTRA-sim runs one trace per NPU: the network has {self.config.total_npus} "
                f"ranks, but traces were given for {len(world)} ranks ({world[0]}..{world[-1]})"
            )

    def compute(self, node: TraceNode) -> int:
        if node.tensor_bytes == 0:
            return 0
        num_ops = emitted_num_ops(node.flops, node.tensor_bytes)
        intensity = num_ops / node.tensor_bytes
        performance = min(self._memory_bytes_per_s * intensity, self._peak_flops_per_s)
        return int(num_ops / performance * 1e9)

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> dict[int, int]:
        key = (kind, size_bytes, group)
        if key not in self._collectives:
            self._collectives[key] = astra_collective_member_ns(
                self.config, kind, size_bytes, group
            )
        return self._collectives[key]

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> int:
        return astra_point_to_point_ns(self.config, source, destination, size_bytes)

    def skewed_collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...], issued: dict[int, int]
    ) -> dict[int, int] | None:
        members = None if len(group) == self.config.total_npus else group
        return astra_skewed_collective_ns(self.config, kind, size_bytes, members, issued)


class AlphaBetaTimingModel(BaseTimingModel[float]):
    """The fast default: roofline with efficiencies for compute, α–β for communication (s)."""

    zero = 0.0

    def __init__(self, system: System, dtype: str = "bf16") -> None:
        system.accelerator.peak(dtype)  # fail early on an unknown dtype
        self.system = system
        self.dtype = dtype
        self._collectives: dict[tuple[CollectiveKind, int, tuple[int, ...]], dict[int, float]] = {}

    def compute(self, node: TraceNode) -> float:
        return self.system.accelerator.compute_time_s(node.flops, node.tensor_bytes, self.dtype)

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> dict[int, float]:
        key = (kind, size_bytes, group)
        if key not in self._collectives:
            duration = alpha_beta_collective_s(self.system, kind, size_bytes, group)
            self._collectives[key] = dict.fromkeys(group, duration)
        return self._collectives[key]

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> float:
        return alpha_beta_point_to_point_s(self.system, source, destination, size_bytes)


def instruction_trace(instrs: Sequence[Instr], group: tuple[int, ...]) -> list[TraceNode]:
    """A block's instructions as one rank's trace (rank ``group[0]``): node id = instruction
    index, the instruction's dependencies as data dependencies, every collective over
    ``group`` (the rank standing for its groups, as under a local collective start)."""
    nodes = []
    for index, instr in enumerate(instrs):
        if instr.kind == "ring":
            raise ConfigError(
                f"instruction {index} {instr.name!r} is a ring exchange: a one-rank trace has "
                "no peer to exchange with"
            )
        if instr.collective is not None:
            node = TraceNode(
                index, instr.name, NodeKind.COLL, data_deps=instr.deps,
                collective=instr.collective, comm_bytes=instr.comm_bytes, group=group,
            )  # fmt: skip
        else:
            node = TraceNode(
                index, instr.name, NodeKind.COMP, data_deps=instr.deps, flops=instr.flops,
                tensor_bytes=instr.bytes_read + instr.bytes_written,
            )  # fmt: skip
        nodes.append(node)
    return nodes


class InstructionTimingModel(BaseTimingModel[float]):
    """The analytical cost model on a trace of instructions (:func:`instruction_trace`: node id
    = instruction index): ``compute_s`` and ``comm_s`` are the timers the analytical backend
    gives :func:`~stage_explore.analytical.blocktime.time_block` (per-kernel compute from the
    instruction's operands, α–β collectives over the network dims of the instruction's group),
    so the trace simulator times a block with the backend's per-kernel costs. Every member of a
    collective's group takes the instruction's time. A node that is not its instruction (another
    name at its id) is a ConfigError."""

    zero = 0.0

    def __init__(
        self,
        instrs: Sequence[Instr],
        compute_s: Callable[[Instr], float],
        comm_s: Callable[[Instr], float],
    ) -> None:
        self.instrs = tuple(instrs)
        self._compute_s = compute_s
        self._comm_s = comm_s

    def _instr(self, node: TraceNode) -> Instr:
        if not 0 <= node.id < len(self.instrs) or self.instrs[node.id].name != node.name:
            raise ConfigError(
                f"node {node.id} {node.name!r} is not an instruction of this model's block "
                f"({len(self.instrs)} instructions)"
            )
        return self.instrs[node.id]

    def compute(self, node: TraceNode) -> float:
        return self._compute_s(self._instr(node))

    def node_collective(self, node: TraceNode, group: tuple[int, ...]) -> dict[int, float]:
        return dict.fromkeys(group, self._comm_s(self._instr(node)))

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> Mapping[int, float]:
        raise ConfigError("InstructionTimingModel times collective nodes, not kinds and sizes")

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> float:
        raise ConfigError("InstructionTimingModel times one rank's block: no point-to-point")
