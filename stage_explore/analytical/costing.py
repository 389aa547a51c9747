"""Per-block timing of the analytical backend: bound blocks (memoised across candidates with
the same per-rank shapes) and a block kind's timing per phase on the compute and communication
streams as the timing policy runs it (its phase program: fusion, overlaps, SM sharing, the
framework's extra passes), with the compute share it loses beside NCCL collectives.

:class:`BlockCosting` holds these methods and inherits the communication costs
(:class:`~stage_explore.analytical.costing_comm.CommCosting`), the model states and memory
(:class:`~stage_explore.analytical.costing_states.StateCosting`), the framework's extra
passes (:class:`~stage_explore.analytical.passes.PhasePasses`) and the compute timer of a
block kind, per kernel or roofline
(:class:`~stage_explore.analytical.costing_compute.ComputeCosting`); the analytical backend
(:class:`~stage_explore.analytical.backend.AnalyticalBackend`) inherits them all through
:class:`~stage_explore.analytical.planning.StagePlanning` and owns the memos they read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from stage_core.blocks import Structure
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.compact import layer_pattern, mtp_blocks
from stage_core.lower.flops import AttentionFlops
from stage_core.lower.fp8 import fp8_block
from stage_core.lower.program import (
    Workload,
    bind_all,
    tie_embeddings,
)
from stage_core.lower.weightgrad import split_backward
from stage_core.models.spec import ModelSpec
from stage_explore.analytical.async_tp import (
    NCCL_ALL_REDUCE_SMS,
    async_grad_allreduce_rule,
    combine_rules,
    nccl_sm_share_s,
)
from stage_explore.analytical.blocktime import (
    BlockTiming,
    fuse_elementwise,
    imbalanced_timers,
    rank_imbalance,
    time_block,
)
from stage_explore.analytical.contention import (
    NcclLoad,
    beside_persistent,
    contended_share,
    nccl_channels,
    on_fewer_sms,
)
from stage_explore.analytical.context_parallel import cp_comm_timer
from stage_explore.analytical.costing_comm import CommCosting
from stage_explore.analytical.costing_compute import ComputeCosting
from stage_explore.analytical.costing_states import StateCosting
from stage_explore.analytical.fp8_gather import (
    UB_FP8_RECIPES,
    with_fp8_gathers,
)
from stage_explore.analytical.fp8_roles import fp8_key
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.funcol_copies import funcol_copy_bytes
from stage_explore.analytical.fused_expert_comm import fused_expert_timers
from stage_explore.analytical.gathered_logits import CROSS_ENTROPY, gathered_logits
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.micro_pipeline_tp import fused_reduce_bytes, micro_pipeline_rule
from stage_explore.analytical.overlap import (
    DEEPEP_SMS,
    RING_EXCHANGE_SMS,
    Bulk,
    OverlapRule,
    apply_overlaps,
    block_policy,
    concurrent_chunks,
    deepep_sm_share_s,
    overlap_rule,
    pipelined_chunks,
    pipelined_collectives,
    ring_exchange_chunks,
    runs_outside_nccl,
    sm_margin,
    ub_bulk_share_s,
)
from stage_explore.analytical.parts import (
    Memo,
    Point,
    axes_of,
    canonical,
    canonical_sizes,
)
from stage_explore.analytical.passes import PhasePasses
from stage_explore.analytical.persistent_gemm import bulk_gather_partners, persistent_bulk_s
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.analytical.te_context_parallel import te_ring_comm_timer
from stage_explore.analytical.ub_multicast import (
    pipelined_fprop_scatter,
    ub_multicast_collective,
    with_fp8_buffer_scatters,
)

#: The block kinds a model binds beyond the embedding and head: its distinct layer kinds in
#: order of first use, and its first multi-token-prediction block's (empty without MTP).
BlockKinds = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class PhaseProgram:
    """A block's instructions in one phase as the timing policy runs them, the timers they
    are taken with, the GEMMs sharing SMs with userbuffers kernels (``shared``) and those of
    them on every SM beside bulk kernels (``bulk_gemms``) or pipelined reduce-scatter chunks
    (``chunk_gemms``)."""

    instrs: tuple[Instr, ...]
    compute_s: Callable[[Instr], float]
    comm_s: Callable[[Instr], float]
    shared: frozenset[Instr]
    bulk_gemms: frozenset[Instr]
    chunk_gemms: frozenset[Instr]
    #: The overlap rule the instructions were rewritten with (the policy's, narrowed to the
    #: collectives PyTorch's async TP fuses under ``micro_pipeline_tp``), None: no overlap.
    rule: OverlapRule | None = None
    #: HBM bytes the compute stream moves beside the instructions: PyTorch async TP's
    #: reductions of its fused matmul-reduce-scatters (``micro_pipeline_tp``).
    extra_bytes: int = 0
    #: The collectives' own seconds before a context-parallel ring's exposure charge
    #: (:func:`~stage_explore.analytical.context_parallel.cp_comm_timer`,
    #: :func:`~stage_explore.analytical.te_context_parallel.te_ring_comm_timer`): the trace
    #: mode runs the ring and times what it emits with these; None: ``comm_s``.
    base_comm_s: Callable[[Instr], float] | None = None


class BlockCosting(CommCosting, StateCosting, PhasePasses, ComputeCosting):
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

    def _model_facts(self, model: ModelSpec) -> tuple[tuple[str, ...], Structure, BlockKinds]:
        """The model's :func:`~stage_core.lower.compact.layer_pattern` (it walks every
        layer), its :class:`~stage_core.blocks.Structure` and the block kinds
        :func:`~stage_core.lower.program.bind_all` binds for it (its distinct layer kinds and
        its first multi-token-prediction block's), memoised by the model object (a study
        evaluates one model many times)."""

        def compute() -> tuple[ModelSpec, tuple[str, ...], Structure, BlockKinds]:
            pattern = layer_pattern(model)
            kinds = (tuple(dict.fromkeys(pattern)), mtp_blocks(model)[:1])
            return model, pattern, Structure.of(model), kinds

        entry = self._patterns.get(id(model), compute)
        if entry[0] is not model:  # another object got the id of a collected one
            entry = self._patterns.items[id(model)] = compute()
        return entry[1], entry[2], entry[3]

    def _bound(self, workload: Workload) -> tuple[int, dict[str, BoundBlock]]:
        """Bound blocks, shared by every candidate with the same per-rank shapes: blocks never
        communicate over pp or dp, so those degrees enter only as "1 or more" (and dp through
        the global micro-batch B, whose per-rank share is the micro-batch either way). The key
        holds the block kinds bound (two models of one structure and sizes may lay out
        different kinds: a first dense layer, an MoE interval) and what the compute timer
        reads beyond the blocks: the number it returns names both in the memos."""
        sizes, axis_sizes = canonical_sizes(workload)  # canonical(workload)'s, built on a miss
        parallel, model = workload.parallel, workload.model
        fp8 = parallel.quantized  # FP8 (FP4) copies of saved inputs (lower.fp8)
        _, structure, kinds = self._model_facts(model)
        key = (
            structure, kinds, workload.options, workload.flags,
            str(parallel.recompute), tuple(sorted(sizes.items())),
            tuple(sorted(axis_sizes.items())), model.tied_embeddings,
            parallel.pp == 1, parallel.recompute_modules,
            parallel.recompute_num_layers is not None,  # binds the kept layers' kinds too
            parallel.recompute_method == "uniform",  # and the grouped layers' kinds
            (parallel.linear_recipe, parallel.fp8_gemms) if fp8 else (),
            (model.router_groups, model.router_group_topk),  # DeepEP's shares (s27 mbvrest)
            # what the blocks' compute timer (_compute_timer) reads beyond the blocks, so that
            # every memo keyed on this number tells them apart (s31 memo2): routing_share's
            # dropless routing (capacity 1.0 and dropless bind the same slots C) and the
            # fused weight-gradient accumulator's bytes (_wgrad_accumulator: grad_fp32)
            model.capacity_factor is None, workload.grad_bytes,
        )  # fmt: skip

        def compute() -> tuple[int, dict[str, BoundBlock]]:  # a number names them in keys
            return self._token(), tie_embeddings(workload, bind_all(canonical(workload)))

        return self._blocks.get(key, compute)  # type: ignore[no-any-return]

    def _block_timing(
        self, point: Point, kind: str, phase: str, spans: dict[tuple[str, ...], Any]
    ) -> BlockTiming:
        """A block's timing with its element-wise chains fused; ``spans`` maps its
        collectives' axes to the rank's groups."""
        axes_list = self._axes(point, kind)
        shapes = tuple(spans[a][0] for a in axes_list)
        dtype = point.dtype

        policy = self.policy
        async_rule = self._overlap_rules(point, kind)[1]
        accumulate_s = self._grad_accumulation_s(point, kind) if phase in ("bwd", "bwd_w") else 0.0
        accumulate_s += self._param_cast_s(point, kind, phase)  # 0 unless fsdp_param_fp32
        accumulate_s += self._fsdp2_copies_s(point, kind, phase)  # 0 unless fsdp2_copies
        accumulate_s += self._flat_grad_s(point, kind, phase)  # 0 unless fsdp1_flat_grad
        accumulate_s += self._fp8_weight_casts_s(point, kind, phase)  # torchao Float8Linear

        def compute() -> BlockTiming:
            program = self._phase_program(point, kind, phase, spans)
            instrs, shared, bulk_gemms = program.instrs, program.shared, program.bulk_gemms
            rule = program.rule
            self._parts.get(  # kept for _contention_share, which times them again
                self._computes_key(point, kind, phase, shapes),
                lambda: tuple(i for i in instrs if i.collective is None and i.kind != "ring"),
            )
            chunk_gemms = program.chunk_gemms
            compute_s, comm_s = program.compute_s, program.comm_s
            kernels = point.system.accelerator.kernels
            timing = time_block(  # under torch.distributed: behind the compute issued before
                instrs, compute_s, comm_s, policy.collectives_wait_for_issued_compute
            )
            if bulk_gemms and kernels is not None and rule is not None:
                bulk_s = sum(comm_s(i) for i in instrs if isinstance(rule(i), Bulk))
                gemm_s = sum(compute_s(i) for i in bulk_gemms)
                if kernels.persistent_gemm:  # the GEMMs' blocks wait for the bulk kernels' SMs
                    gathers, beside = bulk_gather_partners(instrs, rule)  # and the gathers'
                    lost_s = persistent_bulk_s(bulk_s, gemm_s) + persistent_bulk_s(
                        sum(comm_s(i) for i in gathers), sum(compute_s(i) for i in beside)
                    )
                else:  # bulk kernels' SMs beside full-grid GEMMs, tiles placed as SMs free
                    lost_s = ub_bulk_share_s(bulk_s, gemm_s, kernels.sm_count)
                timing = timing.plus_compute(lost_s)
            if chunk_gemms and kernels is not None:
                lost_s = ub_bulk_share_s(  # reduce-scatter chunks beside whole-grid GEMM chunks
                    sum(comm_s(i) for i in pipelined_collectives(instrs)),
                    sum(compute_s(i) for i in chunk_gemms),
                    kernels.sm_count,
                )
                timing = timing.plus_compute(lost_s)
            if async_rule is not None and shared and kernels is not None:
                bulk = [i for i in instrs if async_rule(i) is not None]
                channels = max(  # the tp group's dim's figure, else the A100 node's 24
                    (nccl_channels(point.system, spans[i.axes][0][1]) for i in bulk), default=0
                )  # fmt: skip
                reduce_s = sum(comm_s(i) for i in bulk)
                wgrad_s = sum(compute_s(i) for i in shared)
                if kernels.persistent_gemm:  # issued after the collective, on every SM
                    lost_s = persistent_bulk_s(reduce_s, wgrad_s)
                else:  # NCCL's blocks beside the weight gradients
                    lost_s = nccl_sm_share_s(
                        reduce_s, wgrad_s, kernels.sm_count, channels or NCCL_ALL_REDUCE_SMS
                    )
                timing = timing.plus_compute(lost_s)
            flex = self.framework.moe_deepep or self.framework.moe_hybridep
            if flex and rule is not None and kernels is not None:
                deepep_s = sum(  # DeepEP's all-to-alls beside compute take SMs from it
                    comm_s(i) for i in instrs if self._deepep_all_to_all(point, i)
                )
                sms = self.framework.moe_hybridep_sms if self.framework.moe_hybridep else DEEPEP_SMS
                lost_s = deepep_sm_share_s(deepep_s, timing.compute_s, kernels.sm_count, sms)
                timing = timing.plus_compute(lost_s)
            if program.extra_bytes:  # memory-bound kernels on the compute stream
                accelerator = point.system.accelerator
                timing = timing.plus_compute(
                    program.extra_bytes
                    / accelerator.achieved_memory_bandwidth_bytes_per_s
                )
            if accumulate_s == 0.0:
                return timing
            # the accumulation kernels run on the compute stream, at the end
            return timing.plus_compute(accumulate_s)

        parallel = point.workload.parallel
        fp8 = fp8_key(parallel.linear_recipe, parallel.fp8_gemms, dtype)
        key = (point.key, kind, phase, point.token, shapes, dtype, fp8, accumulate_s)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _contention_share(
        self,
        point: Point,
        kind: str,
        phase: str,
        spans: dict[tuple[str, ...], Any],
        load: NcclLoad,
    ) -> float:
        """The share of its rate block ``kind``'s compute in ``phase`` loses while an NCCL
        collective taking ``load`` runs beside it (:func:`~stage_explore.analytical.
        contention.contended_share`; 0 without a kernel model or a load), memoised."""
        kernels = point.system.accelerator.kernels
        if not load or kernels is None:
            return 0.0
        shapes = tuple(spans[a][0] for a in self._axes(point, kind))
        base_key = self._computes_key(point, kind, phase, shapes)

        def computes() -> tuple[Instr, ...]:  # the block timing's, unless evicted
            instrs = self._phase_program(point, kind, phase, spans).instrs
            return tuple(i for i in instrs if i.collective is None and i.kind != "ring")

        def timed() -> tuple[KernelTimer, tuple[Instr, ...], float]:
            timer = cast(KernelTimer, self._compute_timer(point, kind))  # kernels: a KernelTimer
            instrs: tuple[Instr, ...] = self._parts.get(base_key, computes)
            return timer, instrs, sum(timer(i) for i in instrs)

        def compute() -> float:
            timer, instrs, alone = self._parts.get(("timed", *base_key), timed)
            fewer = on_fewer_sms(timer, load)
            if fewer is None:
                return 0.0
            if kernels.persistent_gemm:  # GEMM blocks wait for the SMs the collective holds
                persistent = beside_persistent(timer, fewer, load.channels)
                return contended_share(instrs, alone, persistent)
            return contended_share(instrs, alone, fewer)

        return self._parts.get((*base_key, load), compute)  # type: ignore[no-any-return]

    def _computes_key(
        self, point: Point, kind: str, phase: str, shapes: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        """The memo key of block ``kind``'s compute instructions in ``phase`` as its timing
        runs them (what :meth:`_contention_share` times again on fewer SMs)."""
        parallel = point.workload.parallel
        fp8 = fp8_key(parallel.linear_recipe, parallel.fp8_gemms, point.dtype)
        return ("computes", point.key, kind, phase, point.token, shapes, point.dtype, fp8)

    def _overlap_rules(
        self, point: Point, kind: str
    ) -> tuple[OverlapRule | None, OverlapRule | None]:
        """The collectives the policy takes off block ``kind``'s path (:func:`overlap_rule`
        combined with the asynchronous tp all-reduce's), and the latter alone; the embedding's
        and output layers' under the policy without userbuffers (:func:`block_policy`)."""
        policy, workload = block_policy(self.policy, kind), point.workload
        rule = overlap_rule(  # the dense tp, and the mesh's inner tp when split (1 < etp < tp)
            policy,
            workload.parallel.tp,
            workload.flags.sp,
            workload.axis_sizes["tp"],
            expert_tp_overlap=self.framework.micro_pipeline_tp,  # userbuffers: never experts'
            ring_exchange=self.framework.ub_ring_exchange_fprop,  # the recipe's ub methods
        )
        async_rule = async_grad_allreduce_rule(  # Megatron's async tp all-reduce / SP scatter
            policy, workload.parallel.tp, workload.flags.sp
        )
        return combine_rules(rule, async_rule), async_rule

    def _phase_program(
        self, point: Point, kind: str, phase: str, spans: dict[tuple[str, ...], Any]
    ) -> PhaseProgram:
        """A block's instructions in ``phase`` as the policy runs them (fused, overlaps
        applied) and the timers :func:`time_block` takes them with (per-kernel compute on the
        busiest expert-parallel rank, userbuffers' SM margin, α–β collectives over ``spans``);
        the trace mode (:mod:`~stage_explore.analytical.trace_mode`) emits and times the same."""
        block, policy = point.blocks[kind], block_policy(self.policy, kind)
        rule, async_rule = self._overlap_rules(point, kind)
        instrs = block.fwd if phase == "fwd" else block.bwd
        if phase in ("bwd_b", "bwd_w"):  # zero-bubble split (lower/weightgrad.py)
            halves = split_backward(block)
            instrs = halves.input_grad if phase == "bwd_b" else halves.weight_grad
        instrs = self._fused_projections(instrs, frozenset(w.name for w in block.weights))
        tp = point.workload.parallel.tp
        if self.framework.loss_logits_gathered and tp > 1 and not self.framework.loss_parallel:
            losses = frozenset(i.name for i in block.fwd if i.kind == CROSS_ENTROPY)
            instrs = gathered_logits(instrs, tp, losses)  # the head's Replicate() logits
        gathered = self._fp8_gathered(point, kind)
        instrs = with_fp8_gathers(  # userbuffers gather FP8 linear inputs (fp8_gather.py)
            instrs, gathered, point.workload.parallel.linear_recipe
        )
        fp8_buffers, atomic = self._fprop_scatter_kinds(point, kind)
        if rule is not None and fp8_buffers:  # recipe fp8_buf: the pipelined RS on FP8 bytes
            instrs = with_fp8_buffer_scatters(instrs, rule, fp8_buffers)
        if self.framework.fused_elementwise:
            instrs = fuse_elementwise(instrs)
        extra_bytes = 0
        if rule is not None and self.framework.micro_pipeline_tp and self.framework.tp_comm_overlap:
            rule = micro_pipeline_rule(rule, instrs)  # PyTorch async TP: GEMM-adjacent only
            extra_bytes = fused_reduce_bytes(instrs, rule)  # its partials' sum, on compute
        if self.framework.funcol_seq_copies and point.workload.flags.sp:
            fused_rule = rule if self.framework.tp_comm_overlap else None  # async TP's
            extra_bytes += funcol_copy_bytes(  # DTensor's dim-1 gathers' / scatters' cat
                instrs,
                self.framework.fused_elementwise,
                lambda i: fused_rule is not None and fused_rule(i) is not None,
                gathered,
            )
        outside_nccl = runs_outside_nccl(  # userbuffers / symmetric memory: no NCCL call
            policy, point.workload.parallel.tp, point.workload.flags.sp, rule
        )
        timer = self._compute_timer(point, kind)
        imbalance = rank_imbalance(self.framework.moe_load_imbalance, point.workload.parallel.ep)
        compute_s, comm_s = imbalanced_timers(  # the busiest expert-parallel rank
            timer,
            lambda i: self._comm_time(point, spans[i.axes], i, nccl=not outside_nccl(i)),
            imbalance,
        )
        if self.framework.moe_fused_expert_comm:  # Dist-MoE's fused dispatch / GEMM / combine
            kernel_s = timer.gemm_kernel_s if isinstance(timer, KernelTimer) else None
            compute_s, comm_s = fused_expert_timers(
                instrs, frozenset(w.name for w in block.weights if w.expert), compute_s, comm_s,
                imbalanced_timers(kernel_s, comm_s, imbalance)[0] if kernel_s else None,
            )  # fmt: skip
        instrs, shared = apply_overlaps(instrs, policy, rule)  # the policy's rewrites
        if self.framework.cuda_device_max_connections > 1:  # TE's chunks on 3 queues at once
            compute_s = concurrent_chunks(compute_s, pipelined_chunks(shared))
        rings = ring_exchange_chunks(shared)  # userbuffers ring-exchange reduce-scatters
        if rings:  # two chunks in flight on any queue count (split_overlap_rs)
            compute_s = concurrent_chunks(compute_s, rings)
            comm_s = self._ring_exchange_sends(point, spans, comm_s)
        framework = self.framework
        if rule is not None and framework.ub_multicast and not framework.micro_pipeline_tp:
            multicast_rule = rule  # TE's pipeline / bulk kernels on CUDA multicast (sm_90+)
            comm_s = self._ub_multicast(
                point, spans, comm_s,
                lambda i: outside_nccl(i)
                and ub_multicast_collective(i, multicast_rule)
                and not pipelined_fprop_scatter(i, multicast_rule, fp8_buffers | atomic),
            )  # fmt: skip
        kernels = point.system.accelerator.kernels
        bulk_gemms: frozenset[Instr] = frozenset()
        chunk_gemms: frozenset[Instr] = frozenset()
        if shared and kernels is not None and async_rule is None:
            # userbuffers' GEMMs run on the SMs their kernels leave, where the overlap sets
            # set_sm_margin (ub_bulk_sm_margin, ub_pipeline_sm_margin); otherwise on every
            # SM, losing the kernel's SMs while it runs (ub_bulk_share_s below)
            chunks = pipelined_chunks(shared)
            if not self.framework.ub_bulk_sm_margin:
                bulk_gemms = shared - chunks - rings
            if not self.framework.ub_pipeline_sm_margin:
                chunk_gemms = chunks
            margined = shared - bulk_gemms - chunk_gemms - rings
            compute_s = sm_margin(compute_s, margined, kernels.sm_count)
            compute_s = sm_margin(compute_s, rings, kernels.sm_count, RING_EXCHANGE_SMS)
        cp = point.workload.axis_sizes.get("cp", 1)
        base_comm_s = comm_s
        if self.framework.cp_merge_fp32 and cp > 1:  # torch context_parallel's K/V traffic
            message = self._cp_message(point, spans)
            comm_s = cp_comm_timer(instrs, cp, comm_s, compute_s, message, self._cp_traced)
        elif self.framework.te_cp_overlap and cp > 1 and point.workload.parallel.cp_style == "ring":
            comm_s = te_ring_comm_timer(instrs, cp, comm_s, compute_s)  # TE: step i || msg i+1
        return PhaseProgram(
            tuple(instrs), compute_s, comm_s, shared, bulk_gemms, chunk_gemms, rule, extra_bytes,
            base_comm_s,
        )  # fmt: skip

    def _fprop_scatter_kinds(
        self, point: Point, kind: str
    ) -> tuple[frozenset[str], frozenset[str]]:
        """The userbuffers names (``proj``, ``fc2``) of block ``kind``'s pipelined forward
        reduce-scatters that run on FP8 buffers (the recipe's ``fp8_buf``: framework options
        ``ub_proj_fprop_fp8_buf`` / ``ub_fc2_fprop_fp8_buf``) and of those that are atomic-GEMM
        reduce-scatters (``atomic_gemm``: ``ub_proj_fprop_atomic_gemm`` /
        ``ub_fc2_fprop_atomic_gemm``); both only in an FP8 run (its forward GEMMs too) under
        Transformer Engine's userbuffers overlap, FP8 buffers only with a recipe they take
        (:mod:`~stage_explore.analytical.ub_multicast`)."""
        framework = self.framework
        parallel = point.workload.parallel
        if (
            point.dtype != "fp8"
            or "fprop" not in parallel.fp8_gemms
            or not framework.tp_comm_overlap
            or framework.micro_pipeline_tp
            or not fp8_block(kind)
        ):
            return frozenset(), frozenset()
        fp8_buffers = frozenset(
            name
            for name, on in (
                ("proj", framework.ub_proj_fprop_fp8_buf),
                ("fc2", framework.ub_fc2_fprop_fp8_buf),
            )
            if on and parallel.linear_recipe in UB_FP8_RECIPES
        )
        atomic = frozenset(
            name
            for name, on in (
                ("proj", framework.ub_proj_fprop_atomic_gemm),
                ("fc2", framework.ub_fc2_fprop_atomic_gemm),
            )
            if on
        )
        return fp8_buffers, atomic

    def _axes(self, point: Point, kind: str) -> list[tuple[str, ...]]:
        block = point.blocks[kind]
        return self._parts.get(("axes", point.key, kind), lambda: axes_of(block))  # type: ignore[no-any-return]
