"""A dropout's mask is a tensor of its own: the dropout's second output (1 byte per element,
PyTorch's ``native_dropout`` returns ``(output, mask)``, a bool tensor), saved for and read by
its backward (``native_dropout_backward(grad, result1, scale)``, derivatives.yaml), written
again by a recompute, and still written when Megatron's fused bias-dropout-add keeps the
dropout's output on chip. The layer's saved bytes are Korthikanti et al. 2022's
``34·s·b·h + 5·a·s²·b`` (16-bit activations, 1-byte masks), of which the masks are
``2·s·b·h + a·s²·b``. (What the softmax and attention backwards read: test_backward_reads.py.)
"""

from __future__ import annotations

import pytest

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.blocktime import fuse_elementwise

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=1)  # a=24, h=2304, s=2048, dropout


def layer(parallel: ParallelConfig, model: ModelSpec = GPT) -> BoundBlock:
    return lower(model, parallel).blocks["layer"]


def instr(instrs: tuple[Instr, ...], name: str, phase: str | None = None) -> Instr:
    found = [i for i in instrs if i.name == name and (phase is None or i.phase == phase)]
    assert len(found) == 1, (name, [i.name for i in instrs])
    return found[0]


@pytest.mark.parametrize(("b", "t"), [(1, 1), (2, 2), (1, 4)])
def test_attention_dropout_writes_and_reads_its_one_byte_mask(b: int, t: int) -> None:
    s, a = GPT.seq_len, GPT.heads
    scores = a * s * s * b // t  # elements of the local attention probabilities
    block = layer(ParallelConfig(tp=t, micro_batch=b))
    forward = instr(block.fwd, "attn.dropout")
    assert forward.bytes_read == 2 * scores
    assert forward.bytes_written == 2 * scores + 1 * scores  # output + bool mask
    assert dict(forward.outputs)["attn.dropout.mask"] == scores
    backward = instr(block.bwd, "attn.dropout.backward")
    assert backward.bytes_read == 2 * scores + 1 * scores  # gradient + mask, not the input
    assert backward.bytes_written == 2 * scores
    assert {name for name, _ in backward.inputs} == {"d.attn.dropout", "attn.dropout.mask"}


def test_residual_dropouts_write_masks_of_one_byte_per_hidden_element() -> None:
    s, h, b = GPT.seq_len, GPT.hidden, 2
    block = layer(ParallelConfig(tp=2, sp=True, micro_batch=b))
    sbh = s * b * h // 2  # sequence parallel: each rank holds s/t tokens
    for name in ("attn.proj.dropout", "mlp.dropout"):
        forward = instr(block.fwd, name)
        assert dict(forward.outputs)[f"{name}.mask"] == sbh
        assert forward.bytes_written == 2 * sbh + sbh
        backward = instr(block.bwd, f"{name}.backward")
        assert backward.bytes_read == 2 * sbh + sbh


def test_saved_masks_and_the_layer_total_are_korthikantis() -> None:
    s, h, a, b = GPT.seq_len, GPT.hidden, GPT.heads, 2
    programs = lower(GPT, ParallelConfig(micro_batch=b))
    saved = programs.blocks["layer"].saved_bytes
    assert saved == 34 * s * b * h + 5 * a * s * s * b
    # the masks alone: two residual dropouts (s·b·h each) and the attention dropout (a·s²·b)
    block = layer(ParallelConfig(micro_batch=b))
    masks = sum(n for i in block.fwd for name, n in i.outputs if name.endswith(".mask"))
    assert masks == 2 * s * b * h + a * s * s * b


def test_selective_recompute_rewrites_the_mask_and_its_backward_reads_it() -> None:
    s, a = GPT.seq_len, GPT.heads
    scores = a * s * s // 2
    block = layer(ParallelConfig(tp=2, sp=True, recompute=Recompute.SELECTIVE))
    again = instr(block.bwd, "attn.dropout", "recompute")
    assert again.bytes_written == 3 * scores
    backward = instr(block.bwd, "attn.dropout.backward")
    assert block.bwd.index(again) in backward.deps  # waits for the re-generated mask


def test_fusion_keeps_the_mask_write_of_bias_dropout_add() -> None:
    """Megatron's fused bias-dropout-add keeps the dropout's output on chip, not its mask."""
    s, h = GPT.seq_len, GPT.hidden
    block = layer(ParallelConfig())
    fused = fuse_elementwise(block.fwd)
    index = block.fwd.index(instr(block.fwd, "attn.proj.dropout"))
    assert block.fwd[index].bytes_written == 3 * s * h
    assert fused[index].bytes_written == s * h  # the 1-byte mask only
    residual = block.fwd.index(instr(block.fwd, "attn.residual"))
    assert fused[residual].bytes_read == 2 * s * h  # the residual stream x
