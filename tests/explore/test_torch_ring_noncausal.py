"""PyTorch's ``context_parallel`` (``cp_merge_fp32``, the torchtitan profile) runs the ring's
steps after the first as NON-causal SDPA kernels, as Transformer Engine's ring does
(``_templated_ring_attention``: ``_is_causal_behavior`` is ``IS_CAUSAL`` at step 0 and
``NOT_IS_CAUSAL`` at every later step under load balancing; pytorch/pytorch 0123248
``torch/distributed/tensor/experimental/_attention.py``): the kernel timer's attention time
carries the same step factor (``te_ring_time_factor``) beside torch's own merge kernels."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.context_parallel import cp_merge_bytes
from stage_explore.analytical.kernels import KernelTimer, attention_efficiency
from stage_explore.system import load_system
from tests.explore.ring_helpers import ring_attention, with_noncausal

H100 = load_system("h100-80gb")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("phase", ["fwd", "bwd"])
@pytest.mark.parametrize("cp", [2, 4, 8])
def test_torch_ring_runs_its_later_steps_at_the_non_causal_rate(
    phase: str, cp: int, compiled: bool
) -> None:
    kernels = H100.accelerator.kernels
    assert kernels is not None
    ratio = kernels.noncausal_ratio("fa2")
    assert ratio == pytest.approx(370 / 335, abs=1e-3)  # FA3 paper Fig. 5: FA2, hdim 128, 16k
    timer = KernelTimer(
        H100.accelerator, kernels, "bf16", frozenset(), keys=131072, head_dim=128, causal=True,
        attention_kernel="fa2", cp_merge=cp, cp_compiled=compiled,
    )  # fmt: skip
    instr = ring_attention(phase, 10**15)
    accel = H100.accelerator
    efficiency = attention_efficiency(kernels, 131072, 128, True, phase == "bwd", "fa2")
    flops = 10**15 * (5 / 4 if phase == "bwd" else 1)
    compute_s = flops / (accel.peak("bf16") * efficiency)
    merge_s = cp_merge_bytes(instr, cp, compiled=compiled) / (
        accel.memory_bandwidth_bytes_per_s * accel.efficiency.memory
    )
    expected = compute_s * (1 / cp + (cp - 1) / (cp * ratio)) + merge_s
    assert timer(instr) == pytest.approx(expected, rel=1e-12)
    alone = dataclasses.replace(timer, cp_merge=0)  # no ring: the causal kernel alone
    assert alone(instr) == pytest.approx(compute_s, rel=1e-12)


def test_a_torchtitan_cp_step_is_faster_with_the_non_causal_rate() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=1, cp=4, global_batch=1, micro_batch=1, seq_len=32768)
    backend = AnalyticalBackend(framework="torchtitan")
    with_ratio = backend.evaluate(model, parallel, H100).step_time_s
    without = backend.evaluate(model, parallel, with_noncausal(H100, {})).step_time_s
    assert with_ratio < without
