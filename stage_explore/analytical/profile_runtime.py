"""The framework-profile options of the pipeline's transfers, buffers and schedules, when a
collective starts on its stream, and the memory the process holds beyond the tensors: each option's
documentation (below), the framework flag it stands for (:data:`RUNTIME_FLAGS`) and its field with
the default (:class:`RuntimeOptions`, a base of
:class:`~stage_explore.analytical.framework_profile.FrameworkProfile`).

Options (all booleans unless said):

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
- ``pipeline_p2p_separate`` — with blocking transfers, a stage's send and the next stage's
  receive are separate blocking instructions that each hold their rank while the message
  crosses (DeepSpeed's ``PipelineEngine``: ``SendActivation``, ``RecvActivation``, ``SendGrad``
  and ``RecvGrad`` are steps of their own in ``TrainSchedule``, each a ``dist.send`` /
  ``dist.recv``, "the communication is blocking", ``deepspeed/runtime/pipe/schedule.py``); off:
  Megatron's batched exchange, the sender held (:func:`~stage_explore.analytical.costs.
  stage_transfer_s`).
- ``runtime_reserved_bytes`` (int) — memory a training process holds besides its tensors: CUDA
  context, cuBLAS/cuDNN workspaces, NCCL communicator buffers. Its cuBLAS workspaces
  (:mod:`~stage_explore.analytical.memory_kinds`, 2 x 32 MiB) are caching-allocator blocks,
  inside a reserved or allocated figure; the rest is outside (the process peak only).
- ``allocator_overhead`` (float ≥ 0) — the caching allocator's reserved-but-unallocated share
  of the tensor peak (fragmentation): reserved = peak × (1 + overhead).
- ``loss_fp32_buffers`` (int ≥ 0) — fp32 buffers of the logits' size the loss holds at once
  (:func:`stage_core.lower.memory.loss_peak_bytes`): the logits are upcast to fp32 for the
  cross-entropy. 3: eager ``F.cross_entropy`` on fp32 logits (autocast runs it in fp32; torchtitan
  casts ``.float()``): ``log_softmax`` saves its fp32 output, and its backward holds that, the
  ``nll_loss`` gradient and its own result at once. 1: Megatron's ``vocab_parallel_cross_entropy``
  on ``output.float()``, which saves the fp32 softmax and turns it into the gradient in place.
  0: the generator's own count (16-bit logits saved, a 16-bit gradient; a fused kernel). With
  any buffers the freed 16-bit logits' block, which the caching allocator keeps reserved and no
  fp32 buffer fits, is held beside them (2 bytes per logit; with 1 it holds the 16-bit gradient).
- ``local_batch_size`` (int ≥ 0) — sequences per data-parallel rank that run as one pipeline
  schedule, each with its own fill and drain (NeMo AutoModel's ``step_scheduler.
  local_batch_size``: its recipe calls ``schedule.step`` once per local batch; the step's
  gradient accumulation is a loop over such schedules). 0 (every profile's default): all the
  step's micro-batches in one schedule (Megatron-Core, DeepSpeed). No effect without pipeline
  parallelism.
- ``loss_parallel`` — with tensor parallelism the cross-entropy runs on vocabulary-sharded
  logits through DTensor's ``loss_parallel`` (torchtitan: on unless
  ``training.disable_loss_parallel``), whose backward is decomposed into element-wise ops on
  the fp32 log-probabilities (``torch/distributed/tensor/parallel/loss.py``,
  ``_nll_loss_and_log_softmax_backward``: ``zeros_like``, ``exp``, the sum and the product
  with the incoming gradient): with the saved log-probabilities, 4 fp32 buffers of the local
  logits are live at once (:data:`LOSS_PARALLEL_FP32_BUFFERS`), not ``loss_fp32_buffers``.
- ``loss_16bit_buffers`` (int ≥ 0) — 16-bit buffers of the logits' size the loss holds at once
  beside the logits when it runs on the 16-bit logits themselves, with no fp32 upcast (a model
  cast to bf16, no autocast): eager ``F.cross_entropy`` on bf16 logits runs ``log_softmax`` and
  ``nll_loss`` in bf16, so its backward holds the saved bf16 log-probabilities, the
  ``nll_loss`` gradient and ``log_softmax``'s backward result (3), beside the logits the
  caller still references (KempnerForge: ``logits = model(input_ids)`` is live through
  ``loss.backward()``, ``scripts/train.py`` 01b461a7, ``training/loop.py`` ``text_step``).
  0: the loss's memory is ``loss_fp32_buffers`` (or ``loss_parallel``'s); above 0 it replaces
  them (:func:`~stage_explore.analytical.loss_memory.loss_excess_bytes`), and the loss is timed
  at its 16-bit kernels' bytes (``loss_kernels.BF16_CROSS_ENTROPY_BYTES``, s35 bf16loss)
  instead of the fp32 upcast's.
- ``loss_logits_gathered`` — with tensor parallelism the output layer's logits are gathered to
  the whole vocabulary on every rank and the loss runs on them there, not on the rank's
  vocabulary shard: KempnerForge's plan ``ColwiseParallel(input_layouts=Shard(1),
  output_layouts=Replicate())`` on ``output_head.proj`` (``kempnerforge/distributed/
  tensor_parallel.py`` 0c4eba1e, no ``loss_parallel``). The loss's buffers are ``tp`` times
  the local logits'. Timed too (s35 kfthru, :mod:`~stage_explore.analytical.gathered_logits`):
  the head's forward all-gathers the logits' shard over the tp group (its ``cat`` copy with
  ``funcol_seq_copies``), the loss kernels run on ``tp`` times the local logits, the
  vocabulary-parallel statistics all-reduces do not run; the backward's ``Replicate`` ->
  ``Shard(-1)`` is a local chunk, no collective.
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
- ``pipelining_output_chunks`` (str) — which ``torch.distributed.pipelining`` stages keep every
  micro-batch's output until the step ends (``output_chunks``, for ``step()``'s merged return):
  ``"every"`` stage (torch before pytorch/pytorch#153383, May 2025; torchtitan's December 2024
  runs), the ``"last"`` only (torch 2.8 on, the default), ``"none"`` (``step(...,
  return_outputs=False)``, torch 2.10 on, pytorch/pytorch#165822). Each micro-batch whose
  backward has run leaves its output held: a boundary tensor, or the last stage's logits
  (:mod:`~stage_explore.analytical.output_chunks`). Read only with ``pipelining_stage_buffers``
  and pp > 1. Memory only.
- ``pipelining_output_fp32`` — the last stage returns fp32 logits (torchtitan's December 2024
  ``Transformer.forward``: ``self.output(h).float()``; off: the model's 16-bit dtype, the
  upcast inside the loss, torchtitan from spring 2025): the kept outputs are 4 bytes a logit,
  and the last chunk's micro-batches in flight hold their fp32 logits beside the loss's buffers
  (``fwd_cache``). Read only with ``pipelining_stage_buffers`` and pp > 1. Memory only.
- ``rope_table_buffer`` — the model keeps its rotary table as a module buffer on every model
  part (pipeline stage) a rank holds: TorchTitan's Llama registers ``freqs_cis``, complex64
  (8 bytes) of ``max_seq_len`` positions × ``head_dim / 2`` (``models/llama/model.py``
  ``_precompute_freqs_cis``; the 2x of earlier versions was removed when CP came, as
  ``context_parallel`` shards the table like the inputs), 4·seq·head_dim bytes. With
  context parallelism torch's ``context_parallel`` (``torch/distributed/tensor/experimental/
  _attention.py``) clones every buffer it must restore before sharding it in place
  (``original_buffers = [... b.clone() ...]``, then ``buffer.resize_`` to the shard, which keeps
  the storage), and TorchTitan restores ``freqs_cis`` (``cp_no_restore_buffers`` names only the
  inputs and labels), so two whole tables live for the step
  (:func:`~stage_explore.analytical.framework_costs.rope_table_bytes`). Memory only; not for
  latent attention (whose table was not read).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Each option of this area and the flag (or config key) the framework exposes it under.
RUNTIME_FLAGS: dict[str, str] = {
    "pipeline_p2p_blocking": "Megatron --overlap-p2p-communication (off = blocking)",
    "pipeline_scatter_gather": "Megatron-LM pipeline scatter/gather (Narayanan et al. §4.1)",
    "pipeline_p2p_separate": "DeepSpeed PipelineEngine Send/Recv{Activation,Grad} instructions",
    "runtime_reserved_bytes": "CUDA context + cuBLAS workspace + NCCL buffers",
    "allocator_overhead": "PyTorch caching allocator (reserved / allocated - 1)",
    "local_batch_size": "AutoModel step_scheduler.local_batch_size (a PP schedule per batch)",
    "loss_fp32_buffers": "fp32 logits copies of the loss (F.cross_entropy on .float() logits)",
    "loss_parallel": "torchtitan loss parallel (training.disable_loss_parallel off, tp > 1)",
    "loss_16bit_buffers": "bf16 logits copies of a loss on un-upcast logits (bf16 model)",
    "loss_logits_gathered": "KempnerForge output head ColwiseParallel(output_layouts=Replicate())",
    "pipelining_stage_buffers": "torch.distributed.pipelining PipelineStage recv buffers",
    "pipelining_output_chunks": "torch pipelining output_chunks (every/last stage; return_outputs)",
    "pipelining_output_fp32": "torchtitan Transformer.forward self.output(h).float() (Dec 2024)",
    "pipeline_outputs_kept": "Megatron-Core deallocate_pipeline_outputs False (NeMo 1.x)",
    "collectives_wait_for_issued_compute": "torch ProcessGroupNCCL: NCCL stream waits at issue",
    "rope_table_buffer": "torchtitan Transformer.freqs_cis buffer (cloned by context_parallel)",
}

#: fp32 logits-sized buffers DTensor's ``loss_parallel`` cross-entropy holds at its backward's
#: peak (``loss_parallel``): the saved log-probabilities, and ``zeros_like``, ``exp`` and their
#: sum in ``_nll_loss_and_log_softmax_backward`` (the product reuses no buffer while the sum is
#: live); torch/distributed/tensor/parallel/loss.py.
LOSS_PARALLEL_FP32_BUFFERS = 4


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """The fields of this area's options (module docstring); a field's default is what a
    profile that does not set it takes."""

    pipeline_p2p_blocking: bool
    pipeline_scatter_gather: bool
    runtime_reserved_bytes: int
    allocator_overhead: float
    loss_fp32_buffers: int = 0  # the generator's own count of the loss's tensors
    local_batch_size: int = 0  # the step's micro-batches in one pipeline schedule
    pipeline_p2p_separate: bool = False  # Megatron's batched send/receive exchange
    loss_parallel: bool = False  # the loss's fp32 buffers are loss_fp32_buffers
    loss_16bit_buffers: int = 0  # the loss upcasts (loss_fp32_buffers)
    loss_logits_gathered: bool = False  # the loss reads the rank's vocabulary shard
    pipelining_stage_buffers: bool = False  # receive buffers per use, sent outputs freed
    pipelining_output_chunks: str = "last"  # torch 2.8 on: the last stage keeps its outputs
    pipelining_output_fp32: bool = False  # the last stage's logits in the model's 16 bits
    pipeline_outputs_kept: bool = False  # a sent output's data freed (deallocate_output_tensor)
    collectives_wait_for_issued_compute: bool = False  # starts when its input is ready
    rope_table_buffer: bool = False  # the rotary table computed per forward (not counted)
