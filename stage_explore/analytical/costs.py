"""Two pure costs of the analytical backend: the optimizer step and one activation transfer
between pipeline stages.

Holds the per-parameter byte counts of a mixed-precision optimizer step
(:func:`optimizer_extra_bytes`, :data:`OPTIMIZER_EXTRA_BYTES_PER_PARAM`,
:data:`LOSS_SCALING_BYTES_PER_PARAM`; PyTorch's foreach AdamW, :func:`foreach_optimizer_bytes`),
:func:`optimizer_step_s`, :func:`stage_transfer_s` and :func:`stage_arrival_s`.

The optimizer step is counted kernel by kernel from Megatron-LM's
``Float16OptimizerWithFloat16Params.step`` of 2021-22 (``megatron/optimizer/optimizer.py``,
``clip_grads.py`` and the local DDP's ``zero_grad_buffer`` in
``megatron/model/distributed.py``, tags v2.5-v3.0), around Apex's fused Adam
(``apex/optimizers/fused_adam.py`` → ``csrc/multi_tensor_adam.cu``), per updated parameter:

===========================================  ===================================  =============
kernel                                       bytes                                when
===========================================  ===================================  =============
``_copy_model_grads_to_main_grads``          ``main_grad.float()``: none for fp32  16-bit grads
                                             grads; read 2 + write 4 otherwise
``_unscale_main_grads_and_check_for_nan``    read and write the fp32 grad (8)     fp16 only
``clip_grad_norm_fp32``                      ``multi_tensor_l2norm`` reads it (4)  always
fused Adam (``multi_tensor_adam``)           read p, g, m, v (16), write p, m, v  always
                                             (12): :mod:`stage_core.lower.program`
``_copy_main_params_to_model_params``        read the fp32 master (4), write the   always
                                             16-bit weight (2, counted in Adam's
                                             written bytes)
``zero_grad_buffer``                         write the gradient buffer (2 or 4)   always
===========================================  ===================================  =============

The clipping scale (``multi_tensor_scale`` when the norm exceeds the limit) and
``count_zeros`` (``--log-num-zeros-in-grad``) are conditional and not counted. Every other
framework's optimizer step is costed with the same count (DeepSpeed's and FSDP's steps are
fractions of a per-cent of their step times in the published runs), except PyTorch's own
``torch.optim.AdamW(foreach=True)`` (``foreach``; the framework option ``optimizer_foreach``),
counted from ``torch/optim/adamw.py`` ``_multi_tensor_adamw`` (PyTorch 2.5-2.6; weight decay,
no amsgrad, not capturable), each ``torch._foreach_*`` op a pass over whole tensors, on fp32
parameters and moments and ``g``-byte gradients:

=======================================================  ====================================
kernel                                                   bytes per parameter
=======================================================  ====================================
``_foreach_mul_(params, 1 - lr * weight_decay)``         read and write p (8)
``_foreach_lerp_(exp_avgs, grads, 1 - beta1)``           read m and g, write m (8 + g)
``_foreach_mul_(exp_avg_sqs, beta2)``                    read and write v (8)
``_foreach_addcmul_(exp_avg_sqs, grads, grads, ...)``    read v and g, write v (8 + g)
``_foreach_sqrt(exp_avg_sqs)``                           read v, write the denominator (8)
``_foreach_div_`` / ``_foreach_add_`` (bias, eps)        read and write it twice (16)
``_foreach_addcdiv_(params, exp_avgs, denom, step)``     read p, m and it, write p (16)
``clip_grad_norm_(foreach=True)``: the norms, then       read g; read and write g (3 g)
``_foreach_mul_(grads, clip_coef_clamped)`` (always)
=======================================================  ====================================

``72 + 5·g`` bytes (92 with fp32 gradients), where the fused step moves its 42; the parameter
is itself fp32 (FSDP's sharded parameter), so there is no master copy, and ``zero_grad`` sets
the gradients to None (no kernel).

``torch.optim.SGD(foreach=True)`` (the kinds ``sgd`` and ``sgd_momentum`` under
``optimizer_foreach``, s37 optim2) is counted the same way from ``torch/optim/sgd.py``
``_multi_tensor_sgd`` (pytorch/pytorch 0316fdce; its defaults ``weight_decay=0``, no
``nesterov``, not ``maximize``; the momentum buffers exist after the first step), with the same
foreach clipping (``3·g``):

=======================================================  ====================================
kernel                                                   bytes per parameter
=======================================================  ====================================
``_foreach_mul_(bufs, momentum)`` (momentum only)        read and write the buffer (8)
``_foreach_add_(bufs, grads, alpha=1 - dampening)``      read the buffer and g, write the
(momentum only)                                          buffer (8 + g)
``_foreach_add_(params, grads or bufs, alpha=-lr)``      read p and g (momentum: the buffer,
                                                         4), write p (8 + g; 12)
=======================================================  ====================================

``sgd``: ``8 + 4·g``; ``sgd_momentum``: ``28 + 4·g``. ``adam_bf16_moments`` is not a
``torch.optim`` configuration on fp32 parameters (its moments would be fp32,
``torch.zeros_like(p)``), so under ``optimizer_foreach`` it keeps the fused count.
"""

from __future__ import annotations

from stage_core.errors import ConfigError
from stage_core.lower.emit import GroupTable
from stage_core.lower.optimizer_kinds import optimizer_step_bytes
from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
)
from stage_explore.analytical.policy import PointToPoint
from stage_explore.system.accelerator import Accelerator
from stage_explore.system.model import System

#: The transfers the pipeline simulation times (ASTRA-sim's ``arrival`` is tracesim's).
_PIPELINE_POINT_TO_POINT = frozenset(
    {PointToPoint.BLOCKING, PointToPoint.BLOCKING_SEPARATE, PointToPoint.OVERLAPPED}
)

#: ``clip_grad_norm_fp32``: ``multi_tensor_l2norm`` reads each fp32 main gradient.
GRAD_NORM_BYTES_PER_PARAM = 4
#: ``_copy_main_params_to_model_params``: reads each fp32 master weight (its 16-bit write is in
#: ``ADAM_BYTES_WRITTEN_PER_PARAM``).
MASTER_COPY_READ_BYTES_PER_PARAM = 4
#: Bytes of the fp32 main gradient the optimizer works on.
MAIN_GRAD_BYTES = 4
#: fp16 adds dynamic loss scaling: ``_amp_foreach_non_finite_check_and_unscale_`` reads and
#: writes each fp32 main gradient (bf16 runs have no loss scaler in Megatron-LM).
LOSS_SCALING_BYTES_PER_PARAM = 2 * MAIN_GRAD_BYTES


def optimizer_extra_bytes(dtype: str, grad_bytes: int) -> int:
    """Bytes per updated parameter that the mixed-precision step moves besides Adam's own
    (module docstring): the gradient-norm read, the master-weight read of the copy back,
    zeroing the ``grad_bytes``-wide gradient buffer, the fp32 conversion of 16-bit gradients,
    and loss scaling with fp16."""
    extra = GRAD_NORM_BYTES_PER_PARAM + MASTER_COPY_READ_BYTES_PER_PARAM + grad_bytes
    if grad_bytes != MAIN_GRAD_BYTES:  # main_grad.float() copies a 16-bit buffer
        extra += grad_bytes + MAIN_GRAD_BYTES
    if dtype == "fp16":
        extra += LOSS_SCALING_BYTES_PER_PARAM
    return extra


#: The bookkeeping bytes with fp32 gradients and no loss scaling (12: norm 4, copy 4, zero 4).
OPTIMIZER_EXTRA_BYTES_PER_PARAM = optimizer_extra_bytes("bf16", MAIN_GRAD_BYTES)


#: ``torch.optim.AdamW(foreach=True)``'s passes over fp32 parameters and moments, bytes per
#: parameter besides the gradient reads (module docstring): ``72 + 2·g`` for the step.
FOREACH_ADAMW_BYTES_PER_PARAM = 72
#: Gradient reads of the foreach step (``lerp`` and ``addcmul``) and of ``clip_grad_norm_``
#: (the norm, then the scale's read and write), in gradient widths.
FOREACH_GRAD_PASSES = 2 + 3


#: ``torch.optim.SGD(foreach=True)``'s passes besides the gradient reads (module docstring):
#: the parameter update ``8`` (with momentum: the buffer's ``mul_`` 8, ``add_`` 8 and the
#: update reading the buffer 12) and the gradient widths the step and clipping read (1 + 3).
FOREACH_SGD_BYTES_PER_PARAM = {"sgd": 8, "sgd_momentum": 8 + 8 + 12}
FOREACH_SGD_GRAD_PASSES = 1 + 3


def foreach_optimizer_bytes(grad_bytes: int, kind: str = "adam") -> int:
    """Bytes per parameter of PyTorch's foreach step of ``kind`` (AdamW by default, or SGD)
    and foreach gradient clipping on ``grad_bytes``-wide gradients (module docstring):
    AdamW's ``72 + 5·grad_bytes``, SGD's ``8 + 4·grad_bytes``, with momentum ``28 + 4·g``."""
    if kind == "adam":
        return FOREACH_ADAMW_BYTES_PER_PARAM + FOREACH_GRAD_PASSES * grad_bytes
    if kind not in FOREACH_SGD_BYTES_PER_PARAM:
        raise ConfigError(
            f"a foreach step is counted for adam, sgd and sgd_momentum, but got optimizer {kind!r}"
        )
    return FOREACH_SGD_BYTES_PER_PARAM[kind] + FOREACH_SGD_GRAD_PASSES * grad_bytes


def optimizer_step_s(
    accelerator: Accelerator,
    dtype: str,
    params: int,
    grad_bytes: int = MAIN_GRAD_BYTES,
    foreach: bool = False,
    kind: str = "adam",
) -> float:
    """The update of the optimizer ``kind`` (Adam by default; :func:`~stage_core.lower.
    optimizer_kinds.optimizer_step_bytes`) over ``params`` parameters (a shard of them under
    ZeRO; the count of :func:`stage_core.lower.program._optimizer`), memory-bound, plus the
    mixed-precision bookkeeping (:func:`optimizer_extra_bytes` for gradients of
    ``grad_bytes``), at the accelerator's fp32 rate; with ``foreach`` and ``kind`` Adam or SGD,
    PyTorch's foreach step and gradient clipping instead (:func:`foreach_optimizer_bytes`;
    ``adam_bf16_moments`` keeps its fused bytes, module docstring)."""
    flops, read, written = optimizer_step_bytes(kind)
    per_param = read + written + optimizer_extra_bytes(dtype, grad_bytes)
    if foreach and kind != "adam_bf16_moments":
        per_param = foreach_optimizer_bytes(grad_bytes, kind)
    fp32 = "fp32" if "fp32" in accelerator.peak_flops_per_s else dtype
    return accelerator.compute_time_s(flops * params, per_param * params, fp32)


def stage_arrival_s(
    system: System,
    table: GroupTable,
    ends: tuple[int, int],
    size_bytes: int,
    scatter: int,
    point_to_point: PointToPoint,
) -> float:
    """How long an activation message of :func:`stage_transfer_s` delays the receiver beyond
    the sender's hold: for an ``overlapped`` transfer (Megatron-Core's
    ``--overlap-p2p-communication``: ``batch_isend_irecv`` on a communication stream, the
    receive waited for just before the task that reads it) the message's bytes over the link
    (its latency is the hold :func:`stage_transfer_s` gives) and, with ``scatter`` > 1, the
    receiver's all-gather over tp; 0.0 for blocking transfers, whose sender is held for all of
    it. NeMo's communication-overlap guide: the pipeline's transfers overlap "non-dependant
    computations in the 1F1B stage"; "the PP communications in pipeline fill and flush still
    exposed" — what this delay gives in the pipeline simulation (slack in the steady state,
    none in the fill and the drain)."""
    if point_to_point is not PointToPoint.OVERLAPPED:
        return 0.0
    first, second = ends
    seconds = alpha_beta_point_to_point_s(system, first, second, size_bytes // scatter)
    seconds -= alpha_beta_point_to_point_s(system, first, second, 0)  # the hold's latency
    if scatter > 1:
        seconds += _receiver_gather_s(system, table, second, size_bytes, scatter)
    return seconds


def stage_transfer_s(
    system: System,
    table: GroupTable,
    ends: tuple[int, int],
    size_bytes: int,
    scatter: int,
    point_to_point: PointToPoint,
) -> float:
    """One activation message of ``size_bytes`` from rank ``ends[0]`` to ``ends[1]`` (adjacent
    stages). With ``scatter`` > 1 (Megatron's scatter/gather, Narayanan et al. 2021, §4.1: tp
    ranks hold the same activation without sequence parallelism) ``1/scatter`` of it crosses the
    link and the receiver all-gathers it over tp. ``point_to_point`` (the timing policy's,
    :class:`~stage_explore.analytical.policy.PointToPoint`): ``overlapped`` (Megatron-Core's
    overlapped p2p), only the message latency holds the ranks; ``blocking``, the sender is held
    for the transfer; ``blocking-separate`` (DeepSpeed's pipeline engine: the send and the
    matching receive are separate blocking instructions, each holding its rank while the
    message crosses), the link time counts twice — the schedule simulation holds only the
    sender for a transfer, so the receiver's hold is added to it — the all-gather once.
    """
    if point_to_point not in _PIPELINE_POINT_TO_POINT:
        raise ConfigError(
            f"pipeline transfers are timed as blocking, blocking-separate or overlapped, but got "
            f"point_to_point {str(point_to_point)!r}"
        )
    first, second = ends
    if point_to_point is PointToPoint.OVERLAPPED:
        return alpha_beta_point_to_point_s(system, first, second, 0)
    seconds = alpha_beta_point_to_point_s(system, first, second, size_bytes // scatter)
    if point_to_point is PointToPoint.BLOCKING_SEPARATE:
        seconds *= 2
    if scatter > 1:
        seconds += _receiver_gather_s(system, table, second, size_bytes, scatter)
    return seconds


def _receiver_gather_s(
    system: System, table: GroupTable, receiver: int, size_bytes: int, scatter: int
) -> float:
    """The receiving stage's all-gather over tp of a message sent as ``1/scatter`` of its
    ``size_bytes`` (Megatron's scatter/gather, :func:`stage_transfer_s`)."""
    group = table.group(receiver, ("tp",))
    return alpha_beta_collective_s(system, CollectiveKind.ALL_GATHER, size_bytes // scatter, group)
