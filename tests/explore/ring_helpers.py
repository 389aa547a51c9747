"""Shared pieces of the ring context-parallel attention tests (Transformer Engine's ring,
test_te_ring_noncausal.py; PyTorch's ``context_parallel``, test_torch_ring_noncausal.py): a
fused attention instruction of either phase with fixed operand sizes, and a system whose kernel
model states other non-causal ratios (``attention_noncausal``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from stage_core.lower.bind import Instr
from stage_explore.system.model import System


def ring_attention(phase: str, flops: int) -> Instr:
    """A fused attention instruction of ``phase`` (``fwd``: q, k, v in, o out; ``bwd``: the
    output gradient and q, k, v in, their gradients out) doing ``flops``, at 4,096 x 4,096
    query and 2 x 1,024 x 4,096 key / value elements of 2 bytes."""
    q, kv = 2 * 4096 * 4096, 2 * 2 * 1024 * 4096
    if phase == "fwd":
        return Instr(
            "attn.core", "fwd", "attention", flops=flops,
            inputs=(("q", q), ("k", kv), ("v", kv)), outputs=(("o", q),),
        )  # fmt: skip
    return Instr(
        "attn.core.backward", "bwd", "attention", flops=flops,
        inputs=(("d.o", q), ("q", q), ("k", kv), ("v", kv)),
        outputs=(("d.q", q), ("d.k", kv), ("d.v", kv)),
    )  # fmt: skip


def with_noncausal(system: System, ratios: Mapping[str, float]) -> System:
    """``system`` with its kernel model's ``attention_noncausal`` table replaced by ``ratios``
    (empty: every kernel at its causal rate on the non-causal ring steps)."""
    kernels = system.accelerator.kernels
    assert kernels is not None
    accelerator = dataclasses.replace(
        system.accelerator, kernels=dataclasses.replace(kernels, attention_noncausal=dict(ratios))
    )
    return dataclasses.replace(system, accelerator=accelerator)
