"""Lowering a (model, parallel config) pair to per-stage programs with exact integers.

:func:`lower` validates the pair, binds each block kind once (embedding, dense layer, MoE layer,
head), assigns layers to pipeline stages and model chunks, orders every stage's tasks by the
pipeline schedule, and derives the step-level work: gradient synchronisation in buckets (once
per step, or per micro-batch for ZeRO-2/3), the optimizer update and ZeRO's parameter gathers.

Ranks that differ only in their dp, ep, cp or tp coordinate run the same program (with other
communicator groups), so a :class:`ProgramSet` holds one :class:`StageProgram` per pipeline
stage: generation cost grows with ``pp``, not with the number of GPUs.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import cast

from stage_core.arguments import expect
from stage_core.blocks import (
    MTP_HEAD,
    BlockOptions,
    Structure,
    default_options,
)
from stage_core.errors import ConfigError
from stage_core.limits import check_workload
from stage_core.lower.bind import (
    MESH_AXES,
    BoundBlock,
    Instr,
    bind_block,
    symbolic_block,
)
from stage_core.lower.compact import (
    UNBUCKETED,
    bucket_gradients,
    chunk_runs,
    layout_key,
    mtp_blocks,
    run_totals,
)
from stage_core.lower.experts import ExpertFold, data_axes, fold_experts
from stage_core.lower.fp8 import with_fp8_saved
from stage_core.lower.optimizer_kinds import optimizer_state_bytes, optimizer_step_bytes
from stage_core.lower.schedule import Task, chunks_per_rank, global_stage, schedule
from stage_core.lower.weightgrad import split_backward
from stage_core.mesh import Mesh, MeshAxis
from stage_core.models.layers import grouped_block_name, is_grouped_block, kept_block_name
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_core.plans import DP_REPLICATE, TP_OUTER, TP_REST, PlanFlags
from stage_core.trace import CollectiveKind


@dataclass(frozen=True, slots=True)
class Workload:
    """A validated (model, parallel config) pair with every size bound to an integer."""

    model: ModelSpec
    parallel: ParallelConfig
    options: BlockOptions
    flags: PlanFlags
    mesh: Mesh
    sizes: dict[str, int]
    axis_sizes: dict[str, int]
    micro_batches: int
    weight_bytes: int = 2
    grad_bytes: int = 4
    optimizer_bytes: int = 12  # the kind's fp32 master and moments (optimizer_kinds.py)
    stage_layers: tuple[int, ...] = ()  # layers per global virtual stage (ParallelConfig)
    expert_axes: tuple[str, ...] = ("ep",)  # mesh axes partitioning the experts (experts.py)
    optimizer: str = "adam"  # the optimizer's kind (optimizer_kinds.OPTIMIZERS)

    @property
    def world_size(self) -> int:
        return math.prod(self.axis_sizes.values())

    @property
    def tokens_per_step(self) -> int:
        return self.parallel.global_batch * self.sizes["S"]


@functools.lru_cache(maxsize=1024)
def _mesh(axes: tuple[tuple[str, int], ...]) -> Mesh:
    """The mesh of ``(name, size)`` axes, one object per distinct mesh (memoised: a search
    builds one workload per candidate, from few distinct meshes)."""
    return Mesh(tuple(MeshAxis(name, size) for name, size in axes))


@functools.lru_cache(maxsize=256)
def _with_expert_axes(options: BlockOptions, axes: tuple[str, ...]) -> BlockOptions:
    """``options`` with ``expert_axes`` (memoised, one object per distinct pair:
    ``dataclasses.replace`` costs a few µs, and a search builds a workload per candidate)."""
    return replace(options, expert_axes=axes)


def make_workload(model: ModelSpec, parallel: ParallelConfig, optimizer: str = "adam") -> Workload:
    """Validate ``parallel`` against ``model`` (the size limits of :mod:`stage_core.limits`
    first) and bind every dim and axis size; ``optimizer``, the optimizer's kind, sets the state
    per parameter with an fp32 master (``optimizer_kinds.py``: Adam's 12, SGD's 4)."""
    expect(model, ModelSpec, "model", "get_flavor('llama3-8b') or load_model(path)")
    expect(parallel, ParallelConfig, "parallel", "ParallelConfig(dp=…, tp=…, …)")
    check_workload(model, parallel)
    parallel.validate(model)
    model = parallel.resolve(model)
    fold = fold_experts(parallel) if model.is_moe else ExpertFold(("ep",), 1)
    grad_bytes = 4 if parallel.grad_fp32 else 2
    axis_sizes = {
        "pp": parallel.pp,
        DP_REPLICATE: parallel.replicate_dp,  # hybrid sharding's replicas (dp_shard < dp)
        "dp": parallel.shard_dp // fold.ep_from_dp,
        "ep": fold.ep_from_dp,
        "cp": parallel.cp,
        TP_REST: fold.tp_rest,  # tp split when etp < tp and tp/etp does not divide ep
        TP_OUTER: fold.tp_outer,  # tp split when 1 < etp < tp (lower/experts.py)
        "tp": parallel.tp // (fold.tp_outer * fold.tp_rest),
    }
    order = [a for a in parallel.axis_order if a in MESH_AXES]
    if axis_sizes[DP_REPLICATE] > 1:  # the replicas right above the shard group
        order.insert(order.index("dp"), DP_REPLICATE)
    for sub in (TP_REST, TP_OUTER):  # tp's sub-axes right above the inner (etp) tp ranks
        if axis_sizes[sub] > 1:
            order.insert(order.index("tp"), sub)
    mesh = _mesh(tuple([(a, axis_sizes[a]) for a in order]))
    seq = model.seq_len
    batch = parallel.micro_batch * parallel.dp  # the global micro-batch dim B
    sizes = {
        "B": batch,
        "S": seq,
        "H": model.hidden,
        "N": model.heads,
        "K": model.kv_heads * parallel.kv_replication(model),
        "D": model.head_dim,
        "F": model.ffn,
        "G": model.expert_ffn or model.ffn,
        "Z": max(1, model.num_shared_experts) * (model.expert_ffn or model.ffn),
        "V": parallel.padded_vocab(model),
        "P": model.max_position,
        "E": max(1, model.num_experts),
        "C": 1,
        "W": max(1, model.sliding_window),
    }
    if model.is_mla:  # latent attention's dims (blocks.py, _latent_attention)
        rope = model.qk_rope_head_dim
        sizes.update(
            Q=max(1, model.q_lora_rank), L=model.kv_lora_rank, R=rope,
            A=model.head_dim + rope, U=model.v_head_dim,
        )  # fmt: skip
    if model.mtp_layers:  # the hidden dim M_k contracts (blocks.py, mtp_block)
        sizes["Hc"] = model.hidden
    if model.ssm_heads:  # Mamba-2's dims (blocks.py, _mamba_mixer; ops_ssm)
        sizes.update(
            Hs=model.ssm_heads, Ps=model.ssm_head_dim, Gs=model.ssm_groups, Ns=model.ssm_state,
            Ws=model.ssm_conv, Wc=model.ssm_conv - 1, Qs=model.ssm_chunk,
        )  # fmt: skip
    if model.is_moe:
        # Expert slots per rank for the tokens it routes: its sequence shard under sequence
        # parallelism (each tp rank routes its own), else its whole sequence chunk.
        shards = parallel.cp * (parallel.tp if parallel.sequence_parallel else 1)
        local_tokens = parallel.micro_batch * seq // shards
        factor = model.capacity_factor or 1.0
        per_rank = math.ceil(factor * model.top_k * local_tokens / model.num_experts)
        sizes["C"] = per_rank * parallel.dp * shards
    options = _with_expert_axes(default_options(model, parallel.dropout), fold.axes)
    flags = PlanFlags(
        sp=parallel.sequence_parallel,
        attention=options.attention,
        cp_ring=str(parallel.cp_style) == "ring" and parallel.cp > 1,
        moe_allgather=model.is_moe and str(parallel.moe_dispatcher) == "allgather",
        tp_split=fold.tp_split,
        dp_split=axis_sizes[DP_REPLICATE] > 1,
        embedding_replicated=parallel.tp_embedding_replicated and parallel.tp > 1,
    )
    if model.sliding_window and options.attention != "fused":
        raise ConfigError(
            f"sliding-window attention needs a fused attention kernel, but the {model.family} "
            f"family uses Megatron's unfused core attention (got sliding_window="
            f"{model.sliding_window})"
        )
    if flags.cp_ring and options.attention != "fused":
        raise ConfigError(
            "ring context parallelism passes K/V chunks to a fused attention kernel, but the "
            f"{model.family} family uses Megatron's unfused core attention: use "
            f"cp_style='allgather' (got cp={parallel.cp}, cp_style='ring')"
        )
    return Workload(
        model,
        parallel,
        options,
        flags,
        mesh,
        sizes,
        axis_sizes,
        parallel.num_micro_batches,
        grad_bytes=grad_bytes,
        optimizer_bytes=optimizer_state_bytes(optimizer, True),
        stage_layers=parallel.stage_layers(model),
        expert_axes=fold.axes,
        optimizer=optimizer,
    )


@dataclass(frozen=True, slots=True)
class SyncOp:
    """A step-level collective over weight gradients or parameters.

    ``after`` is the index (in the chunk's backward block order) of the block whose last
    micro-batch backward must finish first; -1 means after the optimizer, -2
    (:data:`AFTER_BACKWARD`) after the whole backward of the step, before the optimizer.
    """

    name: str
    collective: CollectiveKind
    axes: tuple[str, ...]
    comm_bytes: int
    chunk: int
    after: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """One model chunk of a pipeline rank: its blocks in forward order."""

    index: int
    stage: int
    blocks: tuple[BoundBlock, ...]
    layers: tuple[int, ...]

    @property
    def saved_bytes(self) -> int:
        return sum(block.saved_bytes for block in self.blocks)

    @property
    def pending_bytes(self) -> int:
        """Bytes a micro-batch's pending weight-gradient work (``W``) holds besides its saved
        activations, under the schedules that split the backward (lower/weightgrad.py)."""
        return sum(split_backward(block).pending_bytes for block in self.blocks)


@dataclass(frozen=True, slots=True)
class StageProgram:
    """Everything one pipeline rank runs in a step."""

    stage: int
    chunks: tuple[Chunk, ...]
    tasks: tuple[Task, ...]
    sync: tuple[SyncOp, ...]
    optimizer: Instr | None  # None: a serving step (no update)
    boundary_bytes: int
    zero3_gathers: tuple[tuple[int, int, int], ...] = field(default=())

    def first_global(self, chunk: int, stages: int) -> bool:
        return self.chunks[chunk].stage == 0

    def last_global(self, chunk: int, stages: int, vpp: int) -> bool:
        return self.chunks[chunk].stage == stages * vpp - 1


@dataclass(frozen=True, slots=True)
class ProgramSet:
    """One program per pipeline stage; ``ranks(stage)`` lists the ranks running it."""

    workload: Workload
    stages: tuple[StageProgram, ...]
    blocks: dict[str, BoundBlock]

    def ranks(self, stage: int) -> list[int]:
        mesh = self.workload.mesh
        return [r for r in range(self.workload.world_size) if mesh.coordinates(r)["pp"] == stage]

    def stage_of(self, rank: int) -> int:
        return self.workload.mesh.coordinates(rank)["pp"]


def bind_all(workload: Workload) -> dict[str, BoundBlock]:
    """Bind every block kind the model uses, once (one per distinct layer kind)."""
    structure = Structure.of(workload.model)
    kinds = ["embedding", "head", *dict.fromkeys(workload.model.layer_blocks())]
    if workload.parallel.recompute_num_layers is not None:  # partial: the kept layers' kinds
        kinds += [kept_block_name(kind) for kind in dict.fromkeys(workload.model.layer_blocks())]
        if workload.parallel.recompute_method == "uniform":  # and the grouped layers' kinds
            layer_kinds = dict.fromkeys(workload.model.layer_blocks())
            kinds += [grouped_block_name(kind) for kind in layer_kinds]
    if workload.model.mtp_layers:
        kinds += [mtp_blocks(workload.model)[0], MTP_HEAD]
    recompute, modules = str(workload.parallel.recompute), workload.parallel.recompute_modules
    blocks: dict[str, BoundBlock] = {}
    for kind in kinds:
        symbolic = symbolic_block(
            kind, structure, workload.options, workload.flags, recompute, modules
        )
        bound = bind_block(symbolic, kind, workload.sizes, workload.axis_sizes)
        blocks[kind] = with_fp8_saved(
            bound, symbolic, workload.sizes, workload.axis_sizes, workload.parallel
        )
        if is_grouped_block(kind):  # inside a uniform recompute group: the group keeps its
            blocks[kind] = replace(blocks[kind], saved_bytes=0)  # first layer's input only
    return blocks


def _without(block: BoundBlock, name: str) -> BoundBlock:
    return replace(block, weights=tuple(w for w in block.weights if w.name != name))


def tie_embeddings(workload: Workload, blocks: dict[str, BoundBlock]) -> dict[str, BoundBlock]:
    """With tied embeddings and one pipeline stage, the output layer reuses the embedding table
    (one copy of the weight, its state and its gradient); across stages each end keeps a copy.

    Multi-token prediction shares the main model's embedding and output layer: an MTP block
    holds neither (its ops read them); with pipeline stages the last stage keeps a copy of the
    embedding table (listed with its head, once however many modules), synchronised with the
    first stage's like a tied embedding (:func:`embedding_ends`), as Megatron-Core does."""
    model, pp = workload.model, workload.parallel.pp
    result = dict(blocks)
    if model.tied_embeddings and pp == 1:
        result["head"] = _without(blocks["head"], "output")
    for kind in dict.fromkeys(mtp_blocks(model)):
        if kind not in blocks:  # serving binds no MTP module
            continue
        module = blocks[kind]
        result[kind] = _without(module, "embed")
        result[MTP_HEAD] = _without(blocks[MTP_HEAD], "output")
        if pp > 1 and not model.tied_embeddings:  # else the head's output layer is the copy
            copy = tuple(w for w in module.weights if w.name == "embed")
            result["head"] = replace(result["head"], weights=result["head"].weights + copy)
    return result


def embedding_ends(workload: Workload) -> bool:
    """Whether the first and the last pipeline stage each hold a copy of the embedding table,
    all-reduced once per step: tied embeddings, or multi-token prediction (its modules on the
    last stage share the table; Megatron-Core all-reduces the MTP stage's embedding gradient
    with the first stage's as it does a tied embedding's)."""
    model = workload.model
    return bool(model.tied_embeddings or model.mtp_layers) and workload.parallel.pp > 1


def shared_embedding_weights(model: ModelSpec) -> frozenset[tuple[str, str]]:
    """The (block kind, weight) pairs that are the two copies of the embedding table at the
    pipeline ends: the embedding's, and the head's output layer (tied) or MTP's copy."""
    return frozenset(
        {("embedding", "embed"), ("head", "output" if model.tied_embeddings else "embed")}
    )


def chunk_blocks(workload: Workload, blocks: dict[str, BoundBlock], global_stage: int) -> Chunk:
    """The chunk of ``global_stage``: the expansion of its runs (:func:`~stage_core.lower.
    compact.chunk_runs`) into ``blocks``. Multi-token prediction sits on the last stage
    (Megatron-Core's default placement): the modules after the last layer, their losses after
    the main model's — in training only (a serving step binds no module, hence no loss)."""
    p, vpp = workload.parallel.pp, workload.parallel.vpp
    counts = workload.stage_layers or workload.parallel.stage_layers(workload.model)
    start = sum(counts[:global_stage])
    layers = tuple(range(start, start + counts[global_stage]))
    runs = chunk_runs(*layout_key(workload))[global_stage]
    modules = frozenset(mtp_blocks(workload.model))
    bound = sum(count for kind, count in runs if kind in modules and kind in blocks)
    chosen: list[BoundBlock] = []
    for kind, count in runs:
        if kind == MTP_HEAD:
            count = bound  # one loss per module bound
        elif kind in modules and kind not in blocks:
            continue
        if count:
            chosen += [blocks[kind]] * count
    return Chunk(global_stage // p if vpp > 1 else 0, global_stage, tuple(chosen), layers)


def block_sync(
    workload: Workload,
    block: BoundBlock,
) -> tuple[dict[tuple[CollectiveKind, tuple[str, ...]], int], dict[tuple[str, ...], int], int]:
    """One bound block's data-parallel synchronisation outside its own instructions, as the
    program lowers it: gradient bytes per (collective, gradient axes in mesh order) (without
    ZeRO or data axes an all-reduce over the gradient's axes; under ZeRO an all-reduce over
    those outside the data axes, and under ZeRO-1 the reduce-scatter over the data axes with
    hybrid sharding's replica all-reduce of the shard: ZeRO-2/3 reduce-scatter each
    micro-batch in the block's instructions), ZeRO-1/2 parameter all-gather bytes per data
    axes (ZeRO-3's gathers are instructions too), and the parameters its rank updates (a shard
    under ZeRO). Public: the analytical backend costs the same bytes from it
    (:mod:`stage_explore.analytical.costing_states`,
    :mod:`stage_explore.analytical.fp8_buckets`)."""
    zero = workload.parallel.zero
    sizes = workload.axis_sizes
    reductions: dict[tuple[CollectiveKind, tuple[str, ...]], int] = {}
    gathers: dict[tuple[str, ...], int] = {}
    updated = 0
    data_of = {  # data_axes by weight.expert, and how many ranks share a copy over them
        expert: (data, math.prod(sizes[a] for a in data))
        for expert in {weight.expert for weight in block.weights}
        for data in (data_axes(sizes, workload.expert_axes, expert),)
    }
    in_mesh_order: dict[tuple[str, ...], tuple[str, ...]] = {}  # by weight.grad_axes
    for weight in block.weights:
        data, ranks = data_of[weight.expert]
        grad_axes = in_mesh_order.get(weight.grad_axes)
        if grad_axes is None:
            grad_axes = tuple(a for a in MESH_AXES if a in weight.grad_axes)
            in_mesh_order[weight.grad_axes] = grad_axes
        grad_size = weight.elements * workload.grad_bytes
        shard = weight.elements // ranks
        updated += shard if zero >= 1 else weight.elements
        if zero == 0 or not data:
            if grad_axes:
                key = (CollectiveKind.ALL_REDUCE, grad_axes)
                reductions[key] = reductions.get(key, 0) + grad_size
            continue
        # hybrid sharding's replicas all-reduce the gradient shard after the reduce-scatter
        other = tuple(a for a in grad_axes if a not in data and a != DP_REPLICATE)
        if other:
            key = (CollectiveKind.ALL_REDUCE, other)
            reductions[key] = reductions.get(key, 0) + grad_size
        if zero < 2:  # ZeRO-2/3 reduce-scatter every micro-batch (lower/nodes.py)
            key = (CollectiveKind.REDUCE_SCATTER, data)
            reductions[key] = reductions.get(key, 0) + grad_size
            if DP_REPLICATE in grad_axes:
                key = (CollectiveKind.ALL_REDUCE, (DP_REPLICATE,))
                reductions[key] = reductions.get(key, 0) + shard * workload.grad_bytes
        if zero < 3:
            gathers[data] = gathers.get(data, 0) + shard * workload.weight_bytes
    return reductions, gathers, updated


def _sync_ops(workload: Workload, chunk: Chunk, limit: int | None = None) -> list[SyncOp]:
    """Gradient reduction in buckets of ``limit`` bytes (by default ``grad_bucket_bytes``;
    backward block order: the expansion of :func:`~stage_core.lower.compact.bucket_gradients`),
    and ZeRO parameter gathers. The reductions a block completes are issued in the order their
    buckets started filling (then the block's own order of bucket keys), as a bucket queue
    does."""
    order = list(reversed(chunk.blocks))
    runs: list[tuple[BoundBlock, int]] = []  # identical blocks in a row, backward order
    for block in order:
        if runs and runs[-1][0] is block:
            runs[-1] = (block, runs[-1][1] + 1)
        else:
            runs.append((block, 1))
    per_block = {id(block): block_sync(workload, block) for block, _ in runs}
    gathers = run_totals([per_block[id(block)][1] for block, _ in runs], [n for _, n in runs])
    run_starts: list[int] = []  # the backward position of each run's first block
    position = 0
    for _, count in runs:
        run_starts.append(position)
        position += count
    groups = bucket_gradients(
        [(per_block[id(block)][0], count) for block, count in runs],
        workload.parallel.grad_bucket_bytes if limit is None else limit,
    )
    reductions: list[tuple[int, int, int, CollectiveKind, tuple[str, ...], int]] = []
    for key, size, first, step, count, lead in groups:
        kind, axes = cast(tuple[CollectiveKind, tuple[str, ...]], key)
        for at in range(first, first + step * count, step):
            start = at - lead  # where this bucket started filling: its block's order of keys
            keys = list(per_block[id(runs[bisect_right(run_starts, start) - 1][0])][0])
            reductions.append((at, start, keys.index((kind, axes)), kind, axes, size))
    reductions.sort(key=lambda r: r[:3])
    ops = [
        SyncOp(f"grad_{kind}", kind, axes, size, chunk.index, at)
        for at, _, _, kind, axes, size in reductions
    ]
    ops += _tied_embedding_sync(workload, chunk, order)
    for axes, size in gathers.items():
        ops.append(
            SyncOp("param_all_gather", CollectiveKind.ALL_GATHER, axes, size, chunk.index, -1)
        )
    return ops


#: ``SyncOp.after`` of a collective issued when the whole backward of the step is done (the two
#: pipeline ends reach their last backward at different times; issuing it earlier would hold
#: the last stage's communication while the first still waits for its gradients).
AFTER_BACKWARD = -2

#: Pseudo mesh axis of the group {first pipeline stage, last pipeline stage} (other
#: coordinates equal): the ranks holding the two copies of a tied embedding table.
PIPELINE_ENDS = "pp_ends"

#: Pseudo mesh axis of the group {pipeline stage s, pipeline stage p − 1 − s} (other coordinates
#: equal): under DualPipe the two ranks holding copies of the same two model stages.
PIPELINE_MIRROR = "pp_mirror"


def _mirror_sync(workload: Workload, chunks: tuple[Chunk, ...]) -> list[SyncOp]:
    """DualPipe keeps two copies of every stage (stage r on rank r and on rank p − 1 − r, lower/
    schedule.py), each accumulating the gradients of its own micro-batches: once the step's
    backward is done the two ranks all-reduce their gradients (one collective: both hold the
    same pair of stages, so the same bytes)."""
    if str(workload.parallel.schedule) != "dualpipe":
        return []
    elements = sum(w.elements for chunk in chunks for block in chunk.blocks for w in block.weights)
    size = elements * workload.grad_bytes
    kind = CollectiveKind.ALL_REDUCE
    return [SyncOp("mirror_grad_all_reduce", kind, (PIPELINE_MIRROR,), size, 0, AFTER_BACKWARD)]


def _tied_embedding_sync(workload: Workload, chunk: Chunk, order: list[BoundBlock]) -> list[SyncOp]:
    """With tied embeddings split over pipeline stages, the first stage's table and the last
    stage's output layer are one weight: their gradients are all-reduced between the two ends
    once per step (Megatron's ``_allreduce_word_embedding_grads``); so are the two copies of
    the embedding table multi-token prediction keeps (:func:`embedding_ends`)."""
    if not embedding_ends(workload):
        return []
    shared = shared_embedding_weights(workload.model)
    ops = []
    for block in order:
        for weight in block.weights:
            if (block.kind, weight.name) in shared:
                size = weight.elements * workload.grad_bytes
                ops.append(
                    SyncOp(
                        "embedding_grad_all_reduce",
                        CollectiveKind.ALL_REDUCE,
                        (PIPELINE_ENDS,),
                        size,
                        chunk.index,
                        AFTER_BACKWARD,
                    )
                )
    return ops


def _optimizer(workload: Workload, chunks: tuple[Chunk, ...]) -> Instr:
    """The workload's optimizer kind over the parameters this rank updates (a shard under
    ZeRO), per parameter Adam's 12 FLOPs, 16 bytes read, 14 written (SGD's 2, 8, 6)."""
    params = 0
    per_block: dict[int, int] = {}
    for chunk in chunks:
        for block in chunk.blocks:
            if id(block) not in per_block:
                per_block[id(block)] = block_sync(workload, block)[2]
            params += per_block[id(block)]
    flops, read, written = optimizer_step_bytes(workload.optimizer)
    return Instr(
        f"optimizer.{workload.optimizer}",
        "step",
        "optimizer",
        flops * params,
        read * params,
        written * params,
    )


def boundary_bytes(workload: Workload) -> int:
    """Bytes of the activation (or its gradient) crossing a stage boundary per micro-batch."""
    sizes, axes = workload.sizes, workload.axis_sizes
    tp = axes[TP_REST] * axes[TP_OUTER] * axes["tp"]
    seq_split = axes["cp"] * (tp if workload.flags.sp else 1)
    local_batch = sizes["B"] // (axes[DP_REPLICATE] * axes["dp"] * axes["ep"])
    return local_batch * (sizes["S"] // seq_split) * sizes["H"] * 2


def lower(
    model: ModelSpec,
    parallel: ParallelConfig,
    *,
    bucketed: Callable[[int, int], bool] | None = None,
    optimizer: str = "adam",
) -> ProgramSet:
    """The per-stage programs of one training step. ``bucketed(stage, chunk)``, if given, says
    which chunks reduce their gradients in buckets of ``grad_bucket_bytes``; the others reduce
    them in one bucket after their last backward (Megatron-Core DDP's ``disable_bucketing`` for
    every chunk but the first of the first pipeline stage); by default every chunk is
    bucketed. ``optimizer``: the optimizer's kind (:func:`make_workload`)."""
    workload = make_workload(model, parallel, optimizer)
    blocks = tie_embeddings(workload, bind_all(workload))
    p, vpp = parallel.pp, parallel.vpp
    kind = parallel.schedule_kind  # the interleaved group size rides in the kind
    stages = []
    for stage in range(p):
        chunks = tuple(
            replace(chunk_blocks(workload, blocks, global_stage(kind, stage, v, p)), index=v)
            for v in range(chunks_per_rank(kind, vpp))
        )  # DualPipe: stages r and p − 1 − r (lower/schedule.py)
        tasks = tuple(schedule(kind, stage, p, workload.micro_batches, vpp))
        sync = tuple(
            op
            for chunk in chunks
            for op in _sync_ops(
                workload,
                chunk,
                None if bucketed is None or bucketed(stage, chunk.index) else UNBUCKETED,
            )
        )
        sync += tuple(_mirror_sync(workload, chunks))
        stages.append(
            StageProgram(
                stage,
                chunks,
                tasks,
                sync,
                _optimizer(workload, chunks),
                boundary_bytes(workload),
            )
        )
    return ProgramSet(workload, tuple(stages), blocks)
