"""The memory-bound passes a framework adds to a block's phases, beside its instructions:
gradient accumulation over micro-batches (DeepSpeed's bf16 path; Megatron-Core's DDP hook for
the parameters its fused weight-gradient GEMMs do not cover; FSDP2's unsharded accumulation
under pipeline parallelism), torchao's per-use FP8 weight
casts, FSDP2's copy-in / copy-out kernels, FSDP1's flat-gradient concatenation and autocast's
per-use parameter casts. Each is timed at the achieved HBM bandwidth.

:class:`PhasePasses` is a mixin of :class:`~stage_explore.analytical.costing.BlockCosting` (the
analytical backend owns the memo and the framework profile it reads).
"""

from __future__ import annotations

from stage_core.lower.bind import group_size
from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import FP8_BYTES, fp8_block, linear_weights
from stage_core.lower.memory import unsharded_elements
from stage_core.lower.weightgrad import split_backward
from stage_core.models.layers import is_kept_block
from stage_core.plans import DP_REPLICATE
from stage_explore.analytical.fp8_gathers import fp8_shard_elements, fsdp_float8_gathers
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.framework_costs import (
    FP8_SHARD_AMAX_BYTES,
    FP8_SHARD_CAST_BYTES,
    fsdp1_flat_grad_bytes,
    fsdp2_copy_bytes,
    grad_accumulation_bytes,
    held_accumulation_bytes,
    held_sync_micro_batches,
    weight_amax_known,
    weight_cast_bytes,
)
from stage_explore.analytical.framework_profile import FP32_BYTES, FrameworkProfile
from stage_explore.analytical.no_sync import (
    accumulation_bytes,
    held_elements,
    no_sync_accumulates,
)
from stage_explore.analytical.parts import Memo, Point


class PhasePasses:
    """Seconds of the framework's extra passes per block kind and phase (module docstring)."""

    framework: FrameworkProfile
    _parts: Memo

    def _grad_accumulation_s(self, point: Point, kind: str) -> float:
        """Seconds per micro-batch of adding a block's weight gradients to the buffers that
        accumulate them over the step, a memory-bound pass at the achieved HBM bandwidth
        (:func:`~stage_explore.analytical.framework_costs.grad_accumulation_bytes`). Under ZeRO-2/3
        a micro-batch's gradients are reduce-scattered first and only this rank's partition
        (1/group of each weight's gradient-reduction group) is accumulated; under
        ``pp_unsharded_params`` (ZeRO-3, pp > 1) the unsharded ones are
        (:meth:`_held_accumulation_s`), and under ``fsdp_no_sync_accumulation``
        (:func:`~stage_explore.analytical.no_sync.no_sync_accumulates`) too
        (:func:`~stage_explore.analytical.no_sync.accumulation_bytes`)."""
        workload = point.workload
        if self.framework.pp_unsharded_params and workload.parallel.zero >= 3:
            if workload.parallel.pp > 1:
                return self._held_accumulation_s(point, kind)
        if no_sync_accumulates(self.framework, workload.parallel, workload.micro_batches):
            unsharded = held_elements(self.framework, workload, point.blocks[kind])
            bandwidth = point.system.accelerator.achieved_memory_bandwidth_bytes_per_s
            return unsharded * accumulation_bytes(self.framework, workload) / bandwidth
        per_element = grad_accumulation_bytes(
            self.framework,
            point.dtype,
            workload.weight_bytes,
            workload.grad_bytes,
            workload.micro_batches,
        )
        if per_element == 0:
            return 0.0
        sharded = workload.parallel.zero >= 2
        elements = 0
        block = point.blocks[kind]
        fused = (  # their weight-gradient GEMMs accumulate into main_grad themselves
            linear_weights(block) if self.framework.grad_accumulation == "fused-linear" else ()
        )
        for weight in block.weights:
            if weight.name in fused:
                continue
            # the reduce-scatter's group: the data axes the weight is replicated over (not the
            # pipeline ends' tied-embedding reduction: stage_core/lower/program.py); hybrid
            # sharding's replicas (dpr) keep a whole shard
            data = data_axes(workload.axis_sizes, workload.expert_axes, weight.expert)
            axes = tuple(a for a in weight.grad_axes if a in data and a != DP_REPLICATE)
            group = group_size(axes, workload.axis_sizes) if sharded else 1
            elements += weight.elements // max(1, group)
        accelerator = point.system.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return elements * per_element / bandwidth

    def _held_accumulation_s(self, point: Point, kind: str) -> float:
        """Seconds per micro-batch, averaged over the step's micro-batches, of FSDP2
        accumulating a held stage's unsharded gradients (``pp_unsharded_params``): with
        gradient sync off, each micro-batch's ``FSDPParamGroup.post_backward`` casts (the
        first) or adds (the later ones) the fresh 16-bit gradient of every gathered parameter
        into its reduce-dtype accumulator (torch/distributed/fsdp/_fully_shard/_fsdp_param.py;
        :func:`~stage_explore.analytical.framework_costs.held_accumulation_bytes`). On the compute
        stream, at the achieved HBM bandwidth, for the weights FSDP gathers
        (:func:`~stage_core.lower.memory.unsharded_elements`)."""
        workload = point.workload
        between = held_sync_micro_batches(
            self.framework, workload.parallel, workload.micro_batches
        )  # the first of each run between two reduce-scatters casts
        per_element = held_accumulation_bytes(between, workload.weight_bytes, workload.grad_bytes)
        elements = unsharded_elements(workload, point.blocks[kind])
        bandwidth = point.system.accelerator.achieved_memory_bandwidth_bytes_per_s
        return elements * per_element / bandwidth

    def _fp8_weight_casts_s(self, point: Point, kind: str, phase: str) -> float:
        """Seconds per micro-batch of casting a block's linear weights to FP8 at every use
        (``fp8_weight_cast_per_use``): one cast per FP8 GEMM of the phase that reads the
        weight — the forward's and a recomputed forward's ``fprop`` (every linear under full
        recompute, the recomputed ones under a module recompute such as TorchTitan's ``op``) and
        the backward's ``dgrad`` — at :func:`~stage_explore.analytical.framework_costs.
        weight_cast_bytes` per element (the recipe's; a compiled ``tensorwise`` cast whose amax
        is already taken reads the weight once, :func:`~stage_explore.analytical.framework_costs.
        weight_amax_known`). Blocks whose linears stay in 16 bits (the
        output layer) and non-FP8 runs: 0."""
        if not self.framework.fp8_weight_cast_per_use or point.dtype != "fp8":
            return 0.0
        if not fp8_block(kind):
            return 0.0
        if fsdp_float8_gathers(self.framework, point.workload, kind):
            return self._fp8_shard_casts_s(point, kind, phase)
        gemms = point.workload.parallel.fp8_gemms
        block = point.blocks[kind]

        recipe = point.workload.parallel.linear_recipe
        compiled = self.framework.fused_elementwise
        modules = point.workload.parallel.recompute_modules

        def cast_bytes() -> int:
            instrs = block.fwd if phase == "fwd" else block.bwd
            if phase in ("bwd_b", "bwd_w"):  # zero-bubble split (lower/weightgrad.py)
                halves = split_backward(block)
                instrs = halves.input_grad if phase == "bwd_b" else halves.weight_grad
            sizes = {weight.name: weight.elements for weight in block.weights}
            total = 0
            for instr in instrs:
                role = gemm_role(instr, sizes.keys())
                if role in ("fprop", "dgrad") and role in gemms:
                    elements = sum(sizes[name] for name, _ in instr.inputs if name in sizes)
                    known = weight_amax_known(compiled, recipe, role, instr.phase, modules)
                    total += elements * weight_cast_bytes(recipe, role, gemms, known)
            return total

        key = ("fp8_weight_casts", point.key, kind, phase, gemms, recipe, compiled, modules)
        cast: int = self._parts.get(key, cast_bytes)
        accelerator = point.system.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return cast / bandwidth

    def _zero3_gathers_in(self, point: Point, phase: str) -> float:
        """ZeRO-3 all-gathers of a block's parameters per micro-batch in ``phase``: the forward's,
        and the backward's unless the parameters stay gathered under pipeline parallelism
        (``pp_unsharded_params`` with pp > 1: one gather per step, or per schedule under
        ``pp_held_sync_per_schedule``, spread over its micro-batches)."""
        workload = point.workload
        held = self.framework.pp_unsharded_params and workload.parallel.pp > 1
        gathers = float(int(phase == "fwd") + int(phase in ("bwd", "bwd_b") and not held))
        if held:
            gathers /= held_sync_micro_batches(
                self.framework, workload.parallel, workload.micro_batches
            )
        return gathers

    def _fp8_shard_casts_s(self, point: Point, kind: str, phase: str) -> float:
        """Seconds per micro-batch of torchao's casts of a block's FP8 linear weight shards
        before FSDP2's float8 all-gathers (``fsdp_float8_all_gather``): the rank's fp32 shard
        read and its FP8 copy written at every gather (:data:`~stage_explore.analytical.
        framework_costs.FP8_SHARD_CAST_BYTES`), and in the forward the step's
        ``precompute_float8_dynamic_scale_for_fsdp`` amax read of the shard spread over the
        step's micro-batches; the gathered FP8 weight feeds the GEMMs uncast."""
        workload = point.workload
        shards, _ = fp8_shard_elements(workload, point.blocks[kind])
        per_element = self._zero3_gathers_in(point, phase) * FP8_SHARD_CAST_BYTES
        if phase == "fwd":
            per_element += FP8_SHARD_AMAX_BYTES / max(1, workload.micro_batches)
        bandwidth = point.system.accelerator.achieved_memory_bandwidth_bytes_per_s
        return shards * per_element / bandwidth

    def _fsdp2_copies_s(self, point: Point, kind: str, phase: str) -> float:
        """Seconds per micro-batch of FSDP2's copies on the compute stream for a block's
        parameters (``fsdp2_copies`` under ZeRO-3, :func:`~stage_explore.analytical.frameworks.
        fsdp2_copy_bytes`): the all-gather copy-out of each gather (the forward's, and the
        backward's unless the parameters stay gathered under pipeline parallelism), the
        reduce-scatter copy-in of the backward; under ``pp_unsharded_params`` with pp > 1 the
        stage gathers and reduce-scatters once per step (per schedule under
        ``pp_held_sync_per_schedule``), spread over its micro-batches; under
        ``fsdp_no_sync_accumulation`` the copy-in runs in the last micro-batch only. Under
        ``fsdp_float8_all_gather`` the copy-out of the FP8 linear weights moves 1-byte elements."""
        workload = point.workload
        if not self.framework.fsdp2_copies or workload.parallel.zero < 3:
            return 0.0
        held = self.framework.pp_unsharded_params and workload.parallel.pp > 1
        gathers = int(phase == "fwd") + int(phase in ("bwd", "bwd_b") and not held)
        scatters = int(phase in ("bwd", "bwd_w"))
        m = workload.micro_batches
        no_sync = scatters and no_sync_accumulates(self.framework, workload.parallel, m)
        elements = sum(weight.elements for weight in point.blocks[kind].weights)
        per_element: float = fsdp2_copy_bytes(
            gathers, 0 if no_sync else scatters, workload.weight_bytes, workload.grad_bytes
        )
        if no_sync:  # the last micro-batch's copy-in, from the reduce-dtype accumulator
            per_element += 2 * workload.grad_bytes / m
        copied = elements * per_element
        if gathers and fsdp_float8_gathers(self.framework, workload, kind):  # FP8 copy-out
            _, fp8_elements = fp8_shard_elements(workload, point.blocks[kind])
            narrower = fsdp2_copy_bytes(gathers, 0, workload.weight_bytes - FP8_BYTES, 0)
            copied -= fp8_elements * narrower
        accelerator = point.system.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        seconds = copied / bandwidth
        if held:  # one gather and one reduce-scatter per step (or per schedule)
            between = held_sync_micro_batches(
                self.framework, workload.parallel, workload.micro_batches
            )
            if phase in ("fwd", "bwd", "bwd_w"):
                seconds /= between
        return seconds

    def _flat_grad_s(self, point: Point, kind: str, phase: str) -> float:
        """Seconds per micro-batch of FSDP1's flat-gradient concatenation of a block's weight
        gradients in the backward (``fsdp1_flat_grad`` under ZeRO-3, :func:`~stage_explore.
        analytical.framework_costs.fsdp1_flat_grad_bytes`): the unsharded gradient, every element,
        on the compute stream, once per backward (a recomputed forward adds none)."""
        workload = point.workload
        if workload.parallel.zero < 3 or phase not in ("bwd", "bwd_w"):
            return 0.0
        per_element = fsdp1_flat_grad_bytes(self.framework, workload.weight_bytes)
        if per_element == 0:
            return 0.0
        elements = sum(weight.elements for weight in point.blocks[kind].weights)
        accelerator = point.system.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return elements * per_element / bandwidth

    def _param_cast_s(self, point: Point, kind: str, phase: str) -> float:
        """Seconds per micro-batch of autocast's casts of a block's gathered fp32 parameters
        (``fsdp_param_fp32`` under ZeRO-3): each forward use casts a weight to the 16-bit type
        (read 4, write 2 bytes per element), again in a fully recomputed forward, and the
        backward casts its 16-bit gradient back to fp32 (read 2, write 4); memory-bound at the
        achieved HBM bandwidth (``torch.autocast`` caches casts only of leaf tensors, and
        FSDP's unsharded parameters are views of its flat parameter)."""
        workload = point.workload
        if not self.framework.fsdp_param_fp32 or workload.parallel.zero < 3:
            return 0.0
        if phase not in ("fwd", "bwd"):
            return 0.0
        passes = 1
        full = str(workload.parallel.recompute) == "full" and not is_kept_block(kind)
        if phase == "bwd" and full:
            passes = 2  # the recomputed forward casts again
        elements = sum(weight.elements for weight in point.blocks[kind].weights)
        per_element = FP32_BYTES + workload.weight_bytes  # one side fp32, the other 16-bit
        accelerator = point.system.accelerator
        bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s
        return passes * elements * per_element / bandwidth
