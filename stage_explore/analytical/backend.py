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

Size: the plan per pipeline-stage class (stage classes, chunks, block kinds' costs, gradient
buckets) is :mod:`~stage_explore.analytical.planning`; the per-block costs it reads are mixins
in :mod:`~stage_explore.analytical.costing` (bound blocks, block timings),
:mod:`~stage_explore.analytical.costing_compute` (the compute timer),
:mod:`~stage_explore.analytical.costing_comm` (collectives, ZeRO, transfers) and
:mod:`~stage_explore.analytical.costing_states` (model states, optimizer, memory). This module
keeps one evaluation: the backend's options and memos, the network, the step and the result.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from stage_core.arguments import expect
from stage_core.errors import ConfigError, InfeasibleError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.emit import GroupTable
from stage_core.lower.flops import DEFAULT_ATTENTION_FLOPS, AttentionFlops
from stage_core.lower.program import (
    Workload,
    make_workload,
)
from stage_core.lower.schedule import SPLIT_BACKWARD
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_explore.analytical.costs import (
    LOSS_SCALING_BYTES_PER_PARAM,
    OPTIMIZER_EXTRA_BYTES_PER_PARAM,
)
from stage_explore.analytical.fp8_roles import fp8_key
from stage_explore.analytical.framework_costs import (
    accumulation_per_step,
    local_schedule_micro_batches,
)
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK, get_framework
from stage_explore.analytical.memory_kinds import RANK0_PREFIX
from stage_explore.analytical.no_sync import one_rank_fsdp2
from stage_explore.analytical.offload import offload_extra
from stage_explore.analytical.parts import (
    Memo,
    Plan,
    Point,
    compute_dtype,
    infeasible,
    peak_dtype,
)
from stage_explore.analytical.pipeline import PipelineResult, StageTimes, step_time
from stage_explore.analytical.planning import StagePlanning
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.analytical.step import Step, assemble_step
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.system.model import System
from stage_explore.system.placement import PLACEMENT_KEY, placement_note

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


class AnalyticalBackend(StagePlanning, BaseBackend):
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
        listed = isinstance(network_efficiency, list | tuple)
        efficiency = tuple(network_efficiency) if listed else ()
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
        self._last_network: tuple[System, tuple[System, int]] | None = None  # (system, _network)
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

    def as_run(self, parallel: ParallelConfig, system: System) -> ParallelConfig:
        """``parallel`` as the framework runs it on ``system``: torchtitan's op-level policy
        re-runs a cuDNN attention kernel its save list does not name
        (:meth:`~stage_explore.analytical.profile_kernels.KernelOptions.op_sac_modules`); the
        levelled mode (:meth:`evaluate`) and the trace mode (``trace_mode.trace_step``) both
        lower this layout."""
        peaks = system.accelerator.peak_flops_per_s
        modules = self.framework.op_sac_modules(parallel.recompute_modules, peaks)
        if modules == parallel.recompute_modules:
            return parallel
        return replace(parallel, recompute_modules=modules)

    def evaluate(self, model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation:
        expect(model, ModelSpec, "model", "get_flavor('llama3-8b') or load_model(path)")
        expect(parallel, ParallelConfig, "parallel", "ParallelConfig(dp=…, tp=…, …)")
        expect(system, System, "system", "load_system('h100-80gb') or a system file")
        parallel = self.as_run(parallel, system)
        workload = make_workload(model, parallel, self.framework.optimizer)  # as the trace mode
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
        fp8 = fp8_key(parallel.linear_recipe, parallel.fp8_gemms, dtype)
        plan_key = (
            key, token, dtype, parallel.zero, axis_sizes, workload.mesh.names,
            workload.grad_bytes, parallel.grad_bucket_bytes, self._layout_key(workload), fp8,
            str(parallel.schedule) if str(parallel.schedule) in SPLIT_BACKWARD else "",
            self._micro_batch_key(workload, dtype),
        )  # fmt: skip

        def plan() -> Plan:
            return self._plan(self._point(workload, key, blocks, net, token, dtype, fp8))

        number: int = self._plan_numbers.get(plan_key, self._token)  # names it in the memos
        planned: Plan = self._plans.get(number, plan)
        kind, m, vpp = parallel.schedule_kind, workload.micro_batches, parallel.vpp
        per_schedule = local_schedule_micro_batches(self.framework, parallel, m)
        schedules = m // per_schedule
        held_per_schedule = self.framework.pp_held_sync_per_schedule
        step: Step = self._steps.get(
            (number, kind, m, schedules),
            lambda: assemble_step(
                planned.step, kind, per_schedule, vpp, self._timeline, schedules, held_per_schedule
            ),
        )
        scale = (m // 2 if kind == "dualpipe" else m) * (gpus // parallel.pp)  # per chunk
        flops = (planned.model_flops * scale, planned.hardware_flops * scale)
        host = max(c.host_bytes for c in planned.step.classes)  # CPU offload (offload.py)
        return self._result(workload, step, flops, system, dtype, host)

    def _micro_batch_key(self, workload: Workload, dtype: str) -> Hashable:
        """What of the schedule and the micro-batches a plan depends on: nothing, but for
        torch pipelining's buffers (``pipelining_stage_buffers``: one per micro-batch of a
        schedule, the first stage's in flight by the schedule) and a held stage's once-per-step
        costs spread over the step's micro-batches (``pp_unsharded_params``: FSDP2's copies,
        the unsharded accumulation's first cast), with pp > 1; and, at any pp, for the
        step's micro-batches when the gradient accumulation pass is averaged over them
        (:func:`~stage_explore.analytical.framework_costs.accumulation_per_step`: DeepSpeed
        fp16's and torch DDP's first micro-batch) or torchao's per-step FP8 amax of the
        shards is spread over them (``fsdp_float8_all_gather``, ``_fp8_shard_casts_s``), or
        DeepSpeed hpZ's one whole-group forward gather per step is (``zero_hpz_partition_size``),
        or FSDP's reduce-scatters and unsharded accumulation are (``fsdp_no_sync_accumulation``:
        none with one micro-batch).
        Leaving these out let a plan computed for one global batch answer another's (s30)."""
        parallel = workload.parallel
        profile = self.framework
        per_step = (
            accumulation_per_step(profile, dtype)
            or (profile.fsdp_float8_all_gather and parallel.zero >= 3)
            or profile.zero_hpz_partition_size > 1  # hpZ's first forward gather (hpz.py)
            or (profile.fsdp_no_sync_accumulation and parallel.zero >= 2)  # no_sync.py
            or one_rank_fsdp2(profile, parallel)  # its held gradient's accumulation (no_sync.py)
        )
        spread = profile.pipelining_stage_buffers or profile.pp_unsharded_params
        if parallel.pp == 1 or not spread:
            return (workload.micro_batches,) if per_step else ()
        return (workload.micro_batches, str(parallel.schedule))

    def _point(
        self,
        workload: Workload,
        key: int,
        blocks: dict[str, BoundBlock],
        net: System,
        token: int,
        dtype: str,
        fp8: Hashable,
    ) -> Point:
        """One evaluation's :class:`~stage_explore.analytical.parts.Point` (the levelled
        evaluation's and the trace mode's, :mod:`~stage_explore.analytical.trace_mode`): the
        model-state inputs the memoised parts depend on are named by one number (equal inputs,
        one number), so the memo keys that hold it hash an int, not the tuple."""
        parallel = workload.parallel
        state = (
            parallel.zero, tuple(workload.axis_sizes.items()), workload.mesh.names,
            workload.expert_axes, workload.grad_bytes, workload.weight_bytes,
            workload.optimizer_bytes, fp8,
            self._micro_batch_key(workload, dtype),  # parts averaged over the micro-batches
        )  # fmt: skip
        state_key: int = self._plan_numbers.get(("state", state), self._token)
        table = self._parts.get(("groups", workload.mesh), lambda: GroupTable(workload.mesh))
        return Point(workload, key, blocks, net, token, dtype, table, state_key)

    def _timeline(
        self,
        kind: str,
        stages: tuple[StageTimes, ...],
        m: int,
        vpp: int,
        transfer_s: float,
        arrival_s: float = 0.0,
    ) -> PipelineResult:
        """:func:`~stage_explore.analytical.pipeline.step_time`, memoised by its arguments
        (the values themselves: an exact memo; plans differing only in gradient
        synchronisation, model states or the optimizer, e.g. ZeRO 0 and 1, share it)."""
        return self._timelines.get(  # type: ignore[no-any-return]
            (kind, stages, m, vpp, transfer_s, arrival_s),
            lambda: step_time(kind, stages, m, vpp, transfer_s, arrival_s),
        )

    # -- network ------------------------------------------------------------------------------

    def achieved_network(self, system: System) -> System:
        """``system`` with each network dim at the bandwidth collectives achieve (the backend's
        network efficiency): what other evaluators built on this backend time messages on."""
        return self._network(system)[0]

    def _network(self, system: System) -> tuple[System, int]:
        """``system`` with every dim's bandwidth scaled by its achieved fraction — the dim's
        ``bus_efficiency`` from the system file, else this backend's ``network_efficiency`` —
        and a token naming it in memo keys (equal systems share one). The last system object
        asked for is answered without hashing it (a study passes one object every time; its
        hash walks every field of the system, ~10 µs)."""
        last = self._last_network
        if last is not None and last[0] is system:
            return last[1]

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

        network: tuple[System, int] = self._systems.get(system, compute)
        self._last_network = (system, network)
        return network

    def _result(
        self,
        workload: Workload,
        step: Step,
        flops: tuple[int, int],
        system: System,
        dtype: str,
        host_bytes: int = 0,
    ) -> Evaluation:
        """The evaluation of ``step``; ``dtype``: the evaluation's compute dtype;
        ``host_bytes``: the model states a rank keeps in host memory (CPU offload)."""
        gpus = workload.world_size
        seconds = step.step_time_s
        peak = system.accelerator.peak(peak_dtype(workload.parallel, dtype))
        tokens = workload.tokens_per_step
        capacity = system.accelerator.memory_bytes
        peaks = self._memory_peaks(step.peak_memory_bytes, capacity)
        rank0 = step.stage_memory_bytes[0] if step.stage_memory_bytes else step.peak_memory_bytes
        first = peaks if rank0 == step.peak_memory_bytes else self._memory_peaks(rank0, capacity)
        peak_bytes = peaks.process  # what decides fitting; the other kinds in ``extra``
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
                **peaks.as_extra(),
                **first.as_extra(RANK0_PREFIX),  # pipeline rank 0's (the global rank 0)
                **self._placement(workload, system),
                **offload_extra(self.framework, host_bytes, system),
            },
        )

    def _placement(self, workload: Workload, system: System) -> dict[str, str]:
        """``{"placement": note}`` when the ranks fill the scale-up domains unevenly
        (:func:`~stage_explore.system.placement.placement_note`), else nothing; under
        ``moe_hybridep_domain_ranks`` or ``moe_ep_one_domain`` the note says how the
        expert-parallel groups were placed instead (:mod:`~stage_explore.analytical.ep_domain`)."""
        axes = tuple((axis.name, int(axis.size)) for axis in workload.mesh.axes)
        note = placement_note(system, axes)
        if note is None:
            return {}
        per_domain = self.framework.moe_hybridep_domain_ranks
        if self.framework.moe_ep_one_domain and workload.parallel.ep > 1:
            note += (
                "; each expert-parallel group timed inside one NVLink domain, as its "
                "symmetric-memory dispatch needs (moe_ep_one_domain), not as above"
            )
        elif self.framework.moe_hybridep and per_domain > 0 and workload.parallel.ep > 1:
            note += (
                f"; the expert-parallel groups timed as HybridEP places them, {per_domain} "
                "ranks in each NVLink domain (moe_hybridep_domain_ranks), not as above"
            )
        return {PLACEMENT_KEY: note}
