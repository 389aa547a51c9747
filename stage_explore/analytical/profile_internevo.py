"""The ``internevo`` framework profile: InternEvo, InternLM's own trainer (InternLM/InternEvo, and
its earlier home InternLM/InternLM ``internlm/``), each option read from its code.

InternEvo trains with its own ``HybridZeroOptimizer`` (ZeRO-1 in ``zero1`` groups), its own
tensor-parallel linears around flash-attn's fused dense / rotary / cross-entropy kernels and
Apex's fused RMSNorm, and an engine and pipeline scheduler adopted from Colossal-AI's. What it
does that no option expresses is listed in the :data:`INTERNEVO` comment (not modelled) and in
docs/analytical.md (s35 internevo).
"""

from __future__ import annotations

from stage_explore.analytical.framework_profile import GIB, FrameworkProfile

#: Commits read: InternLM/InternLM 01e7fd61 ``internlm/solver/optimizer/hybrid_zero_optim.py``,
#: 0417faba ``internlm/core/scheduler/no_pipeline_scheduler.py``, 1698e3d0
#: ``internlm/core/communication/p2p.py``, 08980c6e ``internlm/initialize/initialize_trainer.py``,
#: 02964250 ``internlm/model/modeling_internlm.py``, 220953d7 ``internlm/model/metrics.py``, the
#: ``multi_head_attention.py`` / ``linear.py`` / ``model/utils.py`` of the same tree; 00478761
#: ``configs/7B_sft.py``. Not modelled (each under 2 % of a step by its bytes, docs/analytical.md
#: s35 internevo): the ``residual.float()`` casts before each norm (PackedFlashBaseLayer1D
#: ``self.norm1(residual1.float())``), the per-micro-batch ``AccPerplex`` metric passes over the
#: logits (``metrics.py``, under ``no_grad``), the gradient buckets' flatten / copy-back, which
#: run on the optimizer's communication stream (``_reduce_and_copy``), and the host
#: ``_comm_stream.synchronize()`` before each bucket.
INTERNEVO = FrameworkProfile(
    name="internevo",
    description="InternEvo / InternLM's trainer (HybridZeroOptimizer ZeRO-1, flash-attn, Apex "
    "RMSNorm; 2023-24)",
    source="https://github.com/InternLM/InternEvo (internlm/solver/optimizer/"
    "hybrid_zero_optim.py, internlm/model/modeling_internlm.py)",
    # hybrid_zero_optimizer.overlap_sync_grad (configs/7B_sft.py: True): _attach_reduction_hook
    # hooks every parameter's AccumulateGrad; _store_and_try_reduce_grads_by_bucket reduces a
    # bucket once it holds reduce_bucket_size elements, on self._comm_stream, during the
    # backward of the step's last micro-batch (NonPipelineScheduler sets skip_grad_reduce on
    # the others)
    overlap_grad_reduce=True,
    # overlap_sync_param (True in configs/7B_sft.py): broadcast_params hands each rank's
    # partition broadcast (async_op) to ParamBcastSyncHandler, whose forward pre-hooks wait for
    # a block's broadcast in the next forward
    overlap_param_gather=True,
    tp_comm_overlap=False,  # no userbuffers / async TP: plain torch.distributed calls
    moe_comm_overlap=False,
    moe_shared_expert_overlap=False,
    # core/communication/p2p.py _communicate (Colossal-AI's): dist.batch_isend_irecv, then
    # req.wait() for every request and torch.cuda.synchronize()
    pipeline_p2p_blocking=True,
    # initialize_trainer.py: scatter_gather = gpc.is_initialized(ParallelMode.TENSOR), passed as
    # the schedulers' scatter_gather_tensors (split_tensor_into_1d_equal_chunks / gather)
    pipeline_scatter_gather=True,
    zero3_gathers=2,  # no ZeRO-3 in HybridZeroOptimizer (ZeRO-1 only): unused
    zero3_flat_ring=False,
    zero3_live_elements=0,
    zero3_prefetch_elements=0,
    # model/multi_head_attention.py MHA: FlashSelfAttention (flash-attn's varlen kernel over
    # the packed cu_seqlens). InternEvo's doc/en/install.md asks for "Flash-Attention >=
    # v1.0.5" and its images pin v1.0.5 (InternLM/InternLM 0f5ee057 doc/en/install.md: "==
    # v1.0.5"); the reader (validation/infer_internevo.py) sets attention_kernel "fa1" on the
    # presets that list FlashAttention-1's rate (the A100-class ones, s35 fa1); the profile keeps
    # FlashAttention-2 for the others, where no FA1 figure exists (a documented fallback)
    attention_kernel="fa2",
    # eager PyTorch around single fused kernels: Apex MixedFusedRMSNorm (model/utils.py
    # try_import_RMSNorm), flash-attn's rotary kernel, F.silu(w1) * w2 and the residual adds
    # op by op (linear.py FeedForward / Silu): each generator op one kernel, none fused together
    fused_elementwise=False,
    # multi_head_attention.py: self.Wqkv = ColumnParallelLinearTorch(embed_dim, 3 * embed_dim,
    # ..., bias=True), one GEMM
    fused_qkv=True,
    fused_fc1="none",  # linear.py FeedForward: w1 and w2 separate linears, w3 the down
    # model/loss.py FlashGPTLMLoss: flash_attn.losses.cross_entropy.CrossEntropyLoss
    # (inplace_backward=True) on the 16-bit logits (doc/en/install.md builds flash-attn's
    # csrc/xentropy for it)
    xentropy_cross_entropy=True,
    loss_fp32_buffers=0,  # the fused loss writes its gradient in place (no fp32 copies)
    runtime_reserved_bytes=1 * GIB,  # the same estimate as the other PyTorch profiles
    allocator_overhead=0.05,  # the same estimate
    # HybridZeroOptimizer.zero_grad(set_to_none=True) after every step (_sync_grad): the first
    # micro-batch's AccumulateGrad takes the fresh bf16 gradient, later ones add into .grad in
    # place (variable_grad += new_grad); no gradient-accumulation fusion in its linears
    grad_accumulation="autograd",
    # _reduce_grads_stored_in_bucket(reduce_rank=None) -> _reduce_and_copy -> reduce_tensor(
    # dst_rank=None, parallel_mode=ParallelMode.DATA): an all-reduce of each whole bucket over
    # all of dp in the parameters' dtype, then each rank keeps its zero1 partition and
    # broadcasts the updated partition to its ZERO1 group (broadcast_params)
    zero1_grad_all_reduce=True,
    # train/training_internlm.py initialize_optimizer: torch.optim.AdamW without fused / foreach
    # on the flat fp32 partition: each of its element-wise ops a pass over the whole partition
    # (one tensor: the single-tensor and foreach paths move the same bytes)
    optimizer_foreach=True,
    # model/utils.py FusedDenseFunc.backward: all_reduce_raw(grad_input, async_op=True) before
    # the weight-gradient GEMM, waited after it (reduce_scatter_raw under sequence_parallel)
    tp_async_grad_allreduce=True,
    # ... a torch.distributed call on the compute stream (ProcessGroupNCCL syncStream)
    collectives_wait_for_issued_compute=True,
)
