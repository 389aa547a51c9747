"""The analytical backend: step time, its breakdown, MFU, memory and feasibility in about a ms.

For one (model, parallel config, system) point, under a framework profile
(:mod:`~stage_explore.analytical.frameworks`), it

1. binds the generator's blocks (memoised: candidates with the same per-rank shapes share them);
2. times every block kind on a compute and a communication stream
   (:mod:`~stage_explore.analytical.blocktime`): compute per kernel
   (:mod:`~stage_explore.analytical.kernels`; the roofline with efficiencies for systems without
   a kernel table), collectives by α–β over the network dims their group spans at each dim's
   achieved bus bandwidth, the communication the profile overlaps taken off the critical path
   (:mod:`~stage_explore.analytical.overlap`);
3. simulates the pipeline schedule (:mod:`~stage_explore.analytical.pipeline`) with the
   profile's activation transfers between stages (:mod:`~stage_explore.analytical.costs`);
4. overlaps each chunk's bucketed gradient synchronisation with its last backward, then adds
   the optimizer step and ZeRO's parameter gathers;
5. computes every pipeline stage's peak memory exactly as ``stage memory``, plus what the
   process holds besides tensors (the profile's runtime reserve and allocator overhead).

Step time is the slowest pipeline rank's ``max(pipeline end, gradient sync end) + optimizer +
parameter gathers``; its breakdown (``compute``, ``exposed_<collective>``, ``pipeline_p2p``,
``pipeline_bubble``, ``exposed_gradient_sync``, ``optimizer``, ``parameter_gather``) adds up to
the step time.

Speed: a configuration's *plan* — everything that depends neither on the schedule nor on the
number of micro-batches — is computed once per distinct pipeline-stage class from memoised
parts (bound blocks, block timings, bucketed reductions, model states), then the schedule is
simulated. All memos are bounded LRUs owned by the backend instance (no module state);
``cache_stats()`` reports them; the memo and its value types live in
:mod:`~stage_explore.analytical.parts`.

Size: the per-block cost methods (bound blocks, collectives, ZeRO and gradient-sync costs, block
timings, the compute timer, transfers, the optimizer step) live in
:mod:`~stage_explore.analytical.costing` as a mixin; this module keeps the orchestration of one
evaluation (plan, chunk, kind, step, result).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from stage_core.blocks import mtp_layer_of_block
from stage_core.errors import ConfigError, InfeasibleError
from stage_core.lower.compact import Runs, bucket_gradients, chunk_runs, layout_key
from stage_core.lower.emit import GroupTable
from stage_core.lower.flops import DEFAULT_ATTENTION_FLOPS, AttentionFlops
from stage_core.lower.memory import recompute_working_set
from stage_core.lower.nodes import _zero_collectives
from stage_core.lower.program import (
    PIPELINE_ENDS,
    PIPELINE_MIRROR,
    Workload,
    make_workload,
)
from stage_core.lower.schedule import SPLIT_BACKWARD, global_stage
from stage_core.lower.weightgrad import split_backward
from stage_core.models.layers import is_layer_block
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.blocktime import BlockCost, chunk_timing, sync_timing
from stage_explore.analytical.buckets import UNBUCKETED, grad_bucket_bytes
from stage_explore.analytical.costing import BlockCosting
from stage_explore.analytical.costs import (
    LOSS_SCALING_BYTES_PER_PARAM,
    OPTIMIZER_EXTRA_BYTES_PER_PARAM,
)
from stage_explore.analytical.frameworks import (
    DEFAULT_FRAMEWORK,
    FrameworkProfile,
    get_framework,
    local_schedule_micro_batches,
    zero3_gathered_bytes,
)
from stage_explore.analytical.kernels import (
    fp8_key,
)
from stage_explore.analytical.parts import (
    ChunkParts,
    KindParts,
    Memo,
    Plan,
    Point,
    axes_of,
    compute_dtype,
    infeasible,
    sum_states,
    tied_ends,
)
from stage_explore.analytical.pipeline import (
    PipelineResult,
    StageClass,
    StageTimes,
    Step,
    StepPlan,
    SyncCost,
    assemble_step,
    pair_table,
    step_time,
)
from stage_explore.analytical.policy import Overlap, TimingPolicy
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.system.model import System

#: Achieved fraction of each network dim's link bandwidth (dim 0 = the scale-up domain; the
#: last value applies to further dims). NCCL's bus bandwidth on DGX A100 is ~200–230 GB/s of the
#: 300 GB/s NVLink per direction for large all-reduces (nccl-tests reports, e.g.
#: NVIDIA/nccl-tests#149 and #178: 200–208 GB/s); HDR InfiniBand reaches 85–96 % of 25 GB/s per
#: GPU (NVIDIA/nccl-tests#119: 84.8 average, 96 peak of 100 GB/s over four HDR ports).
DEFAULT_NETWORK_EFFICIENCY: tuple[float, ...] = (0.7, 0.9)


__all__ = [
    "DEFAULT_NETWORK_EFFICIENCY",
    "LOSS_SCALING_BYTES_PER_PARAM",
    "OPTIMIZER_EXTRA_BYTES_PER_PARAM",
    "AnalyticalBackend",
]


class AnalyticalBackend(BlockCosting, BaseBackend):
    """Per-kernel compute (or the roofline with efficiencies), α–β collectives over the network
    dims a group spans at NCCL's achieved bandwidth, the communication the framework profile
    overlaps, in-order compute and communication streams within a block, an event simulation
    across pipeline stages.

    ``network_efficiency``: achieved fraction of each network dim's bandwidth (dim 0 first; the
    last value repeats), default :data:`DEFAULT_NETWORK_EFFICIENCY`. ``cache_size`` bounds the
    memos (bound blocks; plans, steps and pipeline timelines are bounded at 16× it, parts at
    64×).
    ``framework`` names a :data:`~stage_explore.analytical.frameworks.FRAMEWORKS` profile
    (default :data:`~stage_explore.analytical.frameworks.DEFAULT_FRAMEWORK`) and ``overrides``
    replaces some of its options (``{"tp_comm_overlap": False}``). ``attention_flops`` is the
    attention-FLOP convention of MFU/HFU (:class:`~stage_core.lower.flops.AttentionFlops`:
    ``"full"``, the default, or ``"causal"``); it changes the reported FLOPs, never the time.
    """

    name = "analytical"

    def __init__(
        self,
        cache_size: int = 1024,
        network_efficiency: Sequence[float] = DEFAULT_NETWORK_EFFICIENCY,
        framework: str = DEFAULT_FRAMEWORK,
        overrides: Mapping[str, Any] | None = None,
        attention_flops: str = DEFAULT_ATTENTION_FLOPS,
    ) -> None:
        if attention_flops not in tuple(AttentionFlops):
            known = ", ".join(repr(str(a)) for a in AttentionFlops)
            raise ConfigError(f"`attention_flops` must be {known}, but got {attention_flops!r}")
        self.attention_flops = AttentionFlops(attention_flops)
        efficiency = tuple(network_efficiency)
        if not efficiency or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and 0 < x <= 1
            for x in efficiency
        ):
            raise ConfigError(
                "`network_efficiency` must be a non-empty list of numbers in (0, 1], "
                f"but got {network_efficiency!r}"
            )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ConfigError(f"`cache_size` must be a positive int, but got {cache_size!r}")
        self.cache_size = cache_size
        self.network_efficiency = efficiency
        self.framework: FrameworkProfile = get_framework(framework).with_overrides(overrides or {})
        self.policy = TimingPolicy.from_profile(self.framework)
        self._overrides = dict(overrides or {})
        self._blocks = Memo(cache_size)
        self._plans = Memo(cache_size * 16)  # a 10,000-candidate sweep has ~7,300 plans
        self._steps = Memo(cache_size * 16)
        self._timelines = Memo(cache_size * 16)
        self._parts = Memo(cache_size * 64)
        self._systems = Memo(64)
        self._plan_numbers = Memo(cache_size * 16)
        self._patterns = Memo(64)  # by the model object's identity
        self._tokens = 0

    def __getstate__(self) -> dict[str, Any]:
        return {
            "cache_size": self.cache_size,
            "network_efficiency": self.network_efficiency,
            "framework": self.framework.name,
            "overrides": self._overrides,
            "attention_flops": str(self.attention_flops),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["cache_size"],
            state["network_efficiency"],
            state.get("framework", DEFAULT_FRAMEWORK),
            state.get("overrides"),
            state.get("attention_flops", DEFAULT_ATTENTION_FLOPS),
        )

    def cache_stats(self) -> dict[str, dict[str, int]]:
        """Hits, misses and entries of each memo (for benchmarks)."""
        memos = {
            "blocks": self._blocks, "plans": self._plans, "steps": self._steps,
            "timelines": self._timelines, "parts": self._parts,
        }  # fmt: skip
        return {
            name: {"hits": memo.hits, "misses": memo.misses, "entries": len(memo.items)}
            for name, memo in memos.items()
        }

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation:
        workload = make_workload(model, parallel)
        gpus = workload.world_size
        if gpus > system.max_gpus:
            return infeasible(f"{gpus} GPUs exceed the system's {system.max_gpus}", gpus, system)
        try:
            key, blocks = self._bound(workload)
        except InfeasibleError as error:
            return infeasible(error.reason, gpus, system)
        net, token = self._network(system)
        dtype = compute_dtype(parallel, system)
        axis_sizes = tuple(workload.axis_sizes.items())
        fp8 = fp8_key(str(parallel.fp8_recipe), parallel.fp8_gemms, dtype)
        plan_key = (
            key, token, dtype, parallel.zero, axis_sizes, workload.mesh.names,
            workload.grad_bytes, parallel.grad_bucket_bytes, self._layout_key(workload), fp8,
            str(parallel.schedule) if str(parallel.schedule) in SPLIT_BACKWARD else "",
        )  # fmt: skip

        def plan() -> Plan:
            table = self._parts.get(("groups", workload.mesh), lambda: GroupTable(workload.mesh))
            state_key = (
                parallel.zero, axis_sizes, workload.mesh.names, workload.expert_axes,
                workload.grad_bytes, workload.weight_bytes, workload.optimizer_bytes, fp8,
            )  # fmt: skip
            return self._plan(Point(workload, key, blocks, net, token, dtype, table, state_key))

        number: int = self._plan_numbers.get(plan_key, self._token)  # names it in the memos
        planned: Plan = self._plans.get(number, plan)
        kind, m, vpp = str(parallel.schedule), workload.micro_batches, parallel.vpp
        per_schedule = local_schedule_micro_batches(self.framework, parallel, m)
        schedules = m // per_schedule
        step: Step = self._steps.get(
            (number, kind, m, schedules),
            lambda: assemble_step(planned.step, kind, per_schedule, vpp, self._timeline, schedules),
        )
        scale = (m // 2 if kind == "dualpipe" else m) * (gpus // parallel.pp)  # per chunk
        flops = (planned.model_flops * scale, planned.hardware_flops * scale)
        return self._result(workload, step, flops, system)

    def _timeline(
        self, kind: str, stages: tuple[StageTimes, ...], m: int, vpp: int, transfer_s: float
    ) -> PipelineResult:
        """:func:`~stage_explore.analytical.pipeline.step_time`, memoised by its arguments
        (the values themselves: an exact memo; plans differing only in gradient
        synchronisation, model states or the optimizer, e.g. ZeRO 0 and 1, share it)."""
        return self._timelines.get(  # type: ignore[no-any-return]
            (kind, stages, m, vpp, transfer_s),
            lambda: step_time(kind, stages, m, vpp, transfer_s),
        )

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
        transfer = self._transfer(point) if p > 1 else 0.0
        working_set = self._parts.get(
            ("working_set", point.key), lambda: recompute_working_set(workload, point.blocks)
        )
        plan = StepPlan(tuple(stage_class), tuple(c for c, _ in classes), transfer, working_set)
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
        states_bytes = params = model = hardware = 0
        for part in parts:
            for label, seconds in part.timing.exposed_s:
                exposed[label] = exposed.get(label, 0.0) + seconds
            compute_s += part.timing.compute_s
            states = part.states
            states_bytes += states.states_bytes
            params += states.params
            model += states.model_flops
            hardware += states.hardware_flops
        gathered_bytes = 0
        if workload.parallel.zero >= 3:  # the gathered weights held at once (the framework's rule)
            present = {kind for runs in signature for kind, _ in runs}
            tensor = max((w.elements for k in present for w in point.blocks[k].weights), default=0)
            blocks_bytes = [x for part in parts for x in part.states.largest]
            gathered_bytes = zero3_gathered_bytes(
                self.framework, blocks_bytes, tensor, workload.weight_bytes
            )
        dualpipe = str(workload.parallel.schedule) == "dualpipe"
        stage_class = StageClass(
            forward_s=tuple(part.timing.forward_s for part in parts),
            backward_s=tuple(part.timing.backward_s for part in parts),
            sync=tuple(part.sync for part in parts),
            saved_bytes=tuple(part.states.saved_bytes for part in parts),
            compute_s=compute_s,
            exposed_s=tuple(sorted(exposed.items())),
            states_bytes=states_bytes,
            buffers_bytes=self._held_bytes(point, signature, gathered_bytes),
            optimizer_s=self._optimizer_s(point, params),
            input_grad_s=tuple(p.input_grad_s for p in parts if p.input_grad_s is not None),
            pending_bytes=tuple(p.pending_bytes for p in parts if p.input_grad_s is not None),
            pair_s=pair_table(
                [p.timing.forward_s for p in parts], [p.compute_s[0] for p in parts],
                [p.timing.backward_s for p in parts], [p.compute_s[1] for p in parts],
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
        timing = chunk_timing(runs, costs, zero, root)
        w_timing = chunk_timing(runs, w_costs, zero, root) if split else timing
        input_grad_s = pending = None
        computes = (0.0, 0.0)
        if split:
            input_grad_s = chunk_timing(runs, b_costs, zero, root).backward_s
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
        for bucket, size, first, step, count, _ in bucket_gradients(backward, limit):
            grad_total += size * count
            collective, axes = cast(tuple[CollectiveKind, tuple[str, ...]], bucket)
            seconds = self._collective_time(point, spans[axes], collective, size)
            groups.append((seconds, first, step, count))
        total, latest = sync_timing(groups, w_timing.backward_runs)  # after W, if split
        gathered: dict[tuple[str, ...], int] = {}
        for kind, count in reversed(runs):
            for axes, size in kinds[kind].sync[1].items():
                gathered[axes] = gathered.get(axes, 0) + count * size
        gather = 0.0
        for axes, size in gathered.items():
            gather += self._collective_time(point, spans[axes], CollectiveKind.ALL_GATHER, size)
        tied = self._tied_sync_s(point, runs, spans)  # after the chunk's whole backward
        gather_overlapped = Overlap.PARAM_GATHER in self.policy.overlaps
        if gather_overlapped and not bucketed:
            # one all-gather for the chunk, dispatched before an earlier forward: at the step's
            # start on a later pipeline stage (waiting for its first input), with the previous
            # chunk's first forward for a later virtual chunk (Megatron-Core 0.8 chains every
            # chunk's gathers; NeMo/Megatron-Bridge set align_param_gather with vp > 1, whose
            # schedule dispatches chunk k+1's gather when chunk k's first forward starts):
            # hidden behind one forward of the chunk
            gather = max(0.0, gather - timing.forward_s)
        elif gather_overlapped:  # during the next step's first forward
            # one bucket at a time (Megatron-Core: the first bucket's all-gather is launched
            # just before the forward and waited for by its first layer; each next one when the
            # previous ends): the first bucket's share is exposed, the rest behind the forward
            share = min(1.0, limit / grad_total) if grad_total else 1.0
            head = sum(
                self._collective_time(point, spans[axes], CollectiveKind.ALL_GATHER, int(n * share))
                for axes, n in gathered.items()
            )
            gather = head + max(0.0, gather - head - timing.forward_s)
        states = sum_states([(kinds[kind].sync[2], count) for kind, count in runs])
        sync = SyncCost(total + tied, latest + tied, gather)
        return ChunkParts(timing, sync, states, input_grad_s, pending or 0, computes)

    def _block_costs(
        self, point: Point, kind: str, parts: KindParts, spans: dict[Any, Any], split: bool
    ) -> tuple[BlockCost, BlockCost, BlockCost]:
        """A block kind's forward and backward timing and its ZeRO collectives' seconds on
        this rank; under a split backward also the B and the W part as the backward
        (memoised by the shapes of the groups they span)."""
        shapes = tuple(spans[axes][0] for axes in parts.cost_axes)

        def compute() -> tuple[BlockCost, BlockCost, BlockCost]:
            gather_s = sum(self._zero_time(point, spans[i.axes], i) for i in parts.gathers)
            scatter_s = sum(self._zero_time(point, spans[i.axes], i) for i in parts.scatters)
            if (
                self.framework.zero3_gathers == 3
                and str(point.workload.parallel.recompute) != "none"
                and (is_layer_block(kind) or mtp_layer_of_block(kind))
            ):  # the recomputed forward gathers again before the backward's own gather
                scatter_s += gather_s
            cost = BlockCost(
                self._block_timing(point, kind, "fwd", spans),
                self._block_timing(point, kind, "bwd", spans),
                gather_s,
                scatter_s,
            )
            if not split:
                return cost, cost, cost
            b_timing = self._block_timing(point, kind, "bwd_b", spans)
            w_timing = self._block_timing(point, kind, "bwd_w", spans)
            return (
                cost,
                replace(cost, backward=b_timing, scatter_s=0.0),
                replace(cost, backward=w_timing, gather_s=0.0),
            )

        key = ("costs", point.key, kind, point.token, point.dtype, point.state_key, shapes, split)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _kind(self, point: Point, kind: str) -> KindParts:
        """What a block kind's costs need besides the network: its gradient and parameter
        gather bytes and model states (:meth:`_block_sync`), its ZeRO-3 gathers and ZeRO-2/3
        scatters, and the axes its collectives span (memoised)."""
        workload, block = point.workload, point.blocks[kind]

        def compute() -> KindParts:
            zero = workload.parallel.zero
            sync = self._block_sync(point, kind)
            gathers = tuple(_zero_collectives(workload, block, True)) if zero >= 3 else ()
            scatters = tuple(_zero_collectives(workload, block, False)) if zero >= 2 else ()
            zero_axes = {i.axes for i in (*gathers, *scatters)}
            cost_axes = tuple(sorted(set(axes_of(block)) | zero_axes))
            span_axes = set(cost_axes) | {bucket[1] for bucket in sync[0]} | set(sync[1])
            return KindParts(sync, gathers, scatters, cost_axes, tuple(sorted(span_axes)))

        key = ("kind", point.key, kind, point.state_key)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    # -- memoised parts -----------------------------------------------------------------------

    def _layout_key(self, workload: Workload) -> tuple[Any, ...]:
        """:func:`~stage_core.lower.compact.layout_key`, with the model's layer pattern
        memoised by the model object (a study evaluates one model many times; the pattern
        walks every layer)."""
        return layout_key(workload, self._model_facts(workload.model)[0])

    def achieved_network(self, system: System) -> System:
        """``system`` with each network dim at the bandwidth collectives achieve (the backend's
        network efficiency): what other evaluators built on this backend time messages on."""
        return self._network(system)[0]

    def _network(self, system: System) -> tuple[System, int]:
        """``system`` with every dim's bandwidth scaled by its achieved fraction — the dim's
        ``bus_efficiency`` from the system file, else this backend's ``network_efficiency`` —
        and a token naming it in memo keys (equal systems share one)."""

        def compute() -> tuple[System, int]:
            efficiency = self.network_efficiency
            factors = [
                efficiency[min(i, len(efficiency) - 1)]
                if dim.bus_efficiency is None
                else dim.bus_efficiency
                for i, dim in enumerate(system.network)
            ]
            dims = tuple(
                replace(dim, bandwidth_bytes_per_s=dim.bandwidth_bytes_per_s * factor)
                for dim, factor in zip(system.network, factors, strict=True)
            )
            return replace(system, network=dims), self._token()

        return self._systems.get(system, compute)  # type: ignore[no-any-return]

    def _result(
        self, workload: Workload, step: Step, flops: tuple[int, int], system: System
    ) -> Evaluation:
        gpus = workload.world_size
        seconds = step.step_time_s
        peak = system.accelerator.peak(compute_dtype(workload.parallel, system))
        tokens = workload.tokens_per_step
        capacity = system.accelerator.memory_bytes
        peak_bytes = self._process_bytes(step.peak_memory_bytes, capacity)
        feasible = peak_bytes <= capacity
        reason = ""
        if not feasible:
            reason = (
                f"out of memory: peak {peak_bytes / 2**30:.2f} GiB exceeds "
                f"{capacity / 2**30:.2f} GiB"
            )
        price = system.price_per_gpu_hour
        cost = None if price is None else price * gpus * seconds / 3600
        return Evaluation(
            step_time_s=seconds,
            mfu=flops[0] / (seconds * gpus * peak),
            hfu=flops[1] / (seconds * gpus * peak),
            tokens_per_s_per_gpu=tokens / seconds / gpus,
            peak_memory_bytes=peak_bytes,
            feasible=feasible,
            reason=reason,
            breakdown=dict(step.breakdown),
            memory_capacity_bytes=capacity,
            num_gpus=gpus,
            model_flops_per_step=flops[0],
            hardware_flops_per_step=flops[1],
            cost_per_step=cost,
            cost_per_million_tokens=None if cost is None else cost / tokens * 1e6,
            backend=self.name,
            extra={
                "micro_batches": workload.micro_batches,
                "pipeline_stages": workload.parallel.pp,
                "slowest_stage": step.slowest_stage,
                "pipeline_end_s": step.pipeline_end_s,
                "framework": self.framework.name,
            },
        )
