"""The trace mode of the timing engine: a whole training step of the generator's program —
every pipeline stage's trace (:func:`stage_core.lower.nodes.stage_nodes`) — run by the trace
simulator (:func:`~stage_explore.analytical.tracesim.simulate`) under the analytical backend's
timing policy with the backend's own per-instruction costs. It is the oracle of the backend's
levelled mode (docs/analytical.md, "The timing engine"), which times the same program block
by block, chunk by chunk and task by task.

Holds :class:`ProgramTimingModel` (a node's cost by where it comes from,
:attr:`~stage_core.lower.program_node.ProgramNode.source`), :class:`TraceStep` and
:func:`trace_step`.

The backend's rewrites are applied to the trace as to its block timings: each block phase is
emitted as :meth:`~stage_explore.analytical.costing.BlockCosting._phase_program` runs it
(element-wise chains fused, the policy's overlaps applied) and its nodes are timed with that
program's timers. What the backend adds to a block's timing beside its instructions (SM
sharing with userbuffers, NCCL or DeepEP kernels; a framework's extra passes: gradient
accumulation, casts, copies) is charged to the phase's last compute node. Gradient buckets are
the lowering's (:func:`stage_core.lower.program._sync_ops`) at the backend's bucket size
(:func:`~stage_explore.analytical.buckets.grad_bucket_bytes` under ``overlap_grad_reduce``,
else one bucket; under ``ddp_bucket_first_chunk_only`` only the first chunk of the first
pipeline stage is bucketed, :func:`_first_chunk`); ZeRO collectives, bucketed reductions and
the optimizer are costed by the backend's own methods. One rank stands for each pipeline
stage (``rank_of({"pp": s})``, as the backend's group spans); collectives start locally (the
policy's), gradient synchronisation and ZeRO's collectives run on streams of their own (the
policy's ``side_streams``: :func:`_side_stream`; ZeRO's gathers and reduce-scatters on one
queue, the gathers emitted as the frameworks issue them, the profile's
``zero3_prefetch_units`` blocks ahead: ``NodeOptions(zero_prefetch=...)``, the levelled
mode's :mod:`~stage_explore.analytical.zero_queue`; a backward pass's send and the rank's next
task wait for the pass's reduce-scatters and replica all-reduces, as the frameworks' end of a
backward does), and a pipeline transfer holds its sender and
delays its receiver as the levelled mode's ``_transfer`` says (the policy's ``point_to_point``:
the send lasts the hold, the message flies the arrival delay after it; traces run
point-to-point messages on arrival only, which those two durations express).

Schedules that split the backward (ZB-H1, DualPipe) emit their B and W parts as the backend
runs them (its phases ``bwd_b`` and ``bwd_w``: :data:`~stage_core.lower.program_node.BWD_B`,
:data:`~stage_core.lower.program_node.BWD_W`); a W task's instructions wait for the task's
entry, their dependencies on B dropped as the backend's W timing drops them.

Under context parallelism every cp rank of a stage has a trace: a ring attention's key/value
exchanges are point-to-point messages between them (each the backend's α–β time of one ring
step), and under Transformer Engine's overlap (``te_cp_overlap``) the attention runs as its
``cp`` steps with the exchanges between them (:mod:`~stage_explore.analytical.trace_ring`).
torch's ``context_parallel`` (``cp_merge_fp32``, torchtitan) runs as its ring runs: ``cp`` SDPA
calls, the all-gather rotater's gathers beside the first (waited for at once when compiled),
and the backward's ``cp`` key/value-gradient messages between the cp ranks
(:func:`~stage_explore.analytical.trace_ring.torch_ring_program`; the gathers and messages
take their whole seconds, the levelled mode charges what they leave exposed).

Under ``overlap_param_gather`` (``gathers_ahead``) a bucketed chunk's parameter all-gathers
run ahead of its first forward as the previous step's, one bucket at a time as Megatron-Core's
forward pre-hooks dispatch them (:func:`~stage_core.lower.param_buckets.param_buckets`, on the
gradient-sync stream), instead of whole after the optimizer.

The FP8 amax all-reduces (the framework option ``fp8_amax_reduction``: Transformer Engine's
delayed scaling at the exit of a chunk's ``fp8_autocast`` and after its backward; not
instructions of the generator's program) are emitted at the end of each of a chunk's passes
(``NodeOptions(pass_end=...)``,
:meth:`~stage_explore.analytical.trace_costs.StageCosts.amax`), with the levelled mode's
seconds.

FSDP2's stage held unsharded under pipeline parallelism (``pp_unsharded_params`` with ZeRO-3
and pp > 1) runs as the frameworks run it (``NodeOptions(zero_held=True)``): a chunk's
gathers in its first forward only, its reduce-scatters one after the other after its last
backward, before that backward's send, as the levelled pipeline runs them too (``_held_zero_s``
in the chunk's first forward and last backward tasks; equal but for hybrid sharding's replica
stream: tests/explore/test_trace_mode_held.py); under ZB-H1 and DualPipe the reduce-scatters
follow the chunk's last W, as the levelled mode adds them to its last weight-gradient task.
FSDP's gradient accumulation without per-micro-batch sync (``fsdp_no_sync_accumulation``,
:func:`~stage_explore.analytical.no_sync.no_sync_accumulates`) emits a chunk's reduce-scatters
in its last micro-batch's backward only (``NodeOptions(zero_no_sync=True)``), as the levelled
mode times every micro-batch without them and charges the last one's extra once
(tests/explore/test_fsdp_no_sync_trace.py). FSDP's root unit (``zero_root``) and DeepSpeed's
recompute re-gather (``zero_regather``) are emitted as the frameworks issue them
(tests/explore/test_trace_mode_zero3.py).

Not covered: the parameter gathers of an unbucketed chunk (``ddp_bucket_first_chunk_only``'s
later chunks, dispatched before an earlier forward: whole after the optimizer in the trace) or
of a chunk whose gradients reduce in two groups (expert and dense buffers: whole after the
optimizer).

The SMs and HBM bandwidth NCCL's kernels hold beside compute
(:mod:`~stage_explore.analytical.contention`, where a network dim gives ``nccl_channels``) are
the simulator's: a block's compute node runs at ``1 − Σ share`` of its rate while ZeRO's
gathers and scatters, hybrid sharding's replica all-reduce or gradient buckets run on their
side streams beside it (:meth:`ProgramTimingModel.beside_share`: the levelled mode's share of
the block phase for that collective's load), so what the levelled mode charges per block and
per chunk the trace charges per node, for the seconds they actually overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from stage_core.blocks import mtp_layer_of_block
from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.nodes import NodeOptions, materialize, stage_nodes
from stage_core.lower.program import (
    ProgramSet,
    StageProgram,
    Workload,
    boundary_bytes,
    lower,
    make_workload,
)
from stage_core.lower.program_node import (
    BWD_B,
    BWD_W,
    OPTIMIZER,
    PARAM_GATHER,
    PASS_END_BWD,
    PASS_END_FWD,
    SYNC,
    ZERO_GATHER,
    ZERO_SCATTER,
    Instructions,
    NodeSource,
    ProgramNode,
)
from stage_core.models.layers import is_kept_block, is_layer_block
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_core.plans import DP_REPLICATE
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import ROOT_UNIT_KINDS
from stage_explore.analytical.buckets import UNBUCKETED, grad_bucket_bytes
from stage_explore.analytical.contention import nccl_load
from stage_explore.analytical.fp8_roles import fp8_key
from stage_explore.analytical.no_sync import no_sync_accumulates
from stage_explore.analytical.parts import Point, compute_dtype
from stage_explore.analytical.policy import Overlap, PointToPoint, TimingPolicy
from stage_explore.analytical.trace_costs import StageCosts
from stage_explore.analytical.trace_models import BaseTimingModel
from stage_explore.analytical.tracesim import SimulationResult, simulate
from stage_explore.system.model import System


class ProgramTimingModel(BaseTimingModel[float]):
    """The analytical backend's costs of a step's trace nodes, found by where each node comes
    from (its stage and :attr:`~stage_core.lower.program_node.ProgramNode.source`): a block
    phase's instruction by that phase's program and timers, ZeRO collectives by the backend's
    ``_zero_time``, gradient synchronisation and a parameter bucket's all-gather (its bytes)
    by its α–β ``_collective_time``, the optimizer by ``optimizer_s`` (with ZeRO-3's gathers of
    its persistent parameters after it, ``persistent_gather_s``), pipeline transfers as
    the levelled ``_transfer`` holds and delays them, ring-attention messages by the ring's α–β
    time of one step. Nodes are known by identity (the objects :func:`trace_step` built); any
    other node is a ConfigError."""

    zero = 0.0

    def __init__(
        self,
        costs: Mapping[int, StageCosts],
        programs: Mapping[int, StageProgram],
        nodes: Mapping[int, tuple[int, NodeSource | None, TraceNode]],
        params: Mapping[int, int],
        stage_of: Mapping[int, int],
        persistent: Mapping[int, float] | None = None,
    ) -> None:
        self._costs, self._programs, self._nodes, self._params = costs, programs, nodes, params
        self._stage_of = stage_of
        self._persistent = persistent or {stage: 0.0 for stage in params}

    def _source(self, node: TraceNode) -> tuple[StageCosts, NodeSource]:
        entry = self._nodes.get(id(node))
        if entry is None or entry[2] is not node or entry[1] is None:
            raise ConfigError(f"node {node.id} {node.name!r} is not a node of this step's trace")
        return self._costs[entry[0]], entry[1]

    def compute(self, node: TraceNode) -> float:
        costs, (kind, phase, index) = self._source(node)
        if phase == OPTIMIZER:
            seconds = costs.backend.optimizer_s(costs.point, self._params[costs.stage])
            return seconds + self._persistent[costs.stage]
        program, added_s, _ = costs.program(kind, phase)
        emitted, at = costs.emitted(kind, phase)
        seconds = program.compute_s(program.instrs[emitted.origin[index]])
        if emitted.share[index] != 1.0:  # an attention step (trace_ring.py)
            seconds *= emitted.share[index]
        return seconds + added_s if index == at else seconds

    def node_collective(self, node: TraceNode, group: tuple[int, ...]) -> dict[int, float]:
        costs, (kind, phase, index) = self._source(node)
        backend, point = costs.backend, costs.point
        if phase in BLOCK_PHASES:
            program = costs.program(kind, phase)[0]
            emitted = costs.emitted(kind, phase)[0]
            if index in emitted.own:  # its own bytes, before a ring's exposure charge
                seconds = (program.base_comm_s or program.comm_s)(emitted.instrs[index])
            else:
                seconds = program.comm_s(program.instrs[emitted.origin[index]])
        elif phase in (ZERO_GATHER, ZERO_SCATTER):
            parts = backend._kind(point, kind)
            instr = (parts.gathers if phase == ZERO_GATHER else parts.scatters)[index]
            calls = parts.calls(index) if phase == ZERO_GATHER else 1
            seconds = backend._zero_time(point, costs.span(instr.axes), instr, calls)
        elif phase == PARAM_GATHER:  # a bucket's share of a step-end all-gather
            op = self._programs[costs.stage].sync[index]
            span = costs.span(op.axes)
            seconds = backend._collective_time(point, span, op.collective, node.comm_bytes)
        elif phase in (PASS_END_FWD, PASS_END_BWD):  # index: the chunk's
            found = costs.amax(index)
            assert found is not None, index
            seconds = found[1] if phase == PASS_END_FWD else found[2]
        else:
            assert phase == SYNC, phase
            op = self._programs[costs.stage].sync[index]
            span = costs.span(op.axes)
            collective = op.collective
            if collective is CollectiveKind.REDUCE_SCATTER and backend._zero1_all_reduces(point):
                collective = CollectiveKind.ALL_REDUCE  # zero1_grad_all_reduce (planning.py)
            seconds = backend._collective_time(point, span, collective, op.comm_bytes)
        return dict.fromkeys(group, seconds)

    def beside_share(self, compute: TraceNode, collective: TraceNode) -> float:
        """The share of its rate a block's compute node loses while a collective of a side
        stream runs on its rank — a ZeRO gather or scatter, hybrid sharding's replica
        all-reduce or a gradient bucket (:data:`BESIDE`) —, as the levelled mode charges it:
        the block phase's share on what that collective's NCCL kernels leave
        (:meth:`~stage_explore.analytical.costing.BlockCosting._contention_share` of the
        collective's :func:`~stage_explore.analytical.contention.nccl_load`: the
        ``nccl_channels`` of the outermost dim its group spans and its ring's HBM traffic).
        Nothing for the optimizer or for a block's own collectives (their SM sharing, where
        modelled, is in the block's cost already)."""
        costs, (kind, phase, _) = self._source(compute)
        stage_costs, (owner, side, index) = self._source(collective)
        if phase not in BLOCK_PHASES or side not in BESIDE:
            return 0.0
        backend, point = costs.backend, costs.point
        if side in (SYNC, PARAM_GATHER):
            op = self._programs[stage_costs.stage].sync[index]
            axes, kind_of = op.axes, op.collective
        else:
            parts = backend._kind(point, owner)
            instr = (parts.gathers if side == ZERO_GATHER else parts.scatters)[index]
            assert instr.collective is not None
            axes, kind_of = instr.axes, instr.collective
        counts = stage_costs.span(axes)[0][1]  # type: ignore[index]
        load = nccl_load(point.system, counts, kind_of)
        return backend._contention_share(point, kind, phase, costs.spans(kind), load)

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> Mapping[int, float]:
        raise ConfigError("ProgramTimingModel times collective nodes, not kinds and sizes")

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> float:
        """A ring-attention message between two cp ranks of one stage: its seconds
        (:meth:`~stage_explore.analytical.trace_costs.StageCosts.ring_message_s`; it arrives
        when the send ends). What a pipeline
        transfer holds its sender, as the levelled mode charges it
        (``_transfer`` between the two ranks: the policy's ``point_to_point``, Megatron-Core's
        blocking 1F1B, ``p2p_scatter_gather``'s ``1/tp`` message and all-gather). The trace's
        next task of a sender waits for its send and a receive ends at the message's arrival,
        so a send lasting this, with :meth:`point_to_point_flight` after it, runs the
        levelled mode's semantics."""
        ring = self._ring_message_s(source, destination, size_bytes)
        if ring is not None:
            return ring
        return self._transfer(source, destination, size_bytes)[0]

    def point_to_point_flight(self, source: int, destination: int, size_bytes: int) -> float:
        """How long the message flies after the send (the levelled mode's arrival delay: an
        overlapped transfer's bytes and all-gather; 0.0 for blocking ones and ring
        messages)."""
        if self._ring_message_s(source, destination, size_bytes) is not None:
            return 0.0
        return self._transfer(source, destination, size_bytes)[1]

    def _ring_message_s(self, source: int, destination: int, size_bytes: int) -> float | None:
        """A message between two ranks of one pipeline stage is a ring-attention message:
        its seconds; None for a pipeline transfer."""
        stage = self._stage_of[source]
        if self._stage_of[destination] != stage:
            return None
        seconds = self._costs[stage].messages.get(size_bytes)
        if seconds is None:
            raise ConfigError(
                f"a {size_bytes}-byte message from rank {source} to {destination} is not a "
                "ring-attention message of their stage"
            )
        return seconds

    def _transfer(self, source: int, destination: int, size_bytes: int) -> tuple[float, float]:
        costs = next(iter(self._costs.values()))
        expected = boundary_bytes(costs.point.workload)
        if size_bytes != expected:
            raise ConfigError(
                f"a {size_bytes}-byte message from rank {source} to {destination} is not a "
                f"pipeline transfer ({expected} bytes)"
            )
        return costs.backend._transfer(costs.point, (source, destination))


@dataclass(frozen=True, slots=True)
class TraceStep:
    """A step timed in the trace mode: the simulation (ranks: one per pipeline stage), each
    rank's stage and template nodes (``templates[stage]``, node id = index)."""

    result: SimulationResult[float]
    stage_of: dict[int, int]
    templates: tuple[tuple[ProgramNode, ...], ...]

    @property
    def step_time_s(self) -> float:
        return self.result.makespan

    def end_of(self, rank: int, phase: str) -> float:
        """When the last node of ``rank`` whose source has ``phase`` ends (needs
        ``record_nodes``)."""
        template = self.templates[self.stage_of[rank]]
        ends = [
            self.result.node_times[(rank, item.node.id)][1]
            for item in template
            if item.source is not None and item.source[1] == phase
        ]
        if not ends:
            raise ConfigError(f"rank {rank} has no {phase!r} node")
        return max(ends)


def trace_step(
    backend: AnalyticalBackend,
    model: ModelSpec,
    parallel: ParallelConfig,
    system: System,
    *,
    record_nodes: bool = False,
    gathers_ahead: bool = True,
) -> TraceStep:
    """Time one training step of ``model`` under ``parallel`` on ``system`` in the trace mode
    (module docstring), with ``backend``'s costs and timing policy. ``gathers_ahead`` (under
    the policy's ``overlap_param_gather``): a bucketed chunk's parameter all-gathers run as the
    previous step's, bucket by bucket ahead of its first forward, rather than whole after the
    optimizer (the step in a steady run, as the levelled mode counts it)."""
    parallel = backend.as_run(parallel, system)  # the layout the levelled mode lowers
    optimizer = backend.framework.optimizer  # the lowering's optimizer state and node
    workload = make_workload(model, parallel, optimizer)
    if workload.world_size > system.max_gpus:
        raise ConfigError(f"{workload.world_size} GPUs exceed the system's {system.max_gpus}")
    if backend.framework.zero_hpz_partition_size > 1:  # its gathers by pass: levelled only
        raise ConfigError(
            "`zero_hpz_partition_size` > 1 (DeepSpeed hpZ) is timed in the levelled mode only "
            "(expected 1 in the trace mode)"
        )
    # FSDP2 under pipeline parallelism: gathered once per step, reduce-scattered once
    held = backend.framework.pp_unsharded_params and parallel.zero >= 3 and parallel.pp > 1
    # FSDP's gradient sync off but on the last micro-batch (no_sync.py): scatters once a step
    no_sync = no_sync_accumulates(backend.framework, parallel, workload.micro_batches)
    policy: TimingPolicy = backend.policy
    limit = UNBUCKETED
    if Overlap.GRAD_REDUCE in policy.overlaps:
        limit = grad_bucket_bytes(backend.framework, parallel, workload.grad_bytes)
    programs = lower(
        model,
        replace(parallel, grad_bucket_bytes=limit),
        bucketed=_first_chunk if backend.framework.ddp_bucket_first_chunk_only else None,
        optimizer=optimizer,
    )
    point = trace_point(backend, workload, system)
    costs = {p.stage: StageCosts(backend, point, p.stage, p) for p in programs.stages}
    prefetch = backend.framework.zero3_prefetch_units  # ZeRO's one queue, as zero_queue.py

    def emitted(stage: int) -> Instructions:
        def instructions(block: BoundBlock, phase: str) -> tuple[Instr, ...]:
            return costs[stage].emitted(block.kind, phase)[0].instrs

        return instructions

    def ahead(stage: int) -> Callable[[int], bool] | None:
        """Under ``overlap_param_gather`` a bucketed chunk's parameter gathers run ahead of
        its first forward (the previous step's, as the levelled ``_chunk`` hides them)."""
        if not gathers_ahead or Overlap.PARAM_GATHER not in policy.overlaps:
            return None
        if backend.framework.ddp_bucket_first_chunk_only:
            return lambda chunk: _first_chunk(stage, chunk)
        return lambda chunk: True

    streams: dict[int, dict[int, str]] = {}
    traces: dict[int, list[TraceNode]] = {}
    stage_of: dict[int, int] = {}
    nodes: dict[int, tuple[int, NodeSource | None, TraceNode]] = {}
    templates = []
    params = {}
    persistent: dict[int, float] = {}
    cp = workload.axis_sizes.get("cp", 1)
    for stage_program in programs.stages:
        stage = stage_program.stage
        # kept: a framework may charge a kernel where the generator counts no work
        options = NodeOptions(
            zero_prefetch=prefetch, gathers_ahead=ahead(stage), pass_end=costs[stage].pass_end(),
            zero_held=held, zero_root=_root_unit(backend, parallel, stage_program),
            zero_regather=_regathered(backend, parallel, stage_program), zero_no_sync=no_sync,
        )  # fmt: skip
        template = stage_nodes(
            programs, stage_program, emitted(stage), keep_empty=True, options=options
        )
        templates.append(tuple(template))
        for c in range(cp):  # every cp rank: ring attention exchanges messages between them
            rank = workload.mesh.rank_of({"pp": stage, "cp": c})
            trace = list(materialize(template, rank, workload.mesh))
            for item, node in zip(template, trace, strict=True):
                nodes[id(node)] = (stage, item.source, node)
                if node.kind is NodeKind.COLL and item.source is None:
                    raise ConfigError(f"rank {rank}: collective {node.name!r} has no source")
            traces[rank], stage_of[rank] = trace, stage
            if policy.side_streams:
                on_side = ((item.node.id, _side_stream(item)) for item in template)
                streams[rank] = {node_id: name for node_id, name in on_side if name}
        params[stage] = trace_params(backend, point, programs, stage_program)
        persistent[stage] = sum(  # ZeRO-3's persistent parameters, gathered after the step
            backend.persistent_gather_s(point, block.kind, costs[stage].span)
            for chunk in stage_program.chunks
            for block in chunk.blocks
        )
    by_stage = {p.stage: p for p in programs.stages}
    timing = ProgramTimingModel(costs, by_stage, nodes, params, stage_of, persistent)
    if parallel.pp > 1 or cp > 1:  # sends hold and fly what the policy's semantics gives
        policy = replace(policy, point_to_point=PointToPoint.ARRIVAL)
    result = simulate(traces, timing, record_nodes=record_nodes, policy=policy, streams=streams)
    return TraceStep(result, stage_of, tuple(templates))


#: The phases of a block's own instructions: forward, backward, and a split backward's B and W
#: parts (:data:`~stage_core.lower.program_node.BWD_B`,
#: :data:`~stage_core.lower.program_node.BWD_W`).
BLOCK_PHASES = frozenset({"fwd", "bwd", BWD_B, BWD_W})

#: The phases of the collectives whose NCCL kernels slow the compute beside them
#: (:meth:`ProgramTimingModel.beside_share`; the levelled mode's :mod:`~stage_explore.
#: analytical.contention`: ZeRO's gathers and scatters and the replica all-reduce beside their
#: blocks, gradient buckets beside the backward).
BESIDE = frozenset({SYNC, PARAM_GATHER, ZERO_GATHER, ZERO_SCATTER})

#: The streams of the policy's ``side_streams``, by the phase of a node's source: gradient
#: buckets, and ZeRO's gathers and gradient scatters on one queue (whatever CUDA streams the
#: framework issues them from — FSDP2's all-gather and reduce-scatter streams, DeepSpeed's
#: ``__allgather_stream`` — they are one data-parallel group's NCCL communicator, whose
#: operations run in issue order; :mod:`~stage_explore.analytical.zero_queue`); the next
#: step's parameter buckets on the gradient-sync stream (Megatron-Core issues them on the
#: data-parallel group's communicator, as its gradient buckets).
SIDE_STREAMS = {SYNC: "sync", PARAM_GATHER: "sync", ZERO_GATHER: "zero", ZERO_SCATTER: "zero"}


def _side_stream(item: ProgramNode) -> str:
    """The side stream ``item`` runs on ("" for none): hybrid sharding's replica all-reduce on
    a stream of its own (FSDP1 ``_all_reduce_stream``, FSDP2 ``all_reduce_stream``; the
    backend's ``BlockCost.replica_s``), the rest by :data:`SIDE_STREAMS`."""
    if item.source is None:
        return ""
    phase = item.source[1]
    if phase == ZERO_SCATTER and item.group_axes == (DP_REPLICATE,):
        return "zero_replica"
    return SIDE_STREAMS.get(phase, "")


def _root_unit(
    backend: AnalyticalBackend, parallel: ParallelConfig, stage: StageProgram
) -> frozenset[str]:
    """The block kinds of FSDP's root unit on ``stage`` (``fsdp_root_unit`` with ZeRO-3 on one
    pipeline stage, as the levelled ``_chunk`` applies it: the embedding and the head,
    :data:`~stage_explore.analytical.blocktime.ROOT_UNIT_KINDS`), empty for none. A chunk with
    only one of them (the levelled mode exposes that one's collectives whole) is a
    ConfigError."""
    if not (backend.framework.fsdp_root_unit and parallel.zero >= 3 and parallel.pp == 1):
        return frozenset()
    for chunk in stage.chunks:
        kinds = {block.kind for block in chunk.blocks}
        if kinds & ROOT_UNIT_KINDS and not kinds >= ROOT_UNIT_KINDS:
            raise ConfigError(
                f"the trace mode times FSDP's root unit with both of {sorted(ROOT_UNIT_KINDS)} "
                f"in a chunk, not {sorted(kinds & ROOT_UNIT_KINDS)} alone"
            )
    return ROOT_UNIT_KINDS


def _regathered(
    backend: AnalyticalBackend, parallel: ParallelConfig, stage: StageProgram
) -> frozenset[str]:
    """The block kinds of ``stage`` whose backward gathers their parameters twice: under
    ``zero3_gathers`` 3 (DeepSpeed ZeRO-3) with recompute, the recomputed layers (as the
    levelled ``_block_costs`` charges a third gather: layer and MTP-layer blocks not kept)."""
    if backend.framework.zero3_gathers != 3 or str(parallel.recompute) == "none":
        return frozenset()
    return frozenset(
        block.kind
        for chunk in stage.chunks
        for block in chunk.blocks
        if (is_layer_block(block.kind) or mtp_layer_of_block(block.kind))
        and not is_kept_block(block.kind)
    )


def _first_chunk(stage: int, chunk: int) -> bool:
    """Under ``ddp_bucket_first_chunk_only`` (Megatron-Core DDP's ``disable_bucketing`` for
    every model chunk but the first of the first pipeline stage) the chunks whose gradients
    are reduced in buckets during the backward; the others' in one bucket after their last
    backward, as the levelled mode's ``_chunk`` reduces them."""
    return stage == 0 and chunk == 0


def trace_point(backend: AnalyticalBackend, workload: Workload, system: System) -> Point:
    """The backend's per-evaluation point, as :meth:`AnalyticalBackend.evaluate` builds it."""
    parallel = workload.parallel
    key, blocks = backend._bound(workload)
    net, token = backend._network(system)
    dtype = compute_dtype(parallel, system)
    fp8 = fp8_key(parallel.linear_recipe, parallel.fp8_gemms, dtype)
    return backend._point(workload, key, blocks, net, token, dtype, fp8)


def trace_params(
    backend: AnalyticalBackend, point: Point, programs: ProgramSet, stage: StageProgram
) -> int:
    """The parameters the stage's rank updates, as the backend counts them (its blocks'
    model states)."""
    return sum(
        backend._kind(point, block.kind).sync[2].params
        for chunk in stage.chunks
        for block in chunk.blocks
    )
