"""The model FLOPs per trained token as the published sources count them: not one number but a
band, because the counting conventions differ (:func:`flop_band`).

A source that states both a rate in tokens and one in FLOPs (TFLOP/s per GPU, MFU) divided by
its own count of FLOPs per token; which count is not always said. The conventions in use, each
per token, forward and backward (3 × 2 FLOPs per multiply-add of a weight):

- ``6N``: six FLOPs per active non-embedding parameter, no attention core and no output layer
  (Kaplan et al. 2020, arXiv 2001.08361, Section 2.1, C ≈ 6N): the lowest;
- ``causal``: ``6N`` plus the output layer ``6·h·V`` plus half the attention core (the causal
  mask's half: NeMo's ``flops_formulas`` with ``causal_self_attn``, NVIDIA-NeMo/NeMo
  ``nemo/utils/flops_formulas.py``);
- ``megatron``: ``6N`` plus the output layer plus the whole attention core ``6·s·a·(d_qk + d_v)``
  (``12·s·a·d``): the count ``stage validate`` compares TFLOP/s rows with
  (:func:`~stage_explore.validation.run.megatron_flops`; Narayanan et al. 2021, eq. 3 without
  recompute; pytorch/torchtitan's ``get_num_flop_per_token``, ``6·num_params + 12·l·h·q·t``
  with the embedding left out; PaLM's MFU, Chowdhery et al. 2022, Appendix B);
- ``6 x all parameters``: six FLOPs per active parameter, the embeddings' too, plus the whole
  attention core: llm-foundry's MFU (``flops_per_seq = 2·n_params·seq``, ``attn_flops_per_seq
  = n_layers·2·2·d_model·seq²``, times 3; mosaicml/llm-foundry
  ``scripts/train/benchmarking/README.md`` at 061f2c7, "MFU"), above ``megatron`` by the input
  embedding's ``6·h·V`` when it is not tied;
- ``recompute``: ``megatron`` with the layers' recomputed forward (hardware FLOPs, eq. 3's
  96 = 4/3 · 72 for full recompute; the attention core's forward again, a third of it, for
  selective recompute), and for full recompute ``recompute, all``: the largest count times
  4/3 (llm-foundry's HFU, the same README, "HFU": ``4·flops_per_seq + 4·attn_flops_per_seq``):
  only for a run that recomputes, and for an HFU cell whatever the row says
  (:mod:`~stage_explore.validation.consistency`).

The band is ``[6N, the largest of the others]``. Active parameters: ``top_k`` routed experts
plus the shared ones (:meth:`~stage_core.models.spec.ModelSpec.layer_params`); a sliding-window
layer attends over ``min(s, window)`` keys; a Mamba-2 mixer counts its projections (its scan is
not counted). What no convention varies is outside the band: a 2× slip is caught whenever the
band is narrower than 2× (without recompute 1.03× for GPT-3 175B at 2k, 1.19× Llama 3 70B and
1.46× Llama 3 8B at 8k, 1.82× Qwen3-30B-A3B at 4k; full recompute's 4/3 widens each by a third;
Llama 3 8B at 32k is 2.38×: at long sequences the attention core alone makes it wider,
docs/validation.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from stage_core.models.layers import Mixer
from stage_core.models.spec import ModelSpec
from stage_core.parallel.vocab import Recompute


@dataclass(frozen=True, slots=True)
class FlopBand:
    """FLOPs per token under each convention (:data:`conventions`), and the band they span."""

    conventions: Mapping[str, float]

    @property
    def low(self) -> float:
        return min(self.conventions.values())

    @property
    def high(self) -> float:
        return max(self.conventions.values())


def _core(model: ModelSpec, kind_mixer: Mixer) -> float:
    """The whole (non-causal) attention core of one layer per token, forward and backward:
    ``6·s·a·(d_qk + d_v)`` (QKᵀ and the values' product; ``d_qk`` with MLA's RoPE part)."""
    keys = model.seq_len
    if kind_mixer is Mixer.SLIDING and model.sliding_window:
        keys = min(keys, model.sliding_window)
    qk = model.head_dim + (model.qk_rope_head_dim if model.is_mla else 0)
    v = model.v_head_dim if model.is_mla else model.head_dim
    return 6.0 * keys * model.heads * (qk + v)


def _mtp(model: ModelSpec) -> tuple[float, float]:
    """``(6·active parameters, attention core)`` per token of the multi-token-prediction
    modules (:meth:`~stage_core.models.spec.ModelSpec.mtp_params` with ``top_k`` experts):
    Megatron-Core's ``num_floating_point_operations`` counts them; 6N does not."""
    if not model.mtp_layers:
        return 0.0, 0.0
    last = model.layer_kinds()[-1]
    h = model.hidden  # three RMSNorm scales, the projection M_k, the layer
    module = 3 * h + 2 * h * h + model.layer_params(model.layers - 1, active=True)
    core = _core(model, last.mixer) if last.attends else 0.0
    return 6.0 * model.mtp_layers * module, model.mtp_layers * core


@functools.lru_cache(maxsize=512)
def flop_band(model: ModelSpec, recompute: Recompute | str = Recompute.NONE) -> FlopBand:
    """The model FLOPs per token of ``model`` under each published convention (module doc);
    ``recompute``: the run's, which adds the ``recompute`` convention (full for a count of
    hardware FLOPs whatever the run did)."""
    kinds = model.layer_kinds()
    linear = 6.0 * sum(model.layer_params(i, active=True) for i in range(model.layers))
    core = sum(_core(model, kind.mixer) for kind in kinds if kind.attends)
    mtp_linear, mtp_core = _mtp(model)
    logits = 6.0 * model.hidden * model.vocab
    megatron = linear + core + mtp_linear + mtp_core + logits
    everything = 6.0 * model.active_params() + mtp_linear + core + mtp_core
    conventions = {
        "6N": linear,
        "causal": linear + core / 2 + logits,
        "megatron": megatron,
        "6 x all parameters": max(megatron, everything),
    }
    mode = Recompute(recompute)
    if mode is Recompute.FULL:
        conventions["recompute"] = megatron + (linear + core + mtp_linear + mtp_core) / 3
        conventions["recompute, all"] = max(megatron, everything) * 4 / 3
    elif mode is Recompute.SELECTIVE:
        conventions["recompute"] = megatron + (core + mtp_core) / 3
    return FlopBand(MappingProxyType(conventions))
