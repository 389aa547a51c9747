"""The attention kernel a framework runs on Blackwell (``sm100_attention_kernel``): torchtitan
puts cuDNN first in its SDPA priority on compute capability 10.0+ (pytorch/torchtitan#1196) and
runs FlashAttention-2 elsewhere; closed forms from the presets' own kernel figures."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
PARALLEL = ParallelConfig(dp=8, zero=3, micro_batch=1, global_batch=8)


@pytest.mark.parametrize(
    ("system", "kernel"),
    [("b200", "cudnn"), ("gb200-nvl72", "cudnn"), ("h100-80gb", "fa2"), ("h200", "fa2")],
)
def test_torchtitan_asks_for_cudnn_only_on_blackwell(system: str, kernel: str) -> None:
    accelerator = load_system(system).accelerator
    assert get_framework("torchtitan").attention_kernel_on(accelerator.peak_flops_per_s) == kernel
    for name in ("megatron-core", "fsdp", "deepspeed"):  # no sm100 rule: their kernel everywhere
        profile = get_framework(name)
        assert profile.attention_kernel_on(accelerator.peak_flops_per_s) == (
            profile.attention_kernel
        )


def test_on_b200_the_attention_takes_the_cudnn_kernel_s_time() -> None:
    system = load_system("b200")
    accelerator, kernels = system.accelerator, system.accelerator.kernels
    assert kernels is not None
    layer = lower(LLAMA, PARALLEL).blocks["layer"]
    attention = next(i for i in layer.fwd if i.kind == "attention")
    peak = accelerator.peak("bf16")

    def seconds(kernel: str) -> float:  # the forward kernel: FLOPs over its fraction of peak
        return attention.flops / (
            peak * attention_efficiency(kernels, 8192, 128, True, False, kernel)
        )

    tt = AnalyticalBackend(framework="torchtitan")
    fa2 = AnalyticalBackend(framework="torchtitan", overrides={"sm100_attention_kernel": "fa2"})
    step_cudnn = tt.evaluate(LLAMA, PARALLEL, system).step_time_s
    step_fa2 = fa2.evaluate(LLAMA, PARALLEL, system).step_time_s
    assert seconds("cudnn") < seconds("fa2")
    assert step_cudnn < step_fa2  # the only difference between the two backends
    everywhere = AnalyticalBackend(framework="torchtitan", overrides={"attention_kernel": "cudnn"})
    assert everywhere.evaluate(LLAMA, PARALLEL, system).step_time_s == step_cudnn
    h100 = load_system("h100-80gb")
    assert tt.evaluate(LLAMA, PARALLEL, h100).step_time_s == (
        fa2.evaluate(LLAMA, PARALLEL, h100).step_time_s
    )


def test_a_bad_sm100_kernel_is_refused() -> None:
    with pytest.raises(ConfigError, match="sm100_attention_kernel"):
        AnalyticalBackend(framework="torchtitan", overrides={"sm100_attention_kernel": ""})
