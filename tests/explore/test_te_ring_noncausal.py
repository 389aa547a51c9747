"""Transformer Engine's ring context parallelism runs its steps after the first as NON-causal
kernels (``attention_noncausal``): the time factor against a step-by-step count of the scores
each step computes; the kernel timer's attention time against that factor; the ratio is part of
what a timed point depends on (no stale memo); a preset's ratio is loaded and checked."""

from __future__ import annotations

import dataclasses

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import CpStyle, ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import KernelTimer, attention_efficiency
from stage_explore.analytical.te_context_parallel import te_cp_merge_bytes, te_ring_time_factor
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.model import System
from tests.explore.ring_helpers import ring_attention, with_noncausal

H100 = load_system("h100-80gb")


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


def _walk_factor(cp: int, ratio: float, chunk: int = 64) -> float:
    """Load-balanced ring attention on one rank, holding query chunks r and 2·cp − 1 − r: step 0
    is the causal kernel on its own two chunks (scores below the diagonal, counted one by one);
    each later step a non-causal kernel on half blocks (two query chunks against one key chunk,
    or one query chunk against two). Time at the causal rate 1 (non-causal: ``ratio``) over the
    time of all the scores at the causal rate."""
    own = 2 * chunk
    causal_scores = sum(row + 1 for row in range(own))  # the diagonal block, masked above
    later = [2 * chunk * chunk for _ in range(1, cp)]  # 2c x c or c x 2c, every score computed
    # the kernel's causal FLOP count is half the square (the generator's causal attention):
    counted = own * own / 2 + sum(later)
    seconds = own * own / 2 + sum(scores / ratio for scores in later)
    assert abs(causal_scores - own * own / 2) <= own  # only the diagonal differs
    return seconds / counted


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("ratio", [1.0, 1.104, 1.5])
def test_the_factor_is_the_steps_walked(cp: int, ratio: float) -> None:
    assert te_ring_time_factor(cp, ratio) == pytest.approx(_walk_factor(cp, ratio), rel=1e-12)


def test_the_factor_closed_form() -> None:
    assert te_ring_time_factor(1, 1.104) == 1.0  # no ring: the causal kernel alone
    assert te_ring_time_factor(2, 1.104) == pytest.approx(0.5 + 0.5 / 1.104)
    assert te_ring_time_factor(8, 1.104) == pytest.approx(1 / 8 + 7 / (8 * 1.104))


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
@pytest.mark.parametrize("cp", [2, 4])
def test_the_kernel_timer_runs_the_later_steps_at_the_non_causal_rate(phase: str, cp: int) -> None:
    kernels = _kernels(H100)
    ratio = kernels.noncausal_ratio("cudnn")
    assert ratio == pytest.approx(595 / 539, abs=1e-3)  # FA3 paper Fig. 5, hdim 128, 16k
    timer = KernelTimer(
        H100.accelerator, kernels, "bf16", frozenset(), keys=131072, head_dim=128, causal=True,
        attention_kernel="cudnn", te_cp_merge=cp,
    )  # fmt: skip
    instr = ring_attention(phase, 10**15)
    efficiency = attention_efficiency(kernels, 131072, 128, True, phase == "bwd", "cudnn")
    flops = 10**15 * (5 / 4 if phase == "bwd" else 1)
    accel = H100.accelerator
    merge_s = te_cp_merge_bytes(instr, cp) / (
        accel.memory_bandwidth_bytes_per_s * accel.efficiency.memory
    )
    compute_s = flops / (accel.peak("bf16") * efficiency)
    expected = compute_s * (1 / cp + (cp - 1) / (cp * ratio)) + merge_s
    assert timer(instr) == pytest.approx(expected, rel=1e-12)
    # a kernel without a figure keeps its causal rate; no ring: the causal kernel alone
    flex = dataclasses.replace(timer, attention_kernel="flex")
    flex_efficiency = attention_efficiency(kernels, 131072, 128, True, phase == "bwd", "flex")
    assert flex(instr) == pytest.approx(
        flops / (accel.peak("bf16") * flex_efficiency) + merge_s, rel=1e-12
    )
    alone = dataclasses.replace(timer, te_cp_merge=0)
    assert alone(instr) == pytest.approx(compute_s, rel=1e-12)


def _with_ratio(ratio: float | None) -> System:
    return with_noncausal(H100, {} if ratio is None else {"cudnn": ratio})


def test_the_ratio_is_part_of_what_a_point_depends_on() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(
        dp=1, cp=4, cp_style=CpStyle.RING, global_batch=1, micro_batch=1, seq_len=32768
    )
    backend = AnalyticalBackend(framework="megatron-core")  # one backend: its memos shared
    with_ratio = backend.evaluate(model, parallel, _with_ratio(1.104)).step_time_s
    without = backend.evaluate(model, parallel, _with_ratio(None)).step_time_s
    assert with_ratio < without
    fresh = AnalyticalBackend(framework="megatron-core")
    assert fresh.evaluate(model, parallel, _with_ratio(None)).step_time_s == without
    no_cp = dataclasses.replace(parallel, cp=1)
    assert backend.evaluate(model, no_cp, _with_ratio(1.104)).step_time_s == (
        backend.evaluate(model, no_cp, _with_ratio(None)).step_time_s
    )  # no ring: every step is the causal kernel


def test_a_ratio_that_is_not_a_positive_number_is_a_config_error() -> None:
    values = _kernels(H100).to_dict()
    assert values["attention_noncausal"] == {"cudnn": 1.104, "fa2": 1.104}
    for bad in (0, -1.1, "fast", True):
        with pytest.raises(ConfigError, match="attention_noncausal.cudnn"):
            KernelModel(**{**values, "attention_noncausal": {"cudnn": bad}})
