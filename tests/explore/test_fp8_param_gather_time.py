"""Megatron's ``--fp8-param-gather`` in time (``fp8_param_gather``): the distributed optimizer's
parameter all-gather moves the FP8 linear layers' parameters at 1 byte per element (Megatron-Core
DDP keeps a ``Float8Tensor`` parameter in a ``torch.uint8`` buffer), every other parameter at 2;
closed form from the lowered block's weights, and the option's effect on a timed point."""

from __future__ import annotations

import math

from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import block_sync, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_gathers import fp8_param_gathers
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
FP8 = ParallelConfig(tp=2, dp=4, zero=1, sp=True, precision=Precision.FP8, global_batch=8)


def test_fp8_linear_parameters_are_gathered_at_one_byte() -> None:
    programs = lower(LLAMA, FP8)
    workload = programs.workload
    sizes = workload.axis_sizes
    for kind, block in programs.blocks.items():
        _, gathers, _ = block_sync(workload, block)
        fp8 = linear_weights(block) if fp8_block(kind) else frozenset()
        expected: dict[tuple[str, ...], int] = {}
        for weight in block.weights:
            data = data_axes(sizes, workload.expert_axes, weight.expert)
            shard = weight.elements // math.prod(sizes[a] for a in data)
            width = 1 if weight.name in fp8 else 2  # uint8 buffer / bf16 buffer
            expected[data] = expected.get(data, 0) + shard * width
        if fp8:
            assert fp8_param_gathers(workload, block, gathers) == expected
            assert sum(expected.values()) < sum(gathers.values())


def test_the_option_shortens_an_fp8_step_with_a_distributed_optimizer() -> None:
    system = load_system("h100-80gb")
    # reductions and gathers after the backward (no overlaps): half the bytes of most
    # parameters gather faster; with the overlaps the non-FP8 buckets join the first layers'
    # bucket group (fp8_buckets.py, tests/explore/test_fp8_buckets.py), so only a difference
    serial = {"overlap_grad_reduce": False, "overlap_param_gather": False}
    on = AnalyticalBackend(framework="megatron-core", overrides={"fp8_param_gather": True})
    off = AnalyticalBackend(framework="megatron-core", overrides={"fp8_param_gather": False})
    on_serial = AnalyticalBackend(
        framework="megatron-core", overrides={"fp8_param_gather": True, **serial}
    )
    off_serial = AnalyticalBackend(
        framework="megatron-core", overrides={"fp8_param_gather": False, **serial}
    )
    on_s = on.evaluate(LLAMA, FP8, system).step_time_s
    off_s = off.evaluate(LLAMA, FP8, system).step_time_s
    assert on_s != off_s
    assert (
        on_serial.evaluate(LLAMA, FP8, system).step_time_s
        < off_serial.evaluate(LLAMA, FP8, system).step_time_s
    )
    bf16 = ParallelConfig(tp=2, dp=4, zero=1, sp=True, global_batch=8)
    assert (
        on.evaluate(LLAMA, bf16, system).step_time_s
        == off.evaluate(LLAMA, bf16, system).step_time_s
    )  # no FP8 recipe: 16-bit parameters everywhere
