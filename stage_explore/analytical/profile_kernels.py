"""The framework-profile options of the kernels a block runs: attention, fusion and eager module
code, the loss, FP8 casts and amax reductions, and context-parallel attention: each option's
documentation (below), the framework flag it stands for (:data:`KERNEL_FLAGS`) and its field with
the default (:class:`KernelOptions`, a base of
:class:`~stage_explore.analytical.framework_profile.FrameworkProfile`).

Options (all booleans unless said):

- ``attention_kernel`` (str or None) — the fused attention kernel the framework's software of
  its time runs (``"fa2"``: FlashAttention-2), looked up in the accelerator's
  ``attention_kernels``; None: the best kernel the preset lists (FA3 / cuDNN on Hopper, FA4 on
  Blackwell).
- ``sm100_attention_kernel`` (str or None) — the attention kernel on GPUs of compute capability
  10.0 and later (an accelerator with an ``mxfp8`` peak: Blackwell's tensor cores), where the
  framework's software asks for another kernel than ``attention_kernel``; None: as elsewhere.
- ``op_sac_saves_cudnn_attention`` — torchtitan's op-level selective checkpointing
  (``recompute_modules`` ``op``) saves the output of PyTorch's cuDNN attention kernel
  (``aten._scaled_dot_product_cudnn_attention``) as it does FlashAttention's; off (torchtitan
  before pytorch/torchtitan#2095, December 2025): where the framework runs ``cudnn`` attention
  the policy re-runs it (``op_recompute_sdpa``, :mod:`stage_core.recompute`).
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
  (:mod:`~stage_explore.analytical.eager_megatron`), and with ``fused_qkv`` the copies around
  its QKV split on Transformer Engine's attention
  (:mod:`~stage_explore.analytical.eager_qkv_split`); ``"hf-llama"``, Hugging Face
  transformers' Llama under FlashAttention-2: torchtitan's RMSNorm, SwiGLU and residual ops, the
  ``rotate_half`` rotary embedding, no key / value copy (:mod:`~stage_explore.analytical.eager_hf`).
- ``rope_fusion`` — the rotary embedding as one fused kernel (Transformer Engine's
  ``fused_apply_rotary_pos_emb`` under Megatron-Core's ``apply_rope_fusion``, or any fused
  kernel: the generator's count); off, with ``eager_modules = "megatron-core"``: Megatron-Core's
  unfused ``_apply_rotary_pos_emb_bshd`` op by op (:mod:`~stage_explore.analytical.eager_megatron`);
  off with other ``eager_modules`` is a ConfigError (their tables count their own RoPE code).
- ``linear_bias_epilogue`` — a biased model's linear biases are added inside the GEMM (eager
  PyTorch's ``nn.Linear``: ``F.linear`` on a contiguous input takes ``addmm``, whose CUDA
  implementation runs cuBLASLt's bias epilogue, ``gemm_and_bias``, for a 1-D contiguous 16-bit
  or fp32 bias, ``aten/src/ATen/native/cuda/Blas.cpp`` ``useLtInterface``; later PyTorch turns it
  off with ``DISABLE_ADDMM_CUDA_LT=1``): the generator's forward bias adds (``q``, ``k``, ``v``,
  ``attn.proj``, the MLP's ``fc1`` / ``fc2``) move no bytes; the backward keeps the bias
  gradient's reduction (``sum_to``, a read of the output gradient). Off: each bias add an
  element-wise kernel of its own (the generator's count).
- ``cp_merge_fp32`` — context-parallel attention is PyTorch's ``context_parallel`` under
  TorchTitan's Llama (:mod:`stage_explore.analytical.context_parallel`): one SDPA kernel per K/V
  chunk (the first causal, every later one non-causal, at the kernel's ``attention_noncausal``
  rate as under Transformer Engine's ring), the chunks' outputs merged (and, in the backward,
  their gradients accumulated) in fp32 element-wise kernels of its own (``_SDPAMerger`` with
  ``convert_to_f32``); the keys and values, repeated to the query heads before SDPA,
  all-gathered behind the first chunk only; their fp32 gradients passed around the cp ring.
  Off: the merge is inside the attention kernel
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
- ``xentropy_cross_entropy`` — the loss runs flash-attn's fused cross-entropy CUDA extension
  (``xentropy_cuda_lib``, llm-foundry's default ``loss_fn: fused_crossentropy``) on the 16-bit
  logits: one read forward, a read and the gradient's write backward
  (``loss_kernels.XENTROPY_CROSS_ENTROPY_BYTES``). Time only; not with ``te_cross_entropy`` or
  ``native_cross_entropy``.
- ``train_metric_losses`` (int ≥ 0) — cross-entropies the trainer's train metrics compute on the
  logits after every micro-batch's backward, forward only, in fp32 under autocast (Composer's
  ``_train_microbatch`` → ``_eval_train_metrics`` → ``LanguageCrossEntropy`` /
  ``LanguagePerplexity.update``; llm-foundry's ``use_train_metrics``, default true):
  ``loss_kernels.METRIC_CROSS_ENTROPY_BYTES`` each, with the loss's forward. Time only.
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
- ``fp8_output_proj`` — under the ``mxfp8`` recipe the output layer (the LM head, and the
  multi-token-prediction heads that share it) runs as a Transformer Engine linear inside the
  FP8 context: Megatron-Core ``fp8_output_proj`` ("If True, run the LM-head output projection
  with TE ColumnParallelLinear under MXFP8", ``megatron/core/transformer/mxfp8_output_proj.py``
  ``is_te_mxfp8_output_proj_active``: only with ``fp8`` and ``fp8_recipe == "mxfp8"``, else the
  plain 16-bit ``ColumnParallelLinear``; NVIDIA/Megatron-LM 620cf750). Its forward, input- and
  weight-gradient GEMMs are timed as the layers' FP8 GEMMs (the recipe's ``fp8_gemms``) with
  their MXFP8 casts; the final norm stays a kernel of its own (the layer is not a norm +
  linear module). Time only (the head's weight and saved input stay 16-bit in memory). Off
  (Megatron-Core's default), or another recipe: the output layer's GEMMs in 16 bits.
- ``fused_single_qkv_rope`` — with ``fused_qkv`` under ``eager_modules`` ``"megatron-core"``,
  Megatron-Core's option of that name (``TransformerConfig``, default False; "avoid splitting
  QKV before ROPE forward and avoid concatenating ROPE dgrads"): the fused ``linear_qkv`` output
  goes whole to Transformer Engine's fused QKV rotary kernel (NVIDIA/TransformerEngine#2122,
  ``apply_fused_qkv_rotary_pos_emb``) when the layer has a rotary embedding and no query / key
  norm. Charged: no query reshape copy, no ``dq`` / ``dk`` concatenation, the value's read and
  write (now the kernel's ``v_out``) and the ``dv`` copy into the fused gradient as before, and
  the rotary embedding as one fused kernel whatever ``rope_fusion`` says
  (:mod:`~stage_explore.analytical.eager_qkv_split`). Off (the default), or another model: the
  split's copies.
- ``fused_rmsnorm`` — the module table's RMSNorm is ``torch.nn.RMSNorm`` on PyTorch's fused
  ``aten::_fused_rms_norm`` / ``_fused_rms_norm_backward`` CUDA kernels (pytorch/pytorch#153666,
  PyTorch 2.9; torchtitan's models since pytorch/torchtitan#985): 6 bytes forward, 14 backward
  per element at the eager rate instead of the op-by-op chain's 36 / 92; compiled, only the
  final norm outside torchtitan's compiled blocks
  (:mod:`~stage_explore.analytical.eager_rmsnorm`). Off (the default): the table's own ops.
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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Each option of this area and the flag (or config key) the framework exposes it under.
KERNEL_FLAGS: dict[str, str] = {
    "attention_kernel": "FlashAttention generation (flash-attn / TE / PyTorch SDPA backend)",
    "sm100_attention_kernel": "SDPA backend priority on sm100+ (torchtitan: cuDNN first)",
    "op_sac_saves_cudnn_attention": "torchtitan _op_sac_save_list names cuDNN SDPA (#2095)",
    "fused_elementwise": "Megatron fused kernels / torch.compile (off: eager PyTorch)",
    "fused_qkv": "Megatron query_key_value / linear_qkv (off: separate q, k, v linears)",
    "linear_bias_epilogue": "PyTorch addmm's cuBLASLt bias epilogue (off: DISABLE_ADDMM_CUDA_LT=1)",
    "fused_fc1": "Megatron linear_fc1 / dense_h_to_4h, AutoModel gate_and_up_projs (2·ffn)",
    "rope_fusion": "Megatron-Core apply_rope_fusion (off: rope_utils' unfused ops, eager)",
    "eager_modules": "eager module code: generator / torchtitan / llm-foundry MPT / fms Llama / …",
    "te_cross_entropy": "Megatron cross_entropy_loss_fusion + cross_entropy_fusion_impl=te",
    "native_cross_entropy": "Megatron cross_entropy_loss_fusion, cross_entropy_fusion_impl=native",
    "xentropy_cross_entropy": "llm-foundry model.loss_fn: fused_crossentropy (flash-attn xentropy)",
    "train_metric_losses": "llm-foundry model.use_train_metrics (Composer train metrics)",
    "cp_merge_fp32": "torch context_parallel (per-chunk SDPA, fp32 merges, dK/dV ring)",
    "cp_traced_ring": "torchtitan training.compile + CP (traced waits; Inductor reorder off)",
    "te_cp_merge": "TE AttnFuncWithCP p2p (per-step out corrections, dQ/dKV accumulation)",
    "te_cp_overlap": "TE AttnFuncWithCP p2p: step i's attention beside step i+1's K/V exchange",
    "fp8_weight_cast_per_use": "torchao Float8Linear dynamic scaling (weights cast at each use)",
    "fp8_amax_reduction": "TE DelayedScaling amax all-reduce group (Megatron --tp-only-amax-red)",
    "te_current_scaling": "TE Float8CurrentScaling quantizers (Megatron --fp8-recipe tensorwise)",
    "fp8_output_proj": "Megatron-Core fp8_output_proj (MXFP8 LM head as a TE linear)",
    "fused_single_qkv_rope": "Megatron-Core fused_single_qkv_rope (TE fused QKV RoPE, no split)",
    "fused_rmsnorm": "torch.nn.RMSNorm on aten::_fused_rms_norm (PyTorch 2.9+, torchtitan#985)",
}

#: The values of ``fp8_amax_reduction``: no reduction timed, Megatron's ``--tp-only-amax-red``
#: group (tensor- and context-parallel) or its default (tensor-, data- and context-parallel).
FP8_AMAX_REDUCTION = ("off", "tp_cp", "tp_dp_cp")


@dataclass(frozen=True, kw_only=True)
class KernelOptions:
    """The fields of this area's options (module docstring); a field's default is what a
    profile that does not set it takes."""

    attention_kernel: str | None
    fused_elementwise: bool
    cp_merge_fp32: bool = False  # context-parallel attention merged inside its kernel
    cp_traced_ring: bool = False  # torch's ring run eagerly (its collectives overlapped)
    te_cross_entropy: bool = False  # Megatron's unfused fp32 loss (CROSS_ENTROPY_BYTES)
    native_cross_entropy: bool = False  # ditto, not the compiled fused one
    xentropy_cross_entropy: bool = False  # ditto, not flash-attn's xentropy kernel
    train_metric_losses: int = 0  # no train metric computed on the logits per micro-batch
    fp8_weight_cast_per_use: bool = False  # FP8 weight copies kept across micro-batches (TE)
    eager_modules: str = "generator"  # eager ops as the generator emits them (one kernel each)
    fp8_amax_reduction: str = "off"  # no FP8 amax all-reduce timed
    te_current_scaling: bool = False  # a tensorwise cast's amax read charged as its bytes
    fp8_output_proj: bool = False  # the output layer's GEMMs in 16 bits (Megatron's default)
    te_cp_merge: bool = False  # ring context-parallel merges inside the attention kernel
    te_cp_overlap: bool = False  # ring exchanges before the attention, not beside its steps
    sm100_attention_kernel: str | None = None  # attention_kernel on every GPU
    op_sac_saves_cudnn_attention: bool = True  # op-level SAC saves every attention kernel
    fused_qkv: bool = False  # q, k and v as three GEMMs (separate linears)
    linear_bias_epilogue: bool = False  # each bias add an element-wise kernel (generator's)
    fused_fc1: str = "none"  # gate and up as two GEMMs (separate linears), their dgrads summed
    rope_fusion: bool = True  # the rotary embedding as the generator counts it (one kernel)
    fused_single_qkv_rope: bool = False  # Megatron's QKV split and its copies (its default)
    fused_rmsnorm: bool = False  # eager RMSNorm as the module table's own ops (eager_rmsnorm)

    def attention_kernel_on(self, peak_flops_per_s: Mapping[str, float]) -> str | None:
        """The attention kernel the framework runs on an accelerator with these peaks:
        ``sm100_attention_kernel`` on Blackwell and later (an ``mxfp8`` peak, which only
        compute capability 10.0+ tensor cores have), else ``attention_kernel``."""
        if self.sm100_attention_kernel is not None and "mxfp8" in peak_flops_per_s:
            return self.sm100_attention_kernel
        return self.attention_kernel

    def op_sac_modules(
        self, modules: tuple[str, ...], peak_flops_per_s: Mapping[str, float]
    ) -> tuple[str, ...]:
        """The recompute modules the framework runs for ``modules`` on an accelerator with
        these peaks: torchtitan's op-level policy (``op``) re-runs a cuDNN attention kernel its
        save list does not name (``op_recompute_sdpa``, unless ``op_sac_saves_cudnn_attention``),
        and on a compiled block (``fused_elementwise``: torchtitan's ``training.compile``) runs
        traced, keeping only what the backward reads (``op_compiled`` /
        ``op_recompute_sdpa_compiled``, :mod:`stage_core.recompute`); else ``modules``
        unchanged."""
        if modules != ("op",):
            return modules
        module = "op"
        if not self.op_sac_saves_cudnn_attention:
            if self.attention_kernel_on(peak_flops_per_s) == "cudnn":
                module = "op_recompute_sdpa"
        return (f"{module}_compiled",) if self.fused_elementwise else (module,)
