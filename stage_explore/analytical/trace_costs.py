"""One pipeline stage's costs in the trace mode: :class:`StageCosts` gives each node of a
stage's trace the analytical backend's time for the instruction it comes from — the block
phases as :meth:`~stage_explore.analytical.costing.BlockCosting._phase_program` runs them (its
programs and timers), the ring-attention steps and messages (Transformer Engine's and torch's
``context_parallel``'s, :mod:`~stage_explore.analytical.trace_ring`), the FP8 amax reduction at a
pass's end (:func:`stage_core.lower.nodes.stage_nodes`' ``pass_end``) and the communication
spans of a block's collectives. Used by :mod:`~stage_explore.analytical.trace_mode`, which runs
the step."""

from __future__ import annotations

from dataclasses import replace

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import (
    StageProgram,
)
from stage_core.lower.program_node import PassEnd
from stage_core.trace import CollectiveKind
from stage_explore.analytical.amax_costing import (
    AMAX_BACKWARD_ENTRIES,
    AMAX_BYTES,
    AMAX_FORWARD_ENTRIES,
)
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import time_block
from stage_explore.analytical.costing import PhaseProgram
from stage_explore.analytical.parts import Point
from stage_explore.analytical.trace_ring import RingProgram, ring_program, torch_ring_program


class StageCosts:
    """One pipeline stage's costs as the backend gives them: its rank's group spans, each
    block phase's program and the seconds its timing adds beside the instructions."""

    def __init__(
        self, backend: AnalyticalBackend, point: Point, stage: int, program: StageProgram
    ) -> None:
        self.backend, self.point, self.stage = backend, point, stage
        self.chunks = {chunk.index: chunk for chunk in program.chunks}
        self._amax: dict[int, tuple[Instr, float, float] | None] = {}
        self._spans: dict[tuple[str, ...], object] = {}
        self._programs: dict[tuple[str, str], tuple[PhaseProgram, float, int]] = {}
        self._emitted: dict[tuple[str, str], tuple[RingProgram, int]] = {}
        #: Seconds of one ring-attention message by its bytes (:meth:`ring_message_s`).
        self.messages: dict[int, float] = {}
        parallel = point.workload.parallel
        cp = point.workload.axis_sizes.get("cp", 1)
        self._cp = cp
        ring = str(parallel.cp_style) == "ring"
        torch = backend.framework.cp_merge_fp32  # the levelled mode's precedence
        self._steps = backend.framework.te_cp_overlap and ring and not torch
        #: torch's ``context_parallel`` (its gathers and gradient ring, :func:`~stage_explore.
        #: analytical.trace_ring.torch_ring_program`); a ``ring`` style is emitted as written.
        self._torch = torch and cp > 1 and not ring

    def emitted(self, kind: str, phase: str) -> tuple[RingProgram, int]:
        """The phase's instructions as the trace emits them (ring attention per step under
        ``te_cp_overlap``, :func:`~stage_explore.analytical.trace_ring.ring_program`) and the
        emitted index that takes the seconds the backend adds beside them (-1: none)."""
        key = (kind, phase)
        if key not in self._emitted:
            program, _, last = self.program(kind, phase)
            if self._torch:
                traced = self.backend._cp_traced
                emitted = torch_ring_program(program.instrs, self._cp, traced)
                message_s = self.backend._cp_message(self.point, self.spans(kind))
                for instr in emitted.instrs:
                    if instr.kind == "ring":  # a gradient message (_cp_message's seconds)
                        self._note(instr.comm_bytes, message_s(instr.comm_bytes))
            else:
                emitted = ring_program(program.instrs, self._cp, self._steps)
                for instr in emitted.instrs:
                    if instr.kind == "ring":
                        self.ring_message_s(instr)
            at = max((i for i, o in enumerate(emitted.origin) if o == last), default=-1)
            self._emitted[key] = (emitted, at if last >= 0 else -1)
        return self._emitted[key]

    def ring_message_s(self, ring: Instr) -> float:
        """Seconds of one of ``ring``'s messages to the next cp rank: the backend's α–β ring
        time of one step (:meth:`~stage_explore.analytical.costing_comm.CommCosting.
        _comm_time`, the levelled ring's ``ring_steps`` times this), noted by its bytes."""
        one = replace(ring, ring_steps=1)
        return self._note(
            ring.comm_bytes, self.backend._comm_time(self.point, self.span(ring.axes), one)
        )

    def _note(self, size: int, seconds: float) -> float:
        """Note a ring message's seconds by its bytes (two timings of one size: ConfigError)."""
        known = self.messages.setdefault(size, seconds)
        if known != seconds:
            raise ConfigError(f"stage {self.stage}: two ring messages of {size} bytes")
        return seconds

    def amax(self, chunk: int) -> tuple[Instr, float, float] | None:
        """The chunk's FP8 amax all-reduce (the framework option ``fp8_amax_reduction``) and
        its forward and backward seconds, as the levelled mode charges them after each of
        the chunk's passes (:meth:`~stage_explore.analytical.planning.StagePlanning.
        _fp8_amax_s`: one latency-bound all-reduce over the amax group); None when it times
        none (the option off, not FP8 delayed scaling, a group of one, no FP8 linear layer)."""
        if chunk not in self._amax:
            self._amax[chunk] = self._amax_of(chunk)
        return self._amax[chunk]

    def _amax_of(self, chunk: int) -> tuple[Instr, float, float] | None:
        backend, point = self.backend, self.point
        axes = backend._fp8_amax_axes(point)
        if not axes:
            return None
        counts: dict[str, int] = {}
        for block in self.chunks[chunk].blocks:
            counts[block.kind] = counts.get(block.kind, 0) + 1
        runs = tuple(counts.items())
        forward_s, backward_s = backend._fp8_amax_s(point, runs, {axes: self.span(axes)})
        if (forward_s, backward_s) == (0.0, 0.0):
            return None
        # bytes for the trace's readers (the seconds are the backend's, by phase): forward's
        size = (
            AMAX_BYTES
            * AMAX_FORWARD_ENTRIES
            * sum(n * len(linear_weights(point.blocks[k])) for k, n in runs if fp8_block(k))
        )
        instr = Instr(
            "fp8_amax_all_reduce", "fwd", "comm", collective=CollectiveKind.ALL_REDUCE,
            axes=axes, comm_bytes=size,
        )  # fmt: skip
        return instr, forward_s, backward_s

    def pass_end(self) -> PassEnd:
        """The instruction the trace emits at the end of a chunk's pass (:meth:`amax`)."""

        def emit(chunk: int, backward: bool) -> Instr | None:
            found = self.amax(chunk)
            if found is None:
                return None
            instr = found[0]
            if backward:  # TE's backward amaxes: output and input gradients
                size = instr.comm_bytes // AMAX_FORWARD_ENTRIES * AMAX_BACKWARD_ENTRIES
                instr = replace(instr, phase="bwd", comm_bytes=size)
            return instr

        return emit

    def span(self, axes: tuple[str, ...]) -> object:
        if axes not in self._spans:
            self._spans[axes] = self.backend._spans(self.point, axes)[self.stage]
        return self._spans[axes]

    def spans(self, kind: str) -> dict[tuple[str, ...], object]:
        """The spans a block kind's timing reads (its collectives' and ZeRO's axes)."""
        parts = self.backend._kind(self.point, kind)
        return {axes: self.span(axes) for axes in parts.cost_axes}

    def program(self, kind: str, phase: str) -> tuple[PhaseProgram, float, int]:
        """The phase's program, the seconds the backend adds beside it, and the index of its
        last compute instruction (-1 if none)."""
        key = (kind, phase)
        if key not in self._programs:
            spans = self.spans(kind)
            program = self.backend._phase_program(self.point, kind, phase, spans)
            waits = self.backend.policy.collectives_wait_for_issued_compute
            plain = time_block(program.instrs, program.compute_s, program.comm_s, waits)
            timed = self.backend._block_timing(self.point, kind, phase, spans)
            added_s = timed.duration_s - plain.duration_s
            last = max(
                (
                    i
                    for i, x in enumerate(program.instrs)
                    if x.collective is None and x.kind != "ring"
                ),
                default=-1,
            )
            if added_s > 0.0 and last < 0:
                raise ConfigError(f"block {kind!r} {phase}: extra seconds but no compute node")
            self._programs[key] = (program, max(0.0, added_s), last)
        return self._programs[key]
