"""Parameter gathers that move FP8 weights: Megatron's ``fp8_param_gather`` (ZeRO-1/2 bucket
all-gathers of Transformer Engine FP8 parameters) and FSDP2's float8 all-gather
(``fsdp_float8_all_gather``, torchao / torchtitan ``enable_fsdp_float8_all_gather``: ZeRO-3
per-block all-gathers of torchao ``Float8Linear`` weights cast to FP8 on the shard).

Both gather the FP8 linear layers' weights at 1 byte per element (:func:`fp8_param_gathers`,
the byte accounting they share); they differ in what the rank holds and casts. Megatron keeps
no 16-bit copy of those weights (memory, :func:`stage_core.lower.memory.block_states`);
FSDP2 keeps its fp32 shards and casts each shard to FP8 before every gather
(:func:`fsdp_float8_gathers` says when, :func:`fp8_shard_elements` how many elements a rank
casts), the gathered FP8 weight then feeding the GEMMs without a cast of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import FP8_BYTES, fp8_block, linear_weights
from stage_core.lower.program import Workload
from stage_explore.analytical.fp8_roles import SCALED_APART
from stage_explore.analytical.framework_profile import FrameworkProfile


def fp8_param_gathers(
    workload: Workload, block: BoundBlock, gathers: dict[tuple[str, ...], int]
) -> dict[tuple[str, ...], int]:
    """Parameter-gather bytes per axes when the FP8 linear layers' parameters are gathered as
    FP8: those at 1 byte per element, the rest at the 16-bit width. Megatron-Core's
    ``DistributedDataParallel`` groups a ``Float8Tensor`` parameter into a ``torch.uint8``
    parameter buffer ("when creating the param buffer for fp8 params, it is necessary to use
    torch.uint8, not the 'fake' dtype got from 'param.dtype'",
    core/distributed/distributed_data_parallel.py), and the distributed optimizer all-gathers
    that buffer (``fp8_param_gather``); torchao's ``WeightWithDynamicFloat8CastTensor.
    fsdp_pre_all_gather`` hands FSDP2 the shard's FP8 data (``float8_tensor._data``, uint8) to
    all-gather (``fsdp_float8_all_gather``, pytorch/ao torchao/float8/fsdp_utils.py). The
    shard of a weight is its elements over the data-parallel ranks that share it, as both
    ZeRO-1/2 and ZeRO-3 (:func:`stage_core.lower.zero_nodes.zero_collectives`) divide it."""
    result = dict(gathers)
    for data, shard, _ in _fp8_linear_shards(workload, block):
        if data in result:
            result[data] -= shard * (workload.weight_bytes - FP8_BYTES)
    return result


def fsdp_float8_gathers(profile: FrameworkProfile, workload: Workload, kind: str) -> bool:
    """Whether FSDP2 gathers the linear weights of block ``kind`` as FP8
    (``fsdp_float8_all_gather``): ZeRO-3, an FP8 precision with a per-tensor recipe (torchao
    casts with one tensor-wise scale per weight; its row-wise and MX recipes gather 16-bit
    weights), and a block whose linear layers run in FP8 (not the output layer)."""
    parallel = workload.parallel
    return (
        profile.fsdp_float8_all_gather
        and parallel.zero >= 3
        and str(parallel.precision) == "fp8"
        and parallel.linear_recipe not in SCALED_APART
        and fp8_block(kind)
    )


def fp8_zero3_gathers(
    workload: Workload, block: BoundBlock, gathers: tuple[Instr, ...]
) -> tuple[Instr, ...]:
    """A block's ZeRO-3 parameter all-gathers with its FP8 linear weights at 1 byte per element
    (:func:`fp8_param_gathers` on the gathers' bytes per axes)."""
    sizes = fp8_param_gathers(workload, block, {i.axes: i.comm_bytes for i in gathers})
    return tuple(replace(i, comm_bytes=sizes[i.axes]) for i in gathers)


def fp8_shard_elements(workload: Workload, block: BoundBlock) -> tuple[int, int]:
    """Elements of a block's FP8 linear weights: the rank's shards (what it casts to FP8 before
    each gather) and the whole weights (what a gather writes)."""
    shards = whole = 0
    for _, shard, elements in _fp8_linear_shards(workload, block):
        shards += shard
        whole += elements
    return shards, whole


def _fp8_linear_shards(
    workload: Workload, block: BoundBlock
) -> Iterator[tuple[tuple[str, ...], int, int]]:
    """Each FP8 linear weight of ``block``: its data axes, the rank's shard of it (its elements
    over the data-parallel ranks that share it) and its elements."""
    linear = linear_weights(block)
    sizes = workload.axis_sizes
    for weight in block.weights:
        if weight.name in linear:
            data = data_axes(sizes, workload.expert_axes, weight.expert)
            yield data, weight.elements // math.prod(sizes[a] for a in data), weight.elements
