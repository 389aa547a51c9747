"""torch.distributed.pipelining's stage buffers (``pipelining_stage_buffers``, torchtitan),
against closed forms computed here: a receive buffer per micro-batch for a stage's input (after
the first stage) and for its output gradient (before the last), for the whole run; the first
stage's outputs in flight kept until their backward; memory only."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import pipelining_buffer_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
#: A small vocabulary keeps the head's weights from making the last stage the busiest.
SMALL_VOCAB = LLAMA.with_overrides(vocab=512)
#: The tensors' own peak, the loss in 16 bits (so that the first stage stays the busiest).
PLAIN = {
    "runtime_reserved_bytes": 0,
    "allocator_overhead": 0.0,
    "loss_fp32_buffers": 0,
    "loss_parallel": False,
    "pipelining_output_chunks": "none",  # the kept outputs: tests/explore/test_output_chunks.py
    "pipelining_output_fp32": False,
}


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([(True, False)], 8 * 10 + 4 * 10),  # first stage: gradient buffers + outputs in flight
        ([(False, False)], 2 * 8 * 10),  # middle: input and gradient buffers
        ([(False, True)], 8 * 10 - 10),  # last: input buffers, less the one counted as saved
        ([(True, True)], 0),  # one stage holds everything: no boundary
        ([(True, False), (False, False)], 8 * 10 + 4 * 10 + 2 * 8 * 10),  # two virtual chunks
    ],
)
def test_buffer_bytes_closed_forms(chunks: list[tuple[bool, bool]], expected: int) -> None:
    assert pipelining_buffer_bytes(chunks, 8, 10, 4) == expected


@pytest.mark.parametrize(
    ("small_vocab", "recompute", "peak_stage"),
    [
        (True, Recompute.NONE, 0),  # stage 0's two micro-batches in flight make it the peak
        (False, Recompute.FULL, 1),  # the head's unsharded weights make the last stage the peak
    ],
)
def test_the_peak_stage_holds_its_buffers(
    small_vocab: bool, recompute: Recompute, peak_stage: int
) -> None:
    micro_batch, micro_batches, pp = 1, 4, 2
    model = SMALL_VOCAB if small_vocab else LLAMA
    parallel = ParallelConfig(
        pp=pp,
        dp=2,
        zero=3,
        recompute=recompute,
        micro_batch=micro_batch,
        global_batch=2 * micro_batch * micro_batches,
    )
    system = load_system("h100-80gb")
    off = AnalyticalBackend(
        framework="torchtitan", overrides={**PLAIN, "pipelining_stage_buffers": False}
    )
    on = AnalyticalBackend(framework="torchtitan", overrides=PLAIN)
    boundary = micro_batch * LLAMA.seq_len * LLAMA.hidden * 2  # bf16, no tp, no cp
    if peak_stage == 0:  # a gradient buffer per micro-batch and min(pp, m) outputs in flight
        expected = (micro_batches + min(pp, micro_batches)) * boundary
    else:  # an input buffer per micro-batch, one of them its micro-batch in flight's input
        expected = (micro_batches - 1) * boundary
    result_off = off.evaluate(model, parallel, system)
    result_on = on.evaluate(model, parallel, system)
    assert result_on.peak_memory_bytes - result_off.peak_memory_bytes == expected
    assert result_on.step_time_s == result_off.step_time_s  # memory only


def test_without_pipeline_stages_nothing_is_held_and_megatron_frees_its_buffers() -> None:
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=4)
    system = load_system("h100-80gb")
    peaks = {
        AnalyticalBackend(framework="torchtitan", overrides={"pipelining_stage_buffers": flag})
        .evaluate(LLAMA, parallel, system)
        .peak_memory_bytes
        for flag in (False, True)
    }
    assert len(peaks) == 1
    for name in ("torchtitan", "automodel"):  # both run torch.distributed.pipelining stages
        assert get_framework(name).pipelining_stage_buffers
    for name in ("megatron-core", "megatron-lm-2021", "deepspeed", "fsdp"):
        assert not get_framework(name).pipelining_stage_buffers
