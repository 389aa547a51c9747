"""Redistribution: the collectives that turn one layout into another.

One table maps a change of placement on one mesh axis to a collective:

=================  =================  ==============
source             destination        collective
=================  =================  ==============
partial sum        replicated         all-reduce
partial sum        partitioned        reduce-scatter
partitioned        replicated         all-gather
partitioned dim i  partitioned dim j  all-to-all
replicated         partitioned        local slice
=================  =================  ==============

Several axes compose: the planner applies one axis change at a time to the current layout,
cheapest first (slices, then reductions, then all-to-alls, then all-gathers), and merges
adjacent steps of the same kind on the same dims into one collective over several axes. An
all-to-all moves a run of a dim's innermost axes at once when the target dim wants exactly
that run next, in the same nesting order: one all-to-all over the group of those axes (e.g.
expert parallelism folded over ``ep`` and ``tp``), never a gather and a slice.
Axes partitioning one dim nest (outermost first), so only the innermost axis of a dim can be
gathered or moved away, and a new axis is always added innermost; a change that needs a
reordering first gathers and then slices again. A partial sum cannot be created from data that
is already whole or partitioned: that and every other impossible change is a
:class:`ShardingError`.

Bytes follow ASTRA-sim's ``comm_size`` convention (``docs/reference/chakra_et.md``): for every
kind it is the size of the rank's *input* buffer at the time of the collective (whole buffer for
all-reduce and all-to-all, whole input for reduce-scatter, the per-rank shard for all-gather).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

import sympy

from stage_core.errors import ShardingError
from stage_core.layout import Layout, simplified
from stage_core.mesh import Mesh, Size


class StepKind(StrEnum):
    """Kinds of redistribution step; all but ``slice`` communicate."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SLICE = "slice"


@dataclass(frozen=True, slots=True)
class RedistributionStep:
    """One collective (or local slice) of a redistribution.

    ``src_dim`` is the tensor dim the step gathers or moves away from, ``dst_dim`` the dim it
    scatters, slices or moves onto (``None`` where it does not apply). ``bytes_per_rank`` is the
    ASTRA-sim ``comm_size`` of the step (0 for a slice). ``before`` and ``after`` are the layouts
    around the step.
    """

    kind: StepKind
    axes: tuple[str, ...]
    src_dim: str | None
    dst_dim: str | None
    bytes_per_rank: Size
    before: Layout
    after: Layout

    def describe(self) -> str:
        """A one-line human description, e.g. ``all_gather over dp on B: 512 bytes``."""
        where = {
            StepKind.ALL_REDUCE: "",
            StepKind.ALL_GATHER: f" on {self.src_dim}",
            StepKind.REDUCE_SCATTER: f" onto {self.dst_dim}",
            StepKind.ALL_TO_ALL: f" from {self.src_dim} to {self.dst_dim}",
            StepKind.SLICE: f" on {self.dst_dim}",
        }[self.kind]
        return f"{self.kind} over {'*'.join(self.axes)}{where}: {self.bytes_per_rank} bytes"

    def to_dict(self) -> dict[str, object]:
        size = self.bytes_per_rank
        return {
            "kind": str(self.kind),
            "axes": list(self.axes),
            "src_dim": self.src_dim,
            "dst_dim": self.dst_dim,
            "bytes_per_rank": int(size) if _is_int(size) else str(size),
            "before": str(self.before),
            "after": str(self.after),
        }


def _is_int(value: Size) -> bool:
    return isinstance(value, int) or (isinstance(value, sympy.Expr) and bool(value.is_Integer))


# -- the planner --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    src: Layout
    dst: Layout
    mesh: Mesh
    dtype_bytes: int

    def target_prefix_ok(self, layout: Layout, dim: int, axis: str) -> bool:
        """Whether ``axis`` may be appended to ``dim`` now (the dim holds its target prefix)."""
        wanted = self.dst.shards[dim]
        position = wanted.index(axis)
        return layout.shards[dim] == wanted[:position]

    def settled(self, layout: Layout, dim: int) -> int:
        """How many leading axes of ``dim`` are already in their final place."""
        current, wanted = layout.shards[dim], self.dst.shards[dim]
        count = 0
        while count < min(len(current), len(wanted)) and current[count] == wanted[count]:
            count += 1
        return count

    def bytes_of(self, layout: Layout) -> Size:
        elements = layout.local_elements(self.mesh)
        if isinstance(elements, sympy.Expr) and elements.is_number and not elements.is_Integer:
            raise ShardingError(
                f"layout {layout} does not divide evenly on the mesh {self.mesh}: "
                f"{elements} elements per rank"
            )
        size = elements * self.dtype_bytes
        return simplified(size) if isinstance(size, sympy.Expr) else size


def _append(layout: Layout, dim: int, axis: str, partial: tuple[str, ...]) -> Layout:
    shards = [list(axes) for axes in layout.shards]
    shards[dim].append(axis)
    return layout.with_shards(shards, partial)


def _pop(layout: Layout, dim: int) -> tuple[Layout, str]:
    shards = [list(axes) for axes in layout.shards]
    axis = shards[dim].pop()
    return layout.with_shards(shards, layout.partial), axis


_Move = Callable[[_Plan, Layout], "RedistributionStep | None"]


def _slice(plan: _Plan, layout: Layout) -> RedistributionStep | None:
    for dim, wanted in enumerate(plan.dst.shards):
        for axis in wanted:
            if axis in layout.axes_used:
                continue
            if plan.target_prefix_ok(layout, dim, axis):
                after = _append(layout, dim, axis, layout.partial)
                return RedistributionStep(
                    StepKind.SLICE, (axis,), None, layout.dims[dim], 0, layout, after
                )
    return None


def _reduce(plan: _Plan, layout: Layout, scatter: bool) -> RedistributionStep | None:
    for axis in layout.partial:
        if axis in plan.dst.partial:
            continue
        target = plan.dst.dim_of(axis)
        partial = tuple(a for a in layout.partial if a != axis)
        if scatter and target is not None and plan.target_prefix_ok(layout, target, axis):
            after = _append(layout, target, axis, partial)
            return RedistributionStep(
                StepKind.REDUCE_SCATTER,
                (axis,),
                None,
                layout.dims[target],
                plan.bytes_of(layout),
                layout,
                after,
            )
        if not scatter and target is None:
            after = layout.with_shards(layout.shards, partial)
            return RedistributionStep(
                StepKind.ALL_REDUCE, (axis,), None, None, plan.bytes_of(layout), layout, after
            )
    return None


def _unsettled_innermost(plan: _Plan, layout: Layout) -> list[tuple[int, str]]:
    """(dim, axis) for each dim whose innermost axis is not in its final place."""
    found = []
    for dim, axes in enumerate(layout.shards):
        if axes and len(axes) > plan.settled(layout, dim):
            found.append((dim, axes[-1]))
    return found


def _movable_run(plan: _Plan, layout: Layout, dim: int) -> tuple[tuple[str, ...], int] | None:
    """The innermost unsettled axes of ``dim`` that one all-to-all can move onto another dim.

    A run of the ``k`` innermost axes of ``dim`` (outermost first) moves together when it is,
    in the same order, the next ``k`` axes the target dim wants after the axes it already
    holds: every rank of the group over those axes then sends one block of the target dim to
    each member, and the block index nests the axes identically on both dims.
    """
    axes = layout.shards[dim]
    unsettled = len(axes) - plan.settled(layout, dim)
    for count in range(1, unsettled + 1):
        run = axes[len(axes) - count :]
        target = plan.dst.dim_of(run[0])
        if target is None or target == dim:
            continue
        wanted, held = plan.dst.shards[target], layout.shards[target]
        start = len(held)
        if wanted[:start] == held and wanted[start : start + count] == run:
            return run, target
    return None


def _all_to_all(plan: _Plan, layout: Layout) -> RedistributionStep | None:
    for dim, _ in _unsettled_innermost(plan, layout):
        found = _movable_run(plan, layout, dim)
        if found is None:
            continue
        run, target = found
        after = layout
        for _ in run:
            after, _ = _pop(after, dim)
        for axis in run:
            after = _append(after, target, axis, layout.partial)
        return RedistributionStep(
            StepKind.ALL_TO_ALL,
            run,
            layout.dims[dim],
            layout.dims[target],
            plan.bytes_of(layout),
            layout,
            after,
        )
    return None


def _all_gather(plan: _Plan, layout: Layout) -> RedistributionStep | None:
    for dim, axis in _unsettled_innermost(plan, layout):
        if axis in plan.dst.partial:
            raise ShardingError(
                f"cannot turn {plan.src} into {plan.dst}: axis {axis!r} partitions "
                f"{layout.dims[dim]} but must become a partial sum"
            )
        after, _ = _pop(layout, dim)
        return RedistributionStep(
            StepKind.ALL_GATHER,
            (axis,),
            layout.dims[dim],
            None,
            plan.bytes_of(layout),
            layout,
            after,
        )
    return None


_MOVES: tuple[_Move, ...] = (
    _slice,
    lambda plan, layout: _reduce(plan, layout, scatter=True),
    lambda plan, layout: _reduce(plan, layout, scatter=False),
    _all_to_all,
    _all_gather,
)


def _check_compatible(src: Layout, dst: Layout, mesh: Mesh) -> None:
    src.validate(mesh)
    dst.validate(mesh)
    if len(src.dims) != len(dst.dims):
        raise ShardingError(
            f"cannot turn {src} into {dst}: they have {len(src.dims)} and {len(dst.dims)} dims"
        )
    for a, b, size_a, size_b in zip(src.dims, dst.dims, src.sizes, dst.sizes, strict=True):
        if simplified(size_a - size_b) != 0:
            raise ShardingError(
                f"cannot turn {src} into {dst}: dim {a} and dim {b} differ in global size"
            )
    created = sorted(set(dst.partial) - set(src.partial))
    if created:
        raise ShardingError(
            f"cannot turn {src} into {dst}: a partial sum over {created[0]!r} cannot be created "
            "from whole or partitioned data (ambiguous)"
        )


def _merge(steps: list[RedistributionStep], mesh: Mesh) -> list[RedistributionStep]:
    """Merge adjacent steps of one kind on the same dims into one collective over several axes."""
    merged: list[RedistributionStep] = []
    for step in steps:
        if merged:
            last = merged[-1]
            same = (
                last.kind == step.kind
                and last.src_dim == step.src_dim
                and last.dst_dim == step.dst_dim
                and step.kind != StepKind.ALL_TO_ALL
            )
            if same:
                order = {name: i for i, name in enumerate(mesh.names)}
                axes = last.axes + step.axes
                if step.kind == StepKind.ALL_REDUCE:
                    axes = tuple(sorted(axes, key=order.__getitem__))
                elif step.kind == StepKind.ALL_GATHER:
                    axes = step.axes + last.axes  # gathered innermost first; list outer first
                # The merged collective's input is the first step's input.
                merged[-1] = replace(last, axes=axes, after=step.after)
                continue
        merged.append(step)
    return merged


def redistribute(
    src: Layout, dst: Layout, mesh: Mesh, dtype_bytes: int = 2, merge: bool = True
) -> list[RedistributionStep]:
    """The steps, in execution order, that turn layout ``src`` into ``dst`` on ``mesh``.

    ``dst`` may omit the tensor name. Slices are included (kind ``slice``, 0 bytes). Raises
    :class:`ShardingError` when the change is impossible or ambiguous.
    """
    dst = Layout(dst.dims, dst.shards, dst.partial, dst.name or src.name, dst.sizes)
    _check_compatible(src, dst, mesh)
    plan = _Plan(src, dst, mesh, dtype_bytes)
    layout = src
    steps: list[RedistributionStep] = []
    limit = 4 * (len(mesh.names) + 1) ** 2
    while layout.shards != dst.shards or set(layout.partial) != set(dst.partial):
        for move in _MOVES:
            step = move(plan, layout)
            if step is not None:
                steps.append(step)
                layout = step.after
                break
        else:
            raise ShardingError(f"cannot turn {src} into {dst}: no collective makes progress")
        if len(steps) > limit:  # pragma: no cover - guards the termination argument above
            raise ShardingError(f"cannot turn {src} into {dst}: the plan does not converge")
    return _merge(steps, mesh) if merge else steps


def collectives(steps: list[RedistributionStep]) -> list[RedistributionStep]:
    """Only the communicating steps (drops local slices)."""
    return [step for step in steps if step.kind != StepKind.SLICE]
