"""Training-framework behaviours that decide real step times: the registry :data:`FRAMEWORKS`
of shipped profiles (Megatron-LM 2021, Megatron-Core, DeepSpeed, PyTorch FSDP, NeMo AutoModel,
IBM fms-fsdp, llm-foundry 2023, TorchTitan, InternEvo), :data:`DEFAULT_FRAMEWORK` and
:func:`get_framework`. The profile type and its options are in
:mod:`stage_explore.analytical.framework_profile`; what a profile's options imply in bytes and
micro-batches in :mod:`stage_explore.analytical.framework_costs`.
"""

from __future__ import annotations

from dataclasses import replace

from stage_core.errors import ConfigError
from stage_explore.analytical.framework_profile import GIB, FrameworkProfile
from stage_explore.analytical.profile_internevo import INTERNEVO

#: The shipped profiles. Memory besides tensors (``runtime_reserved_bytes``): a PyTorch
#: process holds its CUDA context (the driver and the loaded kernels: ~300 MB with CUDA >= 11.7's
#: lazy module loading, over 1,000 MB before it, when every kernel of the loaded libraries was
#: loaded at start — a PyTorch maintainer's figures, pytorch/pytorch#107667; the 2021 runs of
#: the deepspeed profile predate lazy loading), cuBLAS workspaces and NCCL's communicator
#: buffers (``NCCL_BUFFSIZE``, 4 MiB by default, per channel and peer;
#: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)
#: for each of a 3-D job's communicators: 1 GiB in all is an estimate from those parts, not a
#: measured figure; of it only the cuBLAS workspaces (2 x 32 MiB, memory_kinds.py) are inside
#: the caching allocator, so inside a reserved figure (s33 memkind).
#: ``allocator_overhead`` 0.05: PyTorch's caching allocator keeps freed blocks
#: reserved (https://pytorch.org/docs/stable/notes/cuda.html#memory-management), so what a
#: process holds exceeds the tensors' peak; 5 % is an estimate, not a measurement. Checked
#: against the allocator's rules in s35 alloc (docs/analytical.md). Its rounding is the only
#: part the tensor sizes fix (c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize 512 B,
#: kSmallBuffer 2 MiB, kLargeBuffer 20 MiB for 1-10 MiB requests, kRoundLarge 2 MiB); with
#: expandable segments (torchtitan's run_train.sh sets them), 2 / 20 MiB pages mapped into one
#: segment per pool and stream, a third of a percent of a torchtitan peak at most; without
#: them, under 2 MiB per live block of 10 MiB or more. The rest is fragmentation, set by the
#: allocation order. Public reserved-over-active peaks span 3-36 % at peaks over 5 GB
#: (huggingface/peft#1469 3.0-10.9 %; pytorch/torchtitan#135 20-36 % before expandable
#: segments), none in the rows' setting, so 5 % stays. The published
#: Megatron-LM 2021-22 peaks (Korthikanti et al. Figure 1) are the tensors' own, so that profile
#: adds neither. DeepSpeed ZeRO-3's high cross-node gather overhead at small per-GPU batch is the
#: motivation of ZeRO++ (https://www.microsoft.com/en-us/research/blog/deepspeed-zero-a-leap-in-
#: speed-for-llm-and-chat-model-training-with-4x-less-communication/); ``zero3_flat_ring`` is the
#: mechanism chosen to express it, and NAR21-T2-1..6 (the ZeRO-3 rows) are declared calibration
#: rows for that choice.
FRAMEWORKS: dict[str, FrameworkProfile] = {
    profile.name: profile
    for profile in (
        FrameworkProfile(
            name="megatron-lm-2021",
            description="Megatron-LM of 2021-22 (Narayanan et al. SC'21, Korthikanti et al. 2022)",
            source="https://github.com/NVIDIA/Megatron-LM/tree/v2.5 (examples/sc21)",
            overlap_grad_reduce=True,  # torch DDP buckets / local DDP after each chunk
            overlap_param_gather=False,
            tp_comm_overlap=False,
            moe_comm_overlap=False,
            moe_shared_expert_overlap=False,
            pipeline_p2p_blocking=True,
            pipeline_scatter_gather=True,
            zero3_gathers=2,
            zero3_flat_ring=False,
            zero3_live_elements=0,
            zero3_prefetch_elements=0,
            attention_kernel=None,  # unfused core attention (the generator's GPT blocks)
            fused_elementwise=True,
            # megatron/model/transformer.py ParallelAttention: query_key_value =
            # mpu.ColumnParallelLinear(args.hidden_size, 3 * projection_size, ...), one GEMM
            fused_qkv=True,
            # ParallelMLP.dense_h_to_4h: ffn_hidden_size * 2 with gated_linear_unit (--swiglu),
            # one GEMM for gate and up (GELU models: nothing to fuse)
            fused_fc1="all",
            runtime_reserved_bytes=0,  # the published peaks are allocator figures
            allocator_overhead=0.0,
            # Megatron-LM of 2021 writes each micro-batch's weight gradient to a new tensor
            # (megatron/mpu/layers.py: grad_weight = grad_output.t().matmul(input)) that local
            # DDP's param_hook adds into the contiguous buffer (megatron/model/distributed.py:
            # param.main_grad.add_(param.grad.data), every parameter and micro-batch; torch DDP
            # runs: autograd's AccumulateGrad adds into .grad in place). Untimed until s16
            # a100old: the 0.73 A100 GEMM fraction had absorbed it (docs/analytical.md)
            grad_accumulation="add",
            # megatron/model/gpt_model.py: vocab_parallel_cross_entropy(output.float(), labels)
            # unless --fp16-lm-cross-entropy; mpu/cross_entropy.py saves the fp32 softmax and
            # computes the gradient in it in place: 2 bytes per logit more than the generator
            # counts (1 buffer), under 0.1 GB per rank at its 51,200/tp vocabulary. Kept at 0 so
            # that the default profile's memory is exactly `stage memory`'s and the ASTRA-sim
            # backend's (the tests compare them); KOR22-F1 is the same either way
            loss_fp32_buffers=0,
            # megatron/mpu/mappings.py: every tensor-parallel collective is a synchronous
            # torch.distributed call on the compute stream (ProcessGroupNCCL: the NCCL stream
            # waits for that stream at issue)
            collectives_wait_for_issued_compute=True,
        ),
        FrameworkProfile(
            name="megatron-core",
            description="Megatron-Core / NeMo / Megatron-Bridge recipes (2024-25)",
            source="https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/arguments.py",
            overlap_grad_reduce=True,  # set by every NeMo/Megatron-Bridge performance recipe
            overlap_param_gather=True,
            tp_comm_overlap=True,
            moe_comm_overlap=False,  # off by default; recipes switch it on per model
            moe_shared_expert_overlap=False,  # Megatron's default; recipes switch it on
            pipeline_p2p_blocking=False,
            pipeline_scatter_gather=True,
            zero3_gathers=2,
            zero3_flat_ring=False,
            zero3_live_elements=0,
            zero3_prefetch_elements=0,
            # Transformer Engine prefers cuDNN's fused attention on sm90+ (get_attention_backend:
            # "Disabling FlashAttention to give FusedAttention preference on Hopper+"): the
            # preset's `cudnn` entry (Hopper: cuDNN measured beside FA3, 0.87-0.92x at 16k);
            # presets without one fall back to their best kernel
            attention_kernel="cudnn",
            fused_elementwise=True,
            # megatron/core/transformer/attention.py SelfAttention.__init__: self.linear_qkv =
            # build_module(submodules.linear_qkv, hidden_size, query_projection_size + 2 *
            # kv_projection_size, ...), one (TELayerNormColumnParallelLinear) GEMM each way
            fused_qkv=True,
            # megatron/core/transformer/mlp.py MLP.__init__: ffn_hidden_size *= 2 with
            # gated_linear_unit, one linear_fc1 (shared experts too); moe/experts.py
            # TEGroupedMLP / GroupedMLP: one grouped fc1 of 2 * moe_ffn_hidden_size
            fused_fc1="all",
            runtime_reserved_bytes=1 * GIB,
            allocator_overhead=0.05,
            # --gradient-accumulation-fusion is on by default (--no-gradient-accumulation-fusion
            # turns it off): the wgrad GEMM accumulates into main_grad (grad_added_to_main_grad);
            # the embedding tables, norms and biases are added by the DDP hook each micro-batch
            grad_accumulation="fused-linear",
            # core/tensor_parallel/cross_entropy.py: calculate_logits_max casts the logits to
            # float, the fp32 softmax is saved and becomes the gradient in place
            loss_fp32_buffers=1,
            # Megatron-Core's TE layers issue every tp collective behind the compute issued
            # before it: without --tp-comm-overlap torch.distributed calls on the compute
            # stream (TE distributed.py gather_along_first_dim / reduce_scatter_along_first_dim;
            # ProcessGroupNCCL syncStream), with it userbuffers' comm stream waits for the main
            # stream at the GEMM that carries it (TE comm_gemm_overlap.cpp: "Catch up the
            # default torch stream", cudaEventRecord + cudaStreamWaitEvent); docs/analytical.md
            collectives_wait_for_issued_compute=True,
            # core/distributed/distributed_data_parallel.py: bucket_size = max(40000000,
            # 1000000 * dp_group.size()) parameters unless set (stage_explore/analytical/buckets.py)
            ddp_bucket_scales_with_dp=True,
            # the same file: bucket_size None with disable_bucketing (training.py get_model:
            # model_chunk_idx > 0; NeMo's MegatronParallel likewise) or pp rank > 0
            ddp_bucket_first_chunk_only=True,
            # cp_comm_type p2p (Megatron-Core's default) runs Transformer Engine's AttnFuncWithCP:
            # per ring step an attention kernel, then flash_attn_fwd_out_correction per step and,
            # in the backward, dq/dkv copies, torch.cat and adds (te_context_parallel.py)
            te_cp_merge=True,
            # the same AttnFuncWithCP posts step i+1's K/V send/receive before step i's
            # attention kernel and waits for it at step i+1 (backward: K/V and the accumulated
            # dK/dV in one buffer), "overlap current-step compute with next-step communication"
            # (TE 1.x transformer_engine/pytorch/attention.py; 2.x context_parallel.py)
            te_cp_overlap=True,
            # transformer/moe/experts.py TEGroupedMLP.forward: weighted_bias_swiglu_impl(fc1_output,
            # bias, permuted_probs); the token dispatcher's combine unpermutes without probs
            moe_probs_in_activation=True,
            # the same TEGroupedMLP: linear_fc2 (skip_bias_add=True) returns its biases and
            # _apply_bias adds them per expert, scaled by the probabilities, in eager PyTorch
            # (torch.split, t + b * p, torch.cat); linear_fc1's in its GEMM epilogue
            eager_modules="megatron-core",
            # transformer_block.py TransformerBlock.forward: the layers run inside one TE
            # fp8_autocast(fp8_group=parallel_state.get_amax_reduction_group(
            # with_context_parallel=True)), the tp x dp x cp group unless --tp-only-amax-red;
            # TE's delayed scaling all-reduces the amaxes at its exit and after the backward
            fp8_amax_reduction="tp_dp_cp",
            # --fp8-recipe tensorwise builds TE's Float8CurrentScaling recipe: each cast an amax
            # kernel, then (sequence-parallel column inputs / row output gradients) a blocking
            # tp all-reduce of the amax, then the cast (TE pytorch/csrc/quantizer.cpp
            # Float8CurrentScalingQuantizer::quantize_impl; module/linear.py
            # _customize_quantizers_float8_current_scaling)
            te_current_scaling=True,
            # without --tp-comm-overlap, TE's NCCL sequence-parallel gathers carry FP8 too: TE 1.x
            # LayerNormLinear writes the norm output as uint8 and gathers it, Linear casts then
            # gathers, grad_output_preprocess casts then gathers (NVIDIA/TransformerEngine
            # 3ec87875 module/layernorm_linear.py, module/linear.py, module/base.py); TE 2.x
            # gather_along_first_dim(..., quantizer=...) quantizes the local shard first
            # (negvet/TransformerEngine dbe1dd82 distributed.py, 3b3ec9bc module/linear.py)
            te_sp_fp8_gather=True,
            # transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: sort_chunks_by_idxs
            # of the received tokens by local expert, and back before the combine all-to-all
            moe_sort_chunks=True,
            # transformer/moe/experts.py TEGroupedMLP: under fp8 (or fp4) quantization_padding =
            # Fp8Padding(num_local_experts) before linear_fc1 and Fp8Unpadding after linear_fc2
            # (older releases: self.fp8_padding); TE fp8_padding.py copies unless every count is
            # a multiple of the alignment; --moe-router-padding-for-fp8 turns it off per run
            moe_fp8_padding=True,
            # the same TEGroupedMLP's linear_fc1 / linear_fc2 are TE GroupedLinear: its FP8
            # operands go through tex.split_quantize, one quantize kernel per local expert unless
            # delayed scaling (TE pytorch/csrc/extensions/cast.cpp multi_tensor_quantize_impl)
            moe_split_quantize=True,
        ),
        FrameworkProfile(
            name="deepspeed",
            description="DeepSpeed ZeRO (Rajbhandari et al. SC'20) as run in Narayanan et al. "
            "SC'21 Table 2 and MT-NLG",
            source="https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training",
            cpu_optimizer="deepspeed",  # DeepSpeedCPUAdam under offload_optimizer (offload.py)
            # overlap_comm: false by default, true by default under stage 3 (whose per-layer
            # reduce-scatters run beside the backward here whatever this option says)
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            tp_comm_overlap=False,
            moe_comm_overlap=False,
            moe_shared_expert_overlap=False,
            pipeline_p2p_blocking=True,
            pipeline_scatter_gather=True,  # PipelineEngine.is_pipe_partitioned (tp > 1)
            zero3_gathers=3,
            zero3_flat_ring=True,
            # stage3_max_live_parameters 1e9 and stage3_prefetch_bucket_size 5e7, DeepSpeed's
            # defaults in its code ("max_live_parameters: int = Field(pp_int(1e9), ...)",
            # "prefetch_bucket_size: int = Field(pp_int(5e7), ...)", deepspeed/runtime/zero/
            # config.py, microsoft/DeepSpeed 03dc2b92). The prefetch bucket was 5e8 here until
            # 7 Dec 2026 (s32 zero3), not the code's default; it also sizes the all-gathers
            # (framework_costs.zero3_fetch_calls)
            zero3_live_elements=10**9,
            zero3_prefetch_elements=5 * 10**7,
            # stage3_param_persistence_threshold 1e5, DeepSpeed's code default
            # ("param_persistence_threshold: int = Field(pp_int(1e5), ...)", deepspeed/runtime/
            # zero/config.py, microsoft/DeepSpeed 03dc2b92); DeepSpeedZeRoOffload.
            # mark_persistent_parameters marks "param.ds_numel <= param_threshold" ds_persist
            # (deepspeed/runtime/zero/parameter_offload.py, microsoft/DeepSpeed 0286784a)
            zero3_persistence_elements=10**5,
            attention_kernel="fa2",
            fused_elementwise=True,  # Megatron-DeepSpeed keeps Megatron's fused kernels
            # and Megatron's attention: megatron/model/transformer.py query_key_value, one GEMM
            fused_qkv=True,
            fused_fc1="all",  # and its ParallelMLP: dense_h_to_4h of ffn_hidden_size * 2 (swiglu)
            runtime_reserved_bytes=1 * GIB,
            allocator_overhead=0.05,
            # deepspeed/runtime/pipe/engine.py _exec_backward_pass: "if self.bfloat16_enabled()
            # and not self.is_last_stage(): self.optimizer.update_hp_grads(...)" after every
            # micro-batch (the last stage's engine.backward does the same); bf16_optimizer.py
            # update_hp_grads: hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype)). MT-NLG's
            # "20 bytes of memory per parameter" (Smith et al. 2022, arXiv 2201.11990) reads as
            # ZeRO's 16 bytes of mixed-precision Adam states plus those 4 of fp32 gradients.
            # Under fp16 the engine's torch.autograd.backward leaves each micro-batch's gradient
            # to autograd's AccumulateGrad, an in-place add into the 16-bit .grad (s16 a100old)
            grad_accumulation="deepspeed",
            # the same BF16_Optimizer hands the engine its whole flat fp32 gradient buffer
            # (get_grads_for_reduction), all-reduced by buffered_allreduce_fallback
            # (deepspeed/runtime/pipe/engine.py _bf16_reduce_grads; microsoft/DeepSpeed
            # bf16_optimizer.py at 196e63ac), then each rank updates its partition and
            # all-gathers the bf16 weights (update_lp_params: all_gather_dp_groups); under fp16
            # its ZeRO stage 1 optimizer all-reduces the 16-bit gradients (contiguous_gradients
            # off at stage 1: buffered_reduce_fallback / allreduce_bucket; profile_sharding.py)
            zero1_grad_all_reduce=True,
            loss_fp32_buffers=1,  # Megatron-DeepSpeed keeps Megatron's vocab-parallel loss
            # Megatron-DeepSpeed's megatron/mpu/layers.py of MT-NLG's time: ColumnParallelLinear
            # .forward's copy_to_tensor_model_parallel_region, a synchronous backward all-reduce;
            # its later megatron/core/tensor_parallel/layers.py issues it asynchronously
            # (which one vTrain ran is not stated), but the rebased Megatron-DeepSpeed turns it off
            # under DeepSpeed (megatron/arguments.py validate_args: "if args.deepspeed:
            # args.async_tensor_model_parallel_allreduce = False", "DeepSpeed seems to be
            # incompatible with async_tensor_model_parallel_allreduce"): synchronous in both
            tp_async_grad_allreduce=False,
            # deepspeed/runtime/pipe/schedule.py TrainSchedule.steps: RecvActivation/SendGrad
            # and SendActivation/RecvGrad as separate blocking instructions (p2p.send/recv)
            pipeline_p2p_separate=True,
            # Megatron-DeepSpeed's tensor-parallel collectives are torch.distributed calls on the
            # compute stream, as Megatron-LM's (megatron/mpu/mappings.py)
            collectives_wait_for_issued_compute=True,
        ),
        FrameworkProfile(
            name="fsdp",
            description="PyTorch FSDP FULL_SHARD (MosaicML Composer/LLM Foundry, TorchTitan)",
            source="https://pytorch.org/docs/stable/fsdp.html",
            overlap_grad_reduce=True,  # reduce-scatter in the post-backward hook
            overlap_param_gather=True,  # forward_prefetch / BACKWARD_PRE prefetching
            tp_comm_overlap=False,
            moe_comm_overlap=False,
            moe_shared_expert_overlap=False,
            pipeline_p2p_blocking=True,
            pipeline_scatter_gather=True,
            zero3_gathers=2,  # reshard_after_forward: gathered again for the backward
            zero3_flat_ring=False,
            zero3_live_elements=0,  # FSDP units (one per transformer block)
            zero3_prefetch_elements=0,
            # PyTorch SDPA's flash backend is FlashAttention-2 (torch.nn.functional.
            # scaled_dot_product_attention docs); FA3 needs the separate flash-attn package
            attention_kernel="fa2",
            fused_elementwise=False,  # eager PyTorch unless the model is compiled
            runtime_reserved_bytes=1 * GIB,
            allocator_overhead=0.05,
            # torch.autocast runs cross_entropy / log_softmax / nll_loss in float32 (the CUDA
            # ops that autocast to float32, https://pytorch.org/docs/stable/amp.html)
            loss_fp32_buffers=3,
            # https://pytorch.org/docs/stable/fsdp.html MixedPrecision: "outside forward and
            # backward, the sharded parameters are kept in full precision" (FSDP2 likewise)
            fsdp_fp32_shards=True,
        ),
        FrameworkProfile(
            name="llm-foundry-2023",
            description="MosaicML LLM Foundry / Composer FSDP of 2023 (the MPT benchmarks)",
            source="https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md",
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            tp_comm_overlap=False,
            moe_comm_overlap=False,
            moe_shared_expert_overlap=False,
            pipeline_p2p_blocking=True,
            pipeline_scatter_gather=True,
            zero3_gathers=2,
            zero3_flat_ring=False,
            zero3_live_elements=0,
            zero3_prefetch_elements=0,
            # flash-attn 2 (no FA3 in 2023); the A100 tables ran the Triton port of FA1
            # (attn_impl triton): infer_defaults.LLMFOUNDRY_A100_KERNEL sets fa1-triton there
            attention_kernel="fa2",
            fused_elementwise=False,
            # MPT's blocks on an fp32 residual stream (the fp32 embedding parameter under
            # param_dtype None): LPLayerNorm casts x to bf16 before F.layer_norm
            # (llmfoundry/models/layers/norm.py), residual adds are fp32 + bf16, the stream's
            # gradients fp32 (eager.py); the MLP's nn.GELU one kernel, ALiBi in the attention
            eager_modules="llm-foundry-2023",
            # MPT's attention projects q, k and v with one linear (llmfoundry/models/layers/
            # attention.py: self.Wqkv = nn.Linear(self.d_model, 3 * self.d_model); later
            # d_model + 2 * kv_n_heads * head_dim): one GEMM each way
            fused_qkv=True,
            # MPT's nn.Linear layers (no_bias false in the benchmark yamls): F.linear on the
            # contiguous (b, s, h) input takes addmm, whose CUDA path adds a 1-D bias in
            # cuBLASLt's epilogue (aten/src/ATen/native/cuda/Blas.cpp useLtInterface)
            linear_bias_epilogue=True,
            # ComposerMPTCausalLM's loss_fn defaults to fused_crossentropy, flash-attn's
            # xentropy CUDA extension (llmfoundry/models/mpt/modeling_mpt.py; mosaicml/examples'
            # ComposerMosaicGPT before it): a ValueError at start-up when it is not installed
            xentropy_cross_entropy=True,
            # ... and its train_metrics, LanguageCrossEntropy and LanguagePerplexity
            # (use_train_metrics default True), each a forward-only fp32 cross-entropy over the
            # logits that Composer's _train_microbatch runs after every micro-batch's backward
            # (_eval_train_metrics -> update_metric, under no_grad and the precision's autocast)
            train_metric_losses=2,
            runtime_reserved_bytes=1 * GIB,
            allocator_overhead=0.05,
            # Composer's get_mixed_precision DEFAULT before mosaicml/composer#2047 (2023-03-09):
            # param_dtype None (fp32 all-gathers), reduce_dtype = amp precision (bf16). The
            # inference sets a row's DEFAULT as Composer ran it after #2047 (bf16 gathers, fp32
            # reduction) or its PURE (infer_defaults.COMPOSER_DEFAULT_NOTE / COMPOSER_PURE)
            fsdp_param_fp32=True,
            fsdp_fp32_shards=True,  # FSDP's flat parameter shard is fp32 (MixedPrecision)
            # Composer 0.15-0.16 wraps blocks in torch FSDP1 (FullyShardedDataParallel)
            fsdp1_flat_grad=True,
            # Composer's FSDP wraps the model with an auto-wrap policy of MPT's fsdp_wrap_fn
            # (MPTBlock): the root unit holds wte (tied output) and norm_f; FSDP1's
            # _post_forward_reshard never frees the root's flat parameter
            fsdp_root_unit=True,
        ),
        # TorchTitan (Liang et al., arXiv 2410.06511): FSDP2 ``fully_shard`` per transformer
        # block, TP/SP through DTensor plans, torch.distributed.pipelining. Each default is the
        # job config's default; recipes switch options per run (setups.toml framework_options).
        FrameworkProfile(
            name="torchtitan",
            description="TorchTitan (FSDP2, DTensor TP/SP, torch.distributed.pipelining; 2024-25)",
            source="https://github.com/pytorch/torchtitan (torchtitan/config_manager.py, "
            "parallelisms/parallelize_llama.py, docs/performance.md)",
            overlap_grad_reduce=True,  # FSDP2 reduce-scatters in the post-backward hook
            overlap_param_gather=True,  # FSDP2 implicit forward/backward prefetch
            # experimental.enable_async_tensor_parallel, default false (needs training.compile)
            tp_comm_overlap=False,
            # ... and when on, it is Inductor's micro-pipeline TP pass (torch/_inductor/
            # fx_passes/micro_pipeline_tp.py): all_gather -> mm (lhs) and mm -> reduce_scatter
            # only; the summed wq/wk/wv and w1/w3 input gradients' reduce-scatters stay NCCL
            micro_pipeline_tp=True,
            moe_comm_overlap=False,
            moe_shared_expert_overlap=False,
            # distributed/expert_parallel.py ExpertParallel (expert_parallel_degree > 1 without
            # DeepEP): _token_dispatch receives the tokens ordered by source rank and _permute
            # gathers them by local expert (generate_permute_indices, torch.index_select);
            # _token_combine scatters them back (_unpermute, index_copy_) before the combine
            # all_to_all_single_autograd: the chunk sorts of megatron_dispatch.py
            moe_sort_chunks=True,
            # Schedule1F1B fires a stage's forward sends with its backward receives in one
            # batch_isend_irecv and waits on it before the backward (torch.distributed.
            # pipelining schedules.py, "fwd_send_bwd_recv")
            pipeline_p2p_blocking=True,
            pipeline_scatter_gather=True,  # TP plans keep activations sequence-sharded
            zero3_gathers=2,  # fully_shard(reshard_after_forward=True) without PP
            zero3_flat_ring=False,
            zero3_live_elements=0,  # one FSDP unit per transformer block
            zero3_prefetch_elements=0,
            # F.scaled_dot_product_attention: PyTorch's flash backend is FlashAttention-2
            attention_kernel="fa2",
            # on B200 (sm100) torchtitan puts cuDNN first in its sdpa_kernel priority
            # (models/attention.py ScaledDotProductAttention: has_cuda_capability(10, 0) ->
            # CUDNN_ATTENTION first; pytorch/torchtitan#1196, May 2025, Llama 3 8B on B200:
            # 10,902 -> 12,211 tokens/s). No Dec 2024 torchtitan ran on Blackwell (torch 2.7)
            sm100_attention_kernel="cudnn",
            # parallelize_llama.py _save_list (0596be3) / models/llama3/infra/parallelize.py
            # _op_sac_save_list: the flash and efficient SDPA kernels, not cuDNN's, until
            # pytorch/torchtitan#2095 (merged December 2025, after issue #2091): under
            # selective_ac_option 'op' the cuDNN attention re-runs in the backward
            op_sac_saves_cudnn_attention=False,
            fused_elementwise=False,  # training.compile, default false (eager PyTorch)
            # models/norms.py RMSNorm (norm_type "rmsnorm" in the Llama 3 train configs),
            # models/llama/model.py apply_rotary_emb, repeat_kv and FeedForward, run op by op
            # when not compiled; compiled, the complex RoPE (an ATen fallback in Inductor) and
            # repeat_kv's copies still (stage_explore/analytical/eager.py counts their kernels)
            eager_modules="torchtitan",
            runtime_reserved_bytes=1 * GIB,  # the same estimate as the other PyTorch profiles
            allocator_overhead=0.05,  # the same estimate (torchtitan logs max_reserved_gib)
            # models/llama/model.py: output = self.output(h).float(); train.py's loss_fn:
            # F.cross_entropy(pred.flatten(0, 1).float(), ...), eager (not compiled in 2024/12).
            # From pytorch/torchtitan#1033 (Apr 2025) training.compile compiles the loss too
            # (components/loss.py build_cross_entropy_loss): rows of such runs with compile set
            # loss_fp32_buffers = 0 (Inductor fuses the upcast, log-softmax, NLL and backward)
            loss_fp32_buffers=3,
            pp_unsharded_params=True,  # apply_fsdp: reshard_after_forward = not pp_enabled
            # parallelisms/pipeline_llama.py builds torch.distributed.pipelining PipelineStages
            # (their per-micro-batch receive buffers and kept outputs)
            pipelining_stage_buffers=True,
            # torch pipelining's output_chunks (output_chunks.py): the torch of these runs
            # (nightly 1963fc8, Dec 2024) predates pytorch/pytorch#153383 (May 2025), so every
            # stage keeps each micro-batch's output until the step ends; models/llama/model.py
            # returns self.output(h).float(), fp32 logits. Rows of later torchtitan runs take
            # infer_torch.TORCHTITAN_ERAS' values
            pipelining_output_chunks="every",
            pipelining_output_fp32=True,
            # experimental.context_parallel_degree: torch.distributed.tensor.experimental.
            # context_parallel (ring attention of SDPA calls, _SDPAMerger convert_to_f32, the
            # all-gather rotater, the all-to-all dK/dV ring) on models/llama/model.py's
            # repeat_kv'd keys and values
            cp_merge_fp32=True,
            # parallelize_llama.py apply_compile (torchtitan 0596be3): torch.compile(block,
            # fullgraph=True) traces the ring too; traced functional collectives are waited for at
            # once and torch._inductor.config.reorder_for_compute_comm_overlap is False by default
            # (applies to the compiled rows, fused_elementwise)
            cp_traced_ring=True,
            fsdp2_copies=True,  # fully_shard: FSDP2's all-gather copy-out, reduce-scatter copy-in
            # apply_fsdp: fully_shard(model) after the blocks, the embedding, final norm and
            # output layer one root group (gathered before the forward, reduced at the end)
            fsdp_root_unit=True,
            # optimizer.py build_optimizers: AdamW(fused=optimizer.fused, foreach=not fused),
            # `--optimizer.fused` a store_true flag (off); utils.clip_grad_norm_(foreach=True).
            # Later torchtitan (2025) has optimizer.implementation, default "fused": rows of
            # such runs set optimizer_foreach = false
            optimizer_foreach=True,
            # float8 training is torchao's Float8Linear (dynamic scaling, no float8 all-gather
            # assumed): the weight is cast at every use (matmul_with_hp_or_float8_args)
            fp8_weight_cast_per_use=True,
            # FSDP2 fully_shard with MixedPrecisionPolicy(param_dtype=bf16): the sharded
            # parameters stay fp32, bf16 only once gathered (torch FSDPParam)
            fsdp_fp32_shards=True,
            # parallelize_llama.py: the output layer's ColwiseParallel keeps the logits
            # vocabulary-sharded (use_local_output=not loss_parallel); train.py runs the loss
            # under loss_parallel() unless training.disable_loss_parallel (default false)
            loss_parallel=True,
            # parallelize_llama.py: attention / feed_forward PrepareModuleInput (Shard(1) ->
            # Replicate) and the output layer's ColwiseParallel(input_layouts=Shard(1)): DTensor
            # all-gathers, and the linears' mm save the gathered tensor
            tp_saves_gathered_input=True,
            # the same PrepareModuleInput / RowwiseParallel(output_layouts=Shard(1)) collectives
            # are funcol.all_gather_tensor / reduce_scatter_tensor on dim 1, which copy the
            # whole tensor through torch.cat (torch/distributed/_functional_collectives.py)
            funcol_seq_copies=True,
            # parallelize_llama: enable_float8_tensorwise_tp (Float8ColwiseParallel,
            # Float8RowwiseParallel, PrepareFloat8ModuleInput from torchao.float8) for the
            # tensorwise recipe: the TP all-gathers carry FP8 data
            float8_tp=True,
            # models/llama/model.py: register_buffer("freqs_cis", ...) of max_seq_len
            # positions on every model part; train.py's context_parallel restores it (a clone)
            rope_table_buffer=True,
        ),
    )
}

#: NeMo AutoModel: FSDP2 per block (experts over the expert mesh), torch.distributed.pipelining,
#: and its BackendConfig's Transformer Engine modules (attn/linear/rms_norm "te", rope_fusion):
#: the fsdp profile's behaviours but for attention. TE's DotProductAttention on Hopper and later
#: prefers cuDNN FusedAttention when FlashAttention also qualifies, and only it serves MLA's
#: unequal head dims (get_attention_backend): the preset's `cudnn` kernel, or its best kernel
#: where it lists none. attn "flex" is the kernel "flex".
FRAMEWORKS["automodel"] = replace(
    FRAMEWORKS["fsdp"],
    name="automodel",
    description="NeMo AutoModel (FSDP2 + EP + PP, Transformer Engine modules; 2025)",
    source="https://github.com/NVIDIA-NeMo/Automodel (components/moe/parallelizer.py)",
    attention_kernel="cudnn",
    # components/moe/layers.py GroupedExpertsDeepEP._apply_bias: eager expert biases
    eager_modules="automodel",
    # components/moe/layers.py: GroupedExperts(DeepEP).gate_and_up_projs of [experts, dim,
    # 2 * moe_inter_dim], one grouped GEMM; its MLP (dense, shared experts) keeps gate_proj
    # and up_proj separate
    fused_fc1="experts",
    # docs/guides/autopipeline.md: AutoPipeline is "built on PyTorch's native
    # torch.distributed.pipelining" (its PipelineStages' per-micro-batch receive buffers)
    pipelining_stage_buffers=True,
    # components/moe/parallelizer.py apply_fsdp(reshard_after_forward=False) (the default and
    # the benchmark configs'): every backward with resharding and gradient sync off
    # (components/moe/fsdp_mixin.py patched_backward_maybe_with_nosync)
    pp_unsharded_params=True,
    # apply_fsdp(wrap_outer_model=True), the default, which the benchmark configs of the
    # 2025-10-02 performance summary leave (examples/benchmark/configs/deepseek_v3_te_deepep.yaml
    # at cab96cf, deepseek_v3_te_deepep_1024.yaml at 604375a): the stage is an FSDPModule, so
    # the patch's FSDPModule branch reduce-scatters it on each schedule's last backward (later
    # configs set wrap_outer_model: false: the MoE mixin's branch, once per optimizer step)
    pp_held_sync_per_schedule=True,
    # without pipeline parallelism the recipes' training loop turns FSDP2's gradient sync off
    # on every micro-batch but the last: get_sync_ctx (recipes' training utilities) calls
    # model.set_requires_gradient_sync(is_optim_step) on the FSDPModule, later
    # components/training/utils.py prepare_for_grad_accumulation / prepare_for_final_backward
    # (027f051e), under FSDP2Manager.defer_fsdp_grad_sync, default True
    # (components/distributed/fsdp2.py, NVIDIA-NeMo/Automodel ae4ea496)
    fsdp_no_sync_accumulation=True,
)

#: IBM's fms-fsdp (github.com/foundation-model-stack/fms-fsdp, the PyTorch/IBM FSDP blog of
#: March 2024): torch FSDP1 (main_training.py: FullyShardedDataParallel(..., use_orig_params=
#: cfg.use_torch_compile, limit_all_gathers=True), no backward_prefetch given: BACKWARD_PRE) on
#: IBM foundation-model-stack's Llama run eager (the blog's runs predate its torch.compile),
#: bf16 MixedPrecision for parameters and reductions (policies/mixed_precision.py bfSixteen).
#: Without use_orig_params the unsharded parameters are views of the flat parameter, so each
#: backward concatenates their gradients into the flat gradient (fsdp1_flat_grad, bf16 here);
#: the eager modules are fms's (eager.py, "fms"); the root unit as FSDP1 runs it.
FRAMEWORKS["fms-fsdp"] = replace(
    FRAMEWORKS["fsdp"],
    name="fms-fsdp",
    description="IBM fms-fsdp (PyTorch FSDP1, eager foundation-model-stack Llama; 2024)",
    source="https://github.com/foundation-model-stack/fms-fsdp (main_training.py)",
    eager_modules="fms",
    fsdp1_flat_grad=True,
    # auto_wrap_policy wraps each LLaMABlock (policies/wrapping.py): the root FSDP unit holds
    # the embedding, the final norm and the head, kept unsharded from its pre-forward gather to
    # its post-backward reduce-scatter (FSDP1 _post_forward_reshard: not freed for the root)
    fsdp_root_unit=True,
    # main_training.py: optim.AdamW(model.parameters(), lr=..., betas=(0.9, 0.95),
    # weight_decay=0.1) with neither foreach nor fused: torch's default on CUDA tensors is the
    # foreach implementation; train_utils.py calls model.clip_grad_norm_ every step (FSDP1
    # scales every gradient by the clamped coefficient)
    optimizer_foreach=True,
)

#: InternEvo, InternLM's own trainer: every option from its code (profile_internevo.py; s35).
FRAMEWORKS[INTERNEVO.name] = INTERNEVO

#: The profile the analytical backend uses when none is named (the behaviour the backend was
#: first validated with).
DEFAULT_FRAMEWORK = "megatron-lm-2021"


def get_framework(name: str) -> FrameworkProfile:
    """The registered profile ``name``; an unknown name is a :class:`ConfigError`."""
    try:
        return FRAMEWORKS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(FRAMEWORKS))
        raise ConfigError(f"unknown framework {name!r}; known: {known}") from None
