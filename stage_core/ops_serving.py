"""Serving ops: the KV cache and the last-token selection of an inference step.

:class:`CacheAppend` writes a step's new keys (or values) into a sequence's KV cache and yields
the whole cached context ``[B, T, K, D]`` that the attention kernel then reads (``T`` tokens per
sequence after the step). :class:`LastToken` picks each sequence's last position, the only one
whose logits a serving step needs. Neither does arithmetic beyond a cast; their bytes are exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.ops import BaseOp, Cost, Sizes, Tensor, local_elements


@dataclass(frozen=True, slots=True)
class CacheAppend(BaseOp):
    """``ctx[B, T, …] = append(new[B, S, …], cache[B, T, …])`` (keys or values ``[…] = [K,
    D]``; latent attention's latent ``[L]`` or RoPE key ``[R]``).

    Reads the ``S`` new entries and writes them into their cache slots at the cache's width
    (one FLOP per element to scale and cast when the cache is narrower, e.g. an FP8 cache fed
    by BF16 projections, none otherwise). The cache itself is read by the attention kernel, not
    here. The output is the cache: it has the cache's layout, which must hold every position of
    a sequence and shard batch and heads like the new entries.
    """

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        new, cache = layouts
        if new.partial or cache.partial:
            raise ShardingError(f"{self.name}: cache inputs {new}, {cache} must not be partial")
        if cache.shards[1]:
            raise ShardingError(f"{self.name}: the cache {cache} must hold whole sequences")
        if (new.shards[0], *new.shards[2:]) != (cache.shards[0], *cache.shards[2:]):
            raise ShardingError(
                f"{self.name}: new entries {new} and cache {cache} differ in batch or heads"
            )
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, cache.shards, (), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        elements = local_elements(layouts[0], sizes, axis_sizes)
        new_bytes = tensors[self.inputs[0]].dtype_bytes
        cache_bytes = tensors[self.inputs[1]].dtype_bytes
        flops = elements if cache_bytes != new_bytes else 0
        return Cost(flops, elements * new_bytes, elements * cache_bytes)


@dataclass(frozen=True, slots=True)
class LastToken(BaseOp):
    """``last[B, H] = x[B, S, H][:, -1]``: each sequence's last position (a gather, no FLOPs).

    Serving steps sample one token per sequence, so the output layer runs on these rows only.
    """

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        (x,) = layouts
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, (x.shards[0], x.shards[2]), x.partial, out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        moved = (
            local_elements(out_layouts[0], sizes, axis_sizes) * tensors[self.inputs[0]].dtype_bytes
        )
        return Cost(0, moved, moved)
