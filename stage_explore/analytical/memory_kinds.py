"""The three kinds of peak memory a published figure can be, from one tensor peak.

A training process's memory is read three ways, and sources report different ones:

- ``allocated`` — ``torch.cuda.max_memory_allocated``: the bytes of live tensors and of the
  buffers PyTorch itself allocates through its caching allocator (the cuBLAS workspaces
  below). Korthikanti et al. and Megatron's memory reports give this kind.
- ``reserved`` — ``torch.cuda.max_memory_reserved``: "the maximum GPU memory managed by the
  caching allocator" (https://pytorch.org/docs/stable/generated/torch.cuda.max_memory_reserved.html),
  its segments, which also hold freed blocks kept for reuse (the allocator's reserve,
  ``allocator_overhead`` of the tensor peak). torchtitan's logged 'memory: X GiB' is this
  (``max_reserved_gib``, torchtitan/components/metrics.py).
- ``process`` — what ``nvidia-smi`` shows for the process: the reserved segments plus what is
  allocated outside PyTorch's allocator, the CUDA context and NCCL's communicator buffers.
  The profile's ``runtime_reserved_bytes`` estimates that runtime memory, the cuBLAS
  workspaces included; :data:`BLAS_WORKSPACE_BYTES` of it is inside the allocator.

:func:`memory_peaks` computes the three; the backend's ``peak_memory_bytes`` is the process
peak (the one that decides whether a point fits), the others go in ``Evaluation.extra``, the
three of the rank with the largest peak and, prefixed :data:`RANK0_PREFIX`, the three of
pipeline rank 0 (they differ under pipeline parallelism only).
"""

from __future__ import annotations

from dataclasses import dataclass

#: One cuBLAS workspace: PyTorch's default on Hopper (sm90), 4096 KiB x 8 = 32 MiB
#: (aten/src/ATen/cuda/CublasHandlePool.cpp ``parseChosenWorkspaceSize``: ":4096:2:16:8
#: default, 32MiB for Hopper", i.e. 8.125 MiB on other NVIDIA parts; ROCm 32 MiB, 128 MiB on
#: gfx94x/gfx95x), allocated through the caching allocator (``getNewWorkspace``:
#: ``CUDACachingAllocator::get()->allocate(getChosenWorkspaceSize())``), so inside both the
#: allocated and the reserved figure; cuBLASLt shares it (TORCH_CUBLASLT_UNIFIED_WORKSPACE
#: on by default in the CUDA builds, the same file). The Hopper size is taken for every part:
#: the spread is at most ~0.2 GiB (MI300X), under 0.5 % of the rows' peaks.
BLAS_WORKSPACE_BYTES = 32 * 2**20

#: Workspaces held at once: one per (handle, stream) pair (``setWorkspaceForHandle`` keys
#: them so), and the handle pool gives each thread its own handle (a thread-local
#: ``PoolWindow``); a training step runs its forward GEMMs on the Python thread and its
#: backward ones on the autograd engine's device thread (torch/csrc/autograd/engine.cpp: one
#: worker thread per CUDA device), both on the current stream: 2.
BLAS_WORKSPACES = 2


#: The ``Evaluation.extra`` prefix of the peaks of pipeline rank 0 (the global rank 0 of any
#: device mesh: every mesh coordinate 0), the rank a source logging one rank's memory
#: usually logs; the unprefixed peaks are the maximum over the pipeline ranks.
RANK0_PREFIX = "rank0_"


@dataclass(frozen=True, slots=True)
class MemoryPeaks:
    """One process's peak memory read three ways (bytes; see the module docstring)."""

    allocated: int
    reserved: int
    process: int

    def as_extra(self, prefix: str = "") -> dict[str, int]:
        """The ``Evaluation.extra`` entries: ``<prefix>peak_<kind>_bytes`` of each kind
        (``prefix`` :data:`RANK0_PREFIX` for pipeline rank 0's)."""
        return {
            f"{prefix}peak_allocated_bytes": self.allocated,
            f"{prefix}peak_reserved_bytes": self.reserved,
            f"{prefix}peak_process_bytes": self.process,
        }


def memory_peaks(
    tensor_peak_bytes: int, capacity_bytes: int, runtime_bytes: int, allocator_overhead: float
) -> MemoryPeaks:
    """The three peaks of a process whose tensors peak at ``tensor_peak_bytes``, with the
    profile's ``runtime_bytes`` (``runtime_reserved_bytes``) and ``allocator_overhead``.

    The process holds the tensors, the runtime and the allocator's reserve. The reserve is
    cached free blocks, which the allocator gives back when the device is full: on a failed
    ``cudaMalloc`` PyTorch's caching allocator frees its cached blocks and retries
    (c10/cuda/CUDACachingAllocator.cpp ``release_cached_blocks``; the ``num_alloc_retries`` of
    ``torch.cuda.memory_stats``: "failed cudaMalloc calls that result in a cache flush and
    retry"). So when the tensors and the runtime fit ``capacity_bytes`` the process holds at
    most the capacity; only they can exceed it. The reserved peak is the process's less what
    lies outside the allocator (the runtime less its cuBLAS workspaces); the allocated one is
    the tensors and the workspaces (a profile without runtime memory adds none)."""
    if tensor_peak_bytes < 0 or runtime_bytes < 0 or allocator_overhead < 0:
        raise ValueError(
            f"memory_peaks: tensor peak {tensor_peak_bytes}, runtime {runtime_bytes} and "
            f"allocator overhead {allocator_overhead} must not be negative"
        )
    reserve = int(tensor_peak_bytes * allocator_overhead)
    needed = tensor_peak_bytes + runtime_bytes
    process = needed + reserve if needed > capacity_bytes else min(needed + reserve, capacity_bytes)
    workspaces = min(BLAS_WORKSPACES * BLAS_WORKSPACE_BYTES, runtime_bytes)
    reserved = process - (runtime_bytes - workspaces)
    allocated = min(tensor_peak_bytes + workspaces, reserved)
    return MemoryPeaks(allocated=allocated, reserved=reserved, process=process)
