"""Megatron-Core's gradient buckets under FP8 parameters: the non-FP8 parameters join the
chunk's last bucket group (:func:`merges_non_fp8`, :func:`non_fp8_sync`, :func:`split_runs`).

Megatron-Core's ``DistributedDataParallel`` keeps one parameter-and-gradient buffer per
parameter dtype; a Transformer Engine FP8 parameter (``fp8_param_gather``) goes into a
``torch.uint8`` buffer, everything else (embedding, output layer, norms, biases, the MoE
router) into the 16-bit one. ``partition_buckets`` then builds the bucket groups that the
reductions and gathers run in; with an FP8 buffer present it "merge[s] all non-fp8 buckets into
the last fp8 bucket group" (Case 3), the group of the chunk's first layers (NVIDIA/Megatron-LM
``megatron/core/distributed/param_and_grad_buffer.py`` at 00119989, ``partition_buckets``;
the same code in the Megatron-Core of NeMo 25.x). Two consequences the per-block buckets of
:func:`~stage_core.lower.compact.bucket_gradients` do not have:

- *Reduction*: a bucket group's reduce-scatter starts when every parameter in it has its
  gradient (``register_grad_ready``: ``len(params_with_grad) == len(params)``), so the output
  layer's and every norm's gradients, ready early in the backward, wait for the input
  embedding's, the backward's last: all non-FP8 gradients are reduced after the chunk's last
  backward block (:func:`split_runs` moves them there).
- *Gather*: under ``overlap_param_gather`` the bucket groups' all-gathers are chained one
  ahead in forward order and the chain's first group is dispatched by the first forward
  pre-hook and waited for at once (``finish_param_sync``: "first AG bucket in first model
  chunk"): that first group now holds every non-FP8 parameter at 16 bits, its all-gather
  exposed before the first layer (:func:`~stage_core.lower.compact.run_totals` sums its bytes
  over the chunk's blocks).

Only Megatron-Core's distributed optimizer buckets so (Apex's ``DistributedFusedAdam``, NeMo
1.x's ``distributed_fused_adam``, has its own buckets), and only a bucketed chunk with its
reductions overlapped: otherwise everything is reduced after the backward anyway.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace

from stage_core.lower.bind import BoundBlock
from stage_core.lower.compact import run_totals
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import Workload, block_sync
from stage_explore.analytical.framework_profile import FrameworkProfile

#: A block's gradient bytes per bucket key, and its parameter-gather bytes per axes.
NonFp8Sync = tuple[dict[Hashable, int], dict[tuple[str, ...], int]]


def merges_non_fp8(profile: FrameworkProfile, workload: Workload) -> bool:
    """Whether the run's parameters split into an FP8 and a 16-bit buffer whose non-FP8
    buckets Megatron-Core merges into the last FP8 bucket group: FP8 parameters
    (``fp8_param_gather`` under an FP8 precision) in Megatron-Core's distributed optimizer
    (not ``distributed_fused_adam``)."""
    fp8 = str(workload.parallel.precision) == "fp8"
    return profile.fp8_param_gather and fp8 and profile.distributed_fused_adam == "off"


def non_fp8_sync(workload: Workload, kind: str, block: BoundBlock) -> NonFp8Sync:
    """The gradient bytes per bucket key and the parameter-gather bytes per axes of the
    block's parameters that are not FP8 (the 16-bit buffer): every weight of a block outside
    the FP8 linear layers (embedding, output layer), and the weights of an FP8 block that no
    linear layer reads (norms, biases) — the complement of
    :func:`~stage_explore.analytical.fp8_gathers.fp8_param_gathers`' set."""
    fp8 = linear_weights(block) if fp8_block(kind) else frozenset()
    kept = tuple(weight for weight in block.weights if weight.name not in fp8)
    if not kept:
        return {}, {}
    reductions, gathers, _ = block_sync(workload, replace(block, weights=kept))
    return {key: size for key, size in reductions.items()}, gathers


def split_runs(
    backward: Sequence[tuple[Mapping[Hashable, int], int]],
    non_fp8: Sequence[Mapping[Hashable, int]],
) -> tuple[list[tuple[dict[Hashable, int], int]], dict[Hashable, int]]:
    """``backward`` (per run in backward order: gradient bytes per bucket key, block count)
    without the non-FP8 bytes ``non_fp8`` (per run, per block), and those bytes summed over the
    chunk per key: the merged group's reductions after the chunk's last backward block."""
    runs: list[tuple[dict[Hashable, int], int]] = []
    for (reductions, count), moved in zip(backward, non_fp8, strict=True):
        own: dict[Hashable, int] = {}
        for key, size in reductions.items():
            left = size - moved.get(key, 0)
            if left > 0:
                own[key] = left
        runs.append((own, count))
    return runs, run_totals(non_fp8, [count for _, count in backward])
