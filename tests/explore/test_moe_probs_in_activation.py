"""``moe_probs_in_activation``: a framework that scales the experts' activation by the router
probabilities (Megatron-Core's ``TEGroupedMLP``, ``weighted_bias_swiglu_impl``) does not keep
the expert outputs the generator's weighted combine saves
(:func:`stage_core.lower.memory.weighted_combine_saved_bytes`), against closed forms computed
here: b·s tokens per micro-batch, each routed to top-k experts, hidden H, 16-bit."""

from __future__ import annotations

import pytest

from stage_core.lower.memory import weighted_combine_saved_bytes
from stage_core.lower.program import make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

SEQ, MICRO = 1024, 2
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=SEQ)
LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=SEQ)
#: The expert outputs of one micro-batch on one rank: every token's top-k slots (with expert
#: parallelism a rank's experts receive, on balance, as many slots as its own tokens make).
SLOTS_BYTES = MICRO * SEQ * MIXTRAL.top_k * MIXTRAL.hidden * 2
#: Only the tensors: no runtime reserve, no allocator share, no fp32 loss buffers.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0, "loss_fp32_buffers": 0}


def _parallel(
    recompute: str = "none", ep: int = 1, modules: tuple[str, ...] = ()
) -> ParallelConfig:
    return ParallelConfig(
        dp=2,
        ep=ep,
        recompute=Recompute(recompute),
        recompute_modules=modules,
        global_batch=4,
        micro_batch=MICRO,
    )


@pytest.mark.parametrize(("recompute", "ep"), [("none", 1), ("none", 2), ("selective", 1)])
def test_a_kept_combine_saves_every_slot_of_the_micro_batch(recompute: str, ep: int) -> None:
    workload = make_workload(MIXTRAL, _parallel(recompute, ep))
    assert weighted_combine_saved_bytes(workload, "moe_layer") == SLOTS_BYTES
    assert weighted_combine_saved_bytes(workload, "embedding") == 0


def test_nothing_when_the_combine_is_re_run_or_absent() -> None:
    full = make_workload(MIXTRAL, _parallel("full"))
    assert weighted_combine_saved_bytes(full, "moe_layer") == 0  # the layer keeps its input
    moe = make_workload(MIXTRAL, _parallel("selective", modules=("moe",)))
    assert weighted_combine_saved_bytes(moe, "moe_layer") == 0  # the moe module checkpointed
    dense = make_workload(LLAMA, _parallel())
    assert weighted_combine_saved_bytes(dense, "layer") == 0


def test_megatron_core_keeps_no_expert_outputs_and_times_the_same() -> None:
    assert get_framework("megatron-core").moe_probs_in_activation
    assert not get_framework("torchtitan").moe_probs_in_activation
    system = load_system("h100-80gb")
    parallel = _parallel()
    scaled = AnalyticalBackend(framework="megatron-core", overrides=TENSORS)
    weighted = AnalyticalBackend(
        framework="megatron-core", overrides={**TENSORS, "moe_probs_in_activation": False}
    )
    a = scaled.evaluate(MIXTRAL, parallel, system)
    b = weighted.evaluate(MIXTRAL, parallel, system)
    # one stage, one micro-batch's activations held at the peak: two MoE layers' slots
    assert b.peak_memory_bytes - a.peak_memory_bytes == 2 * SLOTS_BYTES
    assert a.step_time_s == b.step_time_s
    # a dense model is the same either way
    dense_a = scaled.evaluate(LLAMA, parallel, system)
    dense_b = weighted.evaluate(LLAMA, parallel, system)
    assert dense_a.peak_memory_bytes == dense_b.peak_memory_bytes
