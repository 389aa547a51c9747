"""The plan of one configuration in the analytical backend: everything that depends neither on
the schedule nor on the number of micro-batches, per distinct pipeline-stage class — the chunk
timings from the block kinds' costs, each chunk's bucketed gradient synchronisation and ZeRO
parameter gathers, model states, held buffers and the optimizer step.

:class:`StagePlanning` is the analytical backend's base
(:class:`~stage_explore.analytical.backend.AnalyticalBackend` adds evaluation, the network and
the result); it builds on the per-block costs of
:class:`~stage_explore.analytical.costing.BlockCosting`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any, cast

from stage_core.blocks import mtp_layer_of_block
from stage_core.lower.bind import Instr
from stage_core.lower.compact import Runs, bucket_gradients, chunk_runs, layout_key, run_totals
from stage_core.lower.experts import data_axes
from stage_core.lower.program import PIPELINE_ENDS, PIPELINE_MIRROR, Workload
from stage_core.lower.schedule import SPLIT_BACKWARD, global_stage
from stage_core.lower.weightgrad import split_backward
from stage_core.lower.zero_nodes import zero_collectives
from stage_core.models.layers import is_kept_block, is_layer_block
from stage_core.plans import DP_REPLICATE
from stage_core.trace import CollectiveKind
from stage_explore.analytical.amax_costing import CS_AMAX_AXES, FP8_AMAX, AmaxCosting
from stage_explore.analytical.blocktime import (
    BlockCost,
    ChunkTiming,
    chunk_timing,
    plus_exposed,
    sync_and_hidden_s,
)
from stage_explore.analytical.buckets import UNBUCKETED, grad_bucket_bytes
from stage_explore.analytical.contention import NO_LOAD, NcclLoad, nccl_load
from stage_explore.analytical.fp8_buckets import merges_non_fp8, split_runs
from stage_explore.analytical.fp8_gathers import fp8_zero3_gathers, fsdp_float8_gathers
from stage_explore.analytical.framework_costs import (
    zero3_fetch_calls,
    zero3_gathered_bytes,
    zero3_persistent,
)
from stage_explore.analytical.hpz import hpz_gathers, hpz_size, secondary_bytes
from stage_explore.analytical.no_sync import (
    NO_SYNC,
    last_scatter_s,
    no_sync_accumulates,
    weight_scatters_sync,
    without_scatters,
    without_zero,
)
from stage_explore.analytical.offload import shard_transfer_s
from stage_explore.analytical.parts import (
    ChunkParts,
    KindParts,
    Plan,
    Point,
    axes_of,
    pair_sm_share,
    sum_states,
    tied_ends,
)
from stage_explore.analytical.policy import Overlap
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, pair_table
from stage_explore.analytical.zero_queue import QueueBlock, pass_time


class StagePlanning(AmaxCosting):
    """The plan of a configuration per pipeline-stage class (module docstring)."""

    def _plan(self, point: Point) -> Plan:
        """Everything about a configuration that does not depend on the schedule or the number
        of micro-batches, computed once per pipeline-stage class: stages holding the same
        blocks whose groups span the network the same way behave the same."""
        workload = point.workload
        parallel = workload.parallel
        p, schedule = parallel.pp, str(parallel.schedule)
        layout = chunk_runs(*self._layout_key(workload))
        kinds = {k: self._kind(point, k) for k in sorted({k for runs in layout for k, _ in runs})}
        relevant_set = {axes for parts in kinds.values() for axes in parts.span_axes}
        amax_axes = self._fp8_amax_axes(point)
        if amax_axes:  # the FP8 amax reduction's group (fp8_amax_reduction)
            relevant_set.add(amax_axes)
        if self._cs_amax_axes(point):  # current scaling's tp amax reductions
            relevant_set.add(CS_AMAX_AXES)
        if tied_ends(workload):
            relevant_set.add((PIPELINE_ENDS,))
        if schedule == "dualpipe":
            relevant_set.add((PIPELINE_MIRROR,))
        relevant = sorted(relevant_set)
        spans = [self._spans(point, axes) for axes in relevant]
        class_of: dict[Hashable, int] = {}
        stage_class = []
        classes: list[tuple[StageClass, tuple[int, int]]] = []
        chunks: dict[Hashable, ChunkParts] = {}  # chunks alike within this plan are one
        if schedule == "dualpipe":  # stages r and p − 1 − r
            signatures = [
                tuple(layout[global_stage(schedule, stage, v, p)] for v in range(2))
                for stage in range(p)
            ]
        else:  # chunk v of stage r is global stage v·p + r
            signatures = [layout[stage::p] for stage in range(p)]
        stage_shapes = list(zip(*[[entry[0] for entry in span] for span in spans], strict=True))
        for stage in range(p):
            signature = signatures[stage]
            shapes = stage_shapes[stage] if spans else ()
            first = stage == 0 or not self.framework.ddp_bucket_first_chunk_only
            class_key = (signature, shapes, first)
            index = class_of.get(class_key)
            if index is None:
                index = class_of[class_key] = len(classes)
                here = {axes: span[stage] for axes, span in zip(relevant, spans, strict=True)}
                classes.append(self._class(point, signature, kinds, here, shapes, chunks, first))
            stage_class.append(index)
        transfer, arrival = self._transfer(point) if p > 1 else (0.0, 0.0)
        working_set = self._working_set(point)
        stage_classes = tuple(c for c, _ in classes)
        plan = StepPlan(tuple(stage_class), stage_classes, transfer, working_set, arrival)
        model = hardware = 0
        for index in stage_class:
            flops = classes[index][1]
            model += flops[0]
            hardware += flops[1]
        return Plan(plan, model, hardware)

    def _class(
        self,
        point: Point,
        signature: tuple[Runs, ...],
        kinds: dict[str, KindParts],
        spans: dict[tuple[str, ...], Any],
        shapes: tuple[Any, ...],
        chunks: dict[Hashable, ChunkParts],
        first_stage: bool = True,
    ) -> tuple[StageClass, tuple[int, int]]:
        """One pipeline-stage class (chunk timings, gradient synchronisation, model states)
        and its model and hardware FLOPs per micro-batch; ``chunks`` holds the chunks already
        costed in this plan, by runs, the shapes of the groups the class spans and whether
        the chunk's gradients are bucketed (under ``ddp_bucket_first_chunk_only`` only the first
        chunk of the first pipeline stage: ``first_stage``)."""
        workload = point.workload
        parts = []
        for index, runs in enumerate(signature):
            bucketed = not self.framework.ddp_bucket_first_chunk_only or (
                first_stage and index == 0
            )
            chunk_key = (runs, shapes, bucketed)
            part = chunks.get(chunk_key)
            if part is None:
                part = chunks[chunk_key] = self._chunk(point, runs, kinds, spans, bucketed)
            parts.append(part)
        exposed: dict[str, float] = {}
        compute_s = 0.0
        states_bytes = params = model = hardware = host = 0
        for part in parts:
            for label, seconds in part.timing.exposed_s:
                exposed[label] = exposed.get(label, 0.0) + seconds
            compute_s += part.timing.compute_s
            states = part.states
            states_bytes += states.states_bytes
            host += states.host_bytes
            params += states.params
            model += states.model_flops
            hardware += states.hardware_flops
        gathered_bytes = 0
        if workload.parallel.zero >= 3:  # the gathered weights held at once (the framework's rule)
            hpz = hpz_size(self.framework, workload.parallel)
            present = {kind for runs in signature for kind, _ in runs}
            tensor = max((w.elements for k in present for w in point.blocks[k].weights), default=0)
            blocks_bytes = [x for part in parts for x in part.states.largest]
            gathered_bytes = zero3_gathered_bytes(
                self.framework, blocks_bytes, tensor, workload.weight_bytes
            )
            gathered_bytes += workload.weight_bytes * sum(  # persistent: whole on every rank
                n * w.elements
                for runs in signature
                for k, n in runs
                for w in point.blocks[k].weights
                if zero3_persistent(self.framework, w.elements)
            ) + sum(  # DeepSpeed hpZ's secondary shard of the partitioned ones (hpz.py)
                n * secondary_bytes(w.elements, workload.weight_bytes, hpz)
                for runs in signature
                for k, n in runs
                for w in point.blocks[k].weights
                if not zero3_persistent(self.framework, w.elements)
            )
        dualpipe = str(workload.parallel.schedule) == "dualpipe"
        in_flight, kept = self._output_chunk_bytes(point, signature)  # torch pipelining's
        stage_class = StageClass(
            forward_s=tuple(part.timing.forward_s for part in parts),
            backward_s=tuple(part.timing.backward_s for part in parts),
            sync=tuple(part.sync for part in parts),
            saved_bytes=tuple(
                part.states.saved_bytes + self._kept_output_bytes(point, runs)
                + (in_flight[i] if in_flight else 0)
                for i, (part, runs) in enumerate(zip(parts, signature, strict=True))
            ),
            kept_bytes=kept,
            compute_s=compute_s,
            exposed_s=tuple(sorted(exposed.items())),
            states_bytes=states_bytes,
            buffers_bytes=self._held_bytes(point, signature, gathered_bytes),
            working_set_bytes=self._working_set(
                point, frozenset(kind for runs in signature for kind, _ in runs)
            ),
            optimizer_s=self.optimizer_s(point, params) + sum(  # and the persistent gathers
                n * self.persistent_gather_s(point, k, spans.__getitem__)
                for runs in signature
                for k, n in runs
            ),
            input_grad_s=tuple(p.input_grad_s for p in parts if p.input_grad_s is not None),
            pending_bytes=tuple(p.pending_bytes for p in parts if p.input_grad_s is not None),
            weight_grad_s=tuple(p.weight_grad_s for p in parts if p.weight_grad_s is not None),
            host_bytes=host,
            pair_s=pair_table(
                [p.timing.forward_s for p in parts], [p.compute_s[0] for p in parts],
                [p.timing.backward_s for p in parts], [p.compute_s[1] for p in parts],
                pair_sm_share(self.framework, point),
            ) if dualpipe else (),
            after_backward_s=self._collective_time(
                point, spans[(PIPELINE_MIRROR,)], CollectiveKind.ALL_REDUCE,
                sum(n * point.blocks[k].weight_elements for rs in signature for k, n in rs)
                * workload.grad_bytes,
            ) if dualpipe else 0.0,  # program._mirror_sync
        )  # fmt: skip
        return stage_class, (model, hardware)

    def _chunk(
        self,
        point: Point,
        runs: Runs,
        kinds: dict[str, KindParts],
        spans: dict[Any, Any],
        bucketed: bool = True,
    ) -> ChunkParts:
        """One chunk on one rank: its timing per micro-batch, its gradient synchronisation
        after its last backward (after its last W under a split backward) and its ZeRO-1/2
        parameter gathers, its model states; under a split backward (zero-bubble schedules,
        :mod:`stage_core.lower.weightgrad`) also its B seconds, W-pending bytes and compute.
        Not ``bucketed`` (Megatron-Core's ``disable_bucketing``): its gradients are one bucket,
        reduced after its last backward, and its parameters are gathered in one all-gather."""
        parallel = point.workload.parallel
        zero = parallel.zero
        split = str(parallel.schedule) in SPLIT_BACKWARD
        costs, b_costs, w_costs = {}, {}, {}
        for kind, _ in runs:
            costs[kind], b_costs[kind], w_costs[kind] = self._block_costs(
                point, kind, kinds[kind], spans, split
            )
        root = self.framework.fsdp_root_unit and parallel.pp == 1  # FSDP's root unit
        depth: int | None = self.framework.zero3_prefetch_units  # ZeRO's queue (zero_queue.py)
        held = self._params_held(point)
        no_sync = no_sync_accumulates(self.framework, parallel, point.workload.micro_batches)
        step_costs = w_costs if split and no_sync else costs  # as the 1st F / last B (W) run them
        deferred = split and zero == 2  # W's scatters beside the rank's next tasks (no_sync.py)
        weight_sync = weight_scatters_sync(runs, w_costs, root, depth) if deferred else NO_SYNC
        if held:  # gathered once per step, reduce-scattered once (_held_zero_s): none per mb
            costs, b_costs, w_costs = (without_zero(t) for t in (costs, b_costs, w_costs))
        if no_sync or deferred:  # no reduce-scatter per micro-batch: once, after the last (W)
            costs, b_costs, w_costs = (without_scatters(t) for t in (costs, b_costs, w_costs))
        timing = chunk_timing(runs, costs, zero, root, depth)
        unscaled_backward_s = timing.backward_s
        amax_s = self._fp8_amax_s(point, runs, spans)
        if amax_s != (0.0, 0.0):  # on the compute stream after the forward and the backward
            timing = plus_exposed(timing, *amax_s, FP8_AMAX)
        cs_amax_s = self._cs_amax_s(point, runs, spans)
        if cs_amax_s != (0.0, 0.0):  # each waited for on the compute stream before its cast
            timing = plus_exposed(timing, *cs_amax_s, FP8_AMAX)
        w_timing = chunk_timing(runs, w_costs, zero, root, depth) if split else timing
        input_grad_s = pending = weight_grad_s = None
        computes = (0.0, 0.0)
        if split:
            input_grad_s = chunk_timing(runs, b_costs, zero, root, depth).backward_s
            # W from its own instructions, as the trace runs a W task (W_block), with the amax
            # reductions the backward waits for after it (docs/analytical.md, s36 wtime)
            weight_grad_s = w_timing.backward_s + timing.backward_s - unscaled_backward_s
            pending = sum(n * split_backward(point.blocks[k]).pending_bytes for k, n in runs)
        if str(parallel.schedule) == "dualpipe":
            computes = (
                sum(n * costs[k].forward.compute_s for k, n in runs),
                sum(n * costs[k].backward.compute_s for k, n in runs),
            )
        backward = [(kinds[kind].sync[0], count) for kind, count in reversed(runs)]
        groups = []
        limit = (  # a bucket at a time during the backward, or one after it
            grad_bucket_bytes(self.framework, parallel, point.workload.grad_bytes)
            if Overlap.GRAD_REDUCE in self.policy.overlaps and bucketed
            else UNBUCKETED
        )
        grad_total = 0
        reduce_load = NO_LOAD
        whole = self._zero1_all_reduces(point)
        head_gathers: dict[tuple[str, ...], int] = {}  # the first bucket group's whole part
        if limit != UNBUCKETED and merges_non_fp8(self.framework, point.workload):
            # the non-FP8 buckets join the last FP8 bucket group (fp8_buckets.py)
            moved = [self._non_fp8_sync(point, kind) for kind, _ in reversed(runs)]
            split_backward_runs, tail = split_runs(backward, [m[0] for m in moved])
            buckets = bucket_gradients(split_backward_runs, limit)
            last = sum(count for _, count in runs) - 1  # after the chunk's last backward block
            buckets += [(key, size, last, 1, 1, 0) for key, size in tail.items()]
            head_gathers = run_totals([m[1] for m in moved], [n for _, n in backward])
        else:
            buckets = bucket_gradients(backward, limit)
        for bucket, size, first, step, count, _ in buckets:
            grad_total += size * count
            collective, axes = cast(tuple[CollectiveKind, tuple[str, ...]], bucket)
            if whole and collective is CollectiveKind.REDUCE_SCATTER:
                collective = CollectiveKind.ALL_REDUCE  # the whole buffer, then its partition
            seconds = self._collective_time(point, spans[axes], collective, size)
            groups.append((seconds, first, step, count))
            reduce_load = reduce_load.max(nccl_load(point.system, spans[axes][0][1], collective))
        held_s = self._held_zero_s(point, runs, step_costs, timing) if held else (0.0, 0.0)
        if no_sync and not deferred:  # the last micro-batch's backward beside its scatters, once
            held_s = (0.0, last_scatter_s(runs, step_costs, zero, root, depth))
        # after W, if split; and what runs beside the last backward, if it takes SMs
        total, latest, hidden = sync_and_hidden_s(groups, w_timing.backward_runs, bool(reduce_load))
        lost = 0.0  # the last backward's compute beside the reductions' NCCL kernels
        if hidden > 0.0:
            lost = hidden * self._chunk_share(point, runs, costs, spans, "bwd", reduce_load)
            latest += lost  # its last blocks, and the reductions after them, end that later
        gathered = run_totals(
            [kinds[kind].sync[1] for kind, _ in reversed(runs)], [n for _, n in backward]
        )
        gather = 0.0
        gather_load = NO_LOAD
        for axes, size in gathered.items():
            gather += self._collective_time(point, spans[axes], CollectiveKind.ALL_GATHER, size)
            load = nccl_load(point.system, spans[axes][0][1], CollectiveKind.ALL_GATHER)
            gather_load = gather_load.max(load)
        whole_gather, beside = gather, 0.0
        tied = self._tied_sync_s(point, runs, spans)  # after the chunk's whole backward
        if tied and not groups:  # no bucket to follow (dp = 1, or ZeRO-2/3's per-block
            latest = w_timing.backward_s  # reduce-scatters): after the last backward still
        gather_overlapped = Overlap.PARAM_GATHER in self.policy.overlaps
        if gather_overlapped and not bucketed:
            # one all-gather for the chunk, dispatched before an earlier forward: at the step's
            # start on a later pipeline stage (waiting for its first input), with the previous
            # chunk's first forward for a later virtual chunk (Megatron-Core 0.8 chains every
            # chunk's gathers; NeMo/Megatron-Bridge set align_param_gather with vp > 1, whose
            # schedule dispatches chunk k+1's gather when chunk k's first forward starts):
            # hidden behind one forward of the chunk
            gather = max(0.0, gather - timing.forward_s)
            beside = whole_gather - gather  # the first forward's compute beside it
        elif gather_overlapped:  # during the next step's first forward
            # one bucket at a time (Megatron-Core: the first bucket's all-gather is launched
            # just before the forward and waited for by its first layer; each next one when the
            # previous ends): the first bucket's share is exposed, the rest behind the forward
            share = min(1.0, limit / grad_total) if grad_total else 1.0
            head = sum(  # under merged FP8 buckets the first group holds every 16-bit parameter
                self._collective_time(
                    point, spans[axes], CollectiveKind.ALL_GATHER,
                    head_gathers.get(axes, 0) + int((n - head_gathers.get(axes, 0)) * share),
                )
                for axes, n in gathered.items()
            )  # fmt: skip
            gather = head + max(0.0, gather - head - timing.forward_s)
            beside = whole_gather - gather
        # one stage: the next step's first forward follows this step's reductions and
        # optimizer (a pipeline's first stage may lose it in its bubble: kept beside the end)
        forward_lost = 0.0
        if gather_load and beside > 0.0:
            slowed = beside * self._chunk_share(point, runs, costs, spans, "fwd", gather_load)
            if gather_overlapped and bucketed and parallel.pp == 1:
                forward_lost = slowed
            else:
                lost += slowed
        states = sum_states([(kinds[kind].sync[2], count) for kind, count in runs])
        sync = SyncCost(
            total + tied, latest + tied, gather, lost, *held_s, forward_lost, *weight_sync
        )
        return ChunkParts(timing, sync, states, input_grad_s, pending or 0, computes, weight_grad_s)

    def _zero1_all_reduces(self, point: Point) -> bool:
        """Whether a ZeRO-1 run all-reduces its whole gradient buffer where the lowering
        reduce-scatters it (``zero1_grad_all_reduce``): under bf16 DeepSpeed's
        ``BF16_Optimizer`` (ZeRO stage 0 with its own optimizer-state partitioning); in any
        other dtype DeepSpeed's ZeRO stage 1 optimizer on a dense model, whose gradients go
        through ``buffered_reduce_fallback``'s all-reduce (module docstring of
        :mod:`~stage_explore.analytical.profile_sharding`). A mixture-of-experts model under
        fp16 keeps the reduce-scatter (DeepSpeed keeps its contiguous buckets for MoE)."""
        zero1 = point.workload.parallel.zero == 1
        dense = point.dtype == "bf16" or not point.workload.model.is_moe
        return self.framework.zero1_grad_all_reduce and zero1 and dense

    def _params_held(self, point: Point) -> bool:
        """Whether FSDP2 keeps the stage's parameters gathered for the whole step and
        reduce-scatters its gradients once (``pp_unsharded_params`` with ZeRO-3 and pp > 1)."""
        parallel = point.workload.parallel
        return self.framework.pp_unsharded_params and parallel.zero >= 3 and parallel.pp > 1

    def _held_zero_s(
        self, point: Point, runs: Runs, costs: dict[str, BlockCost], timing: ChunkTiming
    ) -> tuple[float, float]:
        """Seconds a chunk holds its rank once per step under ``pp_unsharded_params``: what its
        first forward loses to its per-block all-gathers (each prefetched beside the block
        before, as :func:`chunk_timing` runs them, with the compute they slow: ``timing`` is the
        forward without them), and its per-block gradient reduce-scatters, all of them after
        its last backward, one after the other on the ZeRO queue, a hybrid-sharded block's
        replica all-reduce on a stream of its own after its scatter, beside the next scatter
        (:func:`~stage_explore.analytical.zero_queue.pass_time` of blocks without compute),
        the rank waiting for all of them. No backward re-gathers: the parameters stay
        unsharded until the last backward. The code: torch
        ``fully_shard(reshard_after_forward=False)`` under PP (torchtitan ``apply_fsdp``);
        ``torch.distributed.pipelining`` ``stage.py`` ``backward_maybe_with_nosync``
        (AutoModel's ``patched_backward_maybe_with_nosync``, the same) runs the backwards
        with gradient sync and resharding off, and after the last one calls every FSDP
        state's ``post_backward`` in a loop, then ``_root_post_backward_final_callback``:
        FSDP2's ``post_backward`` makes the current stream wait for the previous
        reduce-scatter's event before issuing its own (``FSDP::post_backward_reduce``), and
        the callback waits for the last one (``reduce_scatter_state.event``;
        ``finalize_backward``: the replica all-reduce's). Returned apart, (gathers,
        reduce-scatters): the schedule runs them in the chunk's first forward and after its
        last backward, before that backward's send
        (:meth:`~stage_explore.analytical.step.StageClass.stage_times`)."""
        gathering = {k: replace(c, scatter_s=0.0, replica_s=0.0) for k, c in costs.items()}
        first = chunk_timing(
            runs, gathering, point.workload.parallel.zero,
            queue_depth=self.framework.zero3_prefetch_units,
        )  # fmt: skip
        first_gather_s = max(0.0, first.forward_s - timing.forward_s)
        scatters = [(QueueBlock(0.0, 0.0, costs[k].scatter_s, costs[k].replica_s), n)
                    for k, n in reversed(runs)]  # fmt: skip
        return first_gather_s, pass_time(scatters, 0)

    def _chunk_share(
        self,
        point: Point,
        runs: Runs,
        costs: dict[str, BlockCost],
        spans: dict[Any, Any],
        phase: str,
        load: NcclLoad,
    ) -> float:
        """The share of its rate a chunk's compute in ``phase`` loses while an NCCL collective
        taking ``load`` runs beside it: its blocks' shares
        (:meth:`~stage_explore.analytical.costing.BlockCosting._contention_share`) weighted
        by their busy compute seconds."""
        weighted = busy = 0.0
        for kind, count in runs:
            timing = costs[kind].forward if phase == "fwd" else costs[kind].backward
            seconds = count * timing.compute_s
            if seconds > 0.0:
                weighted += seconds * self._contention_share(point, kind, phase, spans, load)
                busy += seconds
        return weighted / busy if busy > 0.0 else 0.0

    def _block_costs(
        self, point: Point, kind: str, parts: KindParts, spans: dict[Any, Any], split: bool
    ) -> tuple[BlockCost, BlockCost, BlockCost]:
        """A block kind's forward and backward timing and its ZeRO collectives' seconds on
        this rank; under a split backward also the B and the W part as the backward
        (memoised by the shapes of the groups they span)."""
        shapes = tuple(spans[axes][0] for axes in parts.cost_axes)

        def compute() -> tuple[BlockCost, BlockCost, BlockCost]:
            gather_s, back_s = hpz_gathers(  # DeepSpeed hpZ: in-group gathers (hpz.py)
                point.system.dim_sizes, parts.gathers, spans,
                hpz_size(self.framework, point.workload.parallel), point.workload.micro_batches,
                lambda span, i, n: self._zero_time(point, span, i, parts.calls(n)),
            )  # fmt: skip
            h2d_s, d2h_s = shard_transfer_s(self.framework, point, kind)  # CPU offload's copies
            gather_s, scatter_s, replica_s = gather_s + h2d_s, d2h_s, 0.0
            for i in parts.scatters:  # hybrid sharding's replica all-reduce: a stream of its own
                seconds = self._zero_time(point, spans[i.axes], i)
                if i.axes == (DP_REPLICATE,):
                    replica_s += seconds
                else:
                    scatter_s += seconds
            if (
                self.framework.zero3_gathers == 3
                and str(point.workload.parallel.recompute) != "none"
                and (is_layer_block(kind) or mtp_layer_of_block(kind))
                and not is_kept_block(kind)
            ):  # the recomputed forward gathers again before the backward's own gather
                scatter_s += gather_s if back_s is None else back_s
            forward = self._block_timing(point, kind, "fwd", spans)  # before the shares,
            backward = self._block_timing(point, kind, "bwd", spans)  # which reuse its kernels
            system = point.system  # NCCL's thread blocks beside the block's compute
            gather_load = scatter_load = replica_load = NO_LOAD
            for i in (*parts.gathers, *parts.scatters):
                assert i.collective is not None
                load = nccl_load(system, spans[i.axes][0][1], i.collective)
                if i.axes == (DP_REPLICATE,):
                    replica_load = replica_load.max(load)
                elif i.collective is CollectiveKind.ALL_GATHER:
                    gather_load = gather_load.max(load)
                else:
                    scatter_load = scatter_load.max(load)
            zero_share = (
                self._contention_share(point, kind, "fwd", spans, gather_load)
                if gather_s > 0.0 else 0.0,
                self._contention_share(point, kind, "bwd", spans, gather_load.max(scatter_load))
                if gather_s + scatter_s > 0.0 else 0.0,
            )  # fmt: skip
            replica_share = (
                self._contention_share(point, kind, "bwd", spans, replica_load)
                if replica_s > 0.0 else 0.0
            )  # fmt: skip
            cost = BlockCost(
                forward,
                backward,
                gather_s,
                scatter_s,
                replica_s,
                zero_share,
                replica_share,
                back_s,
            )
            if not split:
                return cost, cost, cost
            b_timing = self._block_timing(point, kind, "bwd_b", spans)
            w_timing = self._block_timing(point, kind, "bwd_w", spans)
            return (
                cost,
                replace(cost, backward=b_timing, scatter_s=0.0, replica_s=0.0),
                replace(cost, backward=w_timing, gather_s=0.0, backward_gather_s=None),
            )

        key = ("costs", point.key, kind, point.token, point.dtype, point.state_key, shapes, split)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _kind(self, point: Point, kind: str) -> KindParts:
        """What a block kind's costs need besides the network: its gradient and parameter
        gather bytes and model states (:meth:`_block_sync`), its ZeRO-3 gathers (the FP8 linear
        weights at 1 byte under ``fsdp_float8_all_gather``) and ZeRO-2/3 scatters, and the axes
        its collectives span (memoised)."""
        workload, block = point.workload, point.blocks[kind]

        def compute() -> KindParts:
            zero = workload.parallel.zero
            sync = self._block_sync(point, kind)
            gathers = tuple(zero_collectives(workload, block, True)) if zero >= 3 else ()
            if fsdp_float8_gathers(self.framework, workload, kind):  # FP8 linear weights
                gathers = fp8_zero3_gathers(workload, block, gathers)
            persistent = self._persistent_gathers(point, kind) if zero >= 3 else ()
            if persistent:  # gathered once per step, not with the block (zero3_persistent)
                kept: dict[tuple[str, ...], int] = {}
                for i in persistent:
                    kept[i.axes] = kept.get(i.axes, 0) + i.comm_bytes
                gathers = tuple(
                    replace(i, comm_bytes=i.comm_bytes - kept.get(i.axes, 0)) for i in gathers
                )
            scatters = tuple(zero_collectives(workload, block, False)) if zero >= 2 else ()
            zero_axes = {i.axes for i in (*gathers, *scatters, *persistent)}
            cost_axes = tuple(sorted(set(axes_of(block)) | zero_axes))
            span_axes = set(cost_axes) | {bucket[1] for bucket in sync[0]} | set(sync[1])
            calls = tuple(  # DeepSpeed's prefetch batches of each gather's weights
                zero3_fetch_calls(self.framework, [
                    w.elements for w in block.weights
                    if data_axes(workload.axis_sizes, workload.expert_axes, w.expert) == i.axes
                ])
                for i in gathers
            )  # fmt: skip
            return KindParts(
                sync, gathers, scatters, cost_axes, tuple(sorted(span_axes)), calls, persistent
            )

        key = ("kind", point.key, kind, point.state_key)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _persistent_gathers(self, point: Point, kind: str) -> tuple[Instr, ...]:
        """The all-gather of each of a block kind's ZeRO-3 parameters that stay whole on every
        rank (:func:`~stage_explore.analytical.framework_costs.zero3_persistent`), in the
        block's order: one NCCL call each, issued once per step after the optimizer step."""
        block = point.blocks[kind]
        return tuple(
            instr
            for w in block.weights
            if zero3_persistent(self.framework, w.elements)
            for instr in zero_collectives(point.workload, replace(block, weights=(w,)), True)
        )

    def persistent_gather_s(
        self, point: Point, kind: str, span_of: Callable[[tuple[str, ...]], Any]
    ) -> float:
        """Seconds of one block of ``kind``'s once-per-step all-gathers of its persistent
        parameters (DeepSpeed's ``_post_step``, after the optimizer step and before the next
        forward; :meth:`_persistent_gathers`), each one NCCL call on the group ``span_of`` its
        axes, at NCCL's α–β time over the dims the group spans (its ring's hops inside a node at
        the node's latency): not the ``zero3_flat_ring`` proxy, a calibration of the blocks'
        gathers on NAR21-T2 that charges every hop the scale-out latency."""
        return sum(
            self._comm_time(point, span_of(i.axes), i) for i in self._kind(point, kind).persistent
        )

    def _layout_key(self, workload: Workload) -> tuple[Any, ...]:
        """:func:`~stage_core.lower.compact.layout_key`, with the model's layer pattern
        memoised by the model object (a study evaluates one model many times; the pattern
        walks every layer)."""
        return layout_key(workload, self._model_facts(workload.model)[0])
