"""The loss's backward working set on the stage holding it, by the profile's loss options
(:mod:`~stage_explore.analytical.profile_runtime`): fp32 buffers of upcast logits
(``loss_fp32_buffers``, ``loss_parallel``), 16-bit buffers of a loss on the 16-bit logits
themselves (``loss_16bit_buffers``), and logits gathered to the whole vocabulary on every
tensor-parallel rank (``loss_logits_gathered``; 7 Dec 2026, s35 kflogits: KempnerForge)."""

from __future__ import annotations

from collections.abc import Sequence

from stage_core.lower.bind import BoundBlock
from stage_core.lower.memory import loss_logits_elements, loss_peak_bytes
from stage_explore.analytical.profile_runtime import LOSS_PARALLEL_FP32_BUFFERS, RuntimeOptions


def loss_excess_bytes(
    blocks: Sequence[BoundBlock], profile: RuntimeOptions, tp: int, activation_bytes: int
) -> int:
    """Bytes the loss among ``blocks`` holds at its backward's peak beyond the 16-bit local
    logits the activation term already counts as saved (0 when no block holds the loss, or
    when the profile counts no loss buffers and the logits stay local).

    The logits the loss reads are the rank's local ones (the generator's vocabulary shard),
    times ``tp`` under ``loss_logits_gathered`` with tp > 1 and no ``loss_parallel`` (the
    gathered ``[tokens, vocab]`` tensor). With ``loss_16bit_buffers`` ``b`` > 0 the loss runs
    on the 16-bit logits: ``(b + 1)`` 16-bit copies of them are live (the logits and ``b``
    buffers); otherwise :func:`~stage_core.lower.memory.loss_peak_bytes` of the fp32 buffers
    (``loss_fp32_buffers``, or :data:`LOSS_PARALLEL_FP32_BUFFERS` under ``loss_parallel``
    with tp > 1)."""
    if tp < 1:
        raise ValueError(f"loss_excess_bytes: tp must be >= 1, but got {tp!r}")
    sharded_loss = profile.loss_parallel and tp > 1
    gathered = tp if profile.loss_logits_gathered and not sharded_loss else 1
    buffers = LOSS_PARALLEL_FP32_BUFFERS if sharded_loss else profile.loss_fp32_buffers
    if not profile.loss_16bit_buffers and not buffers and gathered == 1:
        return 0
    extra = 0
    for block in blocks:
        local = loss_logits_elements(block, activation_bytes)
        if not local:
            continue
        read = local * gathered  # the logits the loss reads on this rank
        if profile.loss_16bit_buffers:
            peak = (profile.loss_16bit_buffers + 1) * activation_bytes * read
        else:
            peak = loss_peak_bytes(read, buffers, activation_bytes)
        extra = max(extra, peak - activation_bytes * local)
    return extra
