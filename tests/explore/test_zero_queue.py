"""ZeRO-2/3's one queue (:mod:`stage_explore.analytical.zero_queue`): the closed form over runs
against the block-by-block recurrence, the steady state against the per-block rule, a pass's
edges, and :func:`~stage_explore.analytical.blocktime.chunk_timing` with and without the queue.
The trace mode runs the same queue (``test_trace_mode.py``:
``test_zero_queue_ends_the_step_as_the_trace_mode``)."""

from __future__ import annotations

import random

import pytest

from stage_explore.analytical.blocktime import BlockCost, BlockTiming, chunk_timing
from stage_explore.analytical.zero_queue import QueueBlock, expanded_pass_time, pass_time


def _block(rng: random.Random) -> QueueBlock:
    def maybe() -> float:
        return rng.choice((0.0, rng.random()))

    return QueueBlock(maybe(), maybe(), maybe(), rng.choice((0.0, 0.0, rng.random())))


def test_the_closed_form_over_runs_is_the_block_by_block_queue() -> None:
    rng = random.Random(11)
    for _ in range(1500):
        runs = [(_block(rng), rng.randint(0, 40)) for _ in range(rng.randint(1, 4))]
        depth = rng.randint(0, 3)
        expanded = [block for block, count in runs for _ in range(count)]
        assert pass_time(runs, depth) == pytest.approx(
            expanded_pass_time(expanded, depth), rel=1e-9, abs=1e-12
        ), (runs, depth)


def test_in_the_steady_state_a_block_costs_the_per_block_rule() -> None:
    """max(compute, gathers + scatters, replica): what the levelled mode charged per block
    before the queue, at the profiles' depth 1 (deeper prefetch can settle into a cycle over
    a few blocks)."""
    rng = random.Random(5)
    for _ in range(500):
        block = QueueBlock(
            rng.random(), rng.random(), rng.random(), rng.choice((0.0, rng.random()))
        )
        per_block = max(block.compute_s, block.gather_s + block.scatter_s, block.replica_s)
        n = rng.randint(3, 30)
        step = pass_time([(block, n + 1)], 1) - pass_time([(block, n)], 1)
        assert step == pytest.approx(per_block, rel=1e-9)


@pytest.mark.parametrize(("compute", "gather"), [(1.0, 0.6), (0.5, 1.0)])
def test_a_forward_exposes_its_first_gather_and_its_last_compute(
    compute: float, gather: float
) -> None:
    n = 10
    expected = gather + (n - 1) * max(compute, gather) + compute
    assert pass_time([(QueueBlock(compute, gather), n)], 1) == pytest.approx(expected)


def test_a_backward_exposes_its_first_gather_and_its_last_scatter() -> None:
    n, block = 10, QueueBlock(1.0, 0.3, 0.4)  # compute-bound
    assert pass_time([(block, n)], 1) == pytest.approx(0.3 + n * 1.0 + 0.4)


def test_without_prefetch_gather_compute_and_scatter_run_one_after_the_other() -> None:
    n, block = 10, QueueBlock(1.0, 0.3, 0.4)
    assert pass_time([(block, n)], 0) == pytest.approx(n * (0.3 + 1.0 + 0.4))
    assert pass_time([(QueueBlock(1.0, 0.3), n)], 0) == pytest.approx(n * 1.3)


def test_a_negative_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="depth"):
        pass_time([(QueueBlock(1.0), 1)], -1)


def _cost(df: float, db: float, gather: float, scatter: float) -> BlockCost:
    return BlockCost(BlockTiming(df, df, {}, 0), BlockTiming(db, db, {}, 0), gather, scatter)


def test_chunk_timing_with_the_queue_adds_a_passes_edges_to_the_per_block_rule() -> None:
    costs = {"layer": _cost(1.0, 2.0, 0.5, 0.5)}
    runs = (("layer", 4),)
    per_block = chunk_timing(runs, costs, 3)
    queued = chunk_timing(runs, costs, 3, queue_depth=1)
    assert per_block.forward_s == pytest.approx(4 * 1.0)
    assert per_block.backward_s == pytest.approx(4 * 2.0)
    assert queued.forward_s == pytest.approx(0.5 + 4 * 1.0)  # the first gather
    assert queued.backward_s == pytest.approx(0.5 + 4 * 2.0 + 0.5)  # and the last scatter
    exposed = dict(queued.exposed_s)
    assert exposed["zero_gather"] == pytest.approx(1.5)
    assert queued.backward_runs == per_block.backward_runs


def test_zero2_queues_its_scatters_and_the_pass_waits_for_them() -> None:
    """ZeRO-2: no gathers, the backward's reduce-scatters one after the other on the queue,
    each after its block's backward, and the pass ends when the last one has (DeepSpeed's
    epilogue synchronises the reduction stream, FSDP's post-backward callback makes the
    compute stream wait for it): a backlog, not ``max(0, scatter − backward)`` per block."""
    runs = (("layer", 4),)
    bound = {"layer": _cost(1.0, 2.0, 0.0, 2.5)}  # the scatters outlast the blocks
    queued = chunk_timing(runs, bound, 2, queue_depth=1)
    assert queued.forward_s == pytest.approx(4 * 1.0)
    assert queued.backward_s == pytest.approx(2.0 + 4 * 2.5)  # first block, then the backlog
    assert chunk_timing(runs, bound, 2).backward_s == pytest.approx(4 * 2.5)  # per block
    hidden = {"layer": _cost(1.0, 2.0, 0.0, 0.5)}  # each hidden behind the next block
    queued = chunk_timing(runs, hidden, 2, queue_depth=1)
    assert queued.backward_s == pytest.approx(4 * 2.0 + 0.5)  # the last one exposed
    exposed = dict(queued.exposed_s)
    assert exposed["zero_scatter"] == pytest.approx(0.5)
    assert "zero_gather" not in exposed
    assert queued.backward_runs == chunk_timing(runs, hidden, 2).backward_runs
    # no gather to prefetch: the depth changes nothing (no block waits for the queue)
    assert chunk_timing(runs, hidden, 2, queue_depth=0) == queued
    assert chunk_timing(runs, bound, 2, queue_depth=0).backward_s == pytest.approx(12.0)


def test_the_root_unit_is_gathered_before_the_embedding_and_scattered_after_it() -> None:
    """FSDP's root unit (embedding and head as one unit): its gather first on the queue,
    exposed; its reduce-scatter last, after the embedding's backward."""
    costs = {
        "embedding": _cost(0.1, 0.2, 0.3, 0.4),
        "layer": _cost(1.0, 2.0, 0.5, 0.5),
        "head": _cost(0.6, 1.2, 0.7, 0.8),
    }
    runs = (("embedding", 1), ("layer", 2), ("head", 1))
    queued = chunk_timing(runs, costs, 3, root_unit=True, queue_depth=1)
    # forward: root gather (0.3 + 0.7), then the first layer's gather beside the embedding
    forward = expanded_pass_time(
        [QueueBlock(0.1, 1.0), QueueBlock(1.0, 0.5), QueueBlock(1.0, 0.5), QueueBlock(0.6)], 1
    )
    backward = expanded_pass_time(
        [QueueBlock(1.2), QueueBlock(2.0, 0.5, 0.5), QueueBlock(2.0, 0.5, 0.5),
         QueueBlock(0.2, 0.0, 0.4 + 0.8)], 1,
    )  # fmt: skip
    assert queued.forward_s == pytest.approx(forward)
    assert queued.backward_s == pytest.approx(backward)
