"""Sharding a single-device block: layouts in, forward steps with derived collectives out.

A :class:`ShardingPlan` is declarative data: the *stored* layout of tensors (every input and
weight; activations optionally, default: the op's natural output) and the *consumed* layout of
an op's input where it differs from the stored one. :func:`shard_forward` infers every op's
natural output layouts and inserts, wherever a stored or consumed layout differs from what the
producer gives, the collectives :func:`~stage_core.redistribute.redistribute` returns. No
collective is ever written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stage_core.errors import ShardingError
from stage_core.graph import Block
from stage_core.layout import Layout
from stage_core.mesh import Mesh
from stage_core.ops import BaseOp, CrossEntropy, Tensor
from stage_core.redistribute import RedistributionStep, StepKind, redistribute


@dataclass(frozen=True, slots=True)
class OpStep:
    """An op executed with the given input and output layouts in a phase (fwd, bwd, recompute)."""

    op: BaseOp
    in_layouts: tuple[Layout, ...]
    out_layouts: tuple[Layout, ...]
    phase: str = "fwd"
    region: str = ""


@dataclass(frozen=True, slots=True)
class CommStep:
    """A derived redistribution step of ``tensor`` (its ``step.before`` gives the bytes)."""

    tensor: str
    step: RedistributionStep
    phase: str = "fwd"
    reason: str = ""


Step = OpStep | CommStep

#: The reason prefix of a vocab-parallel cross-entropy's statistics all-reduces
#: (:func:`_statistics`): they follow the op that emits them (:func:`~stage_core.lower.bind.
#: bind_block` makes the first wait for it).
STATS_REASON = "stats:"


def same_layout(a: Layout, b: Layout) -> bool:
    return a.shards == b.shards and set(a.partial) == set(b.partial)


def strip_partial(layout: Layout) -> Layout:
    return layout.with_shards(layout.shards, ())


@dataclass(frozen=True, slots=True)
class ShardingPlan:
    """Stored layouts by tensor name and consumed layouts by (op name, tensor name)."""

    stored: Mapping[str, Layout] = field(default_factory=dict)
    consumed: Mapping[tuple[str, str], Layout] = field(default_factory=dict)

    @classmethod
    def from_strings(
        cls,
        block: Block,
        stored: Mapping[str, str],
        consumed: Mapping[tuple[str, str], str] | None = None,
    ) -> ShardingPlan:
        """Build a plan from layout strings whose dims must match the tensors' dims."""

        def parse(tensor: str, text: str) -> Layout:
            if tensor not in block.tensors:
                raise ShardingError(f"plan names unknown tensor {tensor!r} of block {block.name!r}")
            body = text if "[" in text else f"[{text}]"
            layout = Layout.parse(body)
            dims = block.tensors[tensor].dims
            if layout.dims != dims:
                raise ShardingError(
                    f"plan layout {text!r} for {tensor!r} has dims {layout.dims}, "
                    f"but the tensor has {dims}"
                )
            return Layout(dims, layout.shards, layout.partial, tensor)

        return cls(
            {name: parse(name, text) for name, text in stored.items()},
            {key: parse(key[1], text) for key, text in (consumed or {}).items()},
        )


@dataclass(frozen=True, slots=True)
class ShardedForward:
    """A block's forward pass on a mesh: steps, and the layouts they leave behind."""

    block: Block
    mesh: Mesh
    steps: tuple[Step, ...]
    stored: Mapping[str, Layout]
    natural: Mapping[str, Layout]
    consumed: Mapping[tuple[str, str], Layout]

    @property
    def tensors(self) -> Mapping[str, Tensor]:
        return self.block.tensors


def _comm_steps(
    tensor: str, src: Layout, dst: Layout, mesh: Mesh, phase: str, reason: str, dtype_bytes: int
) -> list[CommStep]:
    steps = redistribute(src, dst, mesh, dtype_bytes=dtype_bytes)
    return [CommStep(tensor, s, phase, reason) for s in steps if s.kind != StepKind.SLICE]


def _statistics(
    block: Block, op: BaseOp, in_layouts: list[Layout], outs: list[Layout], mesh: Mesh
) -> list[CommStep]:
    """Vocab-parallel cross-entropy: its per-token statistics (max, sum of exponentials, target
    logit) are partial sums over the vocabulary's axes, reduced like any partial tensor."""
    if not isinstance(op, CrossEntropy) or not op.vocab_axes(in_layouts):
        return []
    stats = f"{op.outputs[0]}.stats"
    partial = Layout(outs[0].dims, outs[0].shards, op.vocab_axes(in_layouts), stats)
    steps: list[CommStep] = []
    for _ in range(op.stat_collectives):
        steps += _comm_steps(
            stats, partial, strip_partial(partial), mesh, "fwd", f"{STATS_REASON}{op.name}", 4
        )
    return steps


def shard_forward(block: Block, plan: ShardingPlan, mesh: Mesh) -> ShardedForward:
    """Assign layouts to ``block`` by ``plan`` and derive the forward collectives."""
    block.validate()
    stored: dict[str, Layout] = {}
    natural: dict[str, Layout] = {}
    consumed: dict[tuple[str, str], Layout] = {}
    for name, spec in block.tensors.items():
        if spec.role in ("input", "weight", "index"):
            layout = plan.stored.get(name) or Layout.replicated(spec.dims, name)
            stored[name] = natural[name] = layout.validate(mesh)
    steps: list[Step] = []
    available: set[tuple[str, tuple[tuple[str, ...], ...], frozenset[str]]] = set()
    for op in block.ops:
        in_layouts = []
        for tensor in op.inputs:
            want = plan.consumed.get((op.name, tensor), stored[tensor]).validate(mesh)
            key = (tensor, want.shards, frozenset(want.partial))
            # A tensor redistributed once serves every later consumer of the same layout.
            if not same_layout(want, stored[tensor]) and key not in available:
                available.add(key)
                dtype = block.tensors[tensor].dtype_bytes
                steps += _comm_steps(
                    tensor, stored[tensor], want, mesh, "fwd", f"consume:{op.name}", dtype
                )
            consumed[(op.name, tensor)] = want
            in_layouts.append(want)
        try:
            outs = op.infer(in_layouts, block.tensors)
        except ShardingError as error:
            raise ShardingError(f"block {block.name!r}: {error}") from None
        steps.append(OpStep(op, tuple(in_layouts), tuple(outs)))
        steps += _statistics(block, op, in_layouts, outs, mesh)
        for name, layout in zip(op.outputs, outs, strict=True):
            natural[name] = layout
            target = plan.stored.get(name, layout).validate(mesh)
            if not same_layout(target, layout):
                dtype = block.tensors[name].dtype_bytes
                steps += _comm_steps(name, layout, target, mesh, "fwd", f"store:{op.name}", dtype)
            stored[name] = target
    for name in block.outputs:
        if stored[name].partial:
            raise ShardingError(
                f"block {block.name!r}: output {name!r} leaves the block as a partial sum "
                f"{stored[name]}; give it a stored layout"
            )
    return ShardedForward(block, mesh, tuple(steps), stored, natural, consumed)


def dump_steps(steps: tuple[Step, ...] | list[Step]) -> str:
    """A stable text form of sharded steps: one line per op or collective (golden files)."""
    lines = []
    for step in steps:
        if isinstance(step, CommStep):
            s = step.step
            lines.append(
                f"{step.phase:9s} {s.kind:14s} {step.tensor} over {'*'.join(s.axes)}: "
                f"{s.before} -> {s.after}  [{s.bytes_per_rank} B] ({step.reason})"
            )
        else:
            ins = ", ".join(str(layout) for layout in step.in_layouts)
            outs = ", ".join(str(layout) for layout in step.out_layouts)
            lines.append(f"{step.phase:9s} {step.op.kind:14s} {step.op.name}: {ins} -> {outs}")
    return "\n".join(lines)
