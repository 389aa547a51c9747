"""DeepSpeed's ``BF16_Optimizer`` at ZeRO-1 (``zero1_grad_all_reduce``, issue #11): the engine
all-reduces the optimizer's whole flat fp32 gradient buffer (``buffered_allreduce_fallback``)
where the lowering's ZeRO-1 reduce-scatters it; each rank then updates its partition and
all-gathers the bf16 weights. Under bf16 at ZeRO-1 the gradient synchronisation therefore
takes what ZeRO-0's all-reduce of the same gradients takes; under fp16, or with the option off,
the reduce-scatter's."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
A100 = load_system("a100-80gb")
SYNC = "exposed_gradient_sync"


def _sync_s(zero: int, precision: Precision, option: bool) -> float:
    parallel = ParallelConfig(
        tp=2, dp=8, zero=zero, global_batch=32, precision=precision, recompute=Recompute.FULL
    )
    backend = AnalyticalBackend(
        framework="deepspeed", overrides={"zero1_grad_all_reduce": option}
    )
    return backend.evaluate(GPT, parallel, A100).breakdown[SYNC]


def test_deepspeed_profile_sets_it() -> None:
    assert FRAMEWORKS["deepspeed"].zero1_grad_all_reduce
    assert not FRAMEWORKS["megatron-core"].zero1_grad_all_reduce


def test_bf16_zero1_synchronises_as_zero0_all_reduce() -> None:
    whole = _sync_s(1, Precision.BF16, True)
    assert whole == pytest.approx(_sync_s(0, Precision.BF16, True), rel=1e-9)
    assert whole > 1.5 * _sync_s(1, Precision.BF16, False)  # the reduce-scatter: about half


def test_fp16_zero1_keeps_the_reduce_scatter() -> None:
    assert _sync_s(1, Precision.FP16, True) == pytest.approx(_sync_s(1, Precision.FP16, False))
