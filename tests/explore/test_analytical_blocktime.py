"""Block and chunk timing: in-order streams on hand-checked instruction DAGs, element-wise
fusion, ZeRO beside the blocks, and the timing of the run-length gradient buckets against a
sequential stream (the buckets themselves: tests/core/test_compact.py)."""

from __future__ import annotations

import random

import pytest

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical.blocktime import (
    BlockCost,
    BlockTiming,
    chunk_timing,
    fuse_elementwise,
    sync_timing,
    time_block,
)

AR = CollectiveKind.ALL_REDUCE


def compute(name: str, seconds: float, deps: tuple[int, ...] = ()) -> Instr:
    # the test's compute time is the instruction's FLOPs in seconds
    return Instr(name, "fwd", "einsum", flops=int(seconds * 1000), deps=deps)


def comm(name: str, seconds: float, deps: tuple[int, ...] = ()) -> Instr:
    return Instr(
        name, "fwd", "comm", collective=AR, axes=("tp",), comm_bytes=int(seconds * 1000), deps=deps
    )


def timed(instrs: list[Instr]) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / 1000, lambda i: i.comm_bytes / 1000)


# -- two in-order streams -----------------------------------------------------------------------


def test_a_collective_between_dependent_computes_is_exposed() -> None:
    result = timed([compute("a", 1), comm("c", 2, (0,)), compute("b", 1, (1,))])
    assert (result.duration_s, result.compute_s) == (4.0, 2.0)
    assert result.exposed_s == {"all_reduce": 2.0}


def test_a_collective_hides_behind_independent_compute_placed_after_it() -> None:
    # Megatron's input-gradient reduction behind the weight-gradient GEMM: a ─► c, a ─► b.
    result = timed([compute("a", 1), comm("c", 2, (0,)), compute("b", 3, (0,))])
    assert result.duration_s == 4.0
    assert result.exposed_s == {"all_reduce": 0.0}


def test_partial_overlap_exposes_the_rest() -> None:
    # c runs 1–4 beside b (1–2); d needs c: 4–5. Exposed: 3 − 1 = 2.
    result = timed(
        [compute("a", 1), comm("c", 3, (0,)), compute("b", 1, (0,)), compute("d", 1, (1,))]
    )
    assert result.duration_s == 5.0
    assert result.exposed_s == {"all_reduce": 2.0}


def test_streams_run_in_program_order() -> None:
    # b needs nothing but comes after a, which waits for c: a GPU stream does not reorder, so
    # b runs after a (an issue-any-ready-node simulator would start b at 0 and end at 3).
    result = timed([comm("c", 2), compute("a", 1, (0,)), compute("b", 1)])
    assert result.duration_s == 4.0
    assert result.exposed_s == {"all_reduce": 2.0}


def test_collectives_share_one_stream() -> None:
    result = timed([comm("c1", 2), comm("c2", 2), compute("a", 1, (1,))])
    assert result.duration_s == 5.0
    assert result.exposed_s == {"all_reduce": 4.0}


def test_empty_block_takes_no_time() -> None:
    assert timed([]) == BlockTiming.zero()


# -- element-wise fusion ------------------------------------------------------------------------


def elementwise(name: str, read: int, written: int, deps: tuple[int, ...] = ()) -> Instr:
    return Instr(
        name, "fwd", "elementwise", flops=1, bytes_read=read, bytes_written=written, deps=deps
    )


def test_a_chain_of_elementwise_ops_keeps_its_intermediates_on_chip() -> None:
    # bias (read 10, write 10) → dropout (read 10, write 10) → residual add (read 20, write 10):
    # fused, 10 + 10 (the residual) are read and 10 written.
    chain = [
        elementwise("bias", 10, 10),
        elementwise("dropout", 10, 10, (0,)),
        elementwise("add", 20, 10, (1,)),
    ]
    fused = fuse_elementwise(chain)
    assert sum(i.bytes_read for i in fused) == 20
    assert sum(i.bytes_written for i in fused) == 10


def test_fusion_keeps_outputs_that_something_else_reads() -> None:
    # the producer's output also feeds a matmul: it must be written.
    instrs = [
        elementwise("bias", 10, 10),
        elementwise("act", 10, 10, (0,)),
        Instr("mm", "fwd", "einsum", flops=100, bytes_read=10, deps=(0,)),
    ]
    assert fuse_elementwise(instrs) == tuple(instrs)


def test_fusion_keeps_on_chip_only_what_the_consumer_reads() -> None:
    # dropout writes its output (10) and a mask (5) that only the backward reads; the residual
    # add reads the output and the stream x (10): only the output stays on chip.
    instrs = [
        Instr("drop", "fwd", "elementwise", flops=1, bytes_read=10, bytes_written=15,
              outputs=(("drop", 10), ("drop.mask", 5))),
        Instr("add", "fwd", "elementwise", flops=1, bytes_read=20, bytes_written=10, deps=(0,),
              inputs=(("x", 10), ("drop", 10)), outputs=(("add", 10),)),
    ]  # fmt: skip
    fused = fuse_elementwise(instrs)
    assert (fused[0].bytes_written, fused[1].bytes_read) == (5, 10)


def test_a_recomputed_chain_fuses_although_the_backward_reads_its_mask() -> None:
    # Full recompute: the recomputed dropout writes its output (10) and mask (5), the residual
    # add reads the output and x (10); the dropout's backward, later in the same list, reads
    # only the mask. The output stays on chip as in the forward; the mask is written.
    drop, mask, x = 10, 5, 10
    instrs = [
        Instr("drop", "recompute", "elementwise", flops=1, bytes_read=10,
              bytes_written=drop + mask, outputs=(("drop", drop), ("drop.mask", mask))),
        Instr("add", "recompute", "elementwise", flops=1, bytes_read=x + drop,
              bytes_written=10, deps=(0,), inputs=(("x", x), ("drop", drop)),
              outputs=(("add", 10),)),
        Instr("drop.backward", "bwd", "backwardop", flops=1, bytes_read=10 + mask,
              bytes_written=10, deps=(0,), inputs=(("d.drop", 10), ("drop.mask", mask)),
              outputs=(("d.x", 10),)),
    ]  # fmt: skip
    fused = fuse_elementwise(instrs)
    assert (fused[0].bytes_written, fused[1].bytes_read) == (mask, x)
    assert fused[2] == instrs[2]


def test_fusion_writes_an_output_that_a_later_instruction_also_reads() -> None:
    # the add's output feeds the next element-wise op and a later one: it must be written
    instrs = [
        Instr("add", "fwd", "elementwise", flops=1, bytes_read=20, bytes_written=10,
              outputs=(("h", 10),)),
        Instr("scale", "fwd", "elementwise", flops=1, bytes_read=10, bytes_written=10,
              deps=(0,), inputs=(("h", 10),), outputs=(("y", 10),)),
        Instr("mm", "fwd", "einsum", flops=100, bytes_read=10, bytes_written=10, deps=(0,),
              inputs=(("h", 10),), outputs=(("z", 10),)),
    ]  # fmt: skip
    assert fuse_elementwise(instrs) == tuple(instrs)


def test_fusion_never_crosses_a_matmul_or_a_reduction() -> None:
    instrs = [
        Instr("mm", "fwd", "einsum", flops=100, bytes_read=10, bytes_written=10),
        elementwise("bias", 10, 10, (0,)),
        Instr("ln", "fwd", "reduction", flops=5, bytes_read=10, bytes_written=10, deps=(1,)),
    ]
    assert fuse_elementwise(instrs) == tuple(instrs)


# -- chunks ---------------------------------------------------------------------------------------


def block(duration: float, compute_s: float, exposed: float) -> BlockTiming:
    return BlockTiming(duration, compute_s, {"all_reduce": exposed} if exposed else {}, 0)


def test_a_chunk_adds_its_blocks_and_zero3_gathers_show_where_they_outlast_them() -> None:
    costs = {
        "layer": BlockCost(block(1.0, 0.8, 0.2), block(2.0, 2.0, 0.0), gather_s=1.5, scatter_s=0.4),
        "head": BlockCost(block(0.5, 0.5, 0.0), block(1.0, 1.0, 0.0)),
    }
    plain = chunk_timing((("layer", 3), ("head", 1)), costs, zero=0)
    assert (plain.forward_s, plain.backward_s) == (3.5, 7.0)
    assert plain.compute_s == pytest.approx(3 * 2.8 + 1.5)
    assert dict(plain.exposed_s) == {"all_reduce": pytest.approx(0.6)}
    assert plain.backward_runs == ((1.0, 1), (2.0, 3))
    sharded = chunk_timing((("layer", 3), ("head", 1)), costs, zero=3)
    # per layer: forward max(1, 1.5) = 1.5, backward max(2, 1.5 + 0.4) = 2
    assert (sharded.forward_s, sharded.backward_s) == (5.0, 7.0)
    assert dict(sharded.exposed_s)["zero_gather"] == pytest.approx(3 * 0.5)


# -- gradient buckets (their grouping is the lowering's: tests/core/test_compact.py) ----------


@pytest.mark.parametrize("seed", range(10))
def test_sync_timing_equals_a_sequential_stream(seed: int) -> None:
    rng = random.Random(seed)
    backward_runs = [
        (rng.uniform(0.1, 2.0), rng.randrange(1, 5)) for _ in range(rng.randrange(1, 4))
    ]
    blocks = sum(count for _, count in backward_runs)
    groups = [
        (rng.uniform(0.0, 1.5), rng.randrange(blocks), 1, 1) for _ in range(rng.randrange(0, 6))
    ]
    ends, now = [], 0.0
    for seconds, count in backward_runs:
        for _ in range(count):
            now += seconds
            ends.append(now)
    total, latest = sync_timing(groups, backward_runs)
    for start in (0.0, 3.0):
        for free in (0.0, 2.5, 40.0):
            stream = free  # reductions in position order, none before its block ends
            for seconds, position, _, _ in sorted(groups, key=lambda g: g[1]):
                stream = max(stream, start + ends[position]) + seconds
            assert max(free + total, start + latest) == pytest.approx(stream, rel=1e-12)
