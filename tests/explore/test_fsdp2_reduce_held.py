"""FSDP2's held reduce-scatter input (``fsdp2_copies``: ``FSDPParamGroup.post_backward`` keeps
a unit's reduce-dtype buffer in ``comm_ctx.reduce_scatter_state`` until the next unit's
post-backward), against closed forms computed here from the model's dimensions: the largest
decoder unit's gradient elements in fp32 beside a block's backward; under the root unit the
head's 16-bit gradient too (held until the root's final callback), else the larger of the
head unit's buffer and a block's; none with pipeline parallelism; under the loss's backward
peak the larger of the two, not their sum."""

from __future__ import annotations

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

HIDDEN, KV, FFN, VOCAB = 4096, 1024, 14336, 512
#: Llama 3 8B's layer with a small vocabulary, so a layer's buffer outweighs the head's.
LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=4096, vocab=VOCAB)
#: A layer's weights: q and o (h x h), k and v (h x kv), gate, up and down (h x ffn), 2 norms.
LAYER = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV + 3 * HIDDEN * FFN + 2 * HIDDEN
#: The head: the output layer (vocab x h) and the final norm.
HEAD = VOCAB * HIDDEN + HIDDEN
#: The tensors' own peak, the loss's 16-bit count (no fp32 logits buffers).
PLAIN = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0, "loss_fp32_buffers": 0}


def _peak_rise(parallel: ParallelConfig, **overrides: object) -> int:
    """Peak memory with FSDP2 (``fsdp2_copies``) less without."""
    system = load_system("h100-80gb")
    peaks = []
    for copies in (False, True):
        backend = AnalyticalBackend(
            framework="torchtitan", overrides={**PLAIN, **overrides, "fsdp2_copies": copies}
        )
        peaks.append(backend.evaluate(LLAMA, parallel, system).peak_memory_bytes)
    return peaks[1] - peaks[0]


FSDP = ParallelConfig(dp=2, zero=3, micro_batch=1, global_batch=4)


def test_root_unit_holds_a_layers_fp32_buffer_and_the_heads_bf16_gradient() -> None:
    rise = _peak_rise(FSDP, fsdp_root_unit=True)
    assert rise == 4 * LAYER + 2 * HEAD


def test_separate_head_unit_holds_the_larger_fp32_buffer() -> None:
    rise = _peak_rise(FSDP, fsdp_root_unit=False)
    assert rise == 4 * max(LAYER, HEAD) == 4 * LAYER


def test_no_buffer_counted_with_pipeline_parallelism() -> None:
    parallel = ParallelConfig(dp=2, pp=2, zero=3, micro_batch=1, global_batch=8)
    rise = _peak_rise(parallel)
    assert rise == 0


def test_the_loss_peak_is_not_added_to() -> None:
    """With the eager fp32 loss on a large vocabulary its backward is the peak, before any
    reduce-scatter: the held buffer does not add to it."""
    big = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=4096)
    system = load_system("h100-80gb")
    peaks = []
    for copies in (False, True):
        overrides = {**PLAIN, "loss_fp32_buffers": 3, "fsdp2_copies": copies}
        backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
        peaks.append(backend.evaluate(big, FSDP, system).peak_memory_bytes)
    assert peaks[1] - peaks[0] == 0


def test_torchtitan_and_only_fsdp2_profiles_hold_it() -> None:
    assert get_framework("torchtitan").fsdp2_copies
    for name in ("megatron-core", "fsdp", "deepspeed", "fms-fsdp"):
        assert not get_framework(name).fsdp2_copies
