"""The ASTRA-sim backend's compute policy ``kernels``: each compute node's duration from the
analytical per-kernel timer.

Under the default policy ``roofline`` ASTRA-sim times every Chakra COMP node with its roofline
(``num_ops`` at ``peak-perf``, ``tensor_size`` at ``local-mem-bw``, no efficiency). Under
``kernels`` each COMP node carries ``duration_micros`` (Chakra ``Node`` field 7) and
``system.json`` sets ``roofline-enabled`` 0, so ASTRA-sim replays the durations
(``Workload::issue_comp`` → ``issue_replay`` in astra-sim 518bd51
``astra-sim/workload/Workload.cc``: ``runtime = duration_micros * 1000`` ns, and 1 ns for a
node whose ``duration_micros`` is 0). ``num_ops`` and ``tensor_size`` are written as before.

A node's seconds are what the analytical backend's per-kernel timer gives the instruction it
comes from (:attr:`~stage_core.lower.program_node.ProgramNode.source`): a block phase's
instruction by that phase's timer (:meth:`~stage_explore.analytical.trace_costs.StageCosts.
program`, built on :class:`~stage_explore.analytical.kernels.KernelTimer`: FP8 only on the
recipe's GEMMs, attention by its kernel and grid, memory-bound kernels at the achieved HBM
bandwidth), the optimizer by the backend's optimizer time. The trace's nodes are the lowering's
kernels as bound: element-wise chains the analytical backend fuses under a framework's
``fused_elementwise`` stay separate nodes here, each timed as its own kernel, and the seconds a
framework's timing adds beside a phase's instructions are not charged.

Microseconds are coarse for small kernels, so durations are rounded with the residual carried:
along a stage's trace in node order, node *i* gets ``round(T_i) - round(T_{i-1})`` µs, where
``T_i`` is the exact cumulative time (integer ns) of the first *i* nodes. A rank's replayed
total is then its exact kernel time rounded to the microsecond (within 500 ns), plus 1 ns for
each node that rounds to 0 µs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from stage_core.chakra.mapping import emitted_num_ops
from stage_core.chakra.writer import ClassColumns
from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import ProgramSet
from stage_core.lower.program_node import OPTIMIZER
from stage_core.trace import NodeKind, TraceNode
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.trace_costs import StageCosts
from stage_explore.analytical.trace_mode import trace_params, trace_point
from stage_explore.system.model import System

#: The compute policies of the ASTRA-sim backend (backend option ``compute``).
ROOFLINE, KERNELS = "roofline", "kernels"
COMPUTE_POLICIES = (ROOFLINE, KERNELS)

#: ASTRA-sim's replay time of a node with ``duration_micros`` 0 (``issue_replay``: 1 ns).
ZERO_DURATION_NS = 1


def parse_compute(value: object) -> str:
    """The compute policy ``value`` names; a one-line ConfigError otherwise."""
    if value not in COMPUTE_POLICIES:
        raise ConfigError(
            f"ASTRA-sim `compute` must be one of {COMPUTE_POLICIES}, but got {value!r}"
        )
    return str(value)


def kernel_seconds(
    programs: ProgramSet, system: System, backend: AnalyticalBackend | None = None
) -> dict[int, dict[int, float]]:
    """Per pipeline stage, each COMP node's seconds (by node id) as ``backend`` (default: the
    analytical backend with its defaults) times the instruction it comes from."""
    backend = AnalyticalBackend() if backend is None else backend
    point = trace_point(backend, programs.workload, system)
    seconds: dict[int, dict[int, float]] = {}
    for stage_program in programs.stages:
        costs = StageCosts(backend, point, stage_program.stage, stage_program)
        params: int | None = None
        by_id: dict[int, float] = {}
        for item in stage_nodes(programs, stage_program):
            node = item.node
            if node.kind is not NodeKind.COMP:
                continue
            if item.source is None:
                raise ConfigError(f"compute node {node.id} {node.name!r} has no source to time")
            kind, phase, index = item.source
            if phase == OPTIMIZER:
                if params is None:
                    params = trace_params(backend, point, programs, stage_program)
                by_id[node.id] = backend.optimizer_s(point, params)
            elif phase in ("fwd", "bwd"):
                block = point.blocks[kind]
                instrs = block.fwd if phase == "fwd" else block.bwd
                instr = _instr(instrs, index, node)
                by_id[node.id] = costs.program(kind, phase)[0].compute_s(instr)
            else:
                raise ConfigError(
                    f"compute node {node.id} {node.name!r} of phase {phase!r}: the kernel "
                    "model has no time for it"
                )
        seconds[stage_program.stage] = by_id
    return seconds


def _instr(instrs: Sequence[Instr], index: int, node: TraceNode) -> Instr:
    if not 0 <= index < len(instrs) or not node.name.endswith(f".{instrs[index].name}"):
        raise ConfigError(
            f"compute node {node.id} {node.name!r} is not instruction {index} of its block"
        )
    return instrs[index]


def micros_with_residual(program: Sequence[TraceNode], seconds: Mapping[int, float]) -> list[int]:
    """Whole microseconds for each COMP node of ``program`` (in order), the rounding residual
    carried: the running sum of the result is the running exact sum (integer ns) rounded to
    the microsecond, half up."""
    micros = []
    exact_ns = written = 0
    for node in program:
        if node.kind is not NodeKind.COMP:
            continue
        if node.id not in seconds:
            raise ConfigError(f"compute node {node.id} {node.name!r} has no kernel time")
        exact_ns += round(seconds[node.id] * 1e9)
        target = (exact_ns + 500) // 1000
        micros.append(target - written)
        written = target
    return micros


def with_durations(
    classes: Sequence[ClassColumns],
    programs: ProgramSet,
    seconds: Mapping[int, Mapping[int, float]],
) -> list[ClassColumns]:
    """``classes`` (one per pipeline stage, :func:`stage_core.lower.emit.class_columns`) with
    every COMP node's ``duration_micros`` set (:func:`micros_with_residual`)."""
    if len(classes) != len(programs.stages):
        raise ConfigError(f"{len(classes)} rank classes for {len(programs.stages)} stages")
    result = []
    for rank_class, stage_program in zip(classes, programs.stages, strict=True):
        program = list(rank_class.program)
        micros = iter(micros_with_residual(program, seconds[stage_program.stage]))
        timed = [
            replace(node, duration_micros=next(micros)) if node.kind is NodeKind.COMP else node
            for node in program
        ]
        result.append(replace(rank_class, program=timed))
    return result


def replayed_ns(program: Sequence[TraceNode]) -> int:
    """The GPU time ASTRA-sim replays for ``program``'s COMP nodes with the roofline off:
    ``duration_micros`` × 1000 ns each, 1 ns for a node of 0 µs, nothing for a node it skips
    (neither duration nor FLOPs, as written: :func:`~stage_core.chakra.mapping.emitted_num_ops`)."""
    total = 0
    for node in program:
        if node.kind is not NodeKind.COMP:
            continue
        if node.duration_micros > 0:
            total += node.duration_micros * 1000
        elif emitted_num_ops(node.flops, node.tensor_bytes) > 0:
            total += ZERO_DURATION_NS
    return total
