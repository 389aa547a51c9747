"""Which copies of the parameters and of the logits a real process holds, against closed forms
computed here: FSDP's fp32 shards (``fsdp_fp32_shards``: no 16-bit copy of the shard),
Megatron's ``--fp8-param-gather`` (``fp8_param_gather``: the FP8 linear weights without their
16-bit copy), DTensor's ``loss_parallel`` cross-entropy (4 fp32 logits buffers), one FP8 copy
of a weight on Blackwell under a per-tensor recipe, the caching allocator's reserve, which the
allocator gives back rather than run out of memory, and DTensor's saved all-gathered inputs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.memory import (
    block_states,
    gathered_input_bytes,
    loss_logits_elements,
    memory_report,
    recompute_working_set,
    weight_shard_factor,
)
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Fp8Recipe, Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.profile_runtime import LOSS_PARALLEL_FP32_BUFFERS
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
#: No runtime reserve, no allocator overhead: the tensors' own peak.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


def _sixteen_bit_bytes(parallel: ParallelConfig, only_fp8_linear: bool) -> dict[str, int]:
    """Per block kind, the bytes of the 16-bit weight copies one rank holds (all weights, or
    only the FP8 linear layers' ones), sharded like the weights."""
    programs = lower(LLAMA, parallel)
    workload = programs.workload
    result = {}
    for kind, block in programs.blocks.items():
        names = linear_weights(block) if only_fp8_linear and fp8_block(kind) else frozenset()
        result[kind] = sum(
            w.elements * 2 // weight_shard_factor(workload, w, parallel.zero >= 3)
            for w in block.weights
            if not only_fp8_linear or w.name in names
        )
    return result


@pytest.mark.parametrize("dp", [2, 8])
def test_fsdp_fp32_shards_drop_the_16_bit_shard_of_every_weight(dp: int) -> None:
    parallel = ParallelConfig(dp=dp, zero=3, global_batch=dp)
    programs = lower(LLAMA, parallel)
    dropped = _sixteen_bit_bytes(parallel, only_fp8_linear=False)
    for kind, block in programs.blocks.items():
        zero_copy = block_states(programs.workload, block)
        shards = block_states(programs.workload, block, fp32_shards=True)
        assert zero_copy[0] - shards[0] == dropped[kind] > 0
        assert zero_copy[1:] == shards[1:]  # gradients, optimizer (the fp32 master), full


def test_fsdp_fp32_shards_need_zero_3() -> None:
    parallel = ParallelConfig(dp=4, zero=1, global_batch=4)
    programs = lower(LLAMA, parallel)
    for block in programs.blocks.values():
        assert block_states(programs.workload, block, fp32_shards=True) == block_states(
            programs.workload, block
        )


def test_fp8_param_gather_drops_the_16_bit_copy_of_the_fp8_linear_weights_only() -> None:
    parallel = ParallelConfig(tp=2, dp=2, zero=1, sp=True, precision=Precision.FP8, global_batch=4)
    programs = lower(LLAMA, parallel)
    dropped = _sixteen_bit_bytes(parallel, only_fp8_linear=True)
    assert dropped["embedding"] == dropped["head"] == 0  # not Transformer Engine modules
    assert dropped["layer"] > 0
    for kind, block in programs.blocks.items():
        plain = block_states(programs.workload, block)
        fp8 = block_states(programs.workload, block, fp8_params=True)
        assert plain[0] - fp8[0] == dropped[kind]
        assert plain[1:] == fp8[1:]
    bf16 = ParallelConfig(tp=2, dp=2, zero=1, sp=True, global_batch=4)
    programs = lower(LLAMA, bf16)
    for block in programs.blocks.values():  # no FP8 recipe: nothing to drop
        assert block_states(programs.workload, block, fp8_params=True) == block_states(
            programs.workload, block
        )


def test_the_backend_peak_falls_by_the_dropped_copies_and_stage_memory_keeps_them() -> None:
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    system = load_system("h100-80gb")
    plain = {**TENSORS, "loss_fp32_buffers": 0}
    off = AnalyticalBackend(framework="fsdp", overrides={**plain, "fsdp_fp32_shards": False})
    on = AnalyticalBackend(framework="fsdp", overrides=plain)
    programs = lower(LLAMA, parallel)
    (report,) = memory_report(programs)
    per_kind = _sixteen_bit_bytes(parallel, only_fp8_linear=False)
    (stage,) = programs.stages
    dropped = sum(per_kind[str(b.kind)] for chunk in stage.chunks for b in chunk.blocks)
    assert dropped == report.weights_bytes  # bf16, no FP8 copies: every weight byte
    assert off.evaluate(LLAMA, parallel, system).peak_memory_bytes == report.peak_bytes
    assert on.evaluate(LLAMA, parallel, system).peak_memory_bytes == report.peak_bytes - dropped


@pytest.mark.parametrize("tp", [2, 4])
def test_loss_parallel_holds_four_fp32_logits_buffers_under_tensor_parallelism(tp: int) -> None:
    parallel = ParallelConfig(
        tp=tp, dp=2, sp=True, zero=3, recompute=Recompute.FULL, global_batch=2
    )
    system = load_system("h100-80gb")
    programs = lower(LLAMA, parallel)
    logits = loss_logits_elements(programs.blocks["head"], 2)
    working_set = recompute_working_set(programs.workload, programs.blocks)
    # FSDP2's held reduce-scatter input (s31 fsdp2mem) would take the peak's place beside a
    # smaller loss excess (the larger of the two is held): off, to see the loss alone
    base = {**TENSORS, "loss_fp32_buffers": 3, "fsdp2_copies": False}
    off = AnalyticalBackend(framework="torchtitan", overrides={**base, "loss_parallel": False})
    on = AnalyticalBackend(framework="torchtitan", overrides=base)
    # beyond the 16-bit logits the activation term saves: 3 x 4 - 2 (eager) vs 4 x 4 - 2 bytes
    eager, parallel_loss = (3 * 4 - 2) * logits, (4 * 4 - 2) * logits
    assert eager > working_set  # 1,024 tokens x 128,256/tp logits outweigh 2 layers
    held_off = off.evaluate(LLAMA, parallel, system).peak_memory_bytes
    held_on = on.evaluate(LLAMA, parallel, system).peak_memory_bytes
    assert held_on - held_off == parallel_loss - eager == 4 * logits


def test_without_tensor_parallelism_loss_parallel_changes_nothing() -> None:
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    system = load_system("h100-80gb")
    peaks = {
        AnalyticalBackend(framework="torchtitan", overrides={"loss_parallel": flag})
        .evaluate(LLAMA, parallel, system)
        .peak_memory_bytes
        for flag in (False, True)
    }
    assert len(peaks) == 1


def test_the_profiles_state_the_options_and_bad_values_are_config_errors() -> None:
    assert LOSS_PARALLEL_FP32_BUFFERS == 4
    for name in ("fsdp", "torchtitan", "llm-foundry-2023"):
        assert get_framework(name).fsdp_fp32_shards
    for name in ("megatron-lm-2021", "megatron-core", "deepspeed"):
        assert not get_framework(name).fsdp_fp32_shards
        assert not get_framework(name).fp8_param_gather  # Megatron-Core's default: off
    assert get_framework("torchtitan").loss_parallel
    assert not get_framework("fsdp").loss_parallel
    for option in ("fsdp_fp32_shards", "loss_parallel", "fp8_param_gather"):
        with pytest.raises(ConfigError, match=option):
            AnalyticalBackend(framework="megatron-core", overrides={option: 1})


def _fp8_copy_bytes(parallel: ParallelConfig) -> int:
    """The FP8 weight copies one rank of the single stage holds (from the lowering's report)."""
    (report,) = memory_report(lower(LLAMA, parallel))
    return report.fp8_weights_bytes


@pytest.mark.parametrize(("recipe", "halved"), [("tensorwise", True), ("mxfp8", False)])
def test_on_blackwell_a_per_tensor_recipe_holds_one_fp8_copy_of_each_weight(
    recipe: str, halved: bool
) -> None:
    parallel = ParallelConfig(
        dp=2, precision=Precision.FP8, fp8_recipe=Fp8Recipe(recipe), global_batch=2
    )
    copies = _fp8_copy_bytes(parallel)  # row- and column-wise: fprop and dgrad run in FP8
    assert copies > 0
    (report,) = memory_report(lower(LLAMA, parallel))
    tensors = {**TENSORS, "loss_fp32_buffers": 0}
    b200 = AnalyticalBackend(framework="megatron-core", overrides=tensors)
    peak = b200.evaluate(LLAMA, parallel, load_system("b200")).peak_memory_bytes
    assert peak == report.peak_bytes - (copies // 2 if halved else 0)
    if recipe != "mxfp8":  # MXFP8 needs Blackwell; Hopper's FP8 GEMMs take only TN
        hopper = AnalyticalBackend(framework="megatron-core", overrides=tensors)
        h100 = load_system("h100-80gb")
        assert hopper.evaluate(LLAMA, parallel, h100).peak_memory_bytes == report.peak_bytes


def test_the_allocator_reserve_never_pushes_a_fitting_run_out_of_memory() -> None:
    parallel = ParallelConfig(dp=8, zero=3, recompute=Recompute.FULL, global_batch=8)
    h100 = load_system("h100-80gb")
    runtime, overhead = 2**30, 0.05
    tensors = (
        AnalyticalBackend(framework="fsdp", overrides=TENSORS)
        .evaluate(LLAMA, parallel, h100)
        .peak_memory_bytes
    )
    backend = AnalyticalBackend(
        framework="fsdp",
        overrides={"runtime_reserved_bytes": runtime, "allocator_overhead": overhead},
    )
    reserved = tensors + int(tensors * overhead) + runtime
    assert backend.evaluate(LLAMA, parallel, h100).peak_memory_bytes == reserved  # room left

    def on(capacity: int) -> tuple[bool, int]:
        accelerator = replace(h100.accelerator, memory_bytes=capacity)
        result = backend.evaluate(LLAMA, parallel, replace(h100, accelerator=accelerator))
        return result.feasible, result.peak_memory_bytes

    # the tensors and the runtime fit, their cached free blocks do not: the allocator gives
    # them back (a cache flush and retry), the process fills the device and runs
    tight = tensors + runtime + (reserved - tensors - runtime) // 2
    assert on(tight) == (True, tight)
    assert on(tensors + runtime) == (True, tensors + runtime)
    # the tensors and the runtime alone exceed it: out of memory, at the full reserved peak
    assert on(tensors + runtime - 1) == (False, reserved)


@pytest.mark.parametrize("tp", [2, 4])
def test_dtensor_saves_the_gathered_input_of_each_column_parallel_linear(tp: int) -> None:
    tokens, hidden = 2 * 1024, LLAMA.hidden  # micro-batch 2 of 1,024 tokens
    parallel = ParallelConfig(tp=tp, dp=2, sp=True, micro_batch=2, global_batch=4)
    workload = lower(LLAMA, parallel).workload
    shard_gap = tokens * hidden * 2 * (tp - 1) // tp  # gathered less stored, 16-bit
    # a layer: the attention and MLP norms' outputs (q/k/v and gate/up read one gathered
    # tensor each); the head: the final norm's output the output layer reads
    assert gathered_input_bytes(workload, "layer") == 2 * shard_gap
    assert gathered_input_bytes(workload, "head") == shard_gap
    assert gathered_input_bytes(workload, "embedding") == 0
    full = lower(LLAMA, replace(parallel, recompute=Recompute.FULL)).workload
    assert gathered_input_bytes(full, "layer") == 0  # only the layer's input is kept
    assert gathered_input_bytes(full, "head") == shard_gap  # the head is not recomputed
    no_sp = lower(LLAMA, replace(parallel, sp=False)).workload
    assert gathered_input_bytes(no_sp, "layer") == gathered_input_bytes(no_sp, "head") == 0


def test_the_backend_adds_the_gathered_inputs_of_the_micro_batches_in_flight() -> None:
    parallel = ParallelConfig(tp=2, dp=2, sp=True, micro_batch=1, global_batch=2)
    system = load_system("h100-80gb")
    programs = lower(LLAMA, parallel)
    (report,) = memory_report(programs)
    plain = {**TENSORS, "loss_fp32_buffers": 0, "loss_parallel": False}
    off = AnalyticalBackend(
        framework="torchtitan", overrides={**plain, "tp_saves_gathered_input": False}
    )
    on = AnalyticalBackend(framework="torchtitan", overrides=plain)
    (stage,) = programs.stages
    extra = sum(
        gathered_input_bytes(programs.workload, str(b.kind))
        for chunk in stage.chunks
        for b in chunk.blocks
    )
    assert extra > 0
    held_off = off.evaluate(LLAMA, parallel, system).peak_memory_bytes
    assert on.evaluate(LLAMA, parallel, system).peak_memory_bytes - held_off == extra
    assert get_framework("torchtitan").tp_saves_gathered_input
    assert not get_framework("megatron-core").tp_saves_gathered_input
