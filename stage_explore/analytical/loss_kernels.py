"""The training loss's kernels: HBM bytes per logit of the cross-entropy implementations the
frameworks run (Megatron's unfused fp32 loss, PyTorch's eager loss on 16-bit logits,
Transformer Engine's fused Triton loss, Megatron-Core's native fused loss, flash-attn's
xentropy kernel), the forward-only cross-entropies of Composer's train metrics, and which
tensors a block's loss reads. The :class:`~stage_explore.analytical.kernels.KernelTimer` charges
them (``_loss_s``); the framework options ``te_cross_entropy`` / ``native_cross_entropy`` /
``xentropy_cross_entropy`` choose between the losses, ``loss_16bit_buffers`` > 0 picks the
eager 16-bit one, ``train_metric_losses`` counts the metrics' passes."""

from __future__ import annotations

from collections.abc import Iterable

from stage_core.lower.bind import Instr

#: HBM bytes per logit of the loss, forward and backward, as Megatron computes it
#: (megatron/core/tensor_parallel/cross_entropy.py, VocabParallelCrossEntropy, unfused):
#: forward ``logits.float()`` (read 2, write 4), max (read 4), in-place subtract (4 + 4),
#: in-place exp (4 + 4), sum (4), in-place divide into the saved softmax (4 + 4) = 38;
#: backward in-place ``mul_`` by the loss gradient (4 + 4) and the cast back to 16 bits of the
#: ``float()`` (read 4, write 2) = 14. PyTorch's autocast ``cross_entropy`` (FP32 log-softmax and
#: its backward) moves a similar 40 bytes per logit. The generator's op counts reading the
#: 16-bit logits once (2) and the gradient's read and write (4).
CROSS_ENTROPY_BYTES = (38, 14)

#: HBM bytes per logit of PyTorch's eager ``F.cross_entropy`` on 16-bit logits with no
#: ``.float()`` upcast (``log_softmax`` + ``nll_loss``; framework option ``loss_16bit_buffers``
#: > 0, e.g. KempnerForge), element size 2 and fp32 only in registers (``accscalar_t``). Forward
#: ``log_softmax``: for a row longer than the 48 KiB per-block shared memory holds (> ~24,500
#: 16-bit logits, any LLM vocabulary) ``host_softmax`` launches ``cunn_SoftMaxForward``
#: (pytorch/pytorch aten/src/ATen/native/cuda/SoftMax.cu, 000cace5), which makes three passes
#: over the row: ``ilpReduce`` for the max (read 2), ``ilpReduce`` of exp for the sum (read 2)
#: and ``WriteFpropResultsVectorized`` (read 2, write the 16-bit output 2) = 8; ``nll_loss``
#: forward reads one logit per token. Backward ``nll_loss_backward_out_cuda``
#: (aten/src/ATen/native/cuda/Loss.cu, 00e3254d) runs ``grad_input.zero_()`` over the whole
#: ``[tokens, vocab]`` gradient (write 2) and scatters one value per token;
#: ``log_softmax_backward`` (``cunn_SoftMaxBackward``) sums the incoming gradient (read 2) and
#: ``WriteBpropResultsVectorized`` reads it and the saved output and writes the logits' gradient
#: (2 + 2 + 2) = 10. Counted pass by pass as :data:`CROSS_ENTROPY_BYTES` is.
BF16_CROSS_ENTROPY_BYTES = (8, 10)

#: HBM bytes per logit of Transformer Engine's fused Triton cross-entropy on 16-bit logits
#: (Megatron-Core ``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl = "te"``;
#: NVIDIA/TransformerEngine ``transformer_engine/pytorch/triton/cross_entropy.py`` and
#: ``common/triton/cross_entropy.py``, TE 2.x): forward ``online_softmax_kernel`` reads the
#: logits once for the running max and sum (2), ``cross_entropy_kernel`` reads them again and
#: writes the gradient into the same buffer (2 + 2) = 6; backward ``element_mul_kernel`` scales
#: it in place by the per-token loss gradient (2 + 2) = 4. The fp32 work stays in registers.
TE_CROSS_ENTROPY_BYTES = (6, 4)

#: HBM bytes per logit of Megatron-Core's own fused cross-entropy (``cross_entropy_loss_fusion``
#: with ``cross_entropy_fusion_impl = "native"``, ``fused_vocab_parallel_cross_entropy`` in
#: ``megatron/core/fusions/fused_cross_entropy.py``, NVIDIA/Megatron-LM d086a2e3): the unfused
#: loss's steps in four ``jit_fuser`` (``torch.compile``, ``megatron/core/jit.py``) graphs, fp32.
#: Forward ``calculate_logits_max`` reads the 16-bit logits and writes their fp32 copy with the
#: max in the same pass (2 + 4); ``calculate_predicted_logits`` subtracts the max and takes exp
#: in place on that copy and sums it (4 + 4), but a graph that reduces over a mutated input makes
#: Inductor write the new value to a fresh buffer and copy it back (+ 4 + 4; Megatron-LM's later
#: fused_cross_entropy.py, 0cb4a9c8, says so when it splits these steps into separate graphs);
#: ``calculate_cross_entropy_loss`` divides in place (4 + 4) = 30. Backward ``calculate_gradients``
#: scatters into the saved softmax (the same fresh copy, 4 + 4), scales it by the loss gradient in
#: place and writes its 16-bit cast (4 + 4 + 2) = 18.
NATIVE_CROSS_ENTROPY_BYTES = (30, 18)

#: HBM bytes per logit of flash-attn's fused cross-entropy CUDA extension (``xentropy_cuda_lib``,
#: Dao-AILab/flash-attention ``csrc/xentropy``, "adapted from Apex's Xentropy ... work for
#: bfloat16"; ``flash_attn/losses/cross_entropy.py`` of flash-attn 1.0.x, no ``custom_fwd``, so
#: autocast leaves the 16-bit logits as they are), llm-foundry's default loss (``loss_fn:
#: fused_crossentropy``): forward one kernel per row reads the logits (its max and sum-of-exp
#: passes over one row, counted once as every kernel here is) and writes only a loss and a
#: log-sum-exp per token (2); backward reads them again and writes their gradient
#: (``inplace_backward`` False, llm-foundry's ``FusedCrossEntropyLoss(ignore_index=-100)``) (2 + 2).
XENTROPY_CROSS_ENTROPY_BYTES = (2, 4)

#: HBM bytes per logit of one train metric's forward-only cross-entropy as Composer computes it
#: (``composer/metrics/nlp.py`` ``LanguageCrossEntropy.update``: ``torch.nn.CrossEntropyLoss(
#: reduction='sum')`` on the logits, under ``no_grad`` and the precision's autocast, which runs
#: ``cross_entropy`` in float32): the cast of the 16-bit logits to fp32 (read 2, write 4) and
#: ``log_softmax`` (read 4, write 4); ``nll_loss`` reads one value per token = 14.
METRIC_CROSS_ENTROPY_BYTES = 14


def loss_logits(instrs: Iterable[Instr]) -> frozenset[str]:
    """The tensors a block's cross-entropy loss reads (its logits and targets)."""
    return frozenset(
        name for instr in instrs if instr.kind == "crossentropy" for name, _ in instr.inputs
    )
