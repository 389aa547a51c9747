"""The optimizer step's byte count (kernel by kernel from Megatron-LM's mixed-precision step)
and its time."""

from __future__ import annotations

import pytest

from stage_core.lower.optimizer_kinds import (
    ADAM_BYTES_READ_PER_PARAM,
    ADAM_BYTES_WRITTEN_PER_PARAM,
    ADAM_FLOPS_PER_PARAM,
)
from stage_explore.analytical.costs import (
    LOSS_SCALING_BYTES_PER_PARAM,
    OPTIMIZER_EXTRA_BYTES_PER_PARAM,
    optimizer_extra_bytes,
    optimizer_step_s,
)
from stage_explore.system import load_system


@pytest.mark.parametrize(
    ("dtype", "grad_bytes", "kernels"),
    [
        # fp32 main grads (Megatron's --accumulate-allreduce-grads-in-fp32, forced for bf16):
        # l2-norm read 4, master read of the copy back 4, zero the fp32 buffer 4
        ("bf16", 4, [4, 4, 4]),
        # fp16 adds the unscale / inf check: read and write the fp32 grad
        ("fp16", 4, [4, 4, 4, 4 + 4]),
        # fp16 grads (Megatron-LM 2021's default): main_grad.float() reads 2 and writes 4,
        # zeroing writes the 2-byte buffer
        ("fp16", 2, [4, 4, 2, 2 + 4, 4 + 4]),
        ("bf16", 2, [4, 4, 2, 2 + 4]),
    ],
)
def test_the_bookkeeping_bytes_are_the_sum_of_megatrons_kernels(
    dtype: str, grad_bytes: int, kernels: list[int]
) -> None:
    assert optimizer_extra_bytes(dtype, grad_bytes) == sum(kernels)


def test_the_exported_constants_are_the_fp32_gradient_counts() -> None:
    assert OPTIMIZER_EXTRA_BYTES_PER_PARAM == optimizer_extra_bytes("bf16", 4) == 12
    assert optimizer_extra_bytes("fp16", 4) - OPTIMIZER_EXTRA_BYTES_PER_PARAM == (
        LOSS_SCALING_BYTES_PER_PARAM
    )


def test_the_step_is_memory_bound_over_every_byte_it_moves() -> None:
    accelerator = load_system("a100-80gb").accelerator
    params = 10**9
    for grad_bytes in (2, 4):
        per_param = (
            ADAM_BYTES_READ_PER_PARAM
            + ADAM_BYTES_WRITTEN_PER_PARAM
            + optimizer_extra_bytes("fp16", grad_bytes)
        )
        expected = accelerator.compute_time_s(
            ADAM_FLOPS_PER_PARAM * params, per_param * params, "fp32"
        )
        assert optimizer_step_s(accelerator, "fp16", params, grad_bytes) == pytest.approx(expected)
    assert optimizer_step_s(accelerator, "fp16", params, 2) > optimizer_step_s(
        accelerator, "fp16", params, 4
    )
