"""The lowering's compact per-stage form (:mod:`stage_core.lower.compact`) and its expansion.

The chunk runs expand to the lowering's blocks; the bucket groups, walked against a per-block
reference of the bucket rule (test code: a bucket per (collective, axes) filled in backward
order, reduced when it holds the limit and at the chunk's last block), give the same reductions
at the same positions with the same start of filling; and the program's sync operations
(:func:`stage_core.lower.program._sync_ops`, built from the groups) equal that reference
walk in their exact order on the generator's own blocks.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pytest

from stage_core.lower.compact import UNBUCKETED, bucket_gradients, chunk_runs, layout_key
from stage_core.lower.program import (
    _sync_ops,
    bind_all,
    block_sync,
    chunk_blocks,
    lower,
    make_workload,
    tie_embeddings,
)
from stage_core.models import get_flavor
from stage_core.models.layers import is_layer_block
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Schedule

#: (backward position, position where the bucket started filling, key, bytes), in issue order.
Reduction = tuple[int, int, Hashable, int]


def reference_walk(blocks: Sequence[Mapping[Any, int]], limit: int) -> list[Reduction]:
    """The bucket rule block by block: each block adds its bytes to the pending bucket of each
    key; every pending bucket that holds ``limit`` bytes (all of them at the last block) is
    reduced, in the order the buckets started filling."""
    pending: dict[Hashable, tuple[int, int]] = {}  # key -> (bytes, start), insertion-ordered
    reductions = []
    for position, contributions in enumerate(blocks):
        for key, size in contributions.items():
            held, start = pending.get(key, (0, position))
            pending[key] = (held + size, start)
        for key, (size, start) in list(pending.items()):
            if position == len(blocks) - 1 or size >= limit:
                reductions.append((position, start, key, size))
                del pending[key]
    return reductions


def expand(groups: list[tuple[Hashable, int, int, int, int, int]]) -> list[Reduction]:
    return [
        (first + i * step, first + i * step - lead, key, size)
        for key, size, first, step, count, lead in groups
        for i in range(count)
    ]


@pytest.mark.parametrize("seed", range(40))
def test_bucket_groups_are_the_per_block_walk(seed: int) -> None:
    rng = random.Random(seed)
    keys = ["a", "b", "c"]
    runs = []
    for _ in range(rng.randrange(1, 6)):
        contributions = {k: rng.randrange(1, 50) for k in rng.sample(keys, rng.randrange(0, 4))}
        runs.append((contributions, rng.randrange(0, 7)))
    limit = rng.randrange(1, 120)
    reference = reference_walk([c for c, n in runs for _ in range(n)], limit)
    assert sorted(expand(bucket_gradients(runs, limit)), key=str) == sorted(reference, key=str)


#: (flavor, config, whether some block completes several reductions: their order is checked)
CONFIGS = [
    ("gpt3-1.3b", ParallelConfig(tp=2, dp=4, sp=True), True),
    ("gpt3-1.3b", ParallelConfig(tp=2, dp=4, zero=1, grad_bucket_bytes=10**6), False),
    ("gpt3-1.3b", ParallelConfig(tp=1, dp=8, zero=2, grad_bucket_bytes=3 * 10**7), False),
    ("megatron-gpt-1.7b", ParallelConfig(tp=2, dp=2, pp=2, grad_bucket_bytes=123_456_789), False),
    ("llama3-8b", ParallelConfig(tp=4, dp=2, cp=2, sp=True, zero=1), True),
    ("mixtral-8x7b", ParallelConfig(tp=2, dp=4, ep=2, grad_bucket_bytes=5 * 10**7), True),
    ("mixtral-8x7b", ParallelConfig(dp=4, ep=4, zero=1, grad_bucket_bytes=7 * 10**6), False),
    ("deepseek-v2-lite", ParallelConfig(dp=4, ep=2, pp=2, zero=1, grad_bucket_bytes=10**7), True),
]


@pytest.mark.parametrize(
    ("name", "parallel", "mixed"), CONFIGS, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(CONFIGS)]
)
def test_the_programs_sync_ops_are_the_walk_in_order(
    name: str, parallel: ParallelConfig, mixed: bool
) -> None:
    model = get_flavor(name)
    if model.layers > 8:
        model = model.with_overrides(layers=8)
    workload = make_workload(model, parallel)
    blocks = tie_embeddings(workload, bind_all(workload))
    several = 0
    for stage in range(parallel.pp * parallel.vpp):
        chunk = chunk_blocks(workload, blocks, stage)
        backward = [block_sync(workload, block)[0] for block in reversed(chunk.blocks)]
        walk = reference_walk(backward, parallel.grad_bucket_bytes)
        ops = [op for op in _sync_ops(workload, chunk) if op.after >= 0]  # not after the step
        assert [(op.after, (op.collective, op.axes), op.comm_bytes) for op in ops] == [
            (position, key, size) for position, _, key, size in walk
        ]
        positions = [op.after for op in ops]
        several += len(positions) != len(set(positions))
    assert bool(several) is mixed  # several reductions at one block: their order is checked


def test_chunk_runs_expand_to_the_lowered_blocks() -> None:
    model = get_flavor("mixtral-8x7b").with_overrides(layers=8)
    parallel = ParallelConfig(
        pp=2, dp=2, ep=2, schedule=Schedule.INTERLEAVED, vpp=2, global_batch=8
    )
    programs = lower(model, parallel)
    workload = programs.workload
    layout = chunk_runs(*layout_key(workload))
    for stage in programs.stages:
        for chunk in stage.chunks:
            runs = layout[chunk.stage]
            assert [k for k, n in runs for _ in range(n)] == [b.kind for b in chunk.blocks]
            assert all(a[0] != b[0] for a, b in zip(runs, runs[1:], strict=False))
    chunks = sorted((c for s in programs.stages for c in s.chunks), key=lambda c: c.stage)
    kinds = [b.kind for c in chunks for b in c.blocks if is_layer_block(b.kind)]
    assert kinds == list(model.layer_blocks())  # every layer once, in order over global stages


def test_unbucketed_chunks_reduce_each_key_once_after_their_last_backward() -> None:
    """``lower(..., bucketed=...)``: a chunk it names reduces as the walk at the config's
    bucket size; any other chunk as the walk with one bucket (each key once, at its last
    block), ahead of its ZeRO gathers as ever."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)
    limit = 1 << 26  # below one layer's gradient bytes: every layer reduces its own bucket
    parallel = ParallelConfig(
        tp=2, dp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=8,
        grad_bucket_bytes=limit, zero=1,
    )  # fmt: skip
    programs = lower(model, parallel, bucketed=lambda s, c: (s, c) == (0, 0))
    workload = programs.workload
    for stage in programs.stages:
        chunk_ops = [op for op in stage.sync if op.after >= 0]
        for chunk in stage.chunks:
            backward = [block_sync(workload, block)[0] for block in reversed(chunk.blocks)]
            first = (stage.stage, chunk.index) == (0, 0)
            walk = reference_walk(backward, limit if first else UNBUCKETED)
            ops = [op for op in chunk_ops if op.chunk == chunk.index]
            assert [(op.after, (op.collective, op.axes), op.comm_bytes) for op in ops] == [
                (position, key, size) for position, _, key, size in walk
            ]
            last = len(chunk.blocks) - 1
            keys = {key for contributions in backward for key in contributions}
            if first:  # bucketed: reductions during the backward
                assert any(op.after < last for op in ops)
            else:
                assert [op.after for op in ops] == [last] * len(keys)
        default = lower(model, parallel).stages[stage.stage].sync  # every chunk bucketed
        assert [op for op in stage.sync if op.after < 0] == [op for op in default if op.after < 0]
