"""The buffers torch's ring attention holds beside the program's tensors (``cp_merge_fp32``,
:func:`stage_explore.analytical.context_parallel.cp_ring_held_bytes`) and how the backward
working set takes them (``backward_working_set``'s ``extra``), against closed forms computed
here from the Dec 2024 ``_templated_ring_attention`` and its backward."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.memory import backward_working_set, recompute_working_set
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.context_parallel import cp_ring_held_bytes
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
H, KV = 4096, 8 * 128
REPEAT = 32 // 8  # query heads per key/value head (Llama 3 8B)
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0, "loss_fp32_buffers": 0}


def _parallel(cp: int) -> ParallelConfig:
    return ParallelConfig(dp=2, cp=cp, zero=3, recompute=Recompute.FULL, global_batch=4)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_the_ring_holds_every_rank_s_keys_and_its_fp32_accumulators(cp: int) -> None:
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    q = 8192 // cp * H  # the rank's query elements
    kv = 8192 // cp * KV * REPEAT  # its keys (or values), repeated to the query heads
    gathered = 2 * 8192 * KV * 2  # the program's all-gathered 16-bit keys and values
    both = 2 * (cp + 1) * kv * 2  # the rotater's buffer and the send buffer, 16-bit
    for instr in (*layer.fwd, *layer.bwd):
        if instr.kind != "attention":
            assert cp_ring_held_bytes(instr, cp) == 0
            continue
        if instr.phase in ("fwd", "recompute"):
            held = both + (4 + 4 + 2 + 4 + 4) * q  # the fp32 merge at its peak
            named = gathered + 2 * q  # k, v and the output
        else:
            accumulators = 4 * q + 3 * 2 * 4 * kv  # dq; received, in-flight, receive buffer
            rank0 = 2 * (q + 4 * kv) + 2 * q  # half the queries, all keys; dq_accum
            last = 2 * (2 * q + 2 * kv) + 4 * q  # all queries, half the keys; dq_accum
            held = both + accumulators + max(rank0, last)
            named = gathered + 2 * q + gathered  # k, v in; dq, dk, dv out
        assert cp_ring_held_bytes(instr, cp) == held - named
        assert cp_ring_held_bytes(instr, 1) == 0


def test_the_working_set_adds_an_instruction_s_buffers_where_it_runs() -> None:
    a = Instr("a", "bwd", "elementwise", outputs=(("x", 100),))
    b = Instr("b", "bwd", "attention", inputs=(("x", 100),), outputs=(("y", 30),))
    c = Instr("c", "bwd", "elementwise", inputs=(("y", 30),), outputs=(("z", 50),))
    block = BoundBlock("layer", (), (a, b, c), (), 0, 0)
    assert backward_working_set(block) == 130  # x and y live at b
    held = {"a": 10, "b": 40, "c": 5}
    assert backward_working_set(block, lambda i: held[i.name]) == 100 + 30 + 40
    assert backward_working_set(block, lambda i: 200 if i.name == "c" else 0) == 30 + 50 + 200


def test_context_parallel_memory_counts_the_ring_only_with_the_option() -> None:
    parallel, system = _parallel(4), load_system("h100-80gb")
    programs = lower(LLAMA, parallel)
    plain = recompute_working_set(programs.workload, programs.blocks)
    ring = recompute_working_set(
        programs.workload, programs.blocks, lambda i: cp_ring_held_bytes(i, 4)
    )
    assert ring > plain
    on = AnalyticalBackend(framework="torchtitan", overrides=TENSORS)
    off = AnalyticalBackend(framework="torchtitan", overrides={**TENSORS, "cp_merge_fp32": False})
    with_ring = on.evaluate(LLAMA, parallel, system).peak_memory_bytes
    without = off.evaluate(LLAMA, parallel, system).peak_memory_bytes
    assert with_ring - without == ring - plain
    single = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    assert on.evaluate(LLAMA, single, system).peak_memory_bytes == (
        off.evaluate(LLAMA, single, system).peak_memory_bytes
    )
