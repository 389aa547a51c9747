"""Memory a PyTorch training process holds beyond the generator's tensors: the loss on fp32
logits (``loss_fp32_buffers``) and FSDP2's unsharded parameters and gradients under pipeline
parallelism (``pp_unsharded_params``), against closed forms computed here."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import (
    loss_logits_elements,
    loss_peak_bytes,
    memory_report,
    recompute_working_set,
)
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
VOCAB = 128256
#: No runtime reserve, no allocator overhead: the tensors' own peak.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


@pytest.mark.parametrize(("tp", "micro_batch"), [(1, 1), (2, 2), (4, 1)])
def test_the_loss_reads_one_micro_batch_of_logits_over_the_tensor_parallel_vocabulary(
    tp: int, micro_batch: int
) -> None:
    parallel = ParallelConfig(tp=tp, dp=2, sp=tp > 1, micro_batch=micro_batch, global_batch=8)
    programs = lower(LLAMA, parallel)
    vocab = programs.workload.sizes["V"]  # padded to a multiple of 128 x tp, as Megatron's
    assert VOCAB <= vocab < VOCAB + 128 * tp
    assert loss_logits_elements(programs.blocks["head"], 2) == micro_batch * 1024 * vocab // tp
    assert loss_logits_elements(programs.blocks["layer"], 2) == 0


@pytest.mark.parametrize("logits", [1, 7, 4096 * 16032])
def test_the_loss_peak_counts_fp32_copies_of_the_logits(logits: int) -> None:
    assert loss_peak_bytes(logits, 0, 2) == 2 * 2 * logits  # 16-bit logits saved + gradient
    assert loss_peak_bytes(logits, 1, 2) == (4 + 2) * logits  # fp32 softmax + 16-bit grad
    # log-softmax out, 2 fp32 grads, and the freed 16-bit logits' block none of them fits
    assert loss_peak_bytes(logits, 3, 2) == (3 * 4 + 2) * logits
    assert loss_peak_bytes(logits, 4, 2) == (4 * 4 + 2) * logits  # DTensor's loss_parallel


@pytest.mark.parametrize("buffers", [1, 3])
def test_an_fp32_loss_raises_the_peak_by_its_excess_over_the_backward_working_set(
    buffers: int,
) -> None:
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    system = load_system("h100-80gb")
    programs = lower(LLAMA, parallel)
    logits = loss_logits_elements(programs.blocks["head"], 2)
    working_set = recompute_working_set(programs.workload, programs.blocks)
    # without FSDP2's held reduce-scatter input, which the loss's peak does not add to
    # (tests/explore/test_fsdp2_reduce_held.py)
    plain = {**TENSORS, "fsdp2_copies": False}
    off = AnalyticalBackend(framework="torchtitan", overrides={**plain, "loss_fp32_buffers": 0})
    on = AnalyticalBackend(
        framework="torchtitan", overrides={**plain, "loss_fp32_buffers": buffers}
    )
    base = off.evaluate(LLAMA, parallel, system).peak_memory_bytes
    held = on.evaluate(LLAMA, parallel, system).peak_memory_bytes
    loss = loss_peak_bytes(logits, buffers, 2) - 2 * logits  # its 16-bit logits are saved
    assert held - base == max(0, loss - working_set)
    assert held > base  # 1,024 tokens x 128,256 logits outweigh a 2-layer working set


def test_fsdp2_under_pp_holds_each_stage_unsharded_parameters_and_gradients() -> None:
    model = LLAMA.with_overrides(layers=4)
    parallel = ParallelConfig(
        pp=2, dp=4, zero=3, recompute=Recompute.FULL, global_batch=16, grad_fp32=True
    )
    system = load_system("h100-80gb")
    plain = {
        **TENSORS,
        "loss_fp32_buffers": 0,
        "fsdp_fp32_shards": False,
        "pipelining_stage_buffers": False,  # tests/explore/test_pipelining_buffers.py
        "rope_table_buffer": False,  # tests/explore/test_rope_table_buffer.py
    }
    off = AnalyticalBackend(
        framework="torchtitan", overrides={**plain, "pp_unsharded_params": False}
    )
    on = AnalyticalBackend(framework="torchtitan", overrides=plain)
    programs = lower(model, parallel)
    expected = 0
    for stage, report in zip(programs.stages, memory_report(programs), strict=True):
        blocks = [block for chunk in stage.chunks for block in chunk.blocks]
        full = sorted((b.weight_elements * 2 for b in blocks), reverse=True)[:2]
        unsharded = sum(b.weight_elements for b in blocks) * (2 + 4)  # bf16 params, fp32 grads
        # the fp32 gradient shards the report counts: none exists before the stage's last
        # backward reduces it (s37 fsdpsync, no_sync.grad_shards_absent)
        shards = sum(b.weight_elements for b in blocks) * 4 // parallel.dp
        peak = report.peak_bytes - sum(full) + max(sum(full), unsharded) - shards
        expected = max(expected, peak)
    assert off.evaluate(model, parallel, system).peak_memory_bytes == max(
        report.peak_bytes for report in memory_report(programs)
    )
    assert on.evaluate(model, parallel, system).peak_memory_bytes == expected


def test_without_pp_fsdp2_reshards_and_the_option_changes_nothing() -> None:
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    system = load_system("h100-80gb")
    results = [
        AnalyticalBackend(framework="torchtitan", overrides={"pp_unsharded_params": flag})
        .evaluate(LLAMA, parallel, system)
        .peak_memory_bytes
        for flag in (False, True)
    ]
    assert results[0] == results[1]


def test_the_profiles_state_their_loss_and_a_bad_value_is_a_config_error() -> None:
    assert get_framework("torchtitan").loss_fp32_buffers == 3
    assert get_framework("megatron-core").loss_fp32_buffers == 1
    assert get_framework("torchtitan").pp_unsharded_params
    with pytest.raises(ConfigError, match="loss_fp32_buffers"):
        AnalyticalBackend(framework="torchtitan", overrides={"loss_fp32_buffers": -1})
    with pytest.raises(ConfigError, match="pp_unsharded_params"):
        AnalyticalBackend(framework="torchtitan", overrides={"pp_unsharded_params": 2})
