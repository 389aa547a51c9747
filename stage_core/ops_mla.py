"""Multi-head latent attention's one op of its own: :class:`HeadConcat`.

MLA (DeepSeek-V2, arXiv 2405.04434, Section 2.1.3) gives every head a query and key made of a
part without position encoding and a decoupled RoPE part; the RoPE key is one vector per token
shared by all heads. :class:`HeadConcat` joins a per-head part ``[B, S, N, D]`` and a second part
— per head ``[B, S, N, R]`` or shared ``[B, S, R]`` — into ``[B, S, N, A]`` (``A = D + R``): a
copy. In the backward a shared part's gradient is the sum over the heads a rank holds
(``B·S·N·R`` additions), a partial sum over the axes that partition the heads; the derived
backward reduces it like any partial tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.ops import BaseOp, Cost, Sizes, Tensor, local_elements, local_extent


@dataclass(frozen=True, slots=True)
class HeadConcat(BaseOp):
    """``out[B, S, N, A] = concat(per_head[B, S, N, D], second[B, S, (N,) R])`` (a copy)."""

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        head, second = layouts
        if head.partial or second.partial:
            raise ShardingError(f"{self.name}: inputs {head}, {second} must not be partial")
        shared = len(second.dims) == 3
        expected = head.shards[:2] if shared else head.shards[:3]
        if second.shards[: len(expected)] != expected or head.shards[3] or second.shards[-1]:
            raise ShardingError(
                f"{self.name}: {second} must shard tokens (and heads) like {head}, with whole "
                "head dims"
            )
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, (*head.shards[:3], ()), (), out.name)]

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

    def shared_grad_flops(
        self,
        in_layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> int:
        """Backward additions: the shared part's gradient summed over the local heads."""
        if len(in_layouts[1].dims) != 3:
            return 0
        out = local_elements(out_layouts[0], sizes, axis_sizes)
        head = local_elements(in_layouts[0], sizes, axis_sizes)
        return int(out - head)


@dataclass(frozen=True, slots=True)
class LatentAttention(BaseOp):
    """Decode-time latent attention with the key up-projection absorbed into the queries
    (DeepSeek-V2 Section 2.1.2; FlashMLA): ``o[B, S, N, L] = softmax(q_lat·cᵀ + q_pe·rᵀ)·c``
    over the cached latent ``c[B, T, L]`` and RoPE keys ``r[B, T, R]``, shared by every head.

    Inputs ``q_lat[B, S, N, L]``, ``q_pe[B, S, N, R]``, ``c[B, T, L]``, ``r[B, T, R]``. Query
    ``i`` of the ``S`` new tokens sees ``T − S + i + 1`` positions; FLOPs
    ``2·B·keys·N·((L + R) + L)``. The caches are read once per rank whatever the heads it holds
    (they are replicated over the axes that partition the heads). Forward only (serving).
    """

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        q_lat, q_pe, latent, rope = layouts
        if any(layout.partial for layout in layouts):
            raise ShardingError(f"{self.name}: inputs must not be partial")
        if latent.shards[1] or rope.shards[1] or q_lat.shards[:3] != q_pe.shards[:3]:
            raise ShardingError(
                f"{self.name}: the caches {latent}, {rope} must hold whole sequences and the "
                f"queries {q_lat}, {q_pe} share their layout"
            )
        if (latent.shards[0], rope.shards[0]) != (q_lat.shards[0], q_lat.shards[0]):
            raise ShardingError(f"{self.name}: caches and queries must shard sequences alike")
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, q_lat.shards, (), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        q_lat, q_pe, latent, _ = layouts
        qt, ct = tensors[self.inputs[0]], tensors[self.inputs[2]]
        batch = local_extent(qt.dims[0], q_lat.shards[0], sizes, axis_sizes)
        sq = local_extent(qt.dims[1], q_lat.shards[1], sizes, axis_sizes)
        heads = local_extent(qt.dims[2], q_lat.shards[2], sizes, axis_sizes)
        rank = local_extent(qt.dims[3], q_lat.shards[3], sizes, axis_sizes)
        rope = local_extent(tensors[self.inputs[1]].dims[3], q_pe.shards[3], sizes, axis_sizes)
        skv = sizes[ct.dims[1]]
        keys = sq * (skv - sq) + sq * (sq + 1) // 2
        flops = 2 * batch * keys * heads * ((rank + rope) + rank)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(flops, read, written)
