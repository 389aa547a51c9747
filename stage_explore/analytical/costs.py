"""Two pure costs of the analytical backend: the optimizer step and one activation transfer
between pipeline stages.

Holds :data:`OPTIMIZER_EXTRA_BYTES_PER_PARAM`, :data:`LOSS_SCALING_BYTES_PER_PARAM`,
:func:`optimizer_step_s` and :func:`stage_transfer_s`.
"""

from __future__ import annotations

from stage_core.lower.emit import GroupTable
from stage_core.lower.program import (
    ADAM_BYTES_READ_PER_PARAM,
    ADAM_BYTES_WRITTEN_PER_PARAM,
    ADAM_FLOPS_PER_PARAM,
)
from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
)
from stage_explore.system.model import Accelerator, System

#: Bytes per updated parameter that a mixed-precision optimizer step moves besides Adam's own
#: (``ADAM_BYTES_*`` in :mod:`stage_core.lower.program`): the gradient-norm reduction reads the
#: fp32 gradient (4), copying the fp32 master weight to the 16-bit weight reads it (4; the write
#: is Adam's), zeroing the gradient buffer for the next step writes it (4) — Megatron-LM's
#: ``MixedPrecisionOptimizer.step`` and ``zero_grad``.
OPTIMIZER_EXTRA_BYTES_PER_PARAM = 12
#: fp16 adds dynamic loss scaling: unscale the gradients and check them for inf/NaN (read and
#: write the fp32 gradient: 8).
LOSS_SCALING_BYTES_PER_PARAM = 8


def optimizer_step_s(accelerator: Accelerator, dtype: str, params: int) -> float:
    """Adam over ``params`` parameters (a shard of them under ZeRO; the count of
    :func:`stage_core.lower.program._optimizer`), memory-bound, plus the mixed-precision
    bookkeeping (:data:`OPTIMIZER_EXTRA_BYTES_PER_PARAM`, and
    :data:`LOSS_SCALING_BYTES_PER_PARAM` with fp16), at the accelerator's fp32 rate."""
    extra = OPTIMIZER_EXTRA_BYTES_PER_PARAM
    if dtype == "fp16":
        extra += LOSS_SCALING_BYTES_PER_PARAM
    per_param = ADAM_BYTES_READ_PER_PARAM + ADAM_BYTES_WRITTEN_PER_PARAM + extra
    fp32 = "fp32" if "fp32" in accelerator.peak_flops_per_s else dtype
    return accelerator.compute_time_s(ADAM_FLOPS_PER_PARAM * params, per_param * params, fp32)


def stage_transfer_s(
    system: System,
    table: GroupTable,
    ends: tuple[int, int],
    size_bytes: int,
    scatter: int,
    blocking: bool,
) -> float:
    """One activation message of ``size_bytes`` from rank ``ends[0]`` to ``ends[1]`` (adjacent
    stages). With ``scatter`` > 1 (Megatron's scatter/gather, Narayanan et al. 2021, §4.1: tp
    ranks hold the same activation without sequence parallelism) ``1/scatter`` of it crosses the
    link and the receiver all-gathers it over tp. Not ``blocking`` (Megatron-Core's overlapped
    p2p): only the message latency holds the ranks."""
    first, second = ends
    if not blocking:
        return alpha_beta_point_to_point_s(system, first, second, 0)
    seconds = alpha_beta_point_to_point_s(system, first, second, size_bytes // scatter)
    if scatter > 1:
        group = table.group(second, ("tp",))
        seconds += alpha_beta_collective_s(
            system, CollectiveKind.ALL_GATHER, size_bytes // scatter, group
        )
    return seconds
