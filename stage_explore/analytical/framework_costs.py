"""What a framework profile's options imply in bytes and micro-batches, for the backend's memory
and pass timing: :func:`zero3_gathered_bytes` (the gathered ZeRO-3 parameters a rank holds under
each framework's gathering rule), :func:`zero3_fetch_calls` (DeepSpeed ZeRO-3's all-gathers per
block), :func:`zero3_persistent` (its parameters that stay whole),
:func:`grad_accumulation_bytes` and
:func:`held_accumulation_bytes` (the traffic of accumulating gradients over micro-batches), the
FSDP copy-kernel byte counts (:func:`fsdp1_flat_grad_bytes`, :func:`fsdp2_copy_bytes`),
:data:`FP8_DYNAMIC_CAST_BYTES` (:func:`weight_cast_bytes` by recipe, :func:`weight_amax_known`),
:data:`FP8_SHARD_CAST_BYTES`,
:data:`FP8_SHARD_AMAX_BYTES`,
:func:`distributed_fused_adam_state_bytes`,
:func:`pipelining_buffer_bytes`, :func:`rope_table_bytes`, :func:`fsdp2_reduce_held_bytes`,
and the micro-batches per pipeline schedule (:func:`local_schedule_micro_batches`,
:func:`held_sync_micro_batches`). The profile type is
:mod:`stage_explore.analytical.framework_profile`, the shipped profiles
:mod:`stage_explore.analytical.frameworks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.memory import shard_factors
from stage_core.lower.program import Workload
from stage_core.models.layers import is_layer_block
from stage_core.parallel import ParallelConfig
from stage_core.parallel.vocab import OP_SAC_MODULES
from stage_explore.analytical.framework_profile import FP32_BYTES, FrameworkProfile


def zero3_gathered_bytes(
    profile: FrameworkProfile,
    blocks_bytes: Sequence[int],
    largest_tensor_elements: int,
    weight_bytes: int,
) -> int:
    """Bytes of gathered (unsharded) ZeRO-3 parameters a rank holds at its peak, given the full
    weight bytes of each block it runs (``blocks_bytes``) and its largest single weight tensor:
    two whole blocks (the one in use and the prefetched next; ``zero3_live_elements`` 0), or
    DeepSpeed's per-sub-module bound — the live elements (at least the largest tensor, which
    must be whole to run) plus the prefetch bucket — when that is smaller."""
    two_blocks = sum(sorted(blocks_bytes, reverse=True)[:2])
    if profile.fsdp_param_fp32 and weight_bytes < FP32_BYTES:  # fp32 units gathered
        two_blocks = two_blocks * FP32_BYTES // weight_bytes
    if profile.zero3_live_elements == 0:
        return two_blocks
    live = max(largest_tensor_elements, profile.zero3_live_elements)
    return min(two_blocks, (live + profile.zero3_prefetch_elements) * weight_bytes)


def zero3_persistent(profile: FrameworkProfile, elements: int) -> bool:
    """Whether a ZeRO-3 parameter of ``elements`` (as one rank holds it before sharding) stays
    whole on every rank (``zero3_persistence_elements``, DeepSpeed's
    ``stage3_param_persistence_threshold``): ``DeepSpeedZeRoOffload.mark_persistent_parameters``
    sets ``ds_persist`` where "param.ds_numel <= param_threshold"
    (deepspeed/runtime/zero/parameter_offload.py, microsoft/DeepSpeed 0286784a). Such a
    parameter keeps its partition (``ds_tensor``, which the optimizer updates and whose gradient
    is reduce-scattered with the rest) but ``release_sub_module`` never frees the whole copy,
    so ``fetch_sub_module`` finds it available and gathers nothing; ``_post_step``
    (deepspeed/runtime/zero/stage3.py) all-gathers every persistent parameter after each
    optimizer step (``persistent_parameters[0].all_gather(...)``), which
    ``_allgather_params_coalesced`` (partition_parameters.py) issues as one
    ``all_gather_into_tensor`` per parameter and then synchronises the device."""
    return 0 < elements <= profile.zero3_persistence_elements


def zero3_fetch_calls(profile: FrameworkProfile, elements: Sequence[int]) -> int:
    """How many all-gathers DeepSpeed ZeRO-3 issues for a block's weights (``elements``, as one
    rank holds them before sharding, in the block's order) in one pass, each paying NCCL's
    per-call cost and its ring's latency: the partitioned parameters (not
    :func:`zero3_persistent`) in batches that close once they reach
    ``zero3_prefetch_elements`` (``stage3_prefetch_bucket_size``) — a tensor larger than that is
    a call of its own. ``PartitionedParameterCoordinator.fetch_sub_module``
    (deepspeed/runtime/zero/partitioned_param_coordinator.py, microsoft/DeepSpeed 03aecee8)
    gathers a sub-module's parameters not yet in flight, then pops parameters off its traced
    queue "while ... numel_prefetching < max_params_to_prefetch" and issues them as one
    ``all_gather_coalesced``: one NCCL call per batch, not one per block. 1 without a prefetch
    bucket (FSDP's whole units); 0 where every weight persists (nothing to gather)."""
    partitioned = [count for count in elements if not zero3_persistent(profile, count)]
    bucket = profile.zero3_prefetch_elements
    if bucket <= 0:
        return 1 if partitioned or not elements else 0
    calls = batch = 0
    for count in partitioned:
        batch += count
        if batch >= bucket:
            calls, batch = calls + 1, 0
    return calls + (batch > 0)


#: HBM bytes per element of a dynamically scaled FP8 cast of a 16-bit tensor: the amax
#: reduction reads it (2), the scale-and-cast kernel reads it again (2) and writes FP8 (1); the
#: reduction must finish before the cast, so even a compiled graph runs two kernels.
FP8_DYNAMIC_CAST_BYTES = 5

#: HBM bytes per weight element of torchao's ``rowwise`` casts of a 16-bit weight, by GEMM role:
#: the forward's scales each output row along its contiguous K (one kernel reads 2 B and writes
#: 1 B, the row's amax in it); the input gradient's scales along the other axis, so a kernel
#: writes a 16-bit transpose (read 2, write 2) and another casts it (read 2, write 1). torchao's
#: roofline, ``get_tensor_memory_traffic_ovhd_s`` for tensor_role "weight" under "rowwise"
#: (torchao/testing/training/roofline_utils.py, pytorch/ao 05980129).
ROWWISE_WEIGHT_CAST_BYTES = {"fprop": 3, "dgrad": 7}


#: HBM bytes per element of a ``tensorwise`` cast whose amax is already at hand (read 2, write 1):
#: torchao's roofline takes a weight's ``max_abs`` once and casts it twice from it, "kernel 3
#: (fwd): x_bf16, max_abs -> to_float8 -> x_fp8_dim0" and "kernel 4 (bwd): x_bf16, max_abs ->
#: to_float8 -> x_fp8_dim1" (``get_tensor_memory_traffic_ovhd_s``, tensor_role "weight",
#: torchao/testing/training/roofline_utils.py, pytorch/ao 05980129); :func:`weight_amax_known`.
FP8_SCALED_CAST_BYTES = FP8_DYNAMIC_CAST_BYTES - 2


def weight_amax_known(
    compiled: bool, recipe: str, role: str, phase: str, modules: Sequence[str]
) -> bool:
    """Whether torchao's ``tensorwise`` cast of a weight for a GEMM of ``role`` in ``phase``
    (``fwd``, ``recompute`` or ``bwd``) finds the weight's amax already taken, so that it reads
    the weight once, not twice (:data:`FP8_SCALED_CAST_BYTES`). Only in a compiled graph
    (``compiled``: ``fused_elementwise``): eager, ``matmul_with_hp_or_float8_args`` (torchao
    float8_linear.py, pytorch/ao 7ca1bfbe) saves the 16-bit weight and its backward calls
    ``hp_tensor_to_float8_dynamic`` on it again, amax first. Compiled:

    - ``dgrad``: the input gradient's cast is the forward's cast of the same weight with the same
      per-tensor scale, which the joint graph computes once: torchao's roofline times one amax
      per weight and step and a backward cast reading the weight and ``max_abs`` (kernel 4);
    - a recomputed ``fprop`` under torchtitan's op-level SAC (``modules`` ``op``): its
      ``_save_list`` keeps ``torch.ops.aten.max.default`` ("for low precision training, it's
      useful to always save the result of max, since the absolute maximum is used to compute
      the scaling factor for quantization", pytorch/torchtitan#701, Nov 2024, "a nice small
      speedup of 1% wps" with float8 and compile; ``_save_list`` in
      torchtitan/parallelisms/parallelize_llama.py at 582fe7d1), so the recompute casts with
      the saved amax. Under full recompute the forward, max included, re-runs (5 B)."""
    if not compiled or recipe != "tensorwise":
        return False
    if role == "dgrad":
        return True
    return role == "fprop" and phase == "recompute" and bool(OP_SAC_MODULES & set(modules))


def weight_cast_bytes(
    recipe: str, role: str, gemms: Sequence[str], amax_known: bool = False
) -> int:
    """HBM bytes per element of torchao's cast of a 16-bit linear weight for one FP8 GEMM of
    ``role`` (``fprop`` or ``dgrad``) under ``recipe``: :data:`ROWWISE_WEIGHT_CAST_BYTES` under
    ``rowwise`` — but for the input gradient of ``rowwise_with_gw_hp`` (``rowwise`` without an FP8
    ``wgrad``), whose weight is scaled tensor-wise (``cast_config_weight_for_grad_input``,
    torchao/float8/config.py c6c388b5) with its amax read again (torchao ``float8_linear.py``:
    "we need https://github.com/pytorch/pytorch/issues/136267 to be solved to have a chance to
    reuse max(abs(weight))"): :data:`FP8_DYNAMIC_CAST_BYTES`, as under the per-tensor recipes;
    :data:`FP8_SCALED_CAST_BYTES` where the amax is already taken (``amax_known``:
    :func:`weight_amax_known`)."""
    if recipe == "rowwise" and (role == "fprop" or "wgrad" in gemms):
        return ROWWISE_WEIGHT_CAST_BYTES[role]
    return FP8_SCALED_CAST_BYTES if amax_known else FP8_DYNAMIC_CAST_BYTES


#: HBM bytes per element of casting an fp32 FSDP2 shard to FP8 before a float8 all-gather
#: (``fsdp_float8_all_gather``) with its precomputed scale: read 4, write 1 (torchao
#: ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`` → ``hp_tensor_and_scale_to_float8``).
FP8_SHARD_CAST_BYTES = FP32_BYTES + 1

#: HBM bytes per shard element and step of ``precompute_float8_dynamic_scale_for_fsdp``: one
#: ``torch._foreach_norm(..., ord=inf)`` read of every fp32 shard (torchao float8/fsdp_utils.py).
FP8_SHARD_AMAX_BYTES = FP32_BYTES


def fsdp1_flat_grad_bytes(profile: FrameworkProfile, weight_bytes: int) -> int:
    """HBM bytes per parameter element of FSDP1's flat-gradient concatenation
    (``fsdp1_flat_grad``): one read and one write of a gradient element in the flat parameter's
    dtype during the backward — fp32 under ``fsdp_param_fp32`` (autocast's cast backward has
    already turned the 16-bit gradient into the fp32 view's), else ``weight_bytes``."""
    if not profile.fsdp1_flat_grad:
        return 0
    element = FP32_BYTES if profile.fsdp_param_fp32 else weight_bytes
    return 2 * element


def fsdp2_copy_bytes(gathers: int, scatters: int, weight_bytes: int, grad_bytes: int) -> int:
    """HBM bytes per parameter element of FSDP2's copies (``fsdp2_copies``) for ``gathers``
    all-gathers and ``scatters`` reduce-scatters: a copy-out reads the gathered buffer and writes
    the unsharded parameter (``2·weight_bytes``); a copy-in reads the unsharded gradient, in the
    parameter dtype, and writes it into the reduce-dtype buffer (``weight_bytes + grad_bytes``:
    6 for bf16 into fp32). The shard-sized copy-in of an all-gather and the accumulation of the
    reduce-scatter output (1/dp of the elements) are not counted."""
    return gathers * 2 * weight_bytes + scatters * (weight_bytes + grad_bytes)


def grad_accumulation_bytes(
    profile: FrameworkProfile, dtype: str, weight_bytes: int, grad_bytes: int, micro_batches: int
) -> float:
    """HBM bytes moved per weight-gradient element and micro-batch, averaged over a step of
    ``micro_batches``, to accumulate it (``grad_accumulation``, module docstring), for a run
    computing in ``dtype`` with ``weight_bytes`` weights and ``grad_bytes`` accumulators: 0 for
    ``"none"``; a separate add reads the fresh gradient and reads and writes the accumulator
    (``weight_bytes + 2·grad_bytes``: 10 for bf16 into fp32, 6 for fp16 into fp16) every
    micro-batch; DeepSpeed under bf16 reads the bf16 gradient, writes and reads its fp32 cast,
    and reads and writes the fp32 accumulator (2 + 2·4 + 2·4 = 18) every micro-batch; under
    fp16 PyTorch's ``AccumulateGrad`` adds the fresh gradient into the parameter's 16-bit
    ``.grad`` in place (``3·weight_bytes``: 6) from the second micro-batch on — the first finds
    ``.grad`` None (``FP16_Optimizer.step`` sets it so) and takes the fresh tensor without a
    pass: ``(m − 1)/m`` of 6. ``"torch-ddp"`` (Megatron-LM 2021 ``--DDP_impl torch``): the same
    ``(m − 1)/m`` of ``3·weight_bytes``, plus, once per step, the reducer's divide-and-copy of
    the gradient into its bucket and the copy back after the all-reduce (``4·weight_bytes``,
    spread as ``1/m`` over the step's micro-batches). ``"autograd"``: that ``(m − 1)/m`` of
    ``3·weight_bytes`` in any dtype (InternEvo)."""
    mode = profile.grad_accumulation
    m = max(1, micro_batches)
    if mode == "none":
        return 0
    if mode == "torch-ddp":
        # Megatron-LM 2021 megatron/optimizer/optimizer.py (NVIDIA/Megatron-LM 00764415):
        # FP16OptimizerWithFP16Params.zero_grad(set_to_none=True) sets the fp16 .grad to None, so
        # the first micro-batch's AccumulateGrad takes the fresh tensor; torch DDP's reducer
        # (torch/csrc/distributed/c10d/reducer.cpp, gradient_as_bucket_view off) divides while
        # copying each gradient into its bucket (at::mul_out(bucket_view, grad, 1/world)) and
        # copies the reduced bucket back into .grad (copy_bucket_to_grad): read + write each
        return (3 * weight_bytes * (m - 1) + 4 * weight_bytes) / m
    if mode == "autograd":
        # AccumulateGrad from the second micro-batch on, whatever the dtype (InternEvo's
        # HybridZeroOptimizer: .grad set None after every step), as DeepSpeed's fp16 below
        return 3 * weight_bytes * (m - 1) / m
    if mode == "deepspeed":
        if dtype != "bf16":
            # fp16: autograd's AccumulateGrad adds the fresh gradient into the parameter's
            # 16-bit .grad in place (variable_grad += new_grad), whatever grad_fp32 says, but
            # only once .grad exists: deepspeed/runtime/fp16/fused_optimizer.py FP16_Optimizer
            # .step flattens the gradients into the fp32 master's and sets "p.grad = None"
            # (microsoft/DeepSpeed 023f3614), so each step's first micro-batch's AccumulateGrad
            # steals the fresh tensor (torch/csrc/autograd/functions/accumulate_grad.h)
            return 3 * weight_bytes * (m - 1) / m
        fp32 = 4  # BF16_Optimizer's fp32 accumulators and the cast's temporary
        return weight_bytes + 2 * fp32 + 2 * fp32
    return weight_bytes + 2 * grad_bytes  # "add", and "fused-linear" for its unfused weights


def accumulation_per_step(profile: FrameworkProfile, dtype: str) -> bool:
    """Whether :func:`grad_accumulation_bytes` of ``profile`` computing in ``dtype`` depends on
    the step's number of micro-batches (a once-per-step pass spread over them, or a first
    micro-batch that takes the fresh gradient without a pass): ``"torch-ddp"``, ``"autograd"``,
    and ``"deepspeed"`` under any dtype but bf16. The backend's plan memo keys on the
    micro-batches when this holds (``AnalyticalBackend._micro_batch_key``)."""
    mode = profile.grad_accumulation
    return mode in ("torch-ddp", "autograd") or (mode == "deepspeed" and dtype != "bf16")


def held_accumulation_bytes(micro_batches: int, weight_bytes: int, grad_bytes: int) -> float:
    """HBM bytes per unsharded weight-gradient element and micro-batch, averaged over a step of
    ``micro_batches``, of FSDP2 accumulating a held stage's gradients with sync off
    (``pp_unsharded_params``): the first micro-batch casts the fresh ``weight_bytes`` gradient
    to the ``grad_bytes`` reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``: one read,
    one write), each later one adds it (``accumulate_unsharded_grad_if_needed``: both read,
    the accumulator written) — 6 then 10 bytes for bf16 into fp32."""
    m = max(1, micro_batches)
    cast = weight_bytes + grad_bytes
    add = weight_bytes + 2 * grad_bytes
    return (cast + (m - 1) * add) / m


#: Bytes of the 16 trailing bits of an fp32 master weight Apex's ``DistributedFusedAdam`` keeps
#: under ``store_param_remainders`` ("store bits required to reconstruct FP32 params" from the
#: bf16 parameter; apex/contrib/optimizers/distributed_fused_adam.py).
PARAM_REMAINDER_BYTES = 2


def distributed_fused_adam_state_bytes(profile: FrameworkProfile, fp8_params: bool) -> int | None:
    """Optimizer-state bytes per parameter (before sharding) of Apex's ``DistributedFusedAdam``
    under ``profile.distributed_fused_adam`` (``None`` when off: Megatron's 12) for a bf16
    model, ``fp8_params`` when its FP8 layers' parameters are FP8 (NeMo ``fp8_params``). Two
    Adam moments in the state dtype, and NeMo's choice of the parameter copy
    (nemo/collections/nlp/models/language_modeling/megatron_base_model.py,
    ``setup_optimization``): ``fp8_params`` -> ``store_params`` (a copy in the state dtype);
    state dtype = model dtype (bf16) -> ``store_params=False`` (none); fp32 state for a bf16
    model -> ``store_param_remainders`` (:data:`PARAM_REMAINDER_BYTES`)."""
    dtype = profile.distributed_fused_adam
    if dtype == "off":
        return None
    state = FP32_BYTES if dtype == "fp32" else 2
    if fp8_params:
        copy = state
    elif dtype == "bf16":
        copy = 0
    else:
        copy = PARAM_REMAINDER_BYTES
    return 2 * state + copy


def pipelining_buffer_bytes(
    chunks: Sequence[tuple[bool, bool]], micro_batches: int, boundary: int, first_in_flight: int
) -> int:
    """Bytes a rank's ``torch.distributed.pipelining`` stages hold beside the saved activations
    (``pipelining_stage_buffers``), for its ``chunks`` as (holds the first stage, holds the
    last stage), ``micro_batches`` per step and ``boundary`` bytes per micro-batch crossing a
    stage boundary. A stage after the first has an input receive buffer per micro-batch
    (``PipelineStage._prepare_forward_infra``), a stage before the last an output-gradient
    receive buffer per micro-batch (``_prepare_backward_infra``); both live for the whole run.
    A stage keeps the outputs of its micro-batches in flight (``fwd_cache``) until their
    backward; on a middle stage these are as many as the inputs in flight, which are the
    receive buffers themselves and already counted among the saved activations (the first
    layer saves its input), so the two cancel. The first stage has no receive buffer: its
    ``first_in_flight`` outputs count; the last keeps no output: its micro-batch in flight's
    input, counted twice, comes off."""
    total = 0
    for first, last in chunks:
        if not first:
            total += micro_batches * boundary
        if not last:
            total += micro_batches * boundary
        if first and not last:
            total += first_in_flight * boundary
        if last and not first:
            total -= boundary
    return total


#: Bytes of a complex64 element: TorchTitan's ``precompute_freqs_cis`` returns
#: ``torch.polar(torch.ones_like(freqs), freqs)`` of fp32 ``freqs``.
COMPLEX64_BYTES = 8

#: Positions of TorchTitan's rotary table per position of the run's sequence:
#: ``_precompute_freqs_cis`` passes ``self.model_args.max_seq_len`` ("we removed the 2x
#: relaxing in our CP enablement PR": ``context_parallel`` shards the table like the inputs), and
#: train.py sets ``max_seq_len`` to ``training.seq_len``.
ROPE_TABLE_POSITIONS_PER_TOKEN = 1


def rope_table_bytes(seq_len: int, head_dim: int, cp: int) -> int:
    """Bytes of one model part's rotary table under ``rope_table_buffer``: ``seq`` positions of
    ``head_dim / 2`` complex64 values, twice with context parallelism (``cp`` > 1), where torch's
    ``context_parallel`` holds a clone of it for the step to restore it afterwards."""
    table = ROPE_TABLE_POSITIONS_PER_TOKEN * seq_len * (head_dim // 2) * COMPLEX64_BYTES
    return 2 * table if cp > 1 else table


def held_sync_micro_batches(
    profile: FrameworkProfile, parallel: ParallelConfig, micro_batches: int
) -> int:
    """Micro-batches between a held stage's gathers and its reduce-scatters
    (``pp_unsharded_params``): the step's ``micro_batches``, or under
    ``pp_held_sync_per_schedule`` one pipeline schedule's
    (:func:`local_schedule_micro_batches`: the stage is reduce-scattered and resharded after
    every schedule)."""
    if profile.pp_held_sync_per_schedule:
        return local_schedule_micro_batches(profile, parallel, micro_batches)
    return micro_batches


def local_schedule_micro_batches(
    profile: FrameworkProfile, parallel: ParallelConfig, micro_batches: int
) -> int:
    """Micro-batches per pipeline schedule: the step's ``micro_batches`` in one schedule, or,
    under ``local_batch_size`` with pipeline parallelism, the local batch's
    ``local_batch_size / micro_batch`` (NeMo AutoModel runs ``schedule.step`` once per local
    batch: recipes/llm/train_ft.py ``_forward_backward_step``). A one-line
    :class:`ConfigError` when the local batch does not split into whole micro-batches or the
    step into whole local batches."""
    local = profile.local_batch_size
    if not local or parallel.pp == 1:
        return micro_batches
    if local % parallel.micro_batch:
        raise ConfigError(
            f"`local_batch_size` must be a multiple of the micro-batch, but got "
            f"({local=}, micro_batch={parallel.micro_batch})"
        )
    per_schedule = local // parallel.micro_batch
    if micro_batches % per_schedule:
        raise ConfigError(
            f"the step's {micro_batches} micro-batches per data-parallel rank must split into "
            f"local batches of {per_schedule} (`local_batch_size` {local})"
        )
    return per_schedule


def fsdp2_reduce_held_bytes(
    workload: Workload, blocks: Mapping[str, BoundBlock], root_unit: bool, unsharded_bytes: int
) -> int:
    """Bytes FSDP2 (``fsdp2_copies``; without pipeline parallelism) holds for gradient reduction
    beside a decoder block's backward: the previous unit's reduce-scatter input, its unsharded
    gradient elements in the reduce dtype (``workload.grad_bytes``; FSDP2 pads each tensor's dim
    0 to the group size, not counted), which ``FSDPParamGroup.post_backward`` keeps in
    ``comm_ctx.reduce_scatter_state`` until the next unit's post-backward (torch
    ``distributed/fsdp/_fully_shard/_fsdp_param_group.py``, pytorch/pytorch 002a76fb). A decoder
    block's units are its non-expert weights and, where they are sharded over their own mesh,
    its experts (torchtitan ``apply_fsdp``: ``fully_shard(transformer_block.moe.experts,
    mesh=dp_mod_ep_mesh)`` before the block): the largest unit's buffer is counted (an upper
    bound there: the experts' unit is reduced mid-block, so the MoE's backward runs beside the
    block before's non-expert buffer and the attention's beside its own experts'). The
    head: under ``root_unit`` (the embedding, norm and output one root group, reduced by the
    root's final callback after the whole backward) its unsharded gradient (``unsharded_bytes``
    an element, the gathered parameters' dtype) is held through every block's backward, beside
    the blocks' buffers; otherwise its own unit's (``fully_shard([model.norm, model.output])``)
    reduce input is held through the last block's backward, the larger of the two. Only
    ZeRO-sharded weights (shard factor > 1) count: an unsharded weight's gradient is the states'
    own."""
    layer_unit = head = 0
    for kind, block in blocks.items():
        shards = shard_factors(workload, block)
        units: dict[bool, int] = {}
        for weight in block.weights:
            if shards[weight.expert] > 1:
                units[weight.expert] = units.get(weight.expert, 0) + weight.elements
        if is_layer_block(kind):
            layer_unit = max(layer_unit, *units.values(), 0)
        elif kind == "head":
            head = sum(units.values())
    staging = workload.grad_bytes * layer_unit
    if root_unit:
        return staging + unsharded_bytes * head
    return max(staging, workload.grad_bytes * head)
