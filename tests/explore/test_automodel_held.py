"""NeMo AutoModel under pipeline parallelism holds its stages gathered, against closed forms
computed here: FSDP gathers only the weights it shards (experts with one data-parallel rank are
left out of FSDP), the held stage accumulates its unsharded gradients every micro-batch, the
MoE model classes keep bf16 model states (``bf16_model_states``: 8 bytes per parameter), and
torch pipelining's buffers are one schedule's (``local_batch_size``)."""

from __future__ import annotations

import pytest

from stage_core.lower.memory import block_states, shard_factors, unsharded_elements
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import held_accumulation_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

MOE = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=512)
LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
SYSTEM = load_system("h100-80gb")
#: The tensors' own peak: no runtime reserve, no allocator overhead.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


@pytest.mark.parametrize(("dp", "ep", "experts_held"), [(4, 4, False), (8, 4, True)])
def test_only_sharded_weights_are_gathered(dp: int, ep: int, experts_held: bool) -> None:
    programs = lower(MOE, ParallelConfig(dp=dp, ep=ep, zero=3, global_batch=dp))
    block = programs.blocks["moe_layer"]
    experts = sum(w.elements for w in block.weights if w.expert)
    others = sum(w.elements for w in block.weights if not w.expert)
    assert experts > 0 and others > 0
    assert shard_factors(programs.workload, block)[True] == dp // ep
    expected = others + (experts if experts_held else 0)
    assert unsharded_elements(programs.workload, block) == expected


@pytest.mark.parametrize(("m", "expected"), [(1, 6.0), (2, 8.0), (4, 9.0), (32, 9.875)])
def test_held_accumulation_casts_once_then_adds(m: int, expected: float) -> None:
    assert held_accumulation_bytes(m, 2, 4) == pytest.approx(expected, rel=1e-12)


def _llama_held(held: bool, global_batch: int) -> tuple[float, float]:
    backend = AnalyticalBackend(
        framework="torchtitan",
        overrides={"pp_unsharded_params": held, "fsdp2_copies": False},
    )
    parallel = ParallelConfig(
        dp=2, pp=2, zero=3, recompute=Recompute.NONE, global_batch=global_batch
    )
    result = backend.evaluate(LLAMA, parallel, SYSTEM)
    return result.breakdown["compute"], result.step_time_s


def test_held_stage_pays_its_accumulation_every_micro_batch() -> None:
    """The held run's compute exceeds the regathering run's by the accumulation: between 6 and
    10 bytes per held element and micro-batch (over the stage's weights: at least one layer's,
    at most the whole model's), at the achieved HBM bandwidth."""
    m = 8
    held, _ = _llama_held(True, 2 * m)
    plain, _ = _llama_held(False, 2 * m)
    programs = lower(LLAMA, ParallelConfig(dp=2, pp=2, zero=3, global_batch=2 * m))
    layer = unsharded_elements(programs.workload, programs.blocks["layer"])
    whole = sum(unsharded_elements(programs.workload, b) for b in programs.blocks.values())
    whole += (LLAMA.layers - 1) * layer
    bandwidth = SYSTEM.accelerator.achieved_memory_bandwidth_bytes_per_s
    extra = held - plain
    assert m * 2 * layer * 6 / bandwidth <= extra <= m * whole * 10 / bandwidth


def test_bf16_model_states_are_eight_bytes_per_parameter() -> None:
    parallel = ParallelConfig(dp=8, ep=4, zero=3, recompute=Recompute.FULL, global_batch=8)
    programs = lower(MOE, parallel)
    workload = programs.workload
    for block in programs.blocks.values():
        shards = shard_factors(workload, block)
        weights, grads, optimizer, _ = block_states(workload, block, False, False, True, 4, 2)
        assert weights == sum(2 * w.elements // shards[w.expert] for w in block.weights)
        assert grads == sum(2 * w.elements // shards[w.expert] for w in block.weights)
        assert optimizer == sum(4 * w.elements // shards[w.expert] for w in block.weights)
    peaks, steps = [], []
    for flag in (False, True):
        backend = AnalyticalBackend(
            framework="automodel", overrides={**TENSORS, "bf16_model_states": flag}
        )
        result = backend.evaluate(MOE, parallel, SYSTEM)
        peaks.append(result.peak_memory_bytes)
        steps.append(result.step_time_s)
    # fp32 shards: 4 (gradient) + 12 (master and moments) bytes; bf16: 2 + 2 + 4
    saved = sum(
        8 * w.elements // shard_factors(workload, block)[w.expert]
        for block in programs.blocks.values()
        for w in block.weights
    )
    chunks = programs.stages[0].chunks
    layers = sum(1 for chunk in chunks for b in chunk.blocks if b.kind == "moe_layer")
    moe = programs.blocks["moe_layer"]
    saved += (layers - 1) * sum(
        8 * w.elements // shard_factors(workload, moe)[w.expert] for w in moe.weights
    )
    assert peaks[0] - peaks[1] == pytest.approx(saved, rel=1e-6)
    assert steps[0] == steps[1]  # memory only
    assert not get_framework("automodel").bf16_model_states  # the rows switch it on


def test_pipelining_buffers_are_one_schedules() -> None:
    """Two local-batch schedules of 4 micro-batches hold the buffers of one schedule of 4 (the
    schedule allocates them for its own micro-batches, once), where one schedule of 8 holds 4
    more; one backend evaluates all three (its plans are keyed by the micro-batches)."""
    model = LLAMA.with_overrides(vocab=512)  # the first stage stays the peak
    # one reduction a step, so two schedules hold no gradient shard the first reduced (their
    # effect: test_fsdp_no_sync.py, s37 fsdpsync); the buffers alone compared here
    plain = {**TENSORS, "loss_fp32_buffers": 0, "pp_held_sync_per_schedule": False}

    def peaks(local: int) -> list[int]:
        backend = AnalyticalBackend(
            framework="automodel", overrides={**plain, "local_batch_size": local}
        )
        return [
            backend.evaluate(
                model,
                ParallelConfig(
                    dp=2, pp=2, zero=3, recompute=Recompute.NONE, micro_batch=1,
                    global_batch=batch,
                ),
                SYSTEM,
            ).peak_memory_bytes
            for batch in (8, 16)
        ]  # fmt: skip

    boundary = model.seq_len * model.hidden * 2  # a micro-batch's bf16 activations
    four, eight = peaks(0)
    assert eight - four == 4 * boundary  # the first stage's gradient buffers
    assert peaks(4) == [four, four]
    assert get_framework("automodel").pp_unsharded_params
