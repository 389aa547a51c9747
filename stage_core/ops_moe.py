"""Mixture-of-experts ops: token dispatch into per-expert capacity slots, and combine.

:class:`Dispatch` permutes tokens ``x[B, S, H]`` into slots ``[E, C, H]`` (``C`` slots per
expert). Each rank fills slots for its own tokens, so the natural layout partitions ``C`` over
every axis that partitions the tokens, with the expert-parallel axes innermost in their mesh
order (``ep``; with Megatron-Core's MoE parallel folding also ``cp`` and ``tp``, or ``tpo``
when ``1 < etp < tp`` splits tp); experts sharded over those axes then need one all-to-all
over their group (derived from the layout change, not written by hand).
:class:`Combine` is the inverse, weighting each token's ``top_k`` expert outputs by its gates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.ops import BaseOp, Cost, Sizes, Tensor, local_elements


@dataclass(frozen=True, slots=True)
class Dispatch(BaseOp):
    """``slots[E, C, H] = dispatch(x[B, S, H], gates[B, S, E])``; no FLOPs, a copy of k·tokens.

    ``expert_axes``: the mesh axes the experts are partitioned over, outermost first.
    """

    expert_axes: tuple[str, ...] = ("ep",)

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        x = layouts[0]
        if x.partial or x.shards[2]:
            raise ShardingError(f"{self.name}: tokens {x} must be whole in H and not partial")
        axes = [a for axes in x.shards[:2] for a in axes]
        ordered = tuple(
            [a for a in axes if a not in self.expert_axes]
            + [a for a in self.expert_axes if a in axes]
        )
        out = tensors[self.outputs[0]]
        if not any(a in axes for a in self.expert_axes):  # tokens gathered over the expert
            # group (Megatron's all-gather dispatcher): each rank fills its local experts' slots
            return [Layout(out.dims, (self.expert_axes, ordered, ()), (), out.name)]
        return [Layout(out.dims, ((), ordered, ()), (), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(0, read, written)

    @property
    def saved(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class Combine(BaseOp):
    """``y[B, S, H] = combine(slots[E, C, H], gates[B, S, E])``: 2 FLOPs per slot element."""

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        slots, gates = layouts
        out = tensors[self.outputs[0]]
        local = tuple(a for a in slots.shards[0] if a not in slots.partial)  # experts sharded:
        partial = slots.partial + local  # each rank sums its local experts' outputs only
        return [Layout(out.dims, (gates.shards[0], gates.shards[1], ()), partial, out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(2 * local_elements(layouts[0], sizes, axis_sizes), read, written)

    @property
    def saved(self) -> tuple[str, ...]:
        return self.inputs
