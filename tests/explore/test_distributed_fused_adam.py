"""The optimizer state of Apex's ``DistributedFusedAdam`` as NeMo 1.x sets it up
(``distributed_fused_adam``), against closed forms computed here: two Adam moments in the state
dtype, and the parameter copy NeMo chooses (the fp32 master's 16 trailing bits for an fp32
state of a bf16 model, none for a bf16 state, a copy in the state dtype under FP8 parameters),
sharded like Megatron's distributed optimizer state; memory only."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import weight_shard_factor
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import distributed_fused_adam_state_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}
FP32, BF16 = 4, 2


@pytest.mark.parametrize(
    ("dtype", "fp8_params", "expected"),
    [
        ("off", False, None),  # Megatron-Core's distributed optimizer: the workload's 12
        ("fp32", False, 2 * FP32 + 2),  # store_param_remainders: the low 16 bits of fp32
        ("bf16", False, 2 * BF16),  # store_params False: state dtype = model dtype
        ("fp32", True, 2 * FP32 + FP32),  # fp8_params -> store_params: an fp32 copy
        ("bf16", True, 2 * BF16 + BF16),  # ... a bf16 copy
    ],
)
def test_state_bytes_per_parameter_follow_nemo_s_rule(
    dtype: str, fp8_params: bool, expected: int | None
) -> None:
    profile = get_framework("megatron-core").with_overrides({"distributed_fused_adam": dtype})
    assert distributed_fused_adam_state_bytes(profile, fp8_params) == expected


def _state_bytes(parallel: ParallelConfig, per_param: int) -> int:
    """Optimizer-state bytes one rank of the single stage holds at ``per_param`` bytes per
    parameter, each weight's state divided by the ranks sharing it (dp x cp)."""
    programs = lower(LLAMA, parallel)
    workload = programs.workload
    (stage,) = programs.stages
    return sum(
        w.elements * per_param // weight_shard_factor(workload, w, True)
        for chunk in stage.chunks
        for block in chunk.blocks
        for w in block.weights
    )


@pytest.mark.parametrize(("dp", "cp"), [(4, 1), (2, 2)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_peak_falls_by_the_smaller_sharded_state(dp: int, cp: int, dtype: str) -> None:
    parallel = ParallelConfig(dp=dp, cp=cp, zero=1, global_batch=dp)
    system = load_system("h100-80gb")
    off = AnalyticalBackend(framework="megatron-core", overrides=TENSORS)
    on = AnalyticalBackend(
        framework="megatron-core", overrides={**TENSORS, "distributed_fused_adam": dtype}
    )
    per_param = 2 * FP32 + 2 if dtype == "fp32" else 2 * BF16
    expected = _state_bytes(parallel, 12) - _state_bytes(parallel, per_param)
    assert expected > 0
    peak_off = off.evaluate(LLAMA, parallel, system)
    peak_on = on.evaluate(LLAMA, parallel, system)
    assert peak_off.peak_memory_bytes - peak_on.peak_memory_bytes == expected
    assert peak_on.step_time_s == peak_off.step_time_s  # memory only


def test_fp8_parameters_store_a_copy_in_the_state_dtype() -> None:
    parallel = ParallelConfig(dp=4, zero=1, precision=Precision.FP8, global_batch=4)
    system = load_system("h100-80gb")
    base = {**TENSORS, "fp8_param_gather": True}
    megatron = AnalyticalBackend(framework="megatron-core", overrides=base)
    apex = AnalyticalBackend(
        framework="megatron-core", overrides={**base, "distributed_fused_adam": "bf16"}
    )
    expected = _state_bytes(parallel, 12) - _state_bytes(parallel, 2 * BF16 + BF16)
    held = megatron.evaluate(LLAMA, parallel, system).peak_memory_bytes
    less = apex.evaluate(LLAMA, parallel, system).peak_memory_bytes
    assert held - less == expected > 0


def test_off_everywhere_and_a_bad_value_is_a_config_error() -> None:
    for name in ("megatron-lm-2021", "megatron-core", "deepspeed", "fsdp", "torchtitan"):
        assert get_framework(name).distributed_fused_adam == "off"
    with pytest.raises(ConfigError, match="distributed_fused_adam"):
        AnalyticalBackend(framework="megatron-core", overrides={"distributed_fused_adam": "fp16"})
