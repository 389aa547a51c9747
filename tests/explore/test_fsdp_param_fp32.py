"""FSDP with ``MixedPrecision(param_dtype=None)`` (the ``fsdp_param_fp32`` framework option,
Composer's FSDP ``DEFAULT`` of 2023): parameters gathered in fp32, twice a 16-bit gather's bytes,
in time and in the gathered units a rank holds."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import zero3_gathered_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point


def test_only_the_2023_llm_foundry_profile_gathers_fp32_parameters() -> None:
    assert FRAMEWORKS["llm-foundry-2023"].fsdp_param_fp32
    assert not any(p.fsdp_param_fp32 for n, p in FRAMEWORKS.items() if n != "llm-foundry-2023")
    with pytest.raises(ConfigError, match="fsdp_param_fp32"):
        get_framework("fsdp").with_overrides({"fsdp_param_fp32": 1})


@pytest.mark.parametrize("weight_bytes", [2, 4])
def test_gathered_units_are_held_in_fp32(weight_bytes: int) -> None:
    blocks = [10 * weight_bytes, 30 * weight_bytes, 20 * weight_bytes]
    fsdp = get_framework("fsdp")
    fp32 = fsdp.with_overrides({"fsdp_param_fp32": True})
    two_blocks = (30 + 20) * weight_bytes  # the block in use and the prefetched next
    assert zero3_gathered_bytes(fsdp, blocks, 5, weight_bytes) == two_blocks
    assert zero3_gathered_bytes(fp32, blocks, 5, weight_bytes) == (30 + 20) * 4


def test_fp32_gathers_cost_time_only_where_they_are_exposed() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(dp=64, zero=3, micro_batch=1, global_batch=64)
    system = load_system("h100-80gb")
    plain = AnalyticalBackend(framework="fsdp").evaluate(model, parallel, system)
    fp32 = AnalyticalBackend(framework="fsdp", overrides={"fsdp_param_fp32": True}).evaluate(
        model, parallel, system
    )
    assert fp32.breakdown["compute"] > plain.breakdown["compute"]  # the per-use casts
    assert fp32.breakdown["exposed_zero_gather"] > plain.breakdown["exposed_zero_gather"]
    assert fp32.step_time_s > plain.step_time_s
    zero1 = ParallelConfig(dp=64, zero=1, micro_batch=1, global_batch=64)
    assert AnalyticalBackend(framework="fsdp", overrides={"fsdp_param_fp32": True}).evaluate(
        model, zero1, system
    ).step_time_s == pytest.approx(
        AnalyticalBackend(framework="fsdp").evaluate(model, zero1, system).step_time_s,
        rel=1e-12,
    )  # no ZeRO-3 gather: nothing changes


@pytest.mark.parametrize(
    ("recompute", "backward_passes"), [(Recompute.SELECTIVE, 1), (Recompute.FULL, 2)]
)
def test_autocast_casts_each_gathered_weight_per_use(
    recompute: Recompute, backward_passes: int
) -> None:
    """Forward: one fp32 -> bf16 cast per weight (4 + 2 bytes per element); backward: the
    gradient cast back, and under full recompute the recomputed forward's casts."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=8, zero=3, global_batch=8, recompute=recompute)
    system = load_system("h100-80gb")
    backend = AnalyticalBackend(framework="llm-foundry-2023")
    point = bound_point(backend, model, parallel, system)
    accelerator = system.accelerator
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    elements = sum(weight.elements for weight in point.blocks["layer"].weights)
    per_pass = elements * (4 + 2) / bandwidth
    assert backend._param_cast_s(point, "layer", "fwd") == pytest.approx(per_pass, rel=1e-12)
    assert backend._param_cast_s(point, "layer", "bwd") == pytest.approx(
        backward_passes * per_pass, rel=1e-12
    )
    fsdp = AnalyticalBackend(framework="fsdp")
    assert fsdp._param_cast_s(point, "layer", "fwd") == 0.0  # gathers 16-bit parameters
