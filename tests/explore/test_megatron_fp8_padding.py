"""Megatron-Core's FP8 row padding of the experts' tokens (``analytical/megatron_dispatch.py``
``fp8_padding_bytes``, framework option ``moe_fp8_padding``): which ops carry it, its bytes, and
when a run has it."""

from __future__ import annotations

from dataclasses import replace

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.megatron_dispatch import (
    SORT_CHUNKS_OPS,
    fp8_padding_bytes,
    sort_chunks_bytes,
)

# the timer's share (the copies at the achieved HBM bandwidth) is tested beside the chunk sorts'
# in test_megatron_sort_chunks.py (test_the_timer_adds_them_at_the_achieved_bandwidth)
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # 32 experts, top-4
FP8 = ParallelConfig(dp=8, ep=8, zero=1, micro_batch=1, global_batch=8, precision="fp8")
OFF = {"moe_fp8_padding": False}


def test_the_copies_sit_where_the_chunk_sorts_do_and_move_the_routed_tokens() -> None:
    layer = bind_all(make_workload(GPTOSS, FP8))["moe_layer"]
    routed = 1024 * GPTOSS.top_k * GPTOSS.hidden * 2  # 16-bit permuted tokens per rank
    found = {}
    for instr in (*layer.fwd, *layer.bwd):
        moved = fp8_padding_bytes(instr)
        assert moved == sort_chunks_bytes(instr)
        if instr.name in SORT_CHUNKS_OPS:
            found[instr.name] = moved
        else:
            assert moved == 0, instr.name
    assert found == {name: 2 * routed for name in SORT_CHUNKS_OPS}


def _step(
    overrides: dict[str, object], parallel: ParallelConfig, model: ModelSpec = GPTOSS
) -> float:
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    return backend.evaluate(model, parallel, H100).step_time_s


def test_when_a_run_pads() -> None:
    """The megatron-core profile pads an FP8 run with randomly routed dropless experts, one
    local expert included; not a BF16 run, nor capacity-padded experts (their counts are the
    capacity), nor with the option off (``--moe-router-padding-for-fp8``)."""
    assert FRAMEWORKS["megatron-core"].moe_fp8_padding
    assert not FRAMEWORKS["automodel"].moe_fp8_padding
    assert _step({}, FP8) > _step(OFF, FP8)
    one_each = replace(FP8, dp=32, ep=32, global_batch=32)
    assert GPTOSS.num_experts // one_each.ep == 1
    assert _step({}, one_each) > _step(OFF, one_each)
    bf16 = replace(FP8, precision="bf16")
    assert _step({}, bf16) == _step(OFF, bf16)
    capacity = GPTOSS.with_overrides(capacity_factor=1.0)
    assert _step({}, FP8, capacity) == _step(OFF, FP8, capacity)
