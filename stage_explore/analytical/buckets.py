"""The gradient buckets of data-parallel synchronisation: how many bytes a framework gathers
into one reduction (:func:`grad_bucket_bytes`).

The analytical backend reduces a chunk's gradients in buckets during its last backward
(:func:`~stage_explore.analytical.blocktime.bucket_gradients`): a bucket is reduced as soon as
it is full, and whatever is left when the chunk's backward ends is reduced then, exposed. The
bucket size therefore sets how much reduction trails the backward, and how many collectives
(each paying its ring's latency) the gradients take.

``ParallelConfig.grad_bucket_bytes`` defaults to PyTorch DDP's 25 MiB (``bucket_cap_mb``).
Megatron-Core sizes its buckets by the data-parallel group instead: ``DistributedDataParallel``
sets ``bucket_size = max(40000000, 1000000 * dp_group.size())`` parameters when the config
leaves it unset ("larger DP sizes need larger buckets to ensure collectives do not become
latency-bound", ``DistributedDataParallelConfig.bucket_size``;
megatron/core/distributed/distributed_data_parallel.py; the training loop passes the
data-parallel group with context parallelism, ``get_data_parallel_world_size(
with_context_parallel=True)``). So past 40 data-parallel ranks each bucket grows with dp, the
chunk's last bucket with it, and that bucket's reduction runs after the backward: part of why
Megatron-Core's tokens/s per GPU falls as the same layout is scaled out (DGX Cloud
Benchmarking's weak-scaling tables, DGXC-H100-BF16 / -FP8).
"""

from __future__ import annotations

from stage_core.lower.compact import UNBUCKETED as UNBUCKETED  # one bucket per chunk
from stage_core.parallel.config import DEFAULT_GRAD_BUCKET_BYTES, ParallelConfig
from stage_explore.analytical.framework_profile import FrameworkProfile

#: Megatron-Core's smallest default bucket, in parameters (``max(40000000, …)``,
#: megatron/core/distributed/distributed_data_parallel.py).
MCORE_BUCKET_MIN_ELEMENTS = 40_000_000
#: Megatron-Core's default bucket per data-parallel rank, in parameters (``1000000 *
#: dp_group.size()``, the same line).
MCORE_BUCKET_ELEMENTS_PER_DP_RANK = 1_000_000


def grad_bucket_bytes(profile: FrameworkProfile, parallel: ParallelConfig, grad_bytes: int) -> int:
    """Bytes of one gradient bucket under ``profile``, with ``grad_bytes`` per gradient
    element, when its timing policy overlaps the reduction with the backward
    (:attr:`~stage_explore.analytical.policy.Overlap.GRAD_REDUCE`; otherwise the backend uses
    :data:`UNBUCKETED`): under ``ddp_bucket_scales_with_dp`` and a config that leaves
    ``grad_bucket_bytes`` at its default, Megatron-Core's ``max(40M, 1M · dp · cp)``
    parameters; otherwise the config's bytes."""
    if (
        profile.ddp_bucket_scales_with_dp
        and parallel.grad_bucket_bytes == DEFAULT_GRAD_BUCKET_BYTES
    ):
        ranks = parallel.dp * parallel.cp
        elements = max(MCORE_BUCKET_MIN_ELEMENTS, MCORE_BUCKET_ELEMENTS_PER_DP_RANK * ranks)
        return elements * grad_bytes
    return parallel.grad_bucket_bytes
