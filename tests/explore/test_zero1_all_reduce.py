"""DeepSpeed at ZeRO-1 (``zero1_grad_all_reduce``, issue #11): the engine all-reduces the whole
gradient buffer where the lowering's ZeRO-1 reduce-scatters it; each rank then updates its
partition and all-gathers the 16-bit weights. Under bf16 the ``BF16_Optimizer`` hands over its
flat fp32 gradients (``buffered_allreduce_fallback``); under fp16 the ZeRO stage 1 optimizer,
with ``contiguous_gradients`` turned off at stage 1, all-reduces its fp16 buckets
(``buffered_reduce_fallback`` → ``allreduce_bucket``, s29 bigsci). So at ZeRO-1 the gradient
synchronisation takes what ZeRO-0's all-reduce of the same gradients takes, in either dtype; a
mixture-of-experts model under fp16 (contiguous buckets kept) and the option off keep the
reduce-scatter."""

from __future__ import annotations

import pytest

from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig, Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2)
A100 = load_system("a100-80gb")
SYNC = "exposed_gradient_sync"


def _sync_s(zero: int, precision: Precision, option: bool, model: ModelSpec = GPT) -> float:
    parallel = ParallelConfig(
        tp=2, dp=8, zero=zero, global_batch=32, precision=precision, recompute=Recompute.FULL
    )
    backend = AnalyticalBackend(
        framework="deepspeed", overrides={"zero1_grad_all_reduce": option}
    )
    return backend.evaluate(model, parallel, A100).breakdown[SYNC]


def test_deepspeed_profile_sets_it() -> None:
    assert FRAMEWORKS["deepspeed"].zero1_grad_all_reduce
    assert not FRAMEWORKS["megatron-core"].zero1_grad_all_reduce


def test_bf16_zero1_synchronises_as_zero0_all_reduce() -> None:
    whole = _sync_s(1, Precision.BF16, True)
    assert whole == pytest.approx(_sync_s(0, Precision.BF16, True), rel=1e-9)
    assert whole > 1.5 * _sync_s(1, Precision.BF16, False)  # the reduce-scatter: about half


def test_fp16_zero1_synchronises_as_zero0_all_reduce() -> None:
    whole = _sync_s(1, Precision.FP16, True)
    assert whole == pytest.approx(_sync_s(0, Precision.FP16, True), rel=1e-9)
    assert whole > 1.5 * _sync_s(1, Precision.FP16, False)  # the reduce-scatter: about half


def test_fp16_zero1_of_a_moe_model_keeps_the_reduce_scatter() -> None:
    on = _sync_s(1, Precision.FP16, True, MIXTRAL)
    assert on == pytest.approx(_sync_s(1, Precision.FP16, False, MIXTRAL), rel=1e-9)
    assert _sync_s(0, Precision.FP16, True, MIXTRAL) > 1.5 * on
