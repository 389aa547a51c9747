"""Per-block costs of the analytical backend: bound blocks, collectives over the network dims
a group spans, ZeRO and gradient-sync collectives, block timings, the compute timer of a block
kind, activation transfers between stages, the optimizer step and the process memory beside
tensors.

:class:`BlockCosting` holds the methods; the analytical backend
(:class:`~stage_explore.analytical.backend.AnalyticalBackend`) inherits them and owns the memos
they read. They were split out of ``backend.py`` so that module keeps only the orchestration of
one evaluation: plan, chunk, kind, step, result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from stage_core.blocks import Structure, mtp_layer_of_block
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.compact import Runs, layer_pattern
from stage_core.lower.flops import AttentionFlops, block_flops
from stage_core.lower.fp8 import fp8_block
from stage_core.lower.memory import (
    _block_states,
    gathered_input_bytes,
    loss_working_set,
    recompute_working_set,
)
from stage_core.lower.program import (
    PIPELINE_ENDS,
    Workload,
    _block_sync,
    bind_all,
    boundary_bytes,
    shared_embedding_weights,
    tie_embeddings,
)
from stage_core.lower.weightgrad import split_backward
from stage_core.models.layers import Mixer, layer_kind_of_block
from stage_core.models.spec import ModelSpec
from stage_core.ops import window_pairs
from stage_core.trace import CollectiveKind
from stage_explore.analytical.async_tp import (
    async_grad_allreduce_rule,
    combine_rules,
    nccl_sm_share_s,
)
from stage_explore.analytical.blocktime import (
    BlockTiming,
    fuse_elementwise,
    imbalanced_timers,
    time_block,
)
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
    group_span,
)
from stage_explore.analytical.context_parallel import cp_comm_timer
from stage_explore.analytical.costs import (
    optimizer_step_s,
    stage_transfer_s,
)
from stage_explore.analytical.deepep import deepep_level_fractions
from stage_explore.analytical.eager import eager_op_bytes
from stage_explore.analytical.frameworks import (
    FP32_BYTES,
    LOSS_PARALLEL_FP32_BUFFERS,
    FrameworkProfile,
    distributed_fused_adam_state_bytes,
    pipelining_buffer_bytes,
)
from stage_explore.analytical.kernels import (
    BLOCK_SCALED,
    KernelTimer,
    cast_shares,
    check_fp8_recipe,
    fp8_key,
    loss_logits,
)
from stage_explore.analytical.overlap import (
    Bulk,
    apply_overlaps,
    deepep_sm_share_s,
    flat_ring_s,
    overlap_rule,
    pipelined_chunks,
    sm_margin,
    ub_bulk_share_s,
)
from stage_explore.analytical.parts import (
    BlockSync,
    Memo,
    Point,
    States,
    axes_of,
    canonical,
    canonical_sizes,
    tied_ends,
)
from stage_explore.analytical.passes import PhasePasses
from stage_explore.analytical.policy import TimingPolicy

#: Names of the expert dispatch/combine all-to-alls and their gradients (blocks._moe: the routed
#: tokens ``moe.tokens`` and the experts' outputs ``experts.fc2``).
EXPERT_ALL_TO_ALL = ("moe.tokens", "experts.")


class BlockCosting(PhasePasses):
    """The memoised per-block cost methods of the analytical backend (a mixin: the backend
    creates the memos, the framework profile and its timing policy in its ``__init__``)."""

    framework: FrameworkProfile
    policy: TimingPolicy  # the framework's timing policy: what the timing code reads
    attention_flops: AttentionFlops
    _blocks: Memo
    _parts: Memo
    _patterns: Memo
    _tokens: int

    def _token(self) -> int:
        """A new number, to name a memoised value (bound blocks, a system, a plan) in other
        memos' keys instead of the larger key it was found by."""
        self._tokens += 1
        return self._tokens

    def _model_facts(self, model: ModelSpec) -> tuple[tuple[str, ...], Structure]:
        """The model's :func:`~stage_core.lower.compact.layer_pattern` (it walks every
        layer) and its :class:`~stage_core.blocks.Structure`, memoised by the model object (a
        study evaluates one model many times)."""

        def compute() -> tuple[ModelSpec, tuple[str, ...], Structure]:
            return model, layer_pattern(model), Structure.of(model)

        entry = self._patterns.get(id(model), compute)
        if entry[0] is not model:  # another object got the id of a collected one
            entry = self._patterns.items[id(model)] = compute()
        return entry[1], entry[2]

    def _bound(self, workload: Workload) -> tuple[int, dict[str, BoundBlock]]:
        """Bound blocks, shared by every candidate with the same per-rank shapes: blocks never
        communicate over pp or dp, so those degrees enter only as "1 or more" (and dp through
        the global micro-batch B, whose per-rank share is the micro-batch either way)."""
        sizes, axis_sizes = canonical_sizes(workload)  # canonical(workload)'s, built on a miss
        parallel, model = workload.parallel, workload.model
        fp8 = str(parallel.precision) == "fp8"  # FP8 copies of saved inputs (lower.fp8)
        key = (
            self._model_facts(model)[1], workload.options, workload.flags,
            str(parallel.recompute), tuple(sorted(sizes.items())),
            tuple(sorted(axis_sizes.items())), model.tied_embeddings,
            parallel.pp == 1, parallel.recompute_modules,
            (str(parallel.fp8_recipe), parallel.fp8_gemms) if fp8 else (),
        )  # fmt: skip

        def compute() -> tuple[int, dict[str, BoundBlock]]:  # a number names them in keys
            return self._token(), tie_embeddings(workload, bind_all(canonical(workload)))

        return self._blocks.get(key, compute)  # type: ignore[no-any-return]

    def _tied_sync_s(self, point: Point, runs: Runs, spans: dict[tuple[str, ...], Any]) -> float:
        """The tied word embedding's gradient all-reduce between the pipeline ends, for a chunk
        holding the embedding or the head (``stage_core.lower.program._tied_embedding_sync``)."""
        workload = point.workload
        if not tied_ends(workload):
            return 0.0
        seconds = 0.0
        for kind, _ in runs:
            for weight in point.blocks[kind].weights:
                if (kind, weight.name) in shared_embedding_weights(workload.model):
                    size = weight.elements * workload.grad_bytes
                    span = spans[(PIPELINE_ENDS,)]
                    seconds += self._collective_time(point, span, CollectiveKind.ALL_REDUCE, size)
        return seconds

    def _spans(self, point: Point, axes: tuple[str, ...]) -> tuple[Any, ...]:
        """Per pipeline stage: (what the α–β time of a group over ``axes`` depends on — its
        size, ranks per network dim, regularity —, a representative group, its rank)."""
        workload, table, system = point.workload, point.table, point.system

        def compute() -> tuple[Any, ...]:
            result = []
            for stage in range(workload.parallel.pp):
                rank = workload.mesh.rank_of({"pp": stage})
                group = table.group(rank, axes)
                span = group_span(system.dim_sizes, group)
                result.append(((len(group), span.counts, span.regular), group, rank))
            return tuple(result)

        key = ("spans", point.token, table.names, table.shape, axes)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _collective_time(
        self,
        point: Point,
        span: Any,
        kind: CollectiveKind,
        size: int,
        scale_out: float = 1.0,
        pipelined: bool = False,
        fractions: tuple[float, ...] = (),
    ) -> float:
        shape, group, _ = span
        return self._parts.get(  # type: ignore[no-any-return]
            ("comm", point.token, shape, kind, size, scale_out, pipelined, fractions),
            lambda: alpha_beta_collective_s(
                point.system, kind, size, group, scale_out, pipelined, fractions
            ),
        )

    def _deepep_all_to_all(self, point: Point, instr: Instr) -> bool:
        """Whether ``instr`` is an expert dispatch/combine all-to-all run on DeepEP."""
        if not (self.framework.moe_deepep and instr.collective is CollectiveKind.ALL_TO_ALL):
            return False
        model = point.workload.model
        return model.is_moe and any(tag in instr.name for tag in EXPERT_ALL_TO_ALL)

    def _deepep_fractions(self, point: Point, span: Any, instr: Instr) -> tuple[float, ...]:
        """DeepEP's share of an expert all-to-all's bytes on each level its group spans
        (``moe_deepep``; :func:`~stage_explore.analytical.deepep.deepep_level_fractions`: a
        token sent once per destination rank inside a node and once per destination node
        across nodes, experts contiguous on the ranks; the router ``moe_fake_balanced_gate``
        or random balanced routing); empty for every other collective and for a group that is
        not a full sub-grid of the dims it spans (all bytes on one flat level)."""
        model = point.workload.model
        if not self._deepep_all_to_all(point, instr):
            return ()
        (_, counts, regular), _, _ = span
        spanned = [count for count in counts if count > 1]
        if not regular or not spanned:
            return ()
        routing = "round_robin" if self.framework.moe_fake_balanced_gate else "random"
        return deepep_level_fractions(model.num_experts, model.top_k, spanned, routing)

    def _zero_time(self, point: Point, span: Any, instr: Instr) -> float:
        """A ZeRO-3 gather or gradient scatter: hierarchical over the dims its group spans, or
        one flat ring at the slowest dim's bandwidth under ``zero3_flat_ring``. Under
        ``fsdp_param_fp32`` a gather moves the fp32 parameters (4 bytes per element)."""
        weight_bytes = point.workload.weight_bytes
        if (
            self.framework.fsdp_param_fp32
            and instr.collective is CollectiveKind.ALL_GATHER
            and weight_bytes < FP32_BYTES
        ):
            instr = replace(instr, comm_bytes=instr.comm_bytes * FP32_BYTES // weight_bytes)
        if not self.framework.zero3_flat_ring or instr.collective is None:
            return self._comm_time(point, span, instr)
        shape, group, _ = span
        kind, size = instr.collective, instr.comm_bytes
        return self._parts.get(  # type: ignore[no-any-return]
            ("flat", point.token, shape, kind, size),
            lambda: flat_ring_s(point.system, kind, size, group),
        )

    def _comm_time(self, point: Point, span: Any, instr: Instr) -> float:
        """α–β time of a collective or ring exchange, memoised by the dims its group spans."""
        if instr.kind != "ring":
            assert instr.collective is not None
            fractions = self._deepep_fractions(point, span, instr)  # DeepEP: levels at once
            if not fractions:
                return self._collective_time(point, span, instr.collective, instr.comm_bytes)
            return self._collective_time(
                point, span, instr.collective, instr.comm_bytes, pipelined=True,
                fractions=fractions,
            )  # fmt: skip
        system, rank = point.system, span[2]  # ring attention: messages to the next cp rank
        (axis,) = instr.axes
        (peer,) = point.table.shifted(np.array([rank]), axis, 1)
        a, b = system.coordinates(rank), system.coordinates(peer)
        dim = next(i for i in range(len(a)) if a[i] != b[i])
        return self._parts.get(  # type: ignore[no-any-return]
            ("ring", point.token, dim, instr.comm_bytes, instr.ring_steps),
            lambda: (
                instr.ring_steps * alpha_beta_point_to_point_s(system, rank, peer, instr.comm_bytes)
            ),
        )

    def _cp_message(
        self, point: Point, spans: dict[tuple[str, ...], Any]
    ) -> Callable[[int], float]:
        """Seconds of one point-to-point message of the given bytes from this rank to the next
        context-parallel rank (torch ``context_parallel``'s gradient ring), memoised."""
        span = spans.get(("cp",))
        if span is None:
            return lambda size: 0.0
        system, rank = point.system, span[2]
        (peer,) = point.table.shifted(np.array([rank]), "cp", 1)
        a, b = system.coordinates(rank), system.coordinates(int(peer))
        dim = next(i for i in range(len(a)) if a[i] != b[i])
        return lambda size: self._parts.get(
            ("cp_message", point.token, dim, size),
            lambda: alpha_beta_point_to_point_s(system, rank, int(peer), size),
        )

    def _block_timing(
        self, point: Point, kind: str, phase: str, spans: dict[tuple[str, ...], Any]
    ) -> BlockTiming:
        """A block's timing with its element-wise chains fused; ``spans`` maps its
        collectives' axes to the rank's groups."""
        block = point.blocks[kind]
        axes_list = self._axes(point, kind)
        shapes = tuple(spans[a][0] for a in axes_list)
        dtype = point.dtype

        policy = self.policy
        rule = overlap_rule(  # the dense tp, and the mesh's inner tp when split (1 < etp < tp)
            policy,
            point.workload.parallel.tp,
            point.workload.flags.sp,
            point.workload.axis_sizes["tp"],
        )
        async_rule = async_grad_allreduce_rule(  # Megatron's async tp all-reduce / SP scatter
            policy, point.workload.parallel.tp, point.workload.flags.sp
        )
        rule = combine_rules(rule, async_rule)
        accumulate_s = (
            self._grad_accumulation_s(point, kind) if phase in ("bwd", "bwd_w") else 0.0
        )
        accumulate_s += self._param_cast_s(point, kind, phase)  # 0 unless fsdp_param_fp32
        accumulate_s += self._fsdp2_copies_s(point, kind, phase)  # 0 unless fsdp2_copies
        accumulate_s += self._flat_grad_s(point, kind, phase)  # 0 unless fsdp1_flat_grad
        accumulate_s += self._fp8_weight_casts_s(point, kind, phase)  # torchao Float8Linear

        def compute() -> BlockTiming:
            instrs = block.fwd if phase == "fwd" else block.bwd
            if phase in ("bwd_b", "bwd_w"):  # zero-bubble split (lower/weightgrad.py)
                halves = split_backward(block)
                instrs = halves.input_grad if phase == "bwd_b" else halves.weight_grad
            if self.framework.fused_elementwise:
                instrs = fuse_elementwise(instrs)
            compute_s, comm_s = imbalanced_timers(  # the busiest expert-parallel rank
                self._compute_timer(point, kind),
                lambda i: self._comm_time(point, spans[i.axes], i),
                self.framework.moe_load_imbalance,
            )
            instrs, shared = apply_overlaps(instrs, policy, rule)  # the policy's rewrites
            kernels = point.system.accelerator.kernels
            bulk_gemms: frozenset[Instr] = frozenset()
            if shared and kernels is not None and async_rule is None:
                # userbuffers' GEMMs run on the SMs their kernels leave (bulk ones only with
                # set_sm_margin: ub_bulk_sm_margin; otherwise ub_bulk_share_s below)
                margined = shared
                if not self.framework.ub_bulk_sm_margin:
                    margined = pipelined_chunks(shared)
                    bulk_gemms = shared - margined
                compute_s = sm_margin(compute_s, margined, kernels.sm_count)
            cp = point.workload.axis_sizes.get("cp", 1)
            if self.framework.cp_merge_fp32 and cp > 1:  # torch context_parallel's K/V traffic
                message = self._cp_message(point, spans)
                comm_s = cp_comm_timer(instrs, cp, comm_s, compute_s, message)
            timing = time_block(  # under torch.distributed: behind the compute issued before
                instrs, compute_s, comm_s, policy.collectives_wait_for_issued_compute
            )
            if bulk_gemms and kernels is not None and rule is not None:
                lost_s = ub_bulk_share_s(  # bulk kernels' SMs beside full-grid GEMMs
                    sum(comm_s(i) for i in instrs if isinstance(rule(i), Bulk)),
                    sum(compute_s(i) for i in bulk_gemms),
                    kernels.sm_count,
                )
                timing = replace(
                    timing,
                    duration_s=timing.duration_s + lost_s,
                    compute_s=timing.compute_s + lost_s,
                )
            kernels = point.system.accelerator.kernels
            if async_rule is not None and shared and kernels is not None:
                bulk_s = sum(comm_s(i) for i in instrs if async_rule(i) is not None)
                lost_s = nccl_sm_share_s(  # NCCL's blocks beside the weight gradients
                    bulk_s, sum(compute_s(i) for i in shared), kernels.sm_count
                )
                timing = replace(
                    timing,
                    duration_s=timing.duration_s + lost_s,
                    compute_s=timing.compute_s + lost_s,
                )
            kernels = point.system.accelerator.kernels
            if self.framework.moe_deepep and rule is not None and kernels is not None:
                deepep_s = sum(  # DeepEP's all-to-alls beside compute take SMs from it
                    comm_s(i) for i in instrs if self._deepep_all_to_all(point, i)
                )
                lost_s = deepep_sm_share_s(deepep_s, timing.compute_s, kernels.sm_count)
                timing = replace(
                    timing,
                    duration_s=timing.duration_s + lost_s,
                    compute_s=timing.compute_s + lost_s,
                )
            if accumulate_s == 0.0:
                return timing
            return replace(  # the accumulation kernels run on the compute stream, at the end
                timing,
                duration_s=timing.duration_s + accumulate_s,
                compute_s=timing.compute_s + accumulate_s,
            )

        parallel = point.workload.parallel
        fp8 = fp8_key(str(parallel.fp8_recipe), parallel.fp8_gemms, dtype)
        key = (point.key, kind, phase, point.token, shapes, dtype, fp8, accumulate_s)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _compute_timer(self, point: Point, kind: str) -> Callable[[Instr], float]:
        """How long a compute instruction of block ``kind`` takes: the accelerator's kernel
        model (:mod:`~stage_explore.analytical.kernels`) when its system has one, else the
        roofline with efficiencies."""
        accelerator, dtype = point.system.accelerator, point.dtype
        kernels = accelerator.kernels
        if kernels is None:
            return lambda i: accelerator.compute_time_s(
                i.flops, i.bytes_read + i.bytes_written, dtype
            )
        sizes, parallel = point.workload.sizes, point.workload.parallel
        block = point.blocks[kind]
        weights = frozenset(weight.name for weight in block.weights)
        if dtype == "fp8":
            check_fp8_recipe(accelerator, str(parallel.fp8_recipe))
        keys = sizes.get("S", point.workload.model.seq_len)
        if parallel.cp > 1 and str(parallel.cp_style) == "ring":
            # load-balanced ring attention runs one kernel per step on S/cp-long chunks (TE
            # AttnFuncWithCPAndKVP2P, causal: step 0 the local two chunks under the mask, then
            # all local queries x the first KV chunk or the second query chunk x both): every
            # step's slowest rank sees S/(2·cp) keys per query row, the causal half of S/cp
            keys = max(1, keys // parallel.cp)
        layer = layer_kind_of_block(kind) or mtp_layer_of_block(kind)  # an MTP module's layer
        sliding = layer is not None and layer.mixer is Mixer.SLIDING
        if sliding:  # the mean keys a query row sees inside its window (no further halving)
            keys = max(1, window_pairs(keys, sizes["W"]) // keys)
        return KernelTimer(
            accelerator,
            kernels,
            dtype,
            weights,
            keys=keys,
            head_dim=sizes.get("D", point.workload.model.head_dim),
            causal=not sliding,  # decoder language models; a window's keys are counted above
            attention_kernel=self.framework.attention_kernel,
            cp_merge=parallel.cp if self.framework.cp_merge_fp32 else 0,
            fp8_recipe=str(parallel.fp8_recipe),
            fp8_gemms=parallel.fp8_gemms,
            fp8_block=fp8_block(kind),
            fp8_training=True,
            shares=(
                cast_shares((*block.fwd, *block.bwd), weights, parallel.fp8_gemms)
                if dtype == "fp8"
                else {}
            ),
            loss_logits=loss_logits(block.fwd),
            eager_bytes=eager_op_bytes(
                point.workload.model,
                self.framework.eager_modules,
                fused=self.framework.fused_elementwise,
            ),
        )

    def _axes(self, point: Point, kind: str) -> list[tuple[str, ...]]:
        block = point.blocks[kind]
        return self._parts.get(("axes", point.key, kind), lambda: axes_of(block))  # type: ignore[no-any-return]

    def _block_sync(self, point: Point, kind: str) -> BlockSync:
        """A block's gradient bytes per bucket key, parameter-gather bytes per axes (ZeRO-1/2),
        and its model states (:func:`stage_core.lower.program._block_sync`,
        :func:`stage_core.lower.memory._block_states`). The FP8 weight copies: one per weight
        on a GPU whose FP8 GEMMs take any layout under a per-tensor recipe (an ``mxfp8`` peak
        in the preset, the Blackwell test :meth:`KernelTimer._cast_s` uses; Transformer
        Engine's ``is_non_tn_fp8_gemm_supported``: sm100 on), else row- and column-wise. The
        optimizer state per parameter: Megatron's, or Apex's ``DistributedFusedAdam``'s under
        ``distributed_fused_adam`` (:func:`~stage_explore.analytical.frameworks.
        distributed_fused_adam_state_bytes`)."""
        workload, block = point.workload, point.blocks[kind]
        peaks = point.system.accelerator.peak_flops_per_s
        recipe = str(workload.parallel.fp8_recipe)
        transposed = recipe in BLOCK_SCALED or "mxfp8" not in peaks

        def compute() -> BlockSync:
            reductions, gathers, params = _block_sync(workload, block)
            profile = self.framework
            fp8_params = profile.fp8_param_gather and str(workload.parallel.precision) == "fp8"
            weights, grads, optimizer, full = _block_states(
                workload,
                block,
                profile.fsdp_fp32_shards,
                profile.fp8_param_gather,
                transposed,
                distributed_fused_adam_state_bytes(profile, fp8_params),
            )
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
            return (
                reductions,
                gathers,
                States(states, saved, params, (full,), model, hardware),
            )

        key = ("block_sync", point.key, kind, point.state_key, transposed)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _transfer(self, point: Point) -> float:
        """One activation (or gradient) message between adjacent stages
        (:func:`~stage_explore.analytical.costs.stage_transfer_s`), memoised."""
        workload, system = point.workload, point.system
        mesh, tp = workload.mesh, workload.axis_sizes["tp"]
        size = boundary_bytes(workload)
        policy = self.policy
        gathered = tp > 1 and not workload.flags.sp and policy.p2p_scatter_gather
        first, second = mesh.rank_of({"pp": 0}), mesh.rank_of({"pp": 1})
        semantics = policy.point_to_point  # blocking (Megatron), separate (DeepSpeed), overlapped
        ends = (system.coordinates(first), system.coordinates(second))
        mesh_key = (point.table.names, point.table.shape)
        key = ("transfer", point.token, mesh_key, ends, size, tp, gathered, semantics)
        scatter = tp if gathered else 1
        ends_ranks = (first, second)
        return self._parts.get(  # type: ignore[no-any-return]
            key, lambda: stage_transfer_s(system, point.table, ends_ranks, size, scatter, semantics)
        )

    def _optimizer_s(self, point: Point, params: int) -> float:
        """The optimizer step over this rank's ``params``
        (:func:`~stage_explore.analytical.costs.optimizer_step_s`), memoised."""
        accelerator, dtype = point.system.accelerator, point.dtype
        grad_bytes = point.workload.grad_bytes
        foreach = self.framework.optimizer_foreach  # torch.optim.AdamW(foreach=True)
        return self._parts.get(  # type: ignore[no-any-return]
            ("optimizer", point.token, params, dtype, grad_bytes, foreach),
            lambda: optimizer_step_s(accelerator, dtype, params, grad_bytes, foreach),
        )

    def _process_bytes(self, tensor_peak_bytes: int, capacity_bytes: int) -> int:
        """What the process holds at the tensors' peak: the caching allocator's reserve
        (``allocator_overhead``) and the runtime's own buffers (``runtime_reserved_bytes``).
        The reserve is cached free blocks, which the allocator gives back when the device is
        full: on a failed ``cudaMalloc`` PyTorch's caching allocator frees its cached blocks
        and retries (c10/cuda/CUDACachingAllocator.cpp ``release_cached_blocks``; the
        ``num_alloc_retries`` of ``torch.cuda.memory_stats``: "failed cudaMalloc calls that
        result in a cache flush and retry"). So when the tensors and the runtime fit
        ``capacity_bytes`` the process holds at most the capacity; only they can exceed it."""
        profile = self.framework
        reserve = int(tensor_peak_bytes * profile.allocator_overhead)
        needed = tensor_peak_bytes + profile.runtime_reserved_bytes
        if needed > capacity_bytes:
            return needed + reserve
        return min(needed + reserve, capacity_bytes)

    def _held_bytes(self, point: Point, signature: tuple[Runs, ...], gathered: int) -> int:
        """Buffers a pipeline-stage class holds beside its model states, saved activations and
        the backward working set: the gathered ZeRO-3 parameters (``gathered``, the framework's
        rule), or under ``pp_unsharded_params`` (with ZeRO-3 and PP) the stage's whole
        parameters and unsharded gradients; and, on the stage holding the loss, what a loss
        on fp32 logits (``loss_fp32_buffers``; under ``loss_parallel`` with tp > 1,
        :data:`LOSS_PARALLEL_FP32_BUFFERS`) holds beyond the working set; under
        ``pipelining_stage_buffers`` with pp > 1, torch pipelining's receive buffers and kept
        outputs (:func:`~stage_explore.analytical.frameworks.pipelining_buffer_bytes`; the first
        stage's outputs in flight: ``min(pp, m)``, all ``m`` under GPipe)."""
        workload, profile = point.workload, self.framework
        parallel = workload.parallel
        held = gathered
        if profile.pp_unsharded_params and parallel.zero >= 3 and parallel.pp > 1:
            elements = sum(n * point.blocks[k].weight_elements for rs in signature for k, n in rs)
            held = max(held, elements * (workload.weight_bytes + workload.grad_bytes))
        if profile.pipelining_stage_buffers and parallel.pp > 1:
            chunks = [
                (any(k == "embedding" for k, _ in runs), any(k == "head" for k, _ in runs))
                for runs in signature
            ]
            m = workload.micro_batches
            in_flight = m if str(parallel.schedule) == "gpipe" else min(parallel.pp, m)
            held += pipelining_buffer_bytes(chunks, m, boundary_bytes(workload), in_flight)
        buffers = profile.loss_fp32_buffers
        if profile.loss_parallel and parallel.tp > 1:  # DTensor loss_parallel's backward
            buffers = LOSS_PARALLEL_FP32_BUFFERS
        if buffers:
            kinds = sorted({kind for runs in signature for kind, _ in runs})
            blocks = [point.blocks[k] for k in kinds]
            loss = loss_working_set(blocks, buffers, workload.weight_bytes)
            working_set: int = self._parts.get(
                ("working_set", point.key), lambda: recompute_working_set(workload, point.blocks)
            )
            held += max(0, loss - working_set)
        return held
