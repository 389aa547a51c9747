"""Megatron's asynchronous tensor-parallel all-reduce of input gradients
(``tp_async_grad_allreduce``): :func:`async_grad_allreduce_rule`, :func:`combine_rules` and
:func:`nccl_sm_share_s`.

Without sequence parallelism, the backward of a column-parallel linear (the qkv and fc1
projections, the vocabulary-parallel output layer) all-reduces its input gradient over the
tensor-parallel group. Megatron-LM since 2022 and Megatron-DeepSpeed issue that all-reduce
asynchronously and compute the linear's weight gradient while it runs
(``megatron/core/tensor_parallel/layers.py``, ``LinearWithGradAccumulationAndAsyncCommunication
.backward``: ``handle = torch.distributed.all_reduce(grad_input, group=..., async_op=True)``,
then the weight-gradient GEMM, then ``handle.wait()``; on unless
``--no-async-tensor-model-parallel-allreduce``, and switched off under sequence parallelism,
whose reduce-scatter takes its place). The all-reduce's dependents (the norm's backward, the
residual add) still wait for all of it.

That is the same two-stream shape as Transformer Engine's "bulk" overlap
(:class:`~stage_explore.analytical.overlap.Bulk`): the rule answers ``Bulk`` for a backward
all-reduce over a tensor-parallel group and :func:`~stage_explore.analytical.overlap.
overlap_block` moves the weight-gradient GEMMs of the same linear layers after it. The NCCL
kernel is not a userbuffers kernel: it runs one thread block per channel on the SMs the GEMM
would use, so while both run the GEMM has ``sm_count − NCCL_ALL_REDUCE_SMS`` SMs
(:func:`nccl_sm_share_s`, the share of the overlapped time), not TE's fixed SM margin. The
collective is issued first (the same function: "Here we rely on CUDA_DEVICE_MAX_CONNECTIONS=1
to ensure that the gather is scheduled before the input gradient computation", and likewise
for the all-reduce and reduce-scatter before the weight gradient), so on an accelerator whose
GEMMs are persistent (``KernelModel.persistent_gemm``) the weight-gradient GEMM's blocks wait for
its SMs and the backend charges :func:`~stage_explore.analytical.persistent_gemm.
persistent_bulk_s` instead.
"""

from __future__ import annotations

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical.overlap import _TP_GROUPS, Bulk, OverlapRule, Pipelined
from stage_explore.analytical.policy import Overlap, TimingPolicy

#: Thread blocks (one per channel, each on its own SM) of an NCCL all-reduce on an 8-GPU A100
#: NVSwitch node: NCCL's own log for nccl-tests all_reduce_perf on HGX A100 lists channels
#: "00/24" to "23/24", each a ring over the 8 GPUs (https://github.com/NVIDIA/nccl-tests/issues/100).
NCCL_ALL_REDUCE_SMS = 24


def async_grad_allreduce_rule(policy: TimingPolicy, tp: int, sp: bool) -> OverlapRule | None:
    """The backward tensor-parallel collectives of input gradients ``policy`` issues before
    the weight-gradient GEMMs and runs beside them (:class:`~stage_explore.analytical.overlap.
    Bulk`), or None when it runs none that way (tp 1, or neither case below).

    Without sequence parallelism: the all-reduces, when :attr:`Overlap.TP_ASYNC_GRAD_ALLREDUCE`
    is on. With it: the reduce-scatters, which Megatron's sequence-parallel linear always
    issues with ``async_op=True`` before its weight gradient
    (``ColumnParallelLinearWithSequenceParallelism.backward`` in the Megatron-LM of Korthikanti
    et al. 2022, later ``LinearWithGradAccumulationAndAsyncCommunication``; Transformer
    Engine's ``_Linear.backward`` without userbuffers: "Overlap dgrad-RS/AR with wgrad",
    ``reduce_scatter_along_first_dim(dgrad, ctx.tp_group, async_op=True)``), when the policy's
    collectives wait for the compute issued before them
    (:attr:`TimingPolicy.collectives_wait_for_issued_compute`; otherwise
    :func:`~stage_explore.analytical.blocktime.time_block` already starts the reduce-scatter as
    soon as its input gradient is ready, beside the weight gradient) and userbuffers do not run
    it (with :attr:`Overlap.TP_COMM` it is :func:`~stage_explore.analytical.overlap.
    overlap_rule`'s "bulk" kernel on ``UB_COMM_SMS`` SMs, not an NCCL kernel)."""
    if tp <= 1:
        return None
    if sp:
        if not policy.collectives_wait_for_issued_compute or Overlap.TP_COMM in policy.overlaps:
            return None
        kind = CollectiveKind.REDUCE_SCATTER
    elif Overlap.TP_ASYNC_GRAD_ALLREDUCE in policy.overlaps:
        kind = CollectiveKind.ALL_REDUCE
    else:
        return None

    def rule(instr: Instr) -> float | Pipelined | Bulk | None:
        if instr.collective is kind and instr.phase == "bwd" and instr.axes in _TP_GROUPS:
            return Bulk()
        return None

    return rule


def combine_rules(first: OverlapRule | None, second: OverlapRule | None) -> OverlapRule | None:
    """One rule answering ``first``'s answer, else ``second``'s; None when both are None."""
    if first is None:
        return second
    if second is None:
        return first
    primary, fallback = first, second

    def rule(instr: Instr) -> float | Pipelined | Bulk | None:
        answer = primary(instr)
        return answer if answer is not None else fallback(instr)

    return rule


def nccl_sm_share_s(
    all_reduce_s: float, gemm_s: float, sm_count: int, channels: int = NCCL_ALL_REDUCE_SMS
) -> float:
    """Compute seconds lost to NCCL's thread blocks while ``all_reduce_s`` of asynchronous
    all-reduces run beside ``gemm_s`` of weight-gradient GEMMs: for ``min(all_reduce_s,
    gemm_s)`` the GEMMs run on ``sm_count − channels`` SMs, so that time times
    ``channels / sm_count`` of their work is left for after. ``channels``: the tensor-parallel
    group's network dim's ``nccl_channels`` (the backend passes it; 24 on A100 and H100
    NVSwitch nodes, 32 on B200, 16 on H800), :data:`NCCL_ALL_REDUCE_SMS` for a dim without
    one."""
    if sm_count <= channels or all_reduce_s <= 0.0 or gemm_s <= 0.0:
        return 0.0
    return min(all_reduce_s, gemm_s) * channels / sm_count
