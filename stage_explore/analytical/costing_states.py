"""Model states and memory-side costs of the analytical backend: a block kind's gradient and
parameter-gather bytes and model states (ZeRO stage, FP8 weight copies, the framework's
optimizer state), the optimizer step's seconds, the buffers a pipeline-stage class holds
beside tensors it saves, and what the process holds beside tensors (runtime reserve,
caching allocator).

:class:`StateCosting` is a mixin of :class:`~stage_explore.analytical.costing.BlockCosting`
(the analytical backend owns the memo and the framework profile it reads).
"""

from __future__ import annotations

from functools import partial

from stage_core.lower.compact import Runs, recompute_groups
from stage_core.lower.flops import AttentionFlops, block_flops
from stage_core.lower.fp8 import FP8_BYTES, fp8_block
from stage_core.lower.memory import (
    WorkingSetTerms,
    block_states,
    fp8_weights,
    gathered_input_bytes,
    loss_logits_elements,
    unsharded_elements,
    weighted_combine_saved_bytes,
    working_set_terms,
)
from stage_core.lower.optimizer_kinds import optimizer_state_bytes
from stage_core.lower.program import (
    block_sync,
    boundary_bytes,
)
from stage_core.models.spec import Position
from stage_explore.analytical.context_parallel import cp_ring_held_bytes
from stage_explore.analytical.costs import (
    optimizer_step_s,
)
from stage_explore.analytical.fp8_buckets import NonFp8Sync, non_fp8_sync
from stage_explore.analytical.fp8_gathers import (
    fp8_param_gathers,
    fp8_shard_elements,
    fsdp_float8_gathers,
)
from stage_explore.analytical.fp8_roles import SCALED_APART
from stage_explore.analytical.framework_costs import (
    distributed_fused_adam_state_bytes,
    fsdp2_reduce_held_bytes,
    local_schedule_micro_batches,
    pipelining_buffer_bytes,
    rope_table_bytes,
)
from stage_explore.analytical.framework_profile import FP32_BYTES, FrameworkProfile
from stage_explore.analytical.loss_memory import loss_excess_bytes
from stage_explore.analytical.memory_kinds import MemoryPeaks, memory_peaks
from stage_explore.analytical.no_sync import (
    grad_shards_absent,
    no_sync_accumulates,
    no_sync_held_bytes,
)
from stage_explore.analytical.offload import check_offload, offload_states, offload_step_s
from stage_explore.analytical.output_chunks import (
    in_flight_output_bytes,
    kept_after_backward_bytes,
)
from stage_explore.analytical.parts import (
    BlockSync,
    Memo,
    Point,
    States,
)

#: Bytes of a bfloat16 element (``bf16_model_states``: shard, gradient shard, each Adam moment).
BF16_BYTES = 2


class StateCosting:
    """The memoised model-state, optimizer and memory costs of the analytical backend (module
    docstring)."""

    framework: FrameworkProfile
    attention_flops: AttentionFlops
    _parts: Memo

    def _block_sync(self, point: Point, kind: str) -> BlockSync:
        """A block's gradient bytes per bucket key, parameter-gather bytes per axes (ZeRO-1/2),
        and its model states (:func:`stage_core.lower.program.block_sync`,
        :func:`stage_core.lower.memory.block_states`). The FP8 weight copies: one per weight
        on a GPU whose FP8 GEMMs take any layout under a per-tensor recipe (an ``mxfp8`` peak
        in the preset, the Blackwell test :meth:`KernelTimer._cast_s` uses; Transformer
        Engine's ``is_non_tn_fp8_gemm_supported``: sm100 on), else row- and column-wise. The
        optimizer state per parameter: the ``optimizer`` kind's master and moments
        (:func:`~stage_core.lower.optimizer_kinds.optimizer_state_bytes`; Adam's 12 by
        default, no master under ``bf16_model_states``), or Apex's ``DistributedFusedAdam``'s
        under ``distributed_fused_adam`` (:func:`~stage_explore.analytical.framework_costs.
        distributed_fused_adam_state_bytes`). Under ``fp8_weight_cast_per_use`` (torchao
        ``Float8Linear``) no FP8 weight copy is held: each GEMM casts its weight and drops the
        cast; the backward casts again from the 16-bit weight it saved. Under
        ``fsdp_float8_all_gather`` the gathered (unsharded) FP8 linear weights are 1 byte per
        element (the block's ``full`` bytes, which the ZeRO-3 gathered buffers count)."""
        workload, block = point.workload, point.blocks[kind]

        def compute() -> BlockSync:
            reductions, gathers, params = block_sync(workload, block)
            profile = self.framework
            fp8_params = profile.fp8_param_gather and str(workload.parallel.precision) == "fp8"
            if fp8_params and fp8_block(kind):
                gathers = fp8_param_gathers(workload, block, gathers)
            weights, grads, optimizer, full, host = self._device_states(point, kind)
            options = workload.options
            fused_causal = options.attention == "fused" and options.causal
            model, hardware = self._parts.get(
                ("flops", point.key, kind),
                lambda: block_flops(block, self.attention_flops, fused_causal),
            )
            states = weights + grads + optimizer
            saved = block.saved_bytes
            if profile.tp_saves_gathered_input and workload.parallel.sp:
                saved += gathered_input_bytes(workload, kind)
            if profile.moe_probs_in_activation:
                saved -= weighted_combine_saved_bytes(workload, kind)
            return (
                reductions,
                gathers,
                States(states, saved, params, (full,), model, hardware, host),
            )

        key = ("block_sync", point.key, kind, point.state_key, self._transposed(point))
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    @staticmethod
    def _transposed(point: Point) -> bool:
        """Whether FP8 weight copies are kept row- and column-wise (:meth:`_block_sync`)."""
        peaks = point.system.accelerator.peak_flops_per_s
        return point.workload.parallel.linear_recipe in SCALED_APART or "mxfp8" not in peaks

    def _device_states(self, point: Point, kind: str) -> tuple[int, int, int, int, int]:
        """A block's model states on the device — ``(weights, gradients, optimizer, full,
        host)`` bytes, :func:`stage_core.lower.memory.block_states` with the profile's state
        dtypes, FP8 copies and CPU offload (:meth:`_block_sync`'s docstring) — memoised."""
        workload, block = point.workload, point.blocks[kind]
        transposed = self._transposed(point)

        def compute() -> tuple[int, int, int, int, int]:
            profile = self.framework
            fp8_params = profile.fp8_param_gather and str(workload.parallel.precision) == "fp8"
            optimizer_bytes = distributed_fused_adam_state_bytes(profile, fp8_params)
            grad_bytes = None
            if profile.bf16_model_states:  # 16-bit shard and gradient shard, no master
                grad_bytes = BF16_BYTES
            if optimizer_bytes is None:  # the kind's master and moments (optimizer_kinds)
                master = not profile.bf16_model_states
                optimizer_bytes = optimizer_state_bytes(profile.optimizer, master)
            weights, grads, optimizer, full = block_states(
                workload,
                block,
                profile.fsdp_fp32_shards and not profile.bf16_model_states,
                profile.fp8_param_gather,
                transposed,
                optimizer_bytes,
                grad_bytes,
            )
            if profile.fp8_weight_cast_per_use:  # no FP8 copy outlives its GEMM
                weights -= fp8_weights(workload, block, transposed)
            if fsdp_float8_gathers(profile, workload, kind):  # gathered (unsharded) as FP8
                full -= fp8_shard_elements(workload, block)[1] * (workload.weight_bytes - FP8_BYTES)
            check_offload(profile, workload, point.system)
            weights, grads, optimizer, host = offload_states(  # CPU offload (offload.py)
                profile, workload, block, weights, grads, optimizer
            )
            return weights, grads, optimizer, full, host

        key = ("device_states", point.key, kind, point.state_key, transposed)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _non_fp8_sync(self, point: Point, kind: str) -> NonFp8Sync:
        """The gradient and gather bytes of a block's 16-bit parameters beside FP8 ones
        (:func:`~stage_explore.analytical.fp8_buckets.non_fp8_sync`), memoised."""
        block = point.blocks[kind]
        return self._parts.get(  # type: ignore[no-any-return]
            ("non_fp8_sync", point.key, kind, point.state_key),
            lambda: non_fp8_sync(point.workload, kind, block),
        )

    def optimizer_s(self, point: Point, params: int) -> float:
        """The optimizer step over this rank's ``params``
        (:func:`~stage_explore.analytical.costs.optimizer_step_s`; on the CPU under
        ``offload_optimizer``, :func:`~stage_explore.analytical.offload.offload_step_s`),
        memoised."""
        accelerator, dtype = point.system.accelerator, point.dtype
        grad_bytes = point.workload.grad_bytes
        if self.framework.offload_optimizer:
            workload, system = point.workload, point.system
            return self._parts.get(  # type: ignore[no-any-return]
                ("offload_step", point.token, params, workload.weight_bytes, grad_bytes,
                 workload.parallel.zero),
                lambda: offload_step_s(self.framework, workload, system, params),
            )  # fmt: skip
        foreach = self.framework.optimizer_foreach  # torch.optim.AdamW(foreach=True)
        kind = self.framework.optimizer  # the update's bytes (optimizer_kinds)
        return self._parts.get(  # type: ignore[no-any-return]
            ("optimizer", point.token, params, dtype, grad_bytes, foreach, kind),
            lambda: optimizer_step_s(accelerator, dtype, params, grad_bytes, foreach, kind),
        )

    def _memory_peaks(self, tensor_peak_bytes: int, capacity_bytes: int) -> MemoryPeaks:
        """The process's allocated, reserved and process peaks at the tensors' peak, with the
        profile's ``runtime_reserved_bytes`` and ``allocator_overhead``
        (:func:`~stage_explore.analytical.memory_kinds.memory_peaks`)."""
        profile = self.framework
        return memory_peaks(
            tensor_peak_bytes,
            capacity_bytes,
            profile.runtime_reserved_bytes,
            profile.allocator_overhead,
        )

    def _working_set(self, point: Point, kinds: frozenset[str] | None = None) -> int:
        """What one block's backward holds at once at its peak
        (:func:`~stage_core.lower.memory.recompute_working_set`; under a uniform recompute
        its groups', :func:`~stage_core.lower.compact.recompute_groups`), over the block kinds
        ``kinds`` one pipeline stage runs (``None``: the whole model's), memoised; under torch's
        ``context_parallel`` (``cp_merge_fp32`` with cp > 1) with the ring attention's own
        buffers at the attention instructions
        (:func:`~stage_explore.analytical.context_parallel.cp_ring_held_bytes`)."""
        cp = point.workload.parallel.cp if self.framework.cp_merge_fp32 else 1
        extra = None if cp <= 1 else partial(cp_ring_held_bytes, cp=cp)
        groups = recompute_groups(point.workload)  # uniform recompute: the groups' layers
        terms: WorkingSetTerms = self._parts.get(  # each block's terms once per point (s37)
            ("working_set_terms", point.key, cp, groups),
            lambda: working_set_terms(point.workload, point.blocks, extra),
        )
        return self._parts.get(  # type: ignore[no-any-return]
            ("working_set", point.key, cp, groups, kinds), lambda: terms.largest(kinds)
        )

    def _kept_output_bytes(self, point: Point, runs: Runs) -> int:
        """Bytes a chunk keeps per micro-batch in flight beside its saved activations under
        ``pipeline_outputs_kept`` (Megatron-Core ``deallocate_pipeline_outputs`` False, NeMo 1.x):
        the output it sent to the next stage, whose data ``deallocate_output_tensor`` leaves in
        place until the micro-batch's backward — one boundary-sized tensor
        (:func:`~stage_core.lower.program.boundary_bytes`); 0 without pipeline parallelism and
        on the chunk holding the loss, whose output is not sent."""
        workload = point.workload
        if not self.framework.pipeline_outputs_kept or workload.parallel.pp <= 1:
            return 0
        if any(kind == "head" for kind, _ in runs):
            return 0
        return boundary_bytes(workload)

    def _output_chunk_bytes(
        self, point: Point, signature: tuple[Runs, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per chunk of ``signature``: the bytes torch pipelining holds per micro-batch in flight
        beyond the saved activations and the loss's buffers, and per micro-batch whose backward
        has run until the step ends (``pipelining_output_chunks``, ``pipelining_output_fp32``
        under ``pipelining_stage_buffers`` with pp > 1;
        :mod:`~stage_explore.analytical.output_chunks`); empty tuples otherwise."""
        workload, profile = point.workload, self.framework
        if not profile.pipelining_stage_buffers or workload.parallel.pp <= 1:
            return (), ()
        chunks = [
            (any(k == "embedding" for k, _ in runs), any(k == "head" for k, _ in runs))
            for runs in signature
        ]
        logits = 0
        if "head" in point.blocks:
            logits = loss_logits_elements(point.blocks["head"], workload.weight_bytes)
        fp32 = profile.pipelining_output_fp32
        kept = kept_after_backward_bytes(
            profile.pipelining_output_chunks, chunks, boundary_bytes(workload), logits,
            FP32_BYTES if fp32 else workload.weight_bytes,
        )  # fmt: skip
        return in_flight_output_bytes(fp32, chunks, logits), kept

    def _held_bytes(self, point: Point, signature: tuple[Runs, ...], gathered: int) -> int:
        """Buffers a pipeline-stage class holds beside its model states, saved activations and
        the backward working set: the gathered ZeRO-3 parameters (``gathered``, the framework's
        rule), or under ``pp_unsharded_params`` (with ZeRO-3 and PP) the stage's whole
        parameters and unsharded gradients, or under ``pp_backward_held_params`` (ZeRO-3 and
        PP) the stage's whole 16-bit parameters, or under ``fsdp_no_sync_accumulation`` the
        unsharded gradients beside them (:func:`~stage_explore.analytical.no_sync.
        no_sync_held_bytes`); the held unsharded gradients (of either rule) in place of the
        gradient shards the states count (none exists before the step's last micro-batch, or
        the held stage's last backward, reduces its units:
        :func:`~stage_explore.analytical.no_sync.grad_shards_absent`); and, on the stage holding the
        loss, what a loss on fp32 logits (``loss_fp32_buffers``; under ``loss_parallel`` with
        tp > 1, :data:`LOSS_PARALLEL_FP32_BUFFERS`) or on 16-bit logits (``loss_16bit_buffers``), on
        the gathered logits under ``loss_logits_gathered``, holds beyond the working set
        (:func:`~stage_explore.analytical.loss_memory.loss_excess_bytes`); under
        ``pipelining_stage_buffers`` with pp > 1, torch pipelining's receive buffers and kept
        outputs (:func:`~stage_explore.analytical.framework_costs.pipelining_buffer_bytes`; the
        first stage's outputs in flight: ``min(pp, m)``, all ``m`` under GPipe); under
        ``rope_table_buffer`` the rotary table of each model part on the rank
        (:func:`~stage_explore.analytical.framework_costs.rope_table_bytes`; rotary, not latent,
        attention). Under FSDP2 (``fsdp2_copies``) with ZeRO-3 and no PP, the reduce-scatter
        input of the previous unit held beside a block's backward
        (:func:`~stage_explore.analytical.framework_costs.fsdp2_reduce_held_bytes`); the loss's
        backward runs before any reduction, so the stage holds the larger of that and the
        loss's excess over the working set, not their sum."""
        workload, profile = point.workload, self.framework
        parallel = workload.parallel
        held = gathered
        held_stage = profile.pp_unsharded_params or profile.pp_backward_held_params
        if held_stage and parallel.zero >= 3 and parallel.pp > 1:
            elements = sum(
                n * unsharded_elements(workload, point.blocks[k]) for rs in signature for k, n in rs
            )  # the whole stage gathered (at a backward's end under pp_backward_held_params)
            per_element = workload.weight_bytes
            if profile.pp_unsharded_params:  # and its gradients; else no_sync_held_bytes's
                per_element += workload.grad_bytes
            held = max(held, elements * per_element)
        if no_sync_accumulates(profile, parallel, workload.micro_batches):
            held += no_sync_held_bytes(profile, point, signature)  # beside the gathered units
        if grad_shards_absent(profile, parallel, workload.micro_batches):
            # the held unsharded gradients stand in place of the gradient shards the states
            # count: at the peak no unit has been reduced this step, so no parameter has a
            # sharded gradient yet (no_sync.py's module docstring; a held pipeline stage too)
            held -= sum(n * self._device_states(point, k)[1] for rs in signature for k, n in rs)
        if profile.pipelining_stage_buffers and parallel.pp > 1:
            chunks = [
                (any(k == "embedding" for k, _ in runs), any(k == "head" for k, _ in runs))
                for runs in signature
            ]
            # one schedule's micro-batches: its stages allocate their buffers for it once
            m = local_schedule_micro_batches(profile, parallel, workload.micro_batches)
            in_flight = m if str(parallel.schedule) == "gpipe" else min(parallel.pp, m)
            held += pipelining_buffer_bytes(chunks, m, boundary_bytes(workload), in_flight)
        model = workload.model
        if profile.rope_table_buffer and model.position is Position.ROTARY and not model.is_mla:
            held += len(signature) * rope_table_bytes(model.seq_len, model.head_dim, parallel.cp)
        kinds = sorted({kind for runs in signature for kind, _ in runs})
        reduce_held = 0  # beside a block's backward working set
        if profile.fsdp2_copies and parallel.zero >= 3 and parallel.pp == 1:  # FSDP2
            gathered_bytes = FP32_BYTES if profile.fsdp_param_fp32 else workload.weight_bytes
            reduce_held = fsdp2_reduce_held_bytes(
                workload, {k: point.blocks[k] for k in kinds}, profile.fsdp_root_unit,
                gathered_bytes,
            )  # fmt: skip
        blocks = [point.blocks[k] for k in kinds]
        loss = loss_excess_bytes(blocks, profile, parallel.tp, workload.weight_bytes)
        loss_excess = 0  # the loss's backward peak, before any reduce-scatter
        if loss:
            loss_excess = max(0, loss - self._working_set(point, frozenset(kinds)))
        return held + max(reduce_held, loss_excess)
