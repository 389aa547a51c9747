"""Binding: symbolic sharded blocks to exact integer instructions.

A block's symbolic forward and backward (:mod:`stage_core.sharding`, :mod:`stage_core.autodiff`)
depend only on the model's *structure* and a few parallel flags, so they are derived once per
structure (:func:`symbolic_block`, a memo of a pure function) and bound here to integers for a
concrete configuration: every FLOP, byte and communication size becomes an ``int``, and
collectives over a group of one rank disappear.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from stage_core.autodiff import ShardedBackward, derive_backward
from stage_core.blocks import (
    ATTENTION_CORE,
    MTP_HEAD,
    BlockOptions,
    Structure,
    embedding_block,
    head_block,
    layer_block,
    mtp_block,
    mtp_layer_of_block,
    serving_head_block,
)
from stage_core.errors import InfeasibleError, ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Mesh
from stage_core.models.layers import is_kept_block, is_layer_block, layer_kind_of_block
from stage_core.ops import Attention, Tensor, axis_product, layout_bytes, local_elements
from stage_core.plans import DP_REPLICATE, TP_OUTER, TP_REST, PlanFlags, plan_for
from stage_core.recompute import op_sac_scattered, recompute_regions
from stage_core.sharding import STATS_REASON, CommStep, OpStep, ShardedForward, shard_forward
from stage_core.trace import CollectiveKind

#: Axes of the generator's mesh, outermost first by default. ``tpr`` and ``tpo``
#: (plans.TP_REST, plans.TP_OUTER) are sub-axes of tp when the lowering splits it for the
#: experts (``tp`` is then the inner ``etp`` ranks, lower/experts.py); ``dpr``
#: (plans.DP_REPLICATE) is the outer sub-axis of dp under hybrid sharding (the replicas; ``dp``
#: is then the ZeRO shard group); each is in a workload's mesh only when its size is more than 1.
MESH_AXES = ("pp", DP_REPLICATE, "dp", "ep", "cp", TP_REST, TP_OUTER, "tp")
#: Axes over which weights are data-parallel replicas that ZeRO shards their states over
#: (gradients reduce-scattered, parameters gathered). The replicas of hybrid sharding (``dpr``)
#: are not among them: gradients are all-reduced over it, the states are not sharded.
DATA_AXES = frozenset({"dp", "ep", "cp"})

BlockKind = str  # "embedding" | "head" | "serving_head" | a layer's (models.layers.LayerKind.block)
# | an MTP module's ("mtp_<layer block>", "mtp_head"; blocks.mtp_block)


@dataclass(frozen=True, slots=True)
class Instr:
    """One instruction of a block, with exact integers.

    Compute: ``flops``, ``bytes_read``, ``bytes_written`` and the op ``kind`` (einsum,
    attention, elementwise …). Collective: ``collective``, mesh ``axes`` and ``comm_bytes``
    (ASTRA-sim's ``comm_size``). ``phase`` is fwd, bwd or recompute.
    """

    name: str
    phase: str
    kind: str
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    collective: CollectiveKind | None = None
    axes: tuple[str, ...] = ()
    comm_bytes: int = 0
    deps: tuple[int, ...] = ()
    ring_steps: int = 0
    inputs: tuple[tuple[str, int], ...] = ()
    outputs: tuple[tuple[str, int], ...] = ()

    @property
    def is_comm(self) -> bool:
        return self.collective is not None


@dataclass(frozen=True, slots=True)
class WeightShard:
    """A weight as one rank holds it, and the axes its gradient must be reduced over."""

    name: str
    elements: int
    grad_axes: tuple[str, ...]
    expert: bool


@dataclass(frozen=True, slots=True)
class BoundBlock:
    """A block bound to integers: instructions per phase, weights and saved activations."""

    kind: BlockKind
    fwd: tuple[Instr, ...]
    bwd: tuple[Instr, ...]
    weights: tuple[WeightShard, ...]
    saved_bytes: int
    fwd_model_flops: int

    @property
    def weight_elements(self) -> int:
        return sum(w.elements for w in self.weights)


@dataclass(frozen=True, slots=True)
class SymbolicBlock:
    forward: ShardedForward
    backward: ShardedBackward


@functools.lru_cache(maxsize=256)
def symbolic_block(
    kind: BlockKind,
    model: Structure,
    options: BlockOptions,
    flags: PlanFlags,
    recompute: str,
    modules: tuple[str, ...] = (),
) -> SymbolicBlock:
    """The sharded forward and derived backward of one block kind (memoised: a pure function
    of the model's structure and the plan flags, never of sizes). Serving blocks (a KV cache in
    ``options``) run forward only: their backward is empty. ``modules``: what a selective
    recompute re-runs (Megatron's ``--recompute-modules``, :mod:`stage_core.recompute`; empty:
    the attention core)."""
    if kind == "embedding":
        block = embedding_block(model, options)
    elif kind in ("head", MTP_HEAD):  # an MTP module's loss runs the head's ops
        block = head_block(model)
    elif kind == "serving_head":
        block = serving_head_block(model)
    elif (mtp_layer := mtp_layer_of_block(kind)) is not None:
        block = mtp_block(model, options, mtp_layer)
    else:
        layer = layer_kind_of_block(kind)
        assert layer is not None, f"unknown block kind {kind!r}"
        block = layer_block(model, options, layer)
    mesh = Mesh.symbolic(MESH_AXES)
    forward = shard_forward(block, plan_for(block, flags), mesh)
    if options.kv_cache_bytes:
        return SymbolicBlock(forward, ShardedBackward((), {}, (), forward.tensors))
    mode = recompute if is_layer_block(kind) or mtp_layer_of_block(kind) else "none"
    if is_kept_block(kind):  # partial checkpointing: this layer keeps its activations
        mode = "none"
    region, discard = ATTENTION_CORE, frozenset[str]()
    if mode == "selective":
        scattered = op_sac_scattered(forward.steps)
        region, discard = recompute_regions(block, modules, scattered)
    backward = derive_backward(forward, recompute=mode, region=region, discard=discard)
    return SymbolicBlock(forward, backward)


def _collective(kind: str) -> CollectiveKind:
    return CollectiveKind(kind)


_MODEL_FLOP_KINDS = ("einsum", "attention", "ssdscan")


def bind_block(
    symbolic: SymbolicBlock,
    kind: BlockKind,
    sizes: Mapping[str, int],
    axis_sizes: Mapping[str, int],
) -> BoundBlock:
    """Bind a symbolic block to integer ``sizes`` (dims) and ``axis_sizes`` (mesh axes)."""
    tensors = symbolic.backward.tensors
    phases: dict[str, list[Instr]] = {"fwd": [], "bwd": []}
    writers: dict[str, dict[str, int]] = {"fwd": {}, "bwd": {}}
    last_op: dict[str, int] = {}  # per phase: the index of the last op's instruction
    fwd_model_flops = 0
    steps = list(symbolic.forward.steps) + list(symbolic.backward.steps)
    try:
        for step in steps:
            which = "fwd" if step.phase == "fwd" else "bwd"
            bucket, writer = phases[which], writers[which]
            if isinstance(step, CommStep):
                axes = tuple(a for a in step.step.axes if axis_sizes[a] > 1)
                if not axes:
                    continue
                size = layout_bytes(step.step.before, tensors[step.tensor], sizes, axis_sizes)
                after = layout_bytes(step.step.after, tensors[step.tensor], sizes, axis_sizes)
                deps: tuple[int, ...] = (writer[step.tensor],) if step.tensor in writer else ()
                if not deps and step.reason.startswith(STATS_REASON) and which in last_op:
                    # a vocab-parallel cross-entropy's statistics are reduced from its logits
                    # and the loss is computed from them: Megatron-LM's
                    # _VocabParallelCrossEntropy.forward (megatron/core/tensor_parallel/
                    # cross_entropy.py) all-reduces logits_max, then predicted_logits and
                    # sum_exp_logits, on the tensor-parallel group in the op's own sequence
                    # (https://github.com/NVIDIA/Megatron-LM); one op here, so the first
                    # all-reduce waits for it (without this it ran beside the logits GEMM,
                    # and the block's last instruction was not its end)
                    deps = (last_op[which],)
                writer[step.tensor] = len(bucket)
                bucket.append(
                    Instr(
                        f"{step.step.kind}:{step.tensor}",
                        step.phase,
                        "comm",
                        collective=_collective(step.step.kind),
                        axes=axes,
                        comm_bytes=int(size),
                        deps=deps,
                        inputs=((step.tensor, int(size)),),
                        outputs=((step.tensor, int(after)),),
                    )
                )
                continue
            assert isinstance(step, OpStep)
            cost = step.op.cost(step.in_layouts, step.out_layouts, tensors, sizes, axis_sizes)
            deps = tuple(sorted({writer[t] for t in step.op.inputs if t in writer}))
            ring = _ring(step, tensors, sizes, axis_sizes, deps)
            if ring is not None:
                deps = (len(bucket),)
                bucket.append(ring)
            for name in step.op.outputs:
                writer[name] = len(bucket)
            instr = Instr(
                step.op.name,
                step.phase,
                step.op.kind,
                int(cost.flops),
                int(cost.bytes_read),
                int(cost.bytes_written),
                deps=deps,
                inputs=_io(step.op.inputs, step.in_layouts, tensors, sizes, axis_sizes),
                outputs=_io(step.op.outputs, step.out_layouts, tensors, sizes, axis_sizes),
            )
            last_op[which] = len(bucket)
            bucket.append(instr)
            if step.phase == "fwd" and step.op.kind in _MODEL_FLOP_KINDS:
                fwd_model_flops += instr.flops
        weights = _weights(symbolic, sizes, axis_sizes)
        saved = sum(int(item.bytes(sizes, axis_sizes)) for item in symbolic.backward.saved)  # type: ignore[call-overload]
    except ShardingError as error:
        raise InfeasibleError(f"{kind}: {error}") from None
    return BoundBlock(
        kind, tuple(phases["fwd"]), tuple(phases["bwd"]), weights, saved, fwd_model_flops
    )


def _io(
    names: tuple[str, ...],
    layouts: tuple[Layout, ...],
    tensors: Mapping[str, Tensor],
    sizes: Mapping[str, int],
    axis_sizes: Mapping[str, int],
) -> tuple[tuple[str, int], ...]:
    return tuple(
        (name, int(layout_bytes(layout, tensors[name], sizes, axis_sizes)))
        for name, layout in zip(names, layouts, strict=True)
    )


def _ring(
    step: OpStep,
    tensors: Mapping[str, Tensor],
    sizes: Mapping[str, int],
    axis_sizes: Mapping[str, int],
    deps: tuple[int, ...],
) -> Instr | None:
    """The K/V exchanges of ring attention before its forward (cp−1 steps) or backward
    (2·(cp−1): K/V again, then dK/dV back to their owners)."""
    forward = step.op if isinstance(step.op, Attention) else getattr(step.op, "forward", None)
    if not isinstance(forward, Attention):
        return None
    layouts = step.in_layouts if step.op is forward else step.op.forward_in  # type: ignore[attr-defined]
    axes = tuple(a for a in Attention.ring_axes(layouts) if axis_sizes[a] > 1)
    if not axes:
        return None
    ring = group_size(axes, axis_sizes)
    chunk = sum(
        int(layout_bytes(layouts[i], tensors[forward.inputs[i]], sizes, axis_sizes)) for i in (1, 2)
    )
    steps = (ring - 1) * (1 if step.op is forward else 2)
    return Instr(
        f"ring:{forward.name}",
        step.phase,
        "ring",
        axes=axes,
        comm_bytes=chunk,
        deps=deps,
        ring_steps=steps,
    )


def _weights(
    symbolic: SymbolicBlock, sizes: Mapping[str, int], axis_sizes: Mapping[str, int]
) -> tuple[WeightShard, ...]:
    result = []
    stored = symbolic.forward.stored
    for name, tensor in symbolic.forward.tensors.items():
        if tensor.role != "weight":
            continue
        layout: Layout = stored[name]
        elements = int(local_elements(layout, sizes, axis_sizes))
        grad = symbolic.backward.weight_grads.get(name)
        grad_axes = tuple(a for a in (grad.partial if grad else ()) if axis_sizes[a] > 1)
        result.append(WeightShard(name, elements, grad_axes, name.startswith("experts.")))
    return tuple(result)


def group_size(axes: tuple[str, ...], axis_sizes: Mapping[str, int]) -> int:
    return int(axis_product(axes, axis_sizes))
