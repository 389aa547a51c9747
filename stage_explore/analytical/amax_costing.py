"""The FP8 amax reductions a chunk waits for, per micro-batch: Transformer Engine's delayed-scaling
global amax all-reduce over Megatron's amax group (``fp8_amax_reduction``) and current scaling's
per-operand tensor-parallel amax all-reduces (``te_current_scaling``), each latency-bound.
:class:`AmaxCosting` adds them to :class:`~stage_explore.analytical.costing.BlockCosting` for
:class:`~stage_explore.analytical.planning.StagePlanning` (moved out of ``planning.py``, s18
split6)."""

from __future__ import annotations

from typing import Any

from stage_core.lower.compact import Runs
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.plans import TP_OUTER, TP_REST
from stage_explore.analytical.collectives import latency_bound_all_reduce_s
from stage_explore.analytical.costing import BlockCosting
from stage_explore.analytical.fp8_gather import amax_reductions, fp8_gathered
from stage_explore.analytical.parts import Point

#: Bytes of one amax entry (fp32) and Transformer Engine's scaling entries per FP8 GEMM in the
#: forward (input, weight, output) and the backward (output gradient, input gradient):
#: transformer_engine/pytorch/module/base.py ``set_meta_tensor`` (``num_fp8_tensors``
#: = 3 × GEMMs forward, 2 × GEMMs backward).
AMAX_BYTES = 4
AMAX_FORWARD_ENTRIES = 3
AMAX_BACKWARD_ENTRIES = 2

#: The mesh axes of Megatron's ``--tp-only-amax-red`` group with context parallelism: tensor
#: parallelism (and its sub-axes under expert tensor parallelism) and context parallelism.
AMAX_TP_CP_AXES = frozenset({"tp", TP_OUTER, TP_REST, "cp"})

#: The group of Transformer Engine's current-scaling amax all-reduces: the layer's
#: ``tp_group`` (``te_current_scaling``).
CS_AMAX_AXES = ("tp",)

#: The breakdown label of the FP8 amax reductions (``exposed_fp8_amax_reduction``).
FP8_AMAX = "fp8_amax_reduction"


class AmaxCosting(BlockCosting):
    """The FP8 amax reductions of a chunk (module docstring)."""

    def _fp8_amax_axes(self, point: Point) -> tuple[str, ...]:
        """The mesh axes of the FP8 amax reduction group (``fp8_amax_reduction``), in mesh
        order and of size > 1; empty when no reduction is timed: the option off, not FP8, a
        recipe other than ``delayed`` (Transformer Engine's global amax buffer is delayed
        scaling's only), or a group of one rank."""
        mode = self.framework.fp8_amax_reduction
        workload = point.workload
        if mode == "off" or point.dtype != "fp8" or workload.parallel.linear_recipe != "delayed":
            return ()
        inside = AMAX_TP_CP_AXES if mode == "tp_cp" else None  # None: all but pp
        sizes = workload.axis_sizes
        return tuple(
            axis
            for axis in workload.mesh.names
            if axis != "pp" and (inside is None or axis in inside) and sizes.get(axis, 1) > 1
        )

    def _fp8_amax_s(self, point: Point, runs: Runs, spans: dict[Any, Any]) -> tuple[float, float]:
        """Seconds per micro-batch of a chunk's FP8 amax reductions (``fp8_amax_reduction``),
        forward and backward: one latency-bound all-reduce each over the group of
        :meth:`_fp8_amax_axes` (:func:`~stage_explore.analytical.collectives.
        latency_bound_all_reduce_s`) of :data:`AMAX_BYTES` per scaling entry — Transformer
        Engine keeps 3 forward entries per FP8 GEMM (input, weight, output) and 2 backward
        (output and input gradients) — for the chunk's FP8 linear layers; (0, 0) when none is
        timed or the chunk has no FP8 linear layer. (TE's global amax buffer holds every FP8
        module of the rank, ``add_fp8_tensors_to_global_buffer``, so each reduction carries
        the other chunks' entries too: a few hundred bytes either way, latency-bound.)"""
        axes = self._fp8_amax_axes(point)
        if not axes:
            return 0.0, 0.0
        linears = sum(
            count * len(linear_weights(point.blocks[kind]))
            for kind, count in runs
            if fp8_block(kind)
        )
        if linears == 0:
            return 0.0, 0.0
        shape, group, _ = spans[axes]

        def seconds(entries: int) -> float:
            size = AMAX_BYTES * entries * linears
            return self._parts.get(  # type: ignore[no-any-return]
                ("amax", point.token, shape, size),
                lambda: latency_bound_all_reduce_s(point.system, size, group),
            )

        return seconds(AMAX_FORWARD_ENTRIES), seconds(AMAX_BACKWARD_ENTRIES)

    def _cs_amax_axes(self, point: Point) -> tuple[str, ...]:
        """:data:`CS_AMAX_AXES` when Transformer Engine's current scaling reduces amaxes over
        the tensor-parallel group (``te_current_scaling``, an FP8 run of the ``tensorwise``
        recipe, tp > 1); empty otherwise."""
        parallel = point.workload.parallel
        if not self.framework.te_current_scaling or point.dtype != "fp8":
            return ()
        if parallel.linear_recipe != "tensorwise" or parallel.tp <= 1:
            return ()
        return CS_AMAX_AXES

    def _cs_amax_s(self, point: Point, runs: Runs, spans: dict[Any, Any]) -> tuple[float, float]:
        """Seconds per micro-batch of a chunk's current-scaling amax all-reduces, forward and
        backward: one latency-bound all-reduce of :data:`AMAX_BYTES` over the tensor-parallel
        group per sequence-parallel operand a Transformer Engine FP8 linear layer gathers
        before its GEMM (:func:`~stage_explore.analytical.fp8_gather.amax_reductions`), each
        waited for on the compute stream between the operand's amax and its cast; (0, 0) when
        none (:meth:`_cs_amax_axes`)."""
        if not self._cs_amax_axes(point):
            return 0.0, 0.0
        gemms = point.workload.parallel.fp8_gemms
        forward = backward = 0
        for kind, count in runs:
            if not fp8_block(kind):
                continue
            block = point.blocks[kind]
            weights = frozenset(weight.name for weight in block.weights)
            instrs = self._timed_instrs(block, weights)
            gathered = fp8_gathered(instrs, weights, gemms, "tensorwise")
            reductions = amax_reductions(gathered)
            forward += count * reductions[0]
            backward += count * reductions[1]
        if forward == backward == 0:
            return 0.0, 0.0
        shape, group, _ = spans[CS_AMAX_AXES]
        each: float = self._parts.get(
            ("cs_amax", point.token, shape),
            lambda: latency_bound_all_reduce_s(point.system, AMAX_BYTES, group),
        )
        return forward * each, backward * each
