"""What a backward kernel reads besides the incoming gradient: a softmax reads its saved output
(dX = Y·(dY − Σ dY·Y); Megatron's scaled_upper_triang_masked_softmax backward takes
softmax_results), a fused attention reads its output O (FlashAttention-2's backward forms
rowsum(dO·O)), and a dropout writes its 1-byte keep-mask in the forward and reads it back in the
backward (PyTorch's native_dropout returns (output, mask); native_dropout_backward(grad, mask)).
Byte counts checked against closed forms of the tensors' sizes."""

from __future__ import annotations

from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

B, ACT = 1, 2  # micro-batch (global_batch 1, one rank) and bytes of an fp16/bf16 activation


def _layer(core_attention: str) -> tuple[dict[str, Instr], dict[str, Instr], int, int, int]:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2, core_attention=core_attention)
    block = bind_all(make_workload(model, ParallelConfig(global_batch=B)))["layer"]
    fwd = {instr.name: instr for instr in block.fwd}
    bwd = {instr.name: instr for instr in block.bwd}
    return fwd, bwd, model.seq_len, model.hidden, model.heads


def test_dropout_writes_its_mask_and_its_backward_reads_it() -> None:
    fwd, bwd, s, _, heads = _layer("unfused")
    elements = B * heads * s * s  # the attention probabilities [b, n, s, s]
    dropout = fwd["attn.dropout"]
    assert (dropout.bytes_read, dropout.bytes_written) == (ACT * elements, (ACT + 1) * elements)
    backward = bwd["attn.dropout.backward"]
    assert (backward.bytes_read, backward.bytes_written) == ((ACT + 1) * elements, ACT * elements)


def test_softmax_backward_reads_the_saved_probabilities() -> None:
    _, bwd, s, _, heads = _layer("unfused")
    elements = B * heads * s * s
    backward = bwd["attn.softmax.backward"]
    assert backward.bytes_read == 2 * ACT * elements  # dY and Y
    assert backward.bytes_written == ACT * elements


def test_fused_attention_backward_reads_its_output() -> None:
    _, bwd, s, h, _ = _layer("fused")
    (backward,) = [instr for instr in bwd.values() if instr.kind == "attention"]
    tensor = B * s * h * ACT  # q, k, v, o and dO are [b, s, h] each
    assert backward.bytes_read == 5 * tensor


def test_an_add_passes_its_gradient_through_and_a_bias_sums_it() -> None:
    """derivatives.yaml ``add.Tensor``: ``self: grad``, ``other: maybe_multiply(grad, alpha)``
    — no kernel for the residual add's full-size operands; a bias (a broadcast operand) gets
    the gradient summed to its shape (one pass reading the gradient, writing [h])."""
    _, bwd, s, h, _ = _layer("fused")
    for name in ("attn.residual.backward", "y.backward"):
        residual = bwd[name]
        assert (residual.flops, residual.bytes_read, residual.bytes_written) == (0, 0, 0)
        assert len(residual.outputs) == 2  # the gradients it hands on, named for the program
    bias = bwd["attn.proj.backward"]  # out = proj.nobias + wo.bias
    assert bias.flops == B * s * h
    assert bias.bytes_read == B * s * h * ACT
    assert bias.bytes_written == h * ACT
