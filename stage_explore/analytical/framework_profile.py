"""The framework-profile type: :class:`FrameworkProfile` (one framework's behaviours as data),
:data:`OPTION_FLAGS` (each option and the framework flag it stands for) and the option values.
The shipped profiles are in :mod:`stage_explore.analytical.frameworks`, what their options imply
in bytes and micro-batches in :mod:`stage_explore.analytical.framework_costs`.

The same parallel configuration runs differently under Megatron-LM, Megatron-Core, DeepSpeed
and PyTorch FSDP: which communication each overlaps with compute, how ZeRO-3 / FSDP gathers
parameters, whether pipeline transfers block, what memory the process holds beyond the tensors.
A profile states those behaviours as data, each option under the framework's own flag name
(:data:`OPTION_FLAGS`) with the default that framework ships; the analytical backend reads it
(``AnalyticalBackend(framework="deepspeed")``, ``[backend.options] framework = "fsdp"`` in a
study, ``stage eval --framework fsdp``) and one option can be overridden
(``AnalyticalBackend(framework="megatron-core", overrides={"tp_comm_overlap": False})``).

Options (all booleans unless said):

- ``overlap_grad_reduce`` — data-parallel gradient reductions run in buckets during the
  backward (Megatron ``--overlap-grad-reduce``, DeepSpeed ``overlap_comm``, FSDP always, torch
  DDP always). Off: they run after the last backward of the step.
- ``overlap_param_gather`` — the distributed optimizer's / ZeRO-1/2 parameter all-gather runs
  during the next forward instead of after the optimizer step (Megatron
  ``--overlap-param-gather``).
- ``tp_comm_overlap`` — tensor-parallel all-gathers and reduce-scatters are split and
  pipelined with their GEMMs (Megatron ``--tp-comm-overlap``, Transformer Engine userbuffers);
  dependents wait only for the first of ``tp`` chunks.
- ``moe_comm_overlap`` — expert-parallel dispatch/combine all-to-alls run beside another
  micro-batch's compute (Megatron ``--overlap-moe-expert-parallel-comm``).
- ``moe_shared_expert_overlap`` — the shared experts' MLP runs while the dispatch all-to-all is
  in flight (Megatron ``--moe-shared-expert-overlap``: "overlap between shared expert
  computations and dispatcher communications; without this, the shared experts execute after
  the routed experts"); off: after the routed experts, as Megatron's default.
- ``pipeline_p2p_blocking`` — activation transfers between pipeline stages hold both ranks
  (Megatron-LM 2021/22 ``batch_isend_irecv`` + synchronise); off: Megatron-Core's
  ``--overlap-p2p-communication`` (transfers beside compute on a communication stream: the
  receiver waits for the message, the sender is not held — hidden by the schedule's slack, on
  the critical path in the fill and the drain; :func:`~stage_explore.analytical.costs.
  stage_arrival_s`), which Megatron-Core runs only in its interleaved schedule: its 1F1B
  without interleaving stays blocking.
- ``pipeline_scatter_gather`` — without sequence parallelism, a stage sends ``1/tp`` of the
  replicated activation and the receiver all-gathers it over tp (Narayanan et al. 2021, §4.1;
  Megatron-LM; DeepSpeed's ``PipelineEngine`` likewise: ``is_pipe_partitioned`` and
  ``is_grad_partitioned`` are on whenever the model-parallel group has more than one rank, and
  the receiver rebuilds the tensor with ``PartitionedTensor.full()``, an all-gather over that
  group — ``deepspeed/runtime/pipe/engine.py``); off: every tp rank sends the whole activation.
- ``tp_async_grad_allreduce`` — without sequence parallelism, the backward all-reduce of a
  column-parallel linear's input gradient over tp runs beside that linear's weight-gradient
  GEMM (Megatron ``--async-tensor-model-parallel-allreduce``, on unless
  ``--no-async-tensor-model-parallel-allreduce``; Megatron-DeepSpeed likewise:
  ``LinearWithGradAccumulationAndAsyncCommunication``); its dependents still wait for all of
  it (:mod:`~stage_explore.analytical.async_tp`). Off: on the path, as Megatron-LM of 2021.
- ``pipeline_p2p_separate`` — with blocking transfers, a stage's send and the next stage's
  receive are separate blocking instructions that each hold their rank while the message
  crosses (DeepSpeed's ``PipelineEngine``: ``SendActivation``, ``RecvActivation``, ``SendGrad``
  and ``RecvGrad`` are steps of their own in ``TrainSchedule``, each a ``dist.send`` /
  ``dist.recv``, "the communication is blocking", ``deepspeed/runtime/pipe/schedule.py``); off:
  Megatron's batched exchange, the sender held (:func:`~stage_explore.analytical.costs.
  stage_transfer_s`).
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
  (``stage3_prefetch_bucket_size``), on top of the live ones.
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
- ``attention_kernel`` (str or None) — the fused attention kernel the framework's software of
  its time runs (``"fa2"``: FlashAttention-2), looked up in the accelerator's
  ``attention_kernels``; None: the best kernel the preset lists (FA3 / cuDNN on Hopper, FA4 on
  Blackwell).
- ``sm100_attention_kernel`` (str or None) — the attention kernel on GPUs of compute capability
  10.0 and later (an accelerator with an ``mxfp8`` peak: Blackwell's tensor cores), where the
  framework's software asks for another kernel than ``attention_kernel``; None: as elsewhere.
- ``fused_elementwise`` — chains of element-wise kernels keep their intermediates on chip
  (Megatron-LM's fused bias-GeLU / bias-dropout-add / fused norms, or ``torch.compile``); off:
  eager PyTorch, every element-wise op reads and writes HBM.
- ``fused_qkv`` — the attention's query, key and value projections run as one GEMM over the
  concatenated weights (Megatron-LM's ``query_key_value``, Megatron-Core's ``linear_qkv``;
  :mod:`~stage_explore.analytical.fused_qkv`); off: three GEMMs whose input gradients autograd
  sums, as separate ``q_proj`` / ``k_proj`` / ``v_proj`` linears (HuggingFace, TorchTitan) run.
- ``fused_fc1`` (str) — which gated MLPs run their gate and up projections as one GEMM of
  output ``2 · ffn`` (:mod:`~stage_explore.analytical.fused_fc1`): one input gradient, no sum.
  ``"all"``: dense, shared and routed experts (Megatron-Core's ``linear_fc1`` with
  ``gated_linear_unit``, Megatron-LM's ``dense_h_to_4h`` with ``--swiglu``); ``"experts"``: the
  routed experts only (NeMo AutoModel's ``gate_and_up_projs``); ``"none"``: two GEMMs whose
  input gradients autograd sums, as separate ``w1`` / ``w3`` (TorchTitan) or ``gate_proj`` /
  ``up_proj`` (HuggingFace) linears run.
- ``eager_modules`` (str) — whose module code eager PyTorch runs when ``fused_elementwise`` is
  off (:mod:`~stage_explore.analytical.eager`): ``"generator"``, each generator op one kernel
  reading its inputs and writing its outputs once (ATen's native ``F.layer_norm``, ``F.gelu``);
  ``"torchtitan"``, torchtitan's Llama code op by op — ``RMSNorm`` on ``x.float()``, the
  complex64 rotary embedding, ``repeat_kv``'s copies, ``F.silu(w1(x)) * w3(x)``, residual adds
  whose backward is free — each ATen op and each autograd formula a kernel over whole tensors
  (compiled too: the complex product, which Inductor leaves to ATen, and the K/V copies);
  ``"llm-foundry-2023"``,
  MPT's blocks of 2023 on an fp32 residual stream (``LPLayerNorm`` casting ``x`` down per
  norm, fp32 residual adds and gradient sums); ``"fms"``, IBM foundation-model-stack's Llama
  (fms-fsdp): torchtitan's RMSNorm and SwiGLU ops, a rotary embedding by fp32 2×2 rotation
  matrices, grouped keys and values repeated by a copy for SDPA; ``"automodel"``, NeMo
  AutoModel's DeepEP experts (under ``moe_deepep``), which add a biased model's expert biases
  in eager PyTorch, per expert then ``torch.cat``, the down projection's scaled by DeepEP's fp32
  routing probabilities (:mod:`~stage_explore.analytical.eager_automodel`); ``"megatron-core"``,
  Megatron-Core's fused modules but for ``TEGroupedMLP``'s expert down-projection bias, which
  ``_apply_bias`` adds per expert in eager PyTorch scaled by the 16-bit routing probabilities,
  and without ``rope_fusion`` its unfused rotary embedding, fused or not
  (:mod:`~stage_explore.analytical.eager_megatron`).
- ``rope_fusion`` — the rotary embedding as one fused kernel (Transformer Engine's
  ``fused_apply_rotary_pos_emb`` under Megatron-Core's ``apply_rope_fusion``, or any fused
  kernel: the generator's count); off, with ``eager_modules = "megatron-core"``: Megatron-Core's
  unfused ``_apply_rotary_pos_emb_bshd`` op by op (:mod:`~stage_explore.analytical.eager_megatron`);
  off with other ``eager_modules`` is a ConfigError (their tables count their own RoPE code).
- ``runtime_reserved_bytes`` (int) — memory a training process holds besides its tensors: CUDA
  context, cuBLAS/cuDNN workspaces, NCCL communicator buffers.
- ``allocator_overhead`` (float ≥ 0) — the caching allocator's reserved-but-unallocated share
  of the tensor peak (fragmentation): reserved = peak × (1 + overhead).
- ``moe_load_imbalance`` (float ≥ 1) — tokens routed to the busiest expert-parallel rank over
  the mean (the max/mean tokens-per-expert ratio Megatron-Core's MoE router balances with its
  auxiliary loss). The step waits for that rank, so its routed experts' compute and the
  dispatch/combine traffic are charged at this factor (:func:`~stage_explore.analytical.blocktime.
  imbalanced_timers`). 1.0 (every profile's default): balanced routing, what benchmarks run
  with Megatron's ``--moe-router-force-load-balancing``.
- ``grad_accumulation`` (str) — how each micro-batch's weight gradients reach the buffer that
  accumulates them over the step (:func:`grad_accumulation_bytes`): ``"none"``, no pass is
  timed — the weight-gradient GEMM accumulates into the buffer (Megatron-Core
  ``--gradient-accumulation-fusion``, on by default), or the profile leaves its add untimed
  (PyTorch's ``AccumulateGrad`` under FSDP assigns the first micro-batch's gradient and adds the
  later ones only into the rank's shard, 1/dp of the weights; Megatron-LM 2021: see its
  profile); ``"add"``, the GEMM writes a fresh gradient that a separate memory-bound kernel
  adds to the buffer every micro-batch (Megatron-LM 2021's local-DDP hook
  ``main_grad.add_(grad)``); ``"deepspeed"``, DeepSpeed's pipeline engine: under bf16 its
  ``BF16_Optimizer.update_hp_grads`` runs after every micro-batch's backward and adds the bf16
  gradient, first cast to an fp32 temporary, to fp32 accumulators; under fp16 only autograd's
  own in-place add into ``.grad`` remains, which no profile times (see :data:`FRAMEWORKS`);
  ``"fused-linear"``, Megatron-Core with ``--gradient-accumulation-fusion``: the linear layers'
  weight-gradient GEMMs accumulate into ``main_grad`` (no pass), every other parameter — the
  embedding tables, norms, biases — gets a ``.grad`` that its DDP hook adds into ``main_grad``
  every micro-batch (core/distributed/distributed_data_parallel.py, the per-parameter hook
  ``_make_param_hook``, later ``_make_backward_post_hook``: ``if param.grad is not None and
  not param.grad_added_to_main_grad: param.main_grad.add_(param.grad.data)``), the ``"add"``
  bytes for those weights only.
- ``loss_fp32_buffers`` (int ≥ 0) — fp32 buffers of the logits' size the loss holds at once
  (:func:`stage_core.lower.memory.loss_peak_bytes`): the logits are upcast to fp32 for the
  cross-entropy. 3: eager ``F.cross_entropy`` on fp32 logits (autocast runs it in fp32; torchtitan
  casts ``.float()``): ``log_softmax`` saves its fp32 output, and its backward holds that, the
  ``nll_loss`` gradient and its own result at once. 1: Megatron's ``vocab_parallel_cross_entropy``
  on ``output.float()``, which saves the fp32 softmax and turns it into the gradient in place.
  0: the generator's own count (16-bit logits saved, a 16-bit gradient; a fused kernel). With
  any buffers the freed 16-bit logits' block, which the caching allocator keeps reserved and no
  fp32 buffer fits, is held beside them (2 bytes per logit; with 1 it holds the 16-bit gradient).
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
- ``cp_merge_fp32`` — context-parallel attention is PyTorch's ``context_parallel`` under
  TorchTitan's Llama (:mod:`stage_explore.analytical.context_parallel`): one SDPA kernel per K/V
  chunk, the chunks' outputs merged (and, in the backward, their gradients accumulated) in fp32
  element-wise kernels of its own (``_SDPAMerger`` with ``convert_to_f32``); the keys and values,
  repeated to the query heads before SDPA, all-gathered behind the first chunk only; their fp32
  gradients passed around the cp ring. Off: the merge is inside the attention kernel
  (Transformer Engine's fused CP attention) and the generator's grouped-query collectives are
  timed as they are, or there is no context parallelism.
- ``cp_traced_ring`` — with ``cp_merge_fp32``, on a compiled run (``fused_elementwise``, torchtitan
  ``training.compile``): the ring is traced into the block's ``torch.compile`` graph, where each
  functional collective is waited for where it is issued (``_maybe_wrap_tensor`` under tracing)
  and Inductor does not move the waits (``reorder_for_compute_comm_overlap`` off by default), so
  the key/value all-gathers and every key/value-gradient message are exposed, while the merges
  and accumulations are fused kernels (:mod:`stage_explore.analytical.context_parallel`). Off,
  or eager: the collectives overlap as eager PyTorch issues them.
- ``te_cp_merge`` — context-parallel attention under ``cp_style`` ring is Transformer Engine's
  ``AttnFuncWithCP`` (Megatron-Core ``cp_comm_type`` p2p): one attention kernel per ring step,
  the steps' outputs corrected into the running output, and in the backward the query and
  key/value gradients copied, concatenated and accumulated, in element-wise kernels of its own
  (:func:`~stage_explore.analytical.te_context_parallel.te_cp_merge_bytes`). Off: merged inside
  the attention kernel, or not Transformer Engine's.
- ``te_cp_overlap`` — under ``cp_style`` ring, Transformer Engine's ring exchanges run beside
  the steps' attention kernels (``AttnFuncWithCP``: "overlap current-step compute with
  next-step communication"): each message is charged only what one step's attention does not
  hide (:func:`~stage_explore.analytical.te_context_parallel.te_ring_exposed_s`). Off: the
  whole ring exchange before the attention (the generator's serial ring).
- ``moe_deepep`` — the expert dispatch and combine run on DeepEP (Megatron
  ``--moe-token-dispatcher-type flex --moe-enable-deepep``; Megatron-Bridge
  ``moe_flex_dispatcher_backend="deepep"``): its internode kernels send a token once to each
  remote node holding any of its top-k experts and fan it out over NVLink there (DeepEP README,
  "normal kernels": NVLink-to-RDMA forwarding), so the scale-out level of the expert
  all-to-all carries :func:`~stage_explore.analytical.collectives.deepep_scale_out_fraction`
  of NCCL's bytes. Off (every profile's default): NCCL all-to-all, every (token, expert) pair
  sent. Inside a node DeepEP sends a token once per destination rank, not once per expert
  (:mod:`~stage_explore.analytical.deepep`).
- ``local_batch_size`` (int ≥ 0) — sequences per data-parallel rank that run as one pipeline
  schedule, each with its own fill and drain (NeMo AutoModel's ``step_scheduler.
  local_batch_size``: its recipe calls ``schedule.step`` once per local batch; the step's
  gradient accumulation is a loop over such schedules). 0 (every profile's default): all the
  step's micro-batches in one schedule (Megatron-Core, DeepSpeed). No effect without pipeline
  parallelism.
- ``moe_fake_balanced_gate`` — the router is NeMo AutoModel's ``FakeBalancedGate``
  (``fake_balanced_gate: true``): token ``t`` goes to the ``k`` consecutive experts
  ``(k·t + j) mod E``, which lie on one or two neighbouring ranks, so DeepEP sends it to far
  fewer ranks and nodes than under random balanced routing (the default, Megatron-Core's
  ``--moe-router-force-load-balancing``: random router logits). DeepEP's traffic depends on
  it, and the experts' GEMMs' row tiles: random routing gives each expert a binomial token
  count (:mod:`~stage_explore.analytical.routing_tiles`), the fake gate exactly the mean.
- ``moe_sort_chunks`` — the MoE tokens go through Megatron-Core's all-to-all token dispatcher
  (``--moe-token-dispatcher-type alltoall``), which sorts the received tokens by local expert
  before the grouped GEMM and back after it (``sort_chunks_by_idxs``, with more than one local
  expert): one more read and write of the routed tokens each way, forward and backward
  (:mod:`~stage_explore.analytical.megatron_dispatch`). Not with ``moe_deepep`` (the flex
  dispatcher permutes the received tokens itself) or the allgather dispatcher.
- ``moe_fp8_padding`` — under an FP8 recipe the MoE experts run as Megatron-Core's
  ``TEGroupedMLP``, which pads every local expert's rows to the FP8 GEMM's alignment (32 under
  MXFP8, else 16) with Transformer Engine's ``Fp8Padding`` before ``linear_fc1`` and strips them
  with ``Fp8Unpadding`` after ``linear_fc2``: under random routing one more read and write of
  the routed tokens each way, forward and backward, whatever the dispatcher
  (:mod:`~stage_explore.analytical.megatron_dispatch`). Off for a run whose router pads the
  routing map instead (``--moe-router-padding-for-fp8``); no effect outside FP8 training.
- ``moe_split_quantize`` — under an FP8 recipe other than delayed scaling the experts' grouped
  GEMMs quantize their operands (input, weights, output gradient) one local expert at a time, a
  cast kernel each: Megatron-Core's ``TEGroupedMLP`` (``--moe-grouped-gemm``) on Transformer
  Engine's ``GroupedLinear`` (``tex.split_quantize``, whose multi-tensor path fuses the splits
  into one kernel only for delayed scaling; :func:`~stage_explore.analytical.fp8_casts.
  split_quantize_kernels`). Each kernel pays the kernel model's ``memory_kernel_s``.
- ``te_cross_entropy`` — the loss runs Transformer Engine's fused Triton cross-entropy
  (Megatron-Core ``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl = "te"``,
  ``te_parallel_cross_entropy``) on the 16-bit logits instead of Megatron's unfused fp32
  ``vocab_parallel_cross_entropy``: an online-softmax pass and a gradient pass over the logits
  and an in-place scale by the loss gradient (``loss_kernels.TE_CROSS_ENTROPY_BYTES``), not
  ``loss_kernels.CROSS_ENTROPY_BYTES``.
  Time only (the loss's memory stays ``loss_fp32_buffers``).
- ``native_cross_entropy`` — the loss runs Megatron-Core's own fused cross-entropy
  (``cross_entropy_loss_fusion`` with the default ``cross_entropy_fusion_impl = "native"``,
  ``fused_vocab_parallel_cross_entropy``): the unfused loss's fp32 steps compiled into four
  ``torch.compile`` graphs (``loss_kernels.NATIVE_CROSS_ENTROPY_BYTES``).
  Time only; not with ``te_cross_entropy`` (one loss or the other).
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
  it frees the gradients); ``torch/distributed/_composable/fsdp/_fsdp_collectives.py``. Off:
  FSDP1's flat parameter, gathered in place (no copy-out), or Megatron/DeepSpeed buffers.
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
- ``fp8_weight_cast_per_use`` — under an FP8 recipe every use of a linear weight casts it again from
  its 16-bit copy with a fresh dynamic scale: an amax over the weight, then the cast
  (:data:`~.framework_costs.FP8_DYNAMIC_CAST_BYTES` per element), in the forward,
  in a fully recomputed forward and for the backward's input gradient (torchao ``Float8Linear``:
  ``matmul_with_hp_or_float8_args`` saves the high-precision input and weight and casts the weight
  again in the backward, "to have a chance to reuse max(abs(weight)) from the forward" waiting on
  pytorch/pytorch#136267; without FSDP float8 all-gather the gathered weight is 16-bit); in
  memory no FP8 weight copy is held (each cast lives for its GEMM). Off: Transformer Engine,
  whose FP8 weight copies are made once per step and kept across micro-batches (not timed;
  held in the model states).
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
- ``loss_parallel`` — with tensor parallelism the cross-entropy runs on vocabulary-sharded
  logits through DTensor's ``loss_parallel`` (torchtitan: on unless
  ``training.disable_loss_parallel``), whose backward is decomposed into element-wise ops on
  the fp32 log-probabilities (``torch/distributed/tensor/parallel/loss.py``,
  ``_nll_loss_and_log_softmax_backward``: ``zeros_like``, ``exp``, the sum and the product
  with the incoming gradient): with the saved log-probabilities, 4 fp32 buffers of the local
  logits are live at once (:data:`LOSS_PARALLEL_FP32_BUFFERS`), not ``loss_fp32_buffers``.
- ``tp_saves_gathered_input`` — under sequence parallelism a linear layer's autograd keeps its
  all-gathered input (DTensor tensor parallelism: the ``Shard(1)`` -> ``Replicate``
  redistribute before a ``ColwiseParallel`` linear is an ordinary op whose output the ``mm``
  saves; torchtitan's plans), not the sequence shard Megatron saves and gathers again in the
  backward (:func:`stage_core.lower.memory.gathered_input_bytes`).
- ``float8_tp`` — under the ``tensorwise`` FP8 recipe the tensor-parallel all-gathers of FP8
  linear layers' inputs and output gradients carry FP8 data (torchao's ``Float8ColwiseParallel``
  / ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput``, TorchTitan's
  ``enable_float8_tensorwise_tp``), the input cast on the local shard
  (:mod:`~stage_explore.analytical.fp8_gather`). Off: 16-bit gathers unless userbuffers.
- ``funcol_seq_copies`` — DTensor's sequence-parallel all-gathers and reduce-scatters over
  ``tp`` gather / scatter on the sequence dim (``Shard(1)``), which NCCL cannot: PyTorch's
  functional collectives copy the whole gathered tensor (``torch.cat(torch.chunk(res,
  group_size, dim=0), dim=gather_dim)``) or the whole unreduced operand (``torch.cat(torch.chunk(
  self, group_size, dim=scatter_dim))``) on the compute stream
  (``torch/distributed/_functional_collectives.py``; :mod:`~stage_explore.analytical.
  funcol_copies`, which also says what ``torch.compile`` and async TP leave out). Off: Megatron's
  and Transformer Engine's sequence-parallel collectives, which gather and scatter on the
  sequence dim that leads their ``[seq, batch, hidden]`` activations (no copy).
- ``moe_probs_in_activation`` — the router's probabilities scale the experts' activation
  output (the FC2 input) instead of the combined expert outputs, so the combine is a plain
  unpermute that keeps nothing for the backward and the experts' FC2 outputs are not saved:
  Megatron-Core's ``TEGroupedMLP.forward`` passes ``permuted_probs`` into
  ``weighted_bias_swiglu_impl`` (``moe/experts.py``) and the dispatcher unpermutes without
  them. Memory only (the saved bytes of MoE layers whose combine is not recomputed). Off: the
  generator's weighted combine, which saves the expert outputs for the probabilities' gradient.
- ``fp8_param_gather`` — under an FP8 recipe the parameters of the FP8 linear layers are stored
  only as FP8 (Transformer Engine ``Float8Tensor`` parameters; Megatron ``--fp8-param-gather``:
  "keep the compute param in fp8 (do not use any other intermediate dtype) and perform the
  param all-gather in fp8"); the 16-bit copy of those weights is not held, the fp32 master
  stays in the optimizer. Off (Megatron-Core's default): the 16-bit weights and their FP8 copies.
- ``fp8_amax_reduction`` (``"off"``, ``"tp_cp"`` or ``"tp_dp_cp"``) — under the per-tensor
  delayed-scaling FP8 recipe (``fp8_recipe`` ``delayed``) the amaxes of a model chunk's FP8
  tensors are all-reduced (max) over this group once per forward and once per backward of
  the chunk, per micro-batch, on the compute stream: Megatron-Core's ``TransformerBlock``
  runs its layers inside one Transformer Engine ``fp8_autocast`` whose ``fp8_group`` is
  ``parallel_state.get_amax_reduction_group(with_context_parallel=True)`` — the tensor-,
  data- and context-parallel group of the pipeline stage (``"tp_dp_cp"``), or the tensor- and
  context-parallel group under ``--tp-only-amax-red`` (``"tp_cp"``); TE reduces at the exit
  of the autocast (``FP8GlobalStateManager.fp8_autocast_exit`` →
  ``reduce_and_update_fp8_tensors(forward=True)``) and at the end of the chunk's backward
  (``hook_for_bwd_amax_reduction``), each a ``torch.distributed.all_reduce(..., op=MAX,
  async_op=False)`` of the concatenated amaxes (transformer_engine/pytorch/fp8.py). A message
  of a few hundred bytes: latency, timed as NCCL's tuner runs it (:func:`~stage_explore.
  analytical.collectives.latency_bound_all_reduce_s`). Off: no reduction timed (a framework
  without TE's delayed scaling, or ``DelayedScaling(reduce_amax=False)``).
- ``te_current_scaling`` — the ``tensorwise`` recipe's casts run as Transformer Engine's
  ``Float8CurrentScalingQuantizer`` (Megatron-Core ``--fp8-recipe tensorwise``, TE
  ``Float8CurrentScaling``): ``quantize_impl`` (``pytorch/csrc/quantizer.cpp``) runs
  ``nvte_compute_amax`` as a kernel of its own, then, when the quantizer has an amax reduction
  group, ``amax_reduction_group->allreduce(...)->wait()`` (MAX, 4 bytes), then
  ``nvte_compute_scale_from_amax`` and the cast ``nvte_quantize_v2``; a fused norm + linear
  layer's norm computes the amax itself (``normalization.cpp`` ``FUSED_NORM_AMAX_FP8``, then
  ``quantize_with_amax``). ``Linear`` / ``LayerNormLinear`` / ``LayerNormMLP``
  (``_customize_quantizers_float8_current_scaling``) give a column-parallel layer's input
  quantizer and a row-parallel layer's output-gradient quantizer the tensor-parallel group under
  sequence parallelism. Timed: the amax kernel (``memory_kernel_s`` beside the read the cast
  already charged; none for a norm's output, whose read is not charged twice:
  :func:`~stage_explore.analytical.fp8_casts.quantize_cost`) and one latency-bound all-reduce
  per such gathered operand on the compute stream
  (:func:`~stage_explore.analytical.fp8_gather.amax_reductions`); the scale kernel (a few
  threads) is not. Off: a ``tensorwise`` cast is one kernel whose amax read is charged as bytes
  (torchao's Float8, whose compiled casts were not read).
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
- ``pipeline_outputs_kept`` — under pipeline parallelism a stage keeps the data of every output
  it sent until that micro-batch's backward: Megatron-Core's ``deallocate_pipeline_outputs``
  False (``ModelParallelConfig``'s default), which NeMo 1.x sets in
  ``MegatronBaseModel.build_model_parallel_config`` ("not supported in NeMo"), so the
  schedules' ``deallocate_output_tensor`` returns at once and each output in
  ``output_tensors`` keeps its data, not a one-element placeholder. One boundary-sized tensor
  per chunk micro-batch in flight, on every chunk but the one holding the loss (its output is
  not sent). Megatron-LM (``core_transformer_config_from_args``), NeMo 2.0's ``GPTConfig`` and
  Megatron-Bridge's model providers set it True: off. Memory only.
- ``collectives_wait_for_issued_compute`` — a collective issued from the compute stream
  starts only when every kernel issued before it on that stream has finished, not as soon as
  its own input is ready: PyTorch's ``ProcessGroupNCCL::collective`` makes the NCCL stream wait
  for the issuing stream (``syncStream``, "let NCCL streams wait for input tensors allocation
  streams"), ``async_op`` or not (:func:`~stage_explore.analytical.blocktime.time_block`). So
  Megatron-LM 2021's synchronous all-reduce of fc1's input gradient (``mpu/mappings.py``
  ``_reduce`` in the backward of ``copy_to_tensor_model_parallel_region``, run after the whole
  backward of the linear: input gradient, then weight gradient) waits for the weight-gradient
  GEMM. On in the profiles whose tensor-parallel collectives are plain ``torch.distributed``
  calls on the compute stream (megatron-lm-2021, deepspeed) and in megatron-core, whose
  Transformer Engine layers issue them that way without ``tp_comm_overlap`` and whose
  userbuffers kernels, with it, start on a stream that first waits for the main stream
  (``CommOverlapBase::bulk_overlap`` / ``split_overlap_rs``: ``cudaEventRecord(_start_comm,
  stream_main)``, ``cudaStreamWaitEvent(_stream_comm, ...)``); off in the profiles not yet
  reviewed.
- ``ub_bulk_sm_margin`` — with ``tp_comm_overlap``, the weight-gradient GEMMs beside a
  userbuffers "bulk" reduce-scatter are launched on the SMs its kernel leaves
  (``set_sm_margin``; :func:`~stage_explore.analytical.overlap.sm_margin`). On: Transformer
  Engine's default for a bulk overlap (``initialize_ub``: ``"set_sm_margin": not method ==
  "ring_exchange"``), what Megatron-LM runs without ``--tp-comm-overlap-cfg`` and NeMo without
  ``ub_tp_comm_overlap_cfg``. Off (set per row in setups.toml): a recipe that names one of the
  per-GEMM userbuffers configs, which set ``set_sm_margin`` 0 / False on every bulk overlap
  (NeMo-Framework-Launcher ``conf/training/tp_overlap/ub_cfg_*.yaml``, NeMo
  ``llm/recipes/tp_overlap_configs/userbuffers.py``): the GEMMs keep every SM and lose only the
  kernel's SMs while it runs, ``min(bulk, wgrad) · UB_COMM_SMS / sm_count``
  (:func:`~stage_explore.analytical.overlap.ub_bulk_share_s`).
- ``ub_pipeline_sm_margin`` — the same for the GEMM chunks pipelined with a userbuffers
  reduce-scatter (``proj_fprop``, ``fc2_fprop``). On: Transformer Engine's default since its
  userbuffers refactor (NVIDIA/TransformerEngine#1067, late 2024: ``get_default_config``,
  ``"set_sm_margin": not method == "ring_exchange"``) and every NeMo / Megatron-Bridge config's
  pipelined overlap. Off: the Transformer Engine of mid-2024 (Megatron-Core r0.8; its
  ``module/base.py`` between TransformerEngine#755, April 2024, and #914, June 2024), whose
  ``initialize_ub`` built every default overlap with ``add_ub(..., set_sm_margin: int = 0)``
  (bulk and pipeline alike, the bulk one too: set ``ub_bulk_sm_margin`` off with it); the
  chunks then run on every SM and lose the kernel's SMs only while it runs, as
  ``ub_bulk_share_s`` charges a bulk overlap.
- ``ub_multicast`` — with ``tp_comm_overlap``, Transformer Engine's userbuffers "pipeline"
  and "bulk" kernels (the pipelined forward reduce-scatters, the backward bulk reduce-scatters
  and the bulk all-gathers of a layer's input for its weight gradient) run on CUDA multicast,
  NVLink SHARP's ``multimem.ld_reduce`` / ``multimem.st``, on a GPU of compute capability 9.0
  or newer unless the launch sets ``UB_SKIPMC`` (``create_communicator_grouped2``, TE
  userbuffers-host.cpp), and move ``S`` bytes in their busier direction at the network dim's
  ``nvls_efficiency`` (:mod:`~stage_explore.analytical.ub_multicast`). On: TE's default; a
  dim without ``nvls_efficiency`` (A100) times them as rings either way. Off: ``UB_SKIPMC=1``
  (IPC-handle kernels, timed as rings).
- ``ub_proj_fprop_fp8_buf`` / ``ub_fc2_fprop_fp8_buf`` — with ``tp_comm_overlap`` and an FP8
  run, the recipe sets ``fp8_buf`` on the pipelined ``proj_fprop`` / ``fc2_fprop``
  reduce-scatter (TE ``ub_cfgs``; TE's default is FP8 buffers for the all-gathers only): its
  GEMM chunks write FP8 into the userbuffer and ``reducescatter2_userbuff_stridedoutput_fp8``
  reduces it, one byte per element and without multicast (no FP8 multicast kernel in
  ``userbuffers.cu``; :mod:`~stage_explore.analytical.ub_multicast`). Off: TE's default.
  Honoured by TE 1.6–1.x (NVIDIA/TransformerEngine#750) and from 2.2 (#1633, which restored it
  after the 2.0 refactor).
- ``ub_proj_fprop_atomic_gemm`` / ``ub_fc2_fprop_atomic_gemm`` — with ``tp_comm_overlap`` and
  an FP8 run, the recipe sets ``atomic_gemm`` on the pipelined ``proj_fprop`` / ``fc2_fprop``
  reduce-scatter: one atomic GEMM signals its chunks to ``reducescatter2_userbuff_strided_
  atomic`` / ``_multiatomic`` (TE ``atomic_gemm_overlap_rs``), which have no multicast branch;
  timed as a ring of the buffer's bytes. Off: TE's default.
- ``ub_proj_fprop_method`` / ``ub_fc2_fprop_method`` — with ``tp_comm_overlap``, the
  userbuffers method of the forward reduce-scatter after the attention's output projection /
  the MLP's fc2 (Transformer Engine ``ub_cfgs`` ``proj_fprop`` / ``fc2_fprop`` ``method``).
  ``pipeline``: TE's default (``initialize_ub``: 4 splits, 16 SMs), what
  :mod:`~stage_explore.analytical.overlap` times with :data:`~stage_explore.analytical.overlap.
  UB_PIPELINE_SPLITS`. ``ring_exchange``: ``CommOverlapP2PBase::split_overlap_rs`` — ``tp``
  GEMM chunks, each chunk's partial result sent to its peer by copy engine while the next
  computes, then one reduction kernel over the received chunks; the chunks on
  ``sm_count - 1`` SMs (the recipes' ``num_sm=1, set_sm_margin=True``) and concurrent on any
  queue count. Set per row (setups.toml) where the recipe's userbuffers config names it
  (Megatron-Bridge / NeMo 2.0 ``userbuffers_fp8_*`` configs: both).
- ``cuda_device_max_connections`` — the launch environment's ``CUDA_DEVICE_MAX_CONNECTIONS``
  (hardware work queues per device). 1: Megatron-LM asserts it whenever tp > 1 or cp > 1 before
  Blackwell (``megatron/training/arguments.py`` ``validate_args``: "CUDA_DEVICE_MAX_CONNECTIONS
  requirement no longer exists since the Blackwell architecture", ``get_device_arch_version() <
  10``), NeMo's ``PerfEnvPlugin`` of early 2025 sets it on every GPU; later Megatron-Bridge /
  NeMo performance plugins (``_set_num_cuda_device_max_connections``) set 32 on sm100 and newer
  "to avoid serialization of streams". Only its effect on the userbuffers pipelined
  reduce-scatter is modelled: above 1, the GEMM chunks Transformer Engine issues on three
  streams fill each other's last waves
  (:func:`~stage_explore.analytical.overlap.concurrent_chunks`); at 1 they run in issue order,
  each with its own waves. Set per row (setups.toml) where the recipe's launcher is read.
- ``micro_pipeline_tp`` — with ``tp_comm_overlap``, the overlap is PyTorch's asynchronous TP
  (TorchTitan ``parallelism.enable_async_tensor_parallel``: Inductor's ``_micro_pipeline_tp``
  pass), which fuses only an all-gather read as a GEMM's first operand and a reduce-scatter of
  one GEMM's output; the other tensor-parallel collectives (the backward's reduce-scatters of
  the summed q/k/v and w1/w3 input gradients, the gathers a weight gradient alone reads) stay
  plain collectives on the path
  (:mod:`~stage_explore.analytical.micro_pipeline_tp`). Off: Transformer Engine's userbuffers,
  which overlap every tensor-parallel gather and scatter of a layer.
- ``pipelining_stage_buffers`` — pipeline stages are ``torch.distributed.pipelining``
  ``PipelineStage`` s (torchtitan): each stage allocates, once and for the whole run, a receive
  buffer for the input of every micro-batch (``_prepare_forward_infra``: one
  ``_make_tensor_from_meta`` per micro-batch and input, stages after the first) and one for the
  output gradient of every micro-batch (``_prepare_backward_infra``, stages before the last),
  and keeps each micro-batch's output in ``fwd_cache`` until its backward (Megatron frees the
  sent output's data, ``deallocate_output_tensor``). Beside the saved activations a stage
  holds ``2·m`` boundary-sized buffers (``m`` micro-batches), the first stage ``m`` plus the
  outputs in flight (:func:`~stage_explore.analytical.framework_costs.pipelining_buffer_bytes`).
  Memory only.
- ``ddp_bucket_scales_with_dp`` — the gradient bucket is ``max(40M, 1M · dp · cp)`` parameters
  when the config leaves ``grad_bucket_bytes`` at its default (Megatron-Core's
  ``DistributedDataParallel``, :mod:`~stage_explore.analytical.buckets`); off: the config's bytes.
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

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from stage_core.errors import ConfigError
from stage_explore.analytical.eager import EAGER_MODULES
from stage_explore.analytical.fused_fc1 import FC1_SCOPES

#: Each option and the flag (or config key) the framework exposes it under.
OPTION_FLAGS: dict[str, str] = {
    "overlap_grad_reduce": "Megatron --overlap-grad-reduce / DeepSpeed overlap_comm",
    "overlap_param_gather": "Megatron --overlap-param-gather",
    "tp_comm_overlap": "Megatron --tp-comm-overlap",
    "moe_comm_overlap": "Megatron --overlap-moe-expert-parallel-comm",
    "moe_shared_expert_overlap": "Megatron --moe-shared-expert-overlap",
    "pipeline_p2p_blocking": "Megatron --overlap-p2p-communication (off = blocking)",
    "pipeline_scatter_gather": "Megatron-LM pipeline scatter/gather (Narayanan et al. §4.1)",
    "tp_async_grad_allreduce": "Megatron --async-tensor-model-parallel-allreduce (no SP)",
    "pipeline_p2p_separate": "DeepSpeed PipelineEngine Send/Recv{Activation,Grad} instructions",
    "zero3_gathers": "DeepSpeed ZeRO-3 + activation checkpointing (3) / FSDP (2)",
    "zero3_flat_ring": "DeepSpeed ZeRO-3 (2021) flat data-parallel all-gathers",
    "zero3_live_elements": "DeepSpeed stage3_max_live_parameters (0: FSDP whole units)",
    "zero3_prefetch_elements": "DeepSpeed stage3_prefetch_bucket_size",
    "zero3_prefetch_units": "FSDP backward_prefetch / limit_all_gathers, FSDP2 implicit prefetch",
    "attention_kernel": "FlashAttention generation (flash-attn / TE / PyTorch SDPA backend)",
    "sm100_attention_kernel": "SDPA backend priority on sm100+ (torchtitan: cuDNN first)",
    "fused_elementwise": "Megatron fused kernels / torch.compile (off: eager PyTorch)",
    "fused_qkv": "Megatron query_key_value / linear_qkv (off: separate q, k, v linears)",
    "fused_fc1": "Megatron linear_fc1 / dense_h_to_4h, AutoModel gate_and_up_projs (2·ffn)",
    "rope_fusion": "Megatron-Core apply_rope_fusion (off: rope_utils' unfused ops, eager)",
    "eager_modules": "eager module code: generator / torchtitan / llm-foundry MPT / fms Llama / …",
    "runtime_reserved_bytes": "CUDA context + cuBLAS workspace + NCCL buffers",
    "allocator_overhead": "PyTorch caching allocator (reserved / allocated - 1)",
    "moe_load_imbalance": "MoE routing: max/mean tokens per expert-parallel rank (1 = balanced)",
    "grad_accumulation": "Megatron --gradient-accumulation-fusion (none) / add / DeepSpeed bf16",
    "moe_deepep": "Megatron --moe-enable-deepep (flex dispatcher on DeepEP)",
    "local_batch_size": "AutoModel step_scheduler.local_batch_size (a PP schedule per batch)",
    "moe_fake_balanced_gate": "AutoModel fake_balanced_gate (token t to experts k·t … k·t+k−1)",
    "moe_sort_chunks": "Megatron alltoall dispatcher's sort_chunks_by_idxs (local experts > 1)",
    "moe_fp8_padding": "Megatron TEGroupedMLP Fp8Padding (off: --moe-router-padding-for-fp8)",
    "moe_split_quantize": "Megatron --moe-grouped-gemm: TE GroupedLinear split_quantize",
    "te_cross_entropy": "Megatron cross_entropy_loss_fusion + cross_entropy_fusion_impl=te",
    "native_cross_entropy": "Megatron cross_entropy_loss_fusion, cross_entropy_fusion_impl=native",
    "loss_fp32_buffers": "fp32 logits copies of the loss (F.cross_entropy on .float() logits)",
    "pp_unsharded_params": "FSDP2 + PP: reshard_after_forward=False, no-sync backward",
    "pp_held_sync_per_schedule": "AutoModel wrap_outer_model=True: FSDP stage synced per schedule",
    "cp_merge_fp32": "torch context_parallel (per-chunk SDPA, fp32 merges, dK/dV ring)",
    "cp_traced_ring": "torchtitan training.compile + CP (traced waits; Inductor reorder off)",
    "te_cp_merge": "TE AttnFuncWithCP p2p (per-step out corrections, dQ/dKV accumulation)",
    "te_cp_overlap": "TE AttnFuncWithCP p2p: step i's attention beside step i+1's K/V exchange",
    "fsdp_param_fp32": "FSDP MixedPrecision param_dtype None (Composer 'DEFAULT' of 2023)",
    "fsdp2_copies": "FSDP2 fully_shard all-gather copy-out / reduce-scatter copy-in",
    "fsdp1_flat_grad": "FSDP1 FlatParameter: the views' gradients concatenated per backward",
    "fsdp_root_unit": "FSDP root unit (embedding, final norm, output) gathered before forward",
    "optimizer_foreach": "torch.optim.AdamW(foreach=True) + clip_grad_norm_(foreach=True)",
    "fp8_weight_cast_per_use": "torchao Float8Linear dynamic scaling (weights cast at each use)",
    "fsdp_fp32_shards": "FSDP MixedPrecision: sharded params kept in fp32 (no 16-bit shard)",
    "bf16_model_states": "AutoModel MoE initialize_weights: FSDP shards cast to bf16 (no master)",
    "loss_parallel": "torchtitan loss parallel (training.disable_loss_parallel off, tp > 1)",
    "fp8_param_gather": "Megatron --fp8-param-gather (FP8 parameters, no 16-bit copy)",
    "tp_saves_gathered_input": "DTensor TP + SP: a linear saves its all-gathered input",
    "float8_tp": "torchao Float8 TP (enable_float8_tensorwise_tp): FP8 all-gathers",
    "funcol_seq_copies": "DTensor SP funcol all-gather / reduce-scatter cat copies (dim 1)",
    "moe_probs_in_activation": "Megatron-Core TEGroupedMLP: router probs in the weighted SwiGLU",
    "ddp_bucket_scales_with_dp": "Megatron-Core DDP bucket_size default max(40M, 1M x dp)",
    "fp8_amax_reduction": "TE DelayedScaling amax all-reduce group (Megatron --tp-only-amax-red)",
    "te_current_scaling": "TE Float8CurrentScaling quantizers (Megatron --fp8-recipe tensorwise)",
    "distributed_fused_adam": "NeMo 1.x optim.name distributed_fused_adam, its optim.dtype",
    "pipelining_stage_buffers": "torch.distributed.pipelining PipelineStage recv buffers",
    "pipeline_outputs_kept": "Megatron-Core deallocate_pipeline_outputs False (NeMo 1.x)",
    "ddp_bucket_first_chunk_only": "Megatron-Core DDP disable_bucketing (chunk > 0, pp rank > 0)",
    "collectives_wait_for_issued_compute": "torch ProcessGroupNCCL: NCCL stream waits at issue",
    "ub_bulk_sm_margin": "TE userbuffers bulk overlap set_sm_margin (ub_tp_comm_overlap_cfg)",
    "ub_pipeline_sm_margin": "TE userbuffers pipelined overlap set_sm_margin (TE >= #1067)",
    "cuda_device_max_connections": "CUDA_DEVICE_MAX_CONNECTIONS (launch environment)",
    "ub_multicast": "TE userbuffers CUDA multicast on sm_90+ (off with UB_SKIPMC=1)",
    "ub_proj_fprop_fp8_buf": "TE userbuffers ub_cfgs proj_fprop fp8_buf (pipeline method)",
    "ub_fc2_fprop_fp8_buf": "TE userbuffers ub_cfgs fc2_fprop fp8_buf (pipeline method)",
    "ub_proj_fprop_atomic_gemm": "TE userbuffers ub_cfgs proj_fprop atomic_gemm",
    "ub_fc2_fprop_atomic_gemm": "TE userbuffers ub_cfgs fc2_fprop atomic_gemm",
    "ub_proj_fprop_method": "TE userbuffers ub_cfgs proj_fprop method",
    "ub_fc2_fprop_method": "TE userbuffers ub_cfgs fc2_fprop method",
    "micro_pipeline_tp": "torchtitan enable_async_tensor_parallel (Inductor _micro_pipeline_tp)",
}

#: The values of ``fp8_amax_reduction``: no reduction timed, Megatron's ``--tp-only-amax-red``
#: group (tensor- and context-parallel) or its default (tensor-, data- and context-parallel).
FP8_AMAX_REDUCTION = ("off", "tp_cp", "tp_dp_cp")

#: The values of ``distributed_fused_adam``: off (Megatron-Core's distributed optimizer) or the
#: optimizer-state dtype of Apex's ``DistributedFusedAdam``.
DISTRIBUTED_FUSED_ADAM = ("off", "fp32", "bf16")

#: fp32 logits-sized buffers DTensor's ``loss_parallel`` cross-entropy holds at its backward's
#: peak (``loss_parallel``): the saved log-probabilities, and ``zeros_like``, ``exp`` and their
#: sum in ``_nll_loss_and_log_softmax_backward`` (the product reuses no buffer while the sum is
#: live); torch/distributed/tensor/parallel/loss.py.
LOSS_PARALLEL_FP32_BUFFERS = 4

#: The values of ``ub_proj_fprop_method`` / ``ub_fc2_fprop_method``: Transformer Engine's
#: userbuffers methods for a forward reduce-scatter (``initialize_ub``).
UB_RS_METHODS = ("pipeline", "ring_exchange")

#: The values of ``grad_accumulation``.
GRAD_ACCUMULATION = ("none", "add", "deepspeed", "fused-linear")

# The options whose value is one of a fixed set of names (checked by ``__post_init__``).
OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    "eager_modules": EAGER_MODULES,
    "distributed_fused_adam": DISTRIBUTED_FUSED_ADAM,
    "fused_fc1": FC1_SCOPES,
    "fp8_amax_reduction": FP8_AMAX_REDUCTION,
    "grad_accumulation": GRAD_ACCUMULATION,
    "ub_proj_fprop_method": UB_RS_METHODS,
    "ub_fc2_fprop_method": UB_RS_METHODS,
}

GIB = 2**30
MIB = 2**20
#: Bytes of an fp32 element (``fsdp_param_fp32``: the sharded master parameters gathered as is).
FP32_BYTES = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkProfile:
    """One framework's behaviours (module docstring); ``source`` names where they come from."""

    name: str
    description: str
    source: str
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    moe_comm_overlap: bool
    moe_shared_expert_overlap: bool
    pipeline_p2p_blocking: bool
    pipeline_scatter_gather: bool
    zero3_gathers: int
    zero3_flat_ring: bool
    zero3_live_elements: int
    zero3_prefetch_elements: int
    attention_kernel: str | None
    fused_elementwise: bool
    runtime_reserved_bytes: int
    allocator_overhead: float
    moe_load_imbalance: float = 1.0  # balanced routing (--moe-router-force-load-balancing)
    grad_accumulation: str = "none"  # no separate accumulation pass timed (module docstring)
    loss_fp32_buffers: int = 0  # the generator's own count of the loss's tensors
    pp_unsharded_params: bool = False  # parameters resharded after each forward and backward
    pp_held_sync_per_schedule: bool = False  # a held stage synced once per step
    cp_merge_fp32: bool = False  # context-parallel attention merged inside its kernel
    cp_traced_ring: bool = False  # torch's ring run eagerly (its collectives overlapped)
    moe_deepep: bool = False  # NCCL all-to-all dispatcher, Megatron-Core's default
    moe_fake_balanced_gate: bool = False  # random balanced routing (Megatron's forced balance)
    moe_sort_chunks: bool = False  # the received tokens land in expert order (no chunk sort)
    moe_fp8_padding: bool = False  # FP8 expert GEMMs take the routed tokens as they are
    moe_split_quantize: bool = False  # one cast kernel per grouped operand (no GroupedLinear)
    te_cross_entropy: bool = False  # Megatron's unfused fp32 loss (CROSS_ENTROPY_BYTES)
    native_cross_entropy: bool = False  # ditto, not the compiled fused one
    local_batch_size: int = 0  # the step's micro-batches in one pipeline schedule
    fsdp_param_fp32: bool = False  # ZeRO-3 / FSDP parameters gathered in the 16-bit type
    fsdp2_copies: bool = False  # ZeRO-3 collectives gather / scatter in place (no copies timed)
    fsdp1_flat_grad: bool = False  # no flat-gradient concatenation timed
    fsdp_root_unit: bool = False  # embedding and head collectives beside their own blocks
    optimizer_foreach: bool = False  # Apex fused Adam with Megatron's bookkeeping
    fp8_weight_cast_per_use: bool = False  # FP8 weight copies kept across micro-batches (TE)
    eager_modules: str = "generator"  # eager ops as the generator emits them (one kernel each)
    tp_async_grad_allreduce: bool = False  # backward tp all-reduces on the path (2021)
    pipeline_p2p_separate: bool = False  # Megatron's batched send/receive exchange
    fsdp_fp32_shards: bool = False  # ZeRO-3 ranks keep the 16-bit shard (DeepSpeed, Megatron)
    bf16_model_states: bool = False  # fp32 master weights, gradients and moments
    loss_parallel: bool = False  # the loss's fp32 buffers are loss_fp32_buffers
    fp8_param_gather: bool = False  # 16-bit weights beside their FP8 copies (Megatron default)
    tp_saves_gathered_input: bool = False  # the sequence shard saved, gathered again (Megatron)
    float8_tp: bool = False  # tensor-parallel gathers 16-bit but under userbuffers
    funcol_seq_copies: bool = False  # sequence-dim-first SP collectives (no layout copies)
    moe_probs_in_activation: bool = False  # the weighted combine saves the expert outputs
    ddp_bucket_scales_with_dp: bool = False  # ParallelConfig.grad_bucket_bytes as given
    distributed_fused_adam: str = "off"  # Megatron-Core's distributed optimizer (fp32 state)
    fp8_amax_reduction: str = "off"  # no FP8 amax all-reduce timed
    te_current_scaling: bool = False  # a tensorwise cast's amax read charged as its bytes
    pipelining_stage_buffers: bool = False  # receive buffers per use, sent outputs freed
    pipeline_outputs_kept: bool = False  # a sent output's data freed (deallocate_output_tensor)
    ddp_bucket_first_chunk_only: bool = False  # every chunk of every stage bucketed
    collectives_wait_for_issued_compute: bool = False  # starts when its input is ready
    ub_bulk_sm_margin: bool = True  # TE's default: bulk-overlapped GEMMs on sm - 16 SMs
    ub_pipeline_sm_margin: bool = True  # TE's default: pipelined GEMM chunks on sm - 16 SMs
    cuda_device_max_connections: int = 1  # one hardware queue: pipelined chunks in order
    ub_multicast: bool = True  # TE's default: pipeline / bulk kernels on NVLink SHARP
    ub_proj_fprop_fp8_buf: bool = False  # TE's default: a 16-bit buffer for the reduce-scatter
    ub_fc2_fprop_fp8_buf: bool = False  # and for fc2_fprop's
    ub_proj_fprop_atomic_gemm: bool = False  # TE's default: no atomic GEMM
    ub_fc2_fprop_atomic_gemm: bool = False
    ub_proj_fprop_method: str = "pipeline"  # TE's default userbuffers method for proj_fprop
    ub_fc2_fprop_method: str = "pipeline"  # and for fc2_fprop
    te_cp_merge: bool = False  # ring context-parallel merges inside the attention kernel
    te_cp_overlap: bool = False  # ring exchanges before the attention, not beside its steps
    sm100_attention_kernel: str | None = None  # attention_kernel on every GPU
    fused_qkv: bool = False  # q, k and v as three GEMMs (separate linears)
    fused_fc1: str = "none"  # gate and up as two GEMMs (separate linears), their dgrads summed
    rope_fusion: bool = True  # the rotary embedding as the generator counts it (one kernel)
    micro_pipeline_tp: bool = False  # tp_comm_overlap overlaps every tp gather and scatter (TE)
    zero3_prefetch_units: int = 1  # a unit's gather beside the compute of the unit before

    @property
    def ub_ring_exchange_fprop(self) -> frozenset[str]:
        """The userbuffers names (``proj``, ``fc2``) whose forward reduce-scatter runs as a
        ring exchange (``ub_proj_fprop_method`` / ``ub_fc2_fprop_method``)."""
        methods = {"proj": self.ub_proj_fprop_method, "fc2": self.ub_fc2_fprop_method}
        return frozenset(name for name, method in methods.items() if method == "ring_exchange")

    def attention_kernel_on(self, peak_flops_per_s: Mapping[str, float]) -> str | None:
        """The attention kernel the framework runs on an accelerator with these peaks:
        ``sm100_attention_kernel`` on Blackwell and later (an ``mxfp8`` peak, which only
        compute capability 10.0+ tensor cores have), else ``attention_kernel``."""
        if self.sm100_attention_kernel is not None and "mxfp8" in peak_flops_per_s:
            return self.sm100_attention_kernel
        return self.attention_kernel

    def __post_init__(self) -> None:
        for option in OPTION_FLAGS:
            value = getattr(self, option)
            if option == "zero3_gathers":
                if isinstance(value, bool) or value not in (2, 3):
                    raise ConfigError(
                        f"framework {self.name!r}: `zero3_gathers` must be 2 or 3, "
                        f"but got {value!r}"
                    )
            elif option in (
                "runtime_reserved_bytes",
                "zero3_live_elements",
                "zero3_prefetch_elements",
                "zero3_prefetch_units",
                "loss_fp32_buffers",
                "local_batch_size",
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be an int >= 0, "
                        f"but got {value!r}"
                    )
            elif option == "cuda_device_max_connections":
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
                    raise ConfigError(  # CUDA's hardware work queues per device: 1 to 32
                        f"framework {self.name!r}: `cuda_device_max_connections` must be an int "
                        f"from 1 to 32, but got {value!r}"
                    )
            elif option in ("attention_kernel", "sm100_attention_kernel"):
                if value is not None and not (isinstance(value, str) and value):
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be a kernel name or "
                        f"None, but got {value!r}"
                    )
            elif option == "allocator_overhead":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not (0 <= value < 1)
                ):
                    raise ConfigError(
                        f"framework {self.name!r}: `allocator_overhead` must be a number in "
                        f"[0, 1), but got {value!r}"
                    )
            elif option == "moe_load_imbalance":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not (1 <= value < float("inf"))
                ):
                    raise ConfigError(
                        f"framework {self.name!r}: `moe_load_imbalance` (max/mean tokens per "
                        f"expert-parallel rank) must be a finite number >= 1, but got {value!r}"
                    )
            elif option in OPTION_CHOICES:
                choices = OPTION_CHOICES[option]
                if value not in choices:
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be one of "
                        f"{', '.join(choices)}, but got {value!r}"
                    )
            elif not isinstance(value, bool):
                raise ConfigError(
                    f"framework {self.name!r}: `{option}` ({OPTION_FLAGS[option]}) must be "
                    f"true or false, but got {value!r}"
                )
        if self.te_cross_entropy and self.native_cross_entropy:
            raise ConfigError(
                f"framework {self.name!r}: `te_cross_entropy` and `native_cross_entropy` are two "
                "values of Megatron-Core's cross_entropy_fusion_impl; set at most one"
            )
        if not self.rope_fusion and self.eager_modules != "megatron-core":
            # only Megatron-Core's module code runs the unfused RoPE op by op (eager_megatron);
            # every other eager table counts its framework's own rotary code already
            raise ConfigError(
                f"framework {self.name!r}: `rope_fusion` false needs eager_modules "
                f"'megatron-core' (Megatron-Core's unfused rope_utils), but got eager_modules="
                f"{self.eager_modules!r}"
            )

    def with_overrides(self, overrides: Mapping[str, Any]) -> FrameworkProfile:
        """This profile with some options replaced (validated like the profile itself)."""
        if not isinstance(overrides, Mapping):
            raise ConfigError(
                f"framework overrides must be a table of option = value, but got {overrides!r}"
            )
        unknown = sorted(set(overrides) - set(OPTION_FLAGS))
        if unknown:
            known = ", ".join(OPTION_FLAGS)
            raise ConfigError(f"unknown framework option {unknown[0]!r}; known: {known}")
        if not overrides:
            return self
        return replace(self, **dict(overrides))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
