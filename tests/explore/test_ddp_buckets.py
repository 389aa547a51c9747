"""Megatron-Core's gradient buckets grow with the data-parallel group (buckets.py): the bucket
is max(40M, 1M · dp · cp) parameters when the config leaves grad_bucket_bytes at its default;
the chunk's last bucket is reduced after its backward, so the exposed gradient reduction grows
with dp past 40 ranks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import DEFAULT_GRAD_BUCKET_BYTES
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.buckets import UNBUCKETED, grad_bucket_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.policy import Overlap, TimingPolicy
from stage_explore.system import load_system


@pytest.mark.parametrize(("dp", "cp"), [(8, 1), (40, 1), (64, 1), (96, 2), (512, 1)])
def test_megatron_core_bucket_is_max_40m_and_1m_per_dp_cp_rank(dp: int, cp: int) -> None:
    profile = get_framework("megatron-core")
    parallel = ParallelConfig(dp=dp, cp=cp, global_batch=dp)
    for grad_bytes in (2, 4):
        expected = max(40 * 10**6, 10**6 * dp * cp) * grad_bytes
        assert grad_bucket_bytes(profile, parallel, grad_bytes) == expected


def test_a_stated_bucket_and_other_frameworks_keep_the_config_bytes() -> None:
    stated = ParallelConfig(dp=512, global_batch=512, grad_bucket_bytes=50 * 2**20)
    default = ParallelConfig(dp=512, global_batch=512)
    assert default.grad_bucket_bytes == DEFAULT_GRAD_BUCKET_BYTES
    assert grad_bucket_bytes(get_framework("megatron-core"), stated, 4) == 50 * 2**20
    for name in ("megatron-lm-2021", "fsdp", "torchtitan"):
        assert grad_bucket_bytes(get_framework(name), default, 4) == DEFAULT_GRAD_BUCKET_BYTES
    # without overlap_grad_reduce the policy reduces one bucket per chunk (UNBUCKETED), after it
    off = get_framework("megatron-core").with_overrides({"overlap_grad_reduce": False})
    assert Overlap.GRAD_REDUCE not in TimingPolicy.from_profile(off).overlaps
    assert Overlap.GRAD_REDUCE in TimingPolicy.from_profile(get_framework("megatron-core")).overlaps


def _exposed_sync(backend: AnalyticalBackend, dp: int, bucket: int | None = None) -> float:
    # 2 layers of Llama 3 8B, vocabulary 32,000, over tp 8: ~87M parameters per rank
    model = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000)
    parallel = ParallelConfig(tp=8, dp=dp, global_batch=dp)
    if bucket is not None:
        parallel = replace(parallel, grad_bucket_bytes=bucket)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert result.feasible, result.reason
    return result.breakdown["exposed_gradient_sync"]


def test_megatron_buckets_reach_the_backend_and_past_dp_87_hold_every_gradient() -> None:
    scaled = AnalyticalBackend(framework="megatron-core")
    fixed = AnalyticalBackend(
        framework="megatron-core", overrides={"ddp_bucket_scales_with_dp": False}
    )
    # dp 256: a 256M-parameter bucket holds the rank's ~87M gradients, so they are reduced in
    # one collective after the backward, as with one bucket per chunk stated in the config
    one_bucket = _exposed_sync(fixed, 256, UNBUCKETED)
    assert _exposed_sync(scaled, 256) == pytest.approx(one_bucket, rel=1e-12)
    assert _exposed_sync(fixed, 256) != pytest.approx(one_bucket, rel=1e-3)
    # dp 16: 40M-parameter buckets (3 of them), neither 25 MiB ones nor a single one
    at_16 = _exposed_sync(scaled, 16)
    assert at_16 != pytest.approx(_exposed_sync(fixed, 16), rel=1e-3)
    assert at_16 != pytest.approx(_exposed_sync(fixed, 16, UNBUCKETED), rel=1e-3)
    # a bucket the config states is kept: both profiles agree on it
    stated = 25 * 2**20 + 4096
    assert _exposed_sync(scaled, 256, stated) == _exposed_sync(fixed, 256, stated)


def _parameter_gather(bucket_bytes: int, overlap: bool = True) -> float:
    backend = AnalyticalBackend(
        framework="megatron-core", overrides={"overlap_param_gather": overlap}
    )
    model = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000)
    parallel = ParallelConfig(tp=8, dp=16, zero=1, global_batch=64, grad_bucket_bytes=bucket_bytes)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert result.feasible, result.reason
    return result.breakdown.get("parameter_gather", 0.0)


def test_the_first_parameter_bucket_is_gathered_before_the_forward() -> None:
    """Under overlap_param_gather the first bucket's all-gather is exposed and the rest hides
    behind the forward: the exposed time is the all-gather of the first bucket's share of the
    parameters, affine in the bucket (an α-β all-gather is affine in its bytes), and below
    the whole gather without overlap."""
    mib = 2**20
    b1, b2, b3 = 16 * mib, 32 * mib, 80 * mib
    h1, h2, h3 = (_parameter_gather(b) for b in (b1, b2, b3))
    assert 0 < h1 < h2 < h3 < _parameter_gather(b1, overlap=False)
    assert (h3 - h1) / (h2 - h1) == pytest.approx((b3 - b1) / (b2 - b1), rel=1e-6)
