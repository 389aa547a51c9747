"""The framework-profile options of data parallelism and sharded model states: gradient buckets and
their overlap, ZeRO-3 / FSDP gathers, what FSDP copies and keeps, the optimizer and gradient
accumulation: each option's documentation (below), the framework flag it stands for
(:data:`SHARDING_FLAGS`) and its field with the default (:class:`ShardingOptions`, a base of
:class:`~stage_explore.analytical.framework_profile.FrameworkProfile`).

Options (all booleans unless said):

- ``overlap_grad_reduce`` — data-parallel gradient reductions run in buckets during the
  backward (Megatron ``--overlap-grad-reduce``, DeepSpeed ``overlap_comm``, FSDP always, torch
  DDP always). Off: they run after the last backward of the step.
- ``overlap_param_gather`` — the distributed optimizer's / ZeRO-1/2 parameter all-gather runs
  during the next forward instead of after the optimizer step (Megatron
  ``--overlap-param-gather``).
- ``zero3_gathers`` — parameter all-gathers per layer and micro-batch under ZeRO-3 / FSDP:
  2 (forward, backward; FSDP ``reshard_after_forward=True``, whose backward gather also serves
  the recompute) or 3 (DeepSpeed ZeRO-3 with activation checkpointing: the recomputed forward
  gathers again before the backward gathers).
- ``zero3_flat_ring`` — ZeRO-3 collectives over a group spanning several nodes run as one flat
  ring at the per-GPU scale-out bandwidth rather than hierarchically (DeepSpeed ZeRO-3 of 2021:
  per-parameter all-gathers over the whole data-parallel group; declared calibration: see
  :data:`FRAMEWORKS` ``deepspeed``).
- ``zero3_live_elements`` (int ≥ 0) — how many gathered parameters a ZeRO-3 rank holds at
  once. 0: whole blocks (FSDP units: the block in use and the next one, prefetched; with
  ``limit_all_gathers`` FSDP keeps at most two all-gathers in flight). > 0: DeepSpeed ZeRO-3,
  which gathers per sub-module (each ``Linear``) and releases parameters once more than
  ``stage3_max_live_parameters`` elements are live — but never the sub-module in use.
- ``zero3_prefetch_elements`` (int ≥ 0) — elements DeepSpeed ZeRO-3 gathers ahead of use
  (``stage3_prefetch_bucket_size``), on top of the live ones; > 0 also splits a block's
  all-gather into one NCCL call per prefetch batch
  (:func:`~stage_explore.analytical.framework_costs.zero3_fetch_calls`). 0: one call per unit.
- ``zero3_persistence_elements`` (int ≥ 0) — ZeRO-3 parameters of at most this many elements
  (as a rank holds them before sharding) are never partitioned nor released: they stay whole on
  every rank, beside their shard, are not gathered with their block, and are all-gathered once
  per step after the optimizer step, one NCCL call each (DeepSpeed
  ``stage3_param_persistence_threshold``; :func:`~stage_explore.analytical.framework_costs.
  zero3_persistent`). 0: none persist (FSDP, whose units gather every parameter).
- ``zero_hpz_partition_size`` (int ≥ 1; 1 in every profile) — DeepSpeed ZeRO++'s hierarchical
  partitioning (hpZ; Wang et al., arXiv 2306.10209): under ZeRO-3 each rank also holds a
  secondary copy of the 16-bit parameters sharded over its group of this many consecutive
  data-parallel ranks, from which every gather but a step's first forward one runs inside the
  group (:mod:`~stage_explore.analytical.hpz`). 1: off (DeepSpeed's default).
- ``zero3_prefetch_units`` (int ≥ 0; 1 in every profile) — under ZeRO-3 how many units
  (blocks) ahead of its compute a parameter gather may run on the one queue the gathers share
  with the gradient reduce-scatters (one NCCL communicator per data-parallel group;
  :mod:`~stage_explore.analytical.zero_queue`): a unit's gather starts once the compute before
  the unit that many before it has ended. 1: FSDP1 with ``limit_all_gathers`` (at most two
  all-gathers in flight, ``_FreeEventQueue._max_num_inflight_all_gathers = 2``: the third
  waits for the first unit's free event after its compute) and ``backward_prefetch=
  BACKWARD_PRE``; FSDP2 (``FSDPParamGroup.unshard`` makes its all-gather streams wait for the
  previous all-gather's copy-out event, ``_wait_all_gather_streams_on_event``; the backward
  prefetches one unit); DeepSpeed ZeRO-3 (``partitioned_param_coordinator.py``: prefetch of
  ``stage3_prefetch_bucket_size`` elements on its ``__allgather_stream``, at most
  ``__max_ongoing_fetch_events`` = 2 fetches in flight, per sub-module — one unit at block
  granularity); Megatron-FSDP (the next unit's all-gather at the previous unit's
  pre-forward after ``ag_stream.wait_stream(current_stream())``). 0: no prefetch.
- ``grad_accumulation`` (str) — how each micro-batch's weight gradients reach the buffer that
  accumulates them over the step (:func:`grad_accumulation_bytes`): ``"none"``, no pass is
  timed — the weight-gradient GEMM accumulates into the buffer (Megatron-Core
  ``--gradient-accumulation-fusion``, on by default), or the profile leaves its add untimed
  (PyTorch's ``AccumulateGrad`` under FSDP assigns the first micro-batch's gradient and adds the
  later ones only into the rank's shard, 1/dp of the weights); ``"add"``, the GEMM writes a
  fresh gradient that a separate memory-bound kernel adds to the buffer every micro-batch
  (Megatron-LM 2021's local-DDP hook ``main_grad.add_(grad)``); ``"deepspeed"``, DeepSpeed's
  pipeline engine: under bf16 its ``BF16_Optimizer.update_hp_grads`` runs after every
  micro-batch's backward and adds the bf16 gradient, first cast to an fp32 temporary, to fp32
  accumulators; under fp16 autograd's own in-place add into the 16-bit ``.grad``
  (``AccumulateGrad``: ``variable_grad += new_grad``) from the second micro-batch of a step on
  (``FP16_Optimizer.step`` leaves every ``.grad`` None); ``"torch-ddp"``, Megatron-LM 2021's
  ``--DDP_impl torch``: the same ``AccumulateGrad`` add from the second micro-batch on (Megatron's
  ``optimizer.zero_grad(set_to_none=True)``), plus, once per step, the reducer's divide-and-copy
  of each gradient into its bucket (``mul_out``) and the copy back after the all-reduce
  (``copy_bucket_to_grad``);
  ``"autograd"``, autograd's own ``AccumulateGrad`` into the 16-bit ``.grad`` in any dtype: the
  first micro-batch of a step takes the fresh gradient (the optimizer set ``.grad`` None), the
  later ones add into it in place, and nothing else is copied on the compute stream (InternEvo's
  ``HybridZeroOptimizer``: ``zero_grad(set_to_none=True)`` each step, its bucket copies on its
  communication stream);
  ``"fused-linear"``, Megatron-Core with ``--gradient-accumulation-fusion``: the linear layers'
  weight-gradient GEMMs accumulate into ``main_grad`` (no pass), every other parameter — the
  embedding tables, norms, biases — gets a ``.grad`` that its DDP hook adds into ``main_grad``
  every micro-batch (core/distributed/distributed_data_parallel.py, the per-parameter hook
  ``_make_param_hook``, later ``_make_backward_post_hook``: ``if param.grad is not None and
  not param.grad_added_to_main_grad: param.main_grad.add_(param.grad.data)``), the ``"add"``
  bytes for those weights only.
- ``pp_unsharded_params`` — FSDP2 under pipeline parallelism keeps a stage's parameters gathered
  from its first forward to its last backward, and accumulates unsharded gradients in the reduce
  dtype over the micro-batches, reduce-scattering them once (torchtitan ``apply_fsdp``:
  ``reshard_after_forward = not pp_enabled``; ``torch.distributed.pipelining`` ``stage.py``
  ``backward_maybe_with_nosync``: ``set_requires_gradient_sync(False)`` and
  ``set_reshard_after_backward(False)`` but on the last backward; FSDP2's
  ``FSDPParam.to_accumulated_grad_if_needed`` keeps ``unsharded_accumulated_grad`` in the reduce
  dtype). The rank holds the stage's whole weights and gradients unsharded beside its shards,
  and the timing charges each chunk's ZeRO-3 all-gathers (its first forward) and
  reduce-scatters (after its last backward) once per step
  (:meth:`~stage_explore.analytical.planning.StagePlanning._held_zero_s`) and the unsharded
  accumulation every micro-batch (:func:`~stage_explore.analytical.frameworks.
  held_accumulation_bytes`); only the weights FSDP shards count (an expert whose data-parallel
  group is one rank is left out of FSDP by NeMo AutoModel, :func:`~stage_core.lower.memory.
  unsharded_elements`). NeMo AutoModel holds its stages the same way
  (``components/moe/parallelizer.py`` ``apply_fsdp(reshard_after_forward=False)``,
  ``components/moe/fsdp_mixin.py`` ``patched_backward_maybe_with_nosync``).
- ``pp_backward_held_params`` — FSDP2 under ``torch.distributed.pipelining`` with
  ``reshard_after_forward=True`` (not ``pp_unsharded_params``'s ``False``): ``stage.py``
  ``backward_maybe_with_nosync`` still calls ``set_reshard_after_backward(False)`` on a stage
  that is an ``FSDPModule``, so each backward leaves the stage's parameters gathered until the
  next forward's ``post_forward`` reshards them (``_fsdp_param_group.py`` ``reshard``: in the
  forward only with ``reshard_after_forward``). Memory only: at the end of a backward the rank
  holds the stage's whole unsharded 16-bit weights (every element FSDP shards, its
  tensor-parallel shard) in place of the gathered units, beside the unsharded gradients that
  ``fsdp_no_sync_accumulation`` charges; the all-gathers stay timed per micro-batch (the code
  skips a forward's gather after a backward and a backward's gather after a backward, about
  ``m + pp - 1`` stage gathers a step on the first stage against the timed ``2m``: not
  modelled). KempnerForge's pipeline path (``scripts/train.py`` ``apply_fsdp2`` without
  ``reshard_after_forward``; 7 Dec 2026, s36 kfpp).
- ``fsdp_no_sync_accumulation`` — the trainer turns FSDP's gradient sync off on every
  micro-batch of a step but the last (FSDP2 ``set_requires_gradient_sync(False)``, FSDP1
  ``no_sync()``), at any pipeline depth: each rank holds every FSDP unit's gradient unsharded
  in the reduce dtype (its tensor-parallel shard) from the first micro-batch's backward to the
  last, accumulates into it every micro-batch, and reduce-scatters once, in the last
  micro-batch's backward; the all-gathers are unchanged (``reshard_after_backward`` stays
  on). ZeRO-3 or ZeRO-2 (FSDP1 ``SHARD_GRAD_OP``) with more than one micro-batch, in both
  timing modes; a ZeRO-3 stage held by ``pp_unsharded_params`` already charges it
  (:mod:`~stage_explore.analytical.no_sync`, whose docstring cites torch's code).
  KempnerForge's ``maybe_no_sync`` (kempnerforge/training/grad.py) does this; off: the
  gradients are reduce-scattered every micro-batch (FSDP2's and FSDP1's default).
- ``fsdp2_one_rank_mesh`` — FSDP2 (``fully_shard``) wraps the model even over one
  data-parallel rank (dp·cp = 1, where the ZeRO stage runs as 0: nothing is sharded), so under
  ``fsdp_no_sync_accumulation`` every weight's unsharded gradient (the rank's tensor-parallel
  shard) is held in the reduce dtype over the step and accumulated there, as at dp > 1
  (:func:`~stage_explore.analytical.no_sync.one_rank_fsdp2`). FSDP2 has no ``NO_SHARD``
  fallback at world size 1: its ``foreach_reduce`` copies the reduce-dtype input to the output
  in place of the reduce-scatter (torch ``distributed/fsdp/_fully_shard/_fsdp_collectives.py``).
  KempnerForge's ``init_distributed`` inserts a ``dp_shard`` mesh dimension of size 1 whenever
  tp > 1 (kempnerforge/distributed/setup.py 01b461a7) and ``apply_fsdp2`` wraps every block over
  it (distributed/parallel.py); off: a run at dp·cp = 1 is not FSDP-wrapped (FSDP1 switches to
  ``NO_SHARD`` at world size 1, :func:`stage_core.parallel.unsharded_zero`). Acts only with
  ``fsdp_no_sync_accumulation`` and more than one micro-batch.
- ``pp_held_sync_per_schedule`` — with ``pp_unsharded_params`` and several pipeline schedules
  per step (``local_batch_size``), a held stage is reduce-scattered and resharded after every
  schedule and gathered again in the next, not once per step: the stage module is itself an
  ``FSDPModule``, and ``torch.distributed.pipelining`` ``stage.py`` ``backward_maybe_with_nosync``
  (AutoModel's ``patched_backward_maybe_with_nosync``, its ``FSDPModule`` branch, the same) runs
  every state's ``post_backward`` on each chunk's ``last_backward``, which
  ``PipelineScheduleMulti._step_microbatches`` sets on the last micro-batch of every
  ``schedule.step`` (its backward counter is per call). NeMo AutoModel's stage is an
  ``FSDPModule`` when ``components/moe/parallelizer.py`` ``apply_fsdp`` also wraps the outer
  causal-LM module (``wrap_outer_model``, default true; the benchmark configs of the 2025-10-02
  performance summary do not set it). Off: the stage stays gathered across the step's schedules
  (the MoE mixin's branch, ``post_backward`` only on the optimizer step's last backward).
- ``fsdp_param_fp32`` — FSDP runs with ``MixedPrecision(param_dtype=None)``: the sharded fp32
  parameters are all-gathered as they are, 4 bytes per element (twice a 16-bit gather), and
  held gathered in fp32; autocast casts them per use. Composer's FSDP ``mixed_precision:
  DEFAULT`` of 2023 (``get_mixed_precision``: DEFAULT sets only ``reduce_dtype`` to the amp
  precision and ``buffer_dtype`` to fp32, composer/trainer/mosaic_fsdp_utils.py), the "MP Mode
  DEFAULT" of the llm-foundry H100 benchmark tables. Off: parameters gathered in the run's
  16-bit type (``param_dtype`` bf16, FSDP2's and later Composer's default). Autocast's per-use
  casts (fp32 -> 16-bit in each forward, the gradient back in the backward) are timed as
  memory-bound passes (``BlockCosting._param_cast_s``).
- ``fsdp2_copies`` — ZeRO-3 is FSDP2 (``fully_shard``, per-parameter sharding), whose
  collectives copy on the compute stream (:func:`fsdp2_copy_bytes`): each all-gather's output is
  copied out into the unsharded parameters (``foreach_all_gather_copy_out``:
  ``torch.split_with_sizes_copy``, run on the current stream after the all-gather), and each
  reduce-scatter first concatenates the unsharded gradients into a reduce-dtype buffer
  (``foreach_reduce_scatter_copy_in``: ``torch.cat``, which the compute stream waits for before
  it frees the gradients); ``torch/distributed/_composable/fsdp/_fsdp_collectives.py``. That
  reduce-dtype buffer outlives the reduce-scatter: ``FSDPParamGroup.post_backward`` keeps it in
  ``comm_ctx.reduce_scatter_state`` and drops it only in the next unit's post-backward (torch
  ``distributed/fsdp/_fully_shard/_fsdp_param_group.py``, pytorch/pytorch 002a76fb), so
  without pipeline parallelism each block's backward runs beside the previous unit's buffer
  (``framework_costs.fsdp2_reduce_held_bytes``, memory). Off: FSDP1's flat parameter,
  gathered in place (no copy-out), or Megatron/DeepSpeed buffers.
- ``fsdp_root_unit`` — under ZeRO-3 without pipeline parallelism the parameters outside the
  transformer blocks (the token embedding, the final norm, the output layer) are the root
  module's own FSDP unit, gathered once before the forward and reduce-scattered once after the
  backward, neither beside any compute: FSDP2 ``fully_shard(model)`` after the per-block
  ``fully_shard`` calls (torchtitan ``apply_fsdp``) is one parameter group, all-gathered in the
  root's pre-forward before the embedding runs; the root keeps it unsharded for the backward
  (``fully_shard``'s ``reshard_after_forward`` docs: the root's value is set to False as a
  heuristic, its parameters being all-gathered again right away for the backward), and its
  gradients are reduce-scattered by the root's
  post-backward final callback, after the embedding's backward ends the whole backward. Off:
  the embedding's and the head's collectives run beside their own blocks like a layer's.
- ``optimizer_foreach`` — the optimizer step is ``torch.optim.AdamW(foreach=True)`` with
  ``clip_grad_norm_(foreach=True)`` on fp32 parameters: each ``torch._foreach_*`` op a pass
  over whole tensors (:func:`~stage_explore.analytical.costs.foreach_optimizer_bytes`, 92
  bytes per parameter with fp32 gradients), not Apex's fused Adam and Megatron's bookkeeping
  (42). torchtitan builds AdamW with ``fused=job_config.optimizer.fused`` (a ``store_true``
  flag, default off) and ``foreach=not fused`` (``build_optimizers``, 2024).
- ``fsdp1_flat_grad`` — ZeRO-3 is FSDP1 (``FullyShardedDataParallel``), whose unsharded
  parameters are views of one flat parameter (``FlatParamHandle._get_unflat_views``:
  ``torch.split(flat_param, numels)`` then ``.view(shape)``): autograd's
  ``SplitWithSizesBackward0`` concatenates the views' gradients into the flat gradient
  (``torch.cat``, a new tensor) on the compute stream once per backward, reading and writing
  each gradient element in the flat parameter's dtype (:func:`fsdp1_flat_grad_bytes`; fp32
  under ``fsdp_param_fp32``). FSDP1's later passes over that gradient — the cast to the reduce
  dtype, ``F.pad`` and the pre-divide (``torch/distributed/fsdp/_runtime_utils.py``
  ``_post_backward_hook``) — run on its post-backward stream beside the next unit's compute and
  are not timed. Off: FSDP2, Megatron and DeepSpeed buffers (no such concatenation).
- ``fsdp_fp32_shards`` — under ZeRO-3 the rank keeps no 16-bit copy of its parameter shard: the
  sharded parameters are the fp32 master weights and the 16-bit ones exist only gathered, per
  unit, while it runs (PyTorch FSDP ``MixedPrecision``: "outside forward and backward, the
  sharded parameters are kept in full precision"; FSDP2 ``MixedPrecisionPolicy``: the sharded
  parameter stays fp32, ``param_dtype`` is the dtype of the unsharded one). 16 bytes per
  parameter (fp32 parameter, fp32 gradient, two Adam moments) instead of ZeRO's 18; DeepSpeed's
  and Megatron's ZeRO-3 keep the 16-bit partition beside the optimizer's fp32 copy.
- ``bf16_model_states`` — the model's parameters are bf16 before the optimizer is built, so
  under ZeRO-3 the shard, its gradient and Adam's two moments are all bf16 and no fp32 master
  exists: 8 bytes per parameter (``fsdp_fp32_shards`` does not apply). NeMo AutoModel's own MoE
  model classes (DeepSeek-V3 / Kimi K2, Qwen3-MoE, GPT-OSS) cast the already FSDP-sharded model
  in ``initialize_weights(dtype=torch.bfloat16)`` (``self.to(dtype)`` / ``cast_model_to_dtype``,
  ``nemo_automodel/components/models/*/model.py``), called by ``Checkpointer.load_base_model``
  after ``parallelize``; ``torch.optim.Adam`` keeps its moments in the parameter's dtype. The
  reduce-scatter still runs in the policy's fp32 ``reduce_dtype`` (the workload's gradient
  bytes), its output cast to the bf16 shard, and an unsharded gradient FSDP2 accumulates without
  sync is in that ``reduce_dtype`` (``FSDPParam.to_accumulated_grad_if_needed``).
- ``fp8_param_gather`` — under an FP8 recipe the parameters of the FP8 linear layers are stored
  only as FP8 (Transformer Engine ``Float8Tensor`` parameters; Megatron ``--fp8-param-gather``:
  "keep the compute param in fp8 (do not use any other intermediate dtype) and perform the
  param all-gather in fp8"); the 16-bit copy of those weights is not held, the fp32 master
  stays in the optimizer. Off (Megatron-Core's default): the 16-bit weights and their FP8 copies.
- ``fsdp_float8_all_gather`` — under ZeRO-3 with a per-tensor FP8 recipe, FSDP2 gathers the FP8
  linear layers' weights as FP8 (torchao ``Float8LinearConfig.enable_fsdp_float8_all_gather``,
  torchtitan ``--float8.enable_fsdp_float8_all_gather``, with
  ``--float8.precompute_float8_dynamic_scale_for_fsdp``; off by default in every torchtitan
  config and in torchao): ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`` casts the
  rank's fp32 shard to FP8 with a tensor-wise scale (precomputed once per step for all layers by
  one all-reduce of their amaxes, not timed: a few hundred floats), the all-gather moves 1 byte
  per element (the gather bytes of :func:`~stage_explore.analytical.fp8_gathers.
  fp8_param_gathers`, shared with ``fp8_param_gather``), and ``fsdp_post_all_gather`` hands the
  GEMMs the gathered ``Float8TrainingTensor``: no per-use weight cast
  (``fp8_weight_cast_per_use`` then costs a cast of the shard per gather, :data:`~stage_explore.
  analytical.framework_costs.FP8_SHARD_CAST_BYTES`), and FSDP2's copy-out moves FP8 elements.
  Unlike ``fp8_param_gather`` the sharded fp32 parameters stay (no memory saved on the shards);
  the gradient reduce-scatter keeps its dtype. Block-scaled recipes gather 16-bit weights.
- ``distributed_fused_adam`` (``"off"``, ``"fp32"`` or ``"bf16"``) — the optimizer is Apex's
  ``DistributedFusedAdam`` as NeMo 1.x sets it up (``optim.name: distributed_fused_adam``),
  with the optimizer-state dtype ``optim.dtype`` (NeMo's default fp32). Its sharded state per
  parameter is two Adam moments in that dtype plus, by NeMo's rule
  (``MegatronBaseModel.setup_optimization``): under ``fp8_param_gather`` (NeMo's
  ``fp8_params``) a stored parameter copy in that dtype (``store_params``); with an fp32 state
  for a bf16 model the 16 trailing bits of the fp32 master only (``store_param_remainders``);
  with a bf16 state for a bf16 model no copy at all (:func:`~stage_explore.analytical.
  framework_costs.distributed_fused_adam_state_bytes`: 10, 4, or with FP8 parameters 12, 6 bytes
  instead of Megatron's 12). Memory only: the optimizer step is timed as Megatron's. Off:
  Megatron-Core's distributed optimizer (fp32 master and moments).
- ``optimizer`` (``"adam"``, ``"adam_bf16_moments"``, ``"sgd_momentum"`` or ``"sgd"``) — the
  optimizer's kind, which sets the state a rank holds per parameter (sharded under ZeRO-1 and
  up as before) and the bytes of its update step (:mod:`~stage_explore.analytical.
  optimizer_kinds`): the fp32 master weight (none under ``bf16_model_states``, whose moments
  are 16-bit) plus two Adam moments in fp32 (12 bytes, the default), two BF16 moments
  (DeepSeek-V3's AdamW, 8), one SGD momentum buffer (8) or none (plain ``torch.optim.SGD``,
  4). Under ``distributed_fused_adam`` only ``adam``.
- ``ddp_bucket_scales_with_dp`` — the gradient bucket is ``max(40M, 1M · dp · cp)`` parameters
  when the config leaves ``grad_bucket_bytes`` at its default (Megatron-Core's
  ``DistributedDataParallel``, :mod:`~stage_explore.analytical.buckets`); off: the config's bytes.
- ``zero1_grad_all_reduce`` — at ZeRO-1 the data-parallel gradient reduction is an all-reduce
  of the whole gradient buffer, not a reduce-scatter. Under bf16, DeepSpeed's
  ``BF16_Optimizer`` (bf16 with the config's ZeRO stage 0; it partitions the optimizer states
  itself) hands the engine its full flat fp32 gradients (``get_grads_for_reduction``), which
  ``buffered_allreduce_fallback`` all-reduces (the pipeline engine's ``_bf16_reduce_grads``,
  the plain engine's ``allreduce_gradients``); each rank then updates its partition and
  all-gathers the bf16 parameters (``update_lp_params``: ``all_gather_dp_groups``). In any
  other dtype (fp16 above all), DeepSpeed's ZeRO stage 1 optimizer does the same in the
  gradients' own dtype: the engine's ``_configure_zero_optimizer`` turns
  ``contiguous_gradients`` off at stage 1 ("Overlap and contiguous grads are meaningless in
  stage 1 and are ignored"; the 2022 releases for every model, later ones "Non-MoE requires
  contiguous grads to be disabled w. stage 1"), so ``reduce_ipg_grads`` takes
  ``buffered_reduce_fallback`` instead of ``average_tensor``'s per-partition reduces, and its
  ``allreduce_bucket`` sets ``rank = None`` before ``dist.all_reduce`` of each flattened bucket
  (``deepspeed/runtime/zero/stage2.py``, ``stage_1_and_2.py`` from v0.6.0; the pipeline
  engine reaches it through ``allreduce_gradients`` → ``reduce_gradients(pipeline_parallel=
  True)`` after the flush); the step then all-gathers the updated 16-bit partitions. A
  mixture-of-experts model outside bf16 keeps the reduce-scatter (contiguous buckets). Off:
  the lowering's reduce-scatter (ZeRO-1 of Megatron's distributed optimizer).
- ``ddp_bucket_first_chunk_only`` — only the first model chunk of the first pipeline stage
  reduces its gradients in buckets: Megatron-Core's ``DistributedDataParallel`` sets
  ``bucket_size = None`` when ``disable_bucketing`` (the training loops pass
  ``model_chunk_idx > 0``: "communication for these model chunks is overlapped with compute
  anyway") or on a pipeline rank past the first ("data-parallel communication on these stages
  is not on the critical path"). Such a chunk reduces all its gradients after its last
  backward and gathers its parameters in one all-gather, dispatched before an earlier forward
  (:meth:`~stage_explore.analytical.planning.StagePlanning._chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Each option of this area and the flag (or config key) the framework exposes it under.
SHARDING_FLAGS: dict[str, str] = {
    "overlap_grad_reduce": "Megatron --overlap-grad-reduce / DeepSpeed overlap_comm",
    "overlap_param_gather": "Megatron --overlap-param-gather",
    "zero3_gathers": "DeepSpeed ZeRO-3 + activation checkpointing (3) / FSDP (2)",
    "zero3_flat_ring": "DeepSpeed ZeRO-3 (2021) flat data-parallel all-gathers",
    "zero3_live_elements": "DeepSpeed stage3_max_live_parameters (0: FSDP whole units)",
    "zero3_prefetch_elements": "DeepSpeed stage3_prefetch_bucket_size",
    "zero3_persistence_elements": "DeepSpeed stage3_param_persistence_threshold",
    "zero_hpz_partition_size": "DeepSpeed zero_optimization.zero_hpz_partition_size (hpZ)",
    "zero3_prefetch_units": "FSDP backward_prefetch / limit_all_gathers, FSDP2 implicit prefetch",
    "grad_accumulation": (
        "--gradient-accumulation-fusion (none) / add / DeepSpeed / DDP_impl torch / autograd"
    ),
    "pp_unsharded_params": "FSDP2 + PP: reshard_after_forward=False, no-sync backward",
    "fsdp_no_sync_accumulation": (
        "FSDP2 set_requires_gradient_sync(False) / FSDP1 no_sync() but on the last micro-batch"
    ),
    "fsdp2_one_rank_mesh": "KempnerForge tp > 1: fully_shard over a dp_shard mesh of size 1",
    "pp_backward_held_params": (
        "torch pipelining + FSDP2 reshard_after_forward=True: stage gathered after backward"
    ),
    "pp_held_sync_per_schedule": "AutoModel wrap_outer_model=True: FSDP stage synced per schedule",
    "fsdp_param_fp32": "FSDP MixedPrecision param_dtype None (Composer 'DEFAULT' of 2023)",
    "fsdp2_copies": "FSDP2 fully_shard all-gather copy-out / reduce-scatter copy-in",
    "fsdp1_flat_grad": "FSDP1 FlatParameter: the views' gradients concatenated per backward",
    "fsdp_root_unit": "FSDP root unit (embedding, final norm, output) gathered before forward",
    "optimizer_foreach": "torch.optim.AdamW(foreach=True) + clip_grad_norm_(foreach=True)",
    "fsdp_fp32_shards": "FSDP MixedPrecision: sharded params kept in fp32 (no 16-bit shard)",
    "bf16_model_states": "AutoModel MoE initialize_weights: FSDP shards cast to bf16 (no master)",
    "fp8_param_gather": "Megatron --fp8-param-gather (FP8 parameters, no 16-bit copy)",
    "fsdp_float8_all_gather": "torchao/torchtitan enable_fsdp_float8_all_gather (FP8 gathers)",
    "ddp_bucket_scales_with_dp": "Megatron-Core DDP bucket_size default max(40M, 1M x dp)",
    "distributed_fused_adam": "NeMo 1.x optim.name distributed_fused_adam, its optim.dtype",
    "optimizer": "the optimizer: Adam (fp32 or BF16 moments), SGD with or without momentum",
    "ddp_bucket_first_chunk_only": "Megatron-Core DDP disable_bucketing (chunk > 0, pp rank > 0)",
    "zero1_grad_all_reduce": "DeepSpeed BF16_Optimizer (bf16) / ZeRO stage 1 (dense model)",
}

#: The values of ``distributed_fused_adam``: off (Megatron-Core's distributed optimizer) or the
#: optimizer-state dtype of Apex's ``DistributedFusedAdam``.
DISTRIBUTED_FUSED_ADAM = ("off", "fp32", "bf16")

#: The values of ``grad_accumulation``.
GRAD_ACCUMULATION = ("none", "add", "deepspeed", "fused-linear", "torch-ddp", "autograd")


@dataclass(frozen=True, kw_only=True)
class ShardingOptions:
    """The fields of this area's options (module docstring); a field's default is what a
    profile that does not set it takes."""

    overlap_grad_reduce: bool
    overlap_param_gather: bool
    zero3_gathers: int
    zero3_flat_ring: bool
    zero3_live_elements: int
    zero3_prefetch_elements: int
    grad_accumulation: str = "none"  # no separate accumulation pass timed (module docstring)
    pp_unsharded_params: bool = False  # parameters resharded after each forward and backward
    pp_held_sync_per_schedule: bool = False  # a held stage synced once per step
    pp_backward_held_params: bool = False  # a stage resharded after each backward
    fsdp_no_sync_accumulation: bool = False  # FSDP reduce-scatters every micro-batch
    fsdp2_one_rank_mesh: bool = False  # no FSDP wrapper at dp·cp = 1 (ZeRO run as 0)
    fsdp_param_fp32: bool = False  # ZeRO-3 / FSDP parameters gathered in the 16-bit type
    fsdp2_copies: bool = False  # ZeRO-3 collectives gather / scatter in place (no copies timed)
    fsdp1_flat_grad: bool = False  # no flat-gradient concatenation timed
    fsdp_root_unit: bool = False  # embedding and head collectives beside their own blocks
    optimizer_foreach: bool = False  # Apex fused Adam with Megatron's bookkeeping
    fsdp_fp32_shards: bool = False  # ZeRO-3 ranks keep the 16-bit shard (DeepSpeed, Megatron)
    bf16_model_states: bool = False  # fp32 master weights, gradients and moments
    fp8_param_gather: bool = False  # 16-bit weights beside their FP8 copies (Megatron default)
    fsdp_float8_all_gather: bool = False  # FSDP2 gathers 16-bit weights (torchtitan's default)
    ddp_bucket_scales_with_dp: bool = False  # ParallelConfig.grad_bucket_bytes as given
    distributed_fused_adam: str = "off"  # Megatron-Core's distributed optimizer (fp32 state)
    optimizer: str = "adam"  # Adam: fp32 master and two fp32 moments (optimizer_kinds)
    ddp_bucket_first_chunk_only: bool = False  # every chunk of every stage bucketed
    zero1_grad_all_reduce: bool = False  # ZeRO-1 reduce-scatters its gradients (module docstring)
    zero3_prefetch_units: int = 1  # a unit's gather beside the compute of the unit before
    zero3_persistence_elements: int = 0  # every ZeRO-3 parameter partitioned and gathered
    zero_hpz_partition_size: int = 1  # no secondary partition (DeepSpeed's default, hpz.py)
