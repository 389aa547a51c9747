"""Parallel execution configurations.

Contents:

- :mod:`~stage_core.parallel.config`: :class:`ParallelConfig` (degrees dp, tp, cp, pp, ep;
  sequence parallelism, schedule, ZeRO, recompute, batch sizes, precision, rank order), its
  vocabularies (:class:`Schedule`, :class:`Recompute`, :class:`CpStyle`, :class:`Precision`),
  :func:`pad_vocab` and the conventions it documents (EP folded into dp×cp, KV-head replication,
  vocabulary padding, gradient bucket size).
- :mod:`~stage_core.parallel.split`: :class:`PipelineSplit` and :func:`split_layers`, the layers
  of every pipeline stage (even, Megatron's first/last-stage and embedding/loss rules, explicit).
"""

from __future__ import annotations

from stage_core.parallel.config import (
    DEFAULT_AXIS_ORDER,
    DEFAULT_GRAD_BUCKET_BYTES,
    DEFAULT_VOCAB_DIVISIBLE_BY,
    EXPERT_DP_AXIS,
    EXPERT_TP_AXIS,
    FP8_GEMMS,
    RECOMPUTE_MODULES,
    CpStyle,
    Fp4Recipe,
    Fp8Recipe,
    MoeDispatcher,
    ParallelConfig,
    Precision,
    Recompute,
    Schedule,
    pad_vocab,
    unsharded_zero,
    unsharded_zero_note,
)
from stage_core.parallel.split import PipelineSplit, split_layers

__all__ = [
    "DEFAULT_AXIS_ORDER",
    "DEFAULT_GRAD_BUCKET_BYTES",
    "DEFAULT_VOCAB_DIVISIBLE_BY",
    "EXPERT_DP_AXIS",
    "EXPERT_TP_AXIS",
    "FP8_GEMMS",
    "RECOMPUTE_MODULES",
    "CpStyle",
    "Fp4Recipe",
    "Fp8Recipe",
    "MoeDispatcher",
    "ParallelConfig",
    "PipelineSplit",
    "Precision",
    "Recompute",
    "Schedule",
    "pad_vocab",
    "split_layers",
    "unsharded_zero",
    "unsharded_zero_note",
]
