"""CPU offload of model states (``offload_optimizer`` / ``offload_params``,
:mod:`stage_explore.analytical.offload`) against closed forms computed here from the cited
figures: the GPU sheds the offloaded states, the host holds them, the optimizer step becomes the
CPU step plus the PCIe copies the framework blocks on, ZeRO-3 gathers and reduce-scatters carry
the shards' copies; the combinations the model does not cover are one-line errors."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.evaluation import Evaluation
from stage_explore.system import load_system

MODEL = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
DP = 8
#: Each rank's partition: every weight of the model divides by 8.
PARTITION = MODEL.params() // DP
#: The tensors' own peak (no allocator overhead nor runtime reserve), so that the peaks differ
#: by exactly the states.
PLAIN = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}
A100_H2D, A100_D2H = 25.13e9, 25.0e9  # nvbandwidth A100-SXM4 (offload.py's citations)
CPU_ADAM, TORCH_ADAM = 11.6e9 / 8.2, 11.6e9 / 56.0  # DeepSpeed PR #735


def _parallel(zero: int) -> ParallelConfig:
    return ParallelConfig(
        dp=DP, zero=zero, recompute=Recompute.FULL, micro_batch=1, global_batch=2 * DP
    )


def _pair(
    framework: str, zero: int, offload: dict[str, bool], system: str = "a100-80gb"
) -> tuple[Evaluation, Evaluation]:
    """``framework`` at ZeRO ``zero`` without and with the ``offload`` options."""
    preset = load_system(system)
    off = AnalyticalBackend(framework=framework, overrides=PLAIN)
    on = AnalyticalBackend(framework=framework, overrides={**PLAIN, **offload})
    parallel = _parallel(zero)
    return off.evaluate(MODEL, parallel, preset), on.evaluate(MODEL, parallel, preset)


def test_model_divides_into_equal_partitions() -> None:
    assert MODEL.params() % DP == 0


def test_zero_offload_moves_the_optimizer_and_gradient_partition_to_the_host() -> None:
    base, offload = _pair("deepspeed", 2, {"offload_optimizer": True})
    # ZeRO-2: the GPU drops the optimizer state (12 bytes a parameter: fp32 master and two
    # moments) and the fp32 gradient partition (4); the host holds both (fp32 gradients)
    assert base.peak_memory_bytes - offload.peak_memory_bytes == PARTITION * (12 + 4)
    assert offload.extra["host_memory_bytes_per_gpu"] == PARTITION * (12 + 4)
    assert offload.extra["host_memory_bytes_per_node"] == 8 * PARTITION * (12 + 4)
    # the step: DeepSpeedCPUAdam over the partition at the host's rate shared by 8 GPUs, the
    # blocking H2D copy of the updated 16-bit partition, the fp32 gradient's D2H copy after
    # the reduction (the deepspeed profile does not overlap_comm)
    step = PARTITION * 8 / CPU_ADAM + PARTITION * 2 / A100_H2D + PARTITION * 4 / A100_D2H
    assert offload.breakdown["optimizer"] == pytest.approx(step, rel=1e-12)
    rise = offload.step_time_s - base.step_time_s
    assert rise == pytest.approx(step - base.breakdown["optimizer"], rel=1e-9)


def test_overlapped_reductions_hide_the_gradient_copies() -> None:
    _, plain = _pair("deepspeed", 2, {"offload_optimizer": True})
    _, overlapped = _pair("deepspeed", 2, {"offload_optimizer": True, "overlap_grad_reduce": True})
    hidden = PARTITION * 4 / A100_D2H
    assert plain.breakdown["optimizer"] - overlapped.breakdown["optimizer"] == pytest.approx(
        hidden, rel=1e-9
    )


def test_fsdp1_cpu_offload_steps_on_the_cpu_and_copies_shards_beside_the_collectives() -> None:
    both = {"offload_optimizer": True, "offload_params": True}
    base, offload = _pair("fsdp", 3, both)
    assert offload.peak_memory_bytes < base.peak_memory_bytes
    # torch's CPU Adam over the shard, nothing copied back after it (the parameters live on
    # the CPU: each gather copies its shard in)
    assert offload.breakdown["optimizer"] == pytest.approx(PARTITION * 8 / TORCH_ADAM, rel=1e-12)
    rest_base = base.step_time_s - base.breakdown["optimizer"]
    rest_offload = offload.step_time_s - offload.breakdown["optimizer"]
    assert rest_offload > rest_base  # the shards' H2D / D2H copies lengthen the collectives


def test_without_offload_nothing_changes() -> None:
    base, same = _pair("deepspeed", 2, {"offload_optimizer": False, "offload_params": False})
    assert (same.step_time_s, same.peak_memory_bytes) == (base.step_time_s, base.peak_memory_bytes)
    assert "host_memory_bytes_per_node" not in same.extra


def test_profiles_cpu_optimizers() -> None:
    assert get_framework("deepspeed").cpu_optimizer == "deepspeed"
    assert get_framework("fsdp").cpu_optimizer == "torch"
    assert not get_framework("deepspeed").offload_optimizer


@pytest.mark.parametrize(
    ("zero", "offload", "system", "message"),
    [
        (2, {"offload_params": True, "offload_optimizer": True}, "a100-80gb", "needs ZeRO-3"),
        (3, {"offload_params": True}, "a100-80gb", "without offload_optimizer"),
        (0, {"offload_optimizer": True}, "a100-80gb", "needs ZeRO >= 1"),
        (2, {"offload_optimizer": True}, "mi300x", "no cited host-device bandwidth"),
    ],
)
def test_uncovered_combinations_are_one_line_errors(
    zero: int, offload: dict[str, bool], system: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        _pair("deepspeed", zero, offload, system)
    assert "\n" not in str(error.value)


def test_parameter_offload_with_hpz_is_an_error() -> None:
    """ZeRO++'s hpZ keeps a secondary shard on the GPU for the backward gathers (hpz.py): with
    the shards in host memory that is not modelled."""
    both = {"offload_optimizer": True, "offload_params": True, "zero_hpz_partition_size": 2}
    with pytest.raises(ConfigError, match="offload_params with ZeRO\\+\\+ hpZ"):
        _pair("deepspeed", 3, both)


def test_unknown_cpu_optimizer_is_refused() -> None:
    with pytest.raises(ConfigError, match="cpu_optimizer"):
        AnalyticalBackend(framework="deepspeed", overrides={"cpu_optimizer": "adam"})
