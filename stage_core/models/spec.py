"""The description of a transformer language model, independent of how it is parallelized.

Contents:

- :class:`Family`, :class:`Norm`, :class:`Activation`, :class:`Position`: closed vocabularies.
- :class:`ModelSpec`: a frozen value with every dim of a decoder-only model (dense or MoE), its
  validation, exact parameter counts (:meth:`ModelSpec.params`, :meth:`ModelSpec.active_params`)
  and :meth:`ModelSpec.with_overrides`.

Four fields are *derived* when left at 0: ``kv_heads`` (= ``heads``, i.e. MHA), ``head_dim``
(= ``hidden // heads``), ``max_position`` (= ``seq_len``) and, for MoE models, ``expert_ffn``
(= ``ffn``). The stored value is always the resolved one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models.layers import Ffn, LayerKind, Mixer, expand_pattern


class Family(StrEnum):
    """Model families; a family selects the block recipe, the dims select the size."""

    GPT = "gpt"
    LLAMA = "llama"
    MIXTRAL = "mixtral"
    DEEPSEEK_MOE = "deepseek-moe"
    PALM = "palm"
    NEMOTRON = "nemotron"
    QWEN3 = "qwen3"
    GPT_OSS = "gpt-oss"
    #: Pure Mamba-2 stacks (every layer a ``mamba`` mixer; no attention, no MLP).
    MAMBA2 = "mamba2"


class Norm(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Activation(StrEnum):
    """``gelu``: two FFN matrices (up, down); ``swiglu``: three (gate, up, down);
    ``squared-relu``: two, ``relu(x)²`` between them (Primer, So et al. 2021; Nemotron-4)."""

    GELU = "gelu"
    SWIGLU = "swiglu"
    SQUARED_RELU = "squared-relu"


class Position(StrEnum):
    """``none``: no position encoding at all (Nemotron-H: its Mamba layers carry position)."""

    LEARNED = "learned"
    ROTARY = "rotary"
    NONE = "none"


_MATRICES_PER_MLP: Mapping[Activation, int] = MappingProxyType(
    {Activation.GELU: 2, Activation.SWIGLU: 3, Activation.SQUARED_RELU: 2}
)

#: Multi-head latent attention's fields (0 when the model uses standard attention).
_MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim")
#: Mamba-2 (state-space) mixer fields (0 when the model has no ``mamba`` layers).
_SSM_FIELDS = ("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv", "ssm_chunk")
#: Mamba-2 defaults: the conv width of the reference implementation (``d_conv=4``, mamba_ssm
#: ``Mamba2``) and the chunk length of Megatron-Core's ``MambaMixer`` (``chunk_size=128``).
_SSM_DEFAULTS: Mapping[str, int] = MappingProxyType(
    {"ssm_groups": 1, "ssm_conv": 4, "ssm_chunk": 128}
)

#: Derived fields and the fields they are derived from (see :meth:`ModelSpec.with_overrides`).
_DERIVED_FROM: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "kv_heads": ("heads",),
        "head_dim": ("hidden", "heads"),
        "max_position": ("seq_len",),
        "expert_ffn": ("ffn",),
    }
)


def _coerce_enum(owner: str, name: str, value: object, kind: type[StrEnum]) -> StrEnum:
    if isinstance(value, str) and value in {member.value for member in kind}:
        return kind(value)
    allowed = ", ".join(repr(member.value) for member in kind)
    raise ConfigError(f"{owner}: `{name}` must be one of {allowed}, but got {name}={value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Every dim of a decoder-only transformer; validated on construction (:class:`ConfigError`).

    MoE layout: when ``num_experts > 0``, layer ``i`` (0-based) is an MoE layer iff
    ``i >= first_k_dense`` and ``i % moe_layer_interval == 0`` (DeepSeek's rule; with the
    defaults every layer is MoE). Dense layers use an FFN of width ``ffn``; MoE layers a router,
    ``num_experts`` routed experts of width ``expert_ffn`` of which ``top_k`` are active per
    token, and ``num_shared_experts`` always-active experts, also of width ``expert_ffn``.
    ``capacity_factor=None`` means dropless routing. ``router_groups`` / ``router_group_topk``
    (0: none): a token's experts among the best ``router_group_topk`` of ``router_groups``
    equal expert groups (DeepSeek-V3's node-limited routing; HF ``n_group`` / ``topk_group``;
    applied where the groups divide the experts and ``router_group_topk`` <= ``top_k``).
    ``bias`` covers the linear layers and the layer-norm shift; an RMSNorm never has a bias.
    ``qk_norm``: an RMSNorm over each head's ``head_dim`` on the queries and on the keys, one
    ``head_dim`` scale each shared by all heads (Qwen3, OLMo 2; Dehghani et al. 2023).

    Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Section 2.1) when
    ``kv_lora_rank > 0``: keys and values are up-projected per head from a shared latent of
    ``kv_lora_rank`` (RMS-normed), queries from a latent of ``q_lora_rank`` (0: projected from
    the hidden state directly); ``head_dim`` is then the per-head query/key dim without RoPE
    (``qk_nope_head_dim``), ``qk_rope_head_dim`` the decoupled RoPE dim (one key shared by the
    heads) and ``v_head_dim`` the value dim (default ``head_dim``). ``kv_heads`` must equal
    ``heads``.

    Mamba-2 layers (kind ``mamba`` in ``layer_pattern``; Dao & Gu 2024, arXiv 2405.21060) need
    ``ssm_heads`` heads of ``ssm_head_dim`` (``d_inner = ssm_heads·ssm_head_dim``), a state of
    ``ssm_state``, ``ssm_groups`` groups sharing ``B`` and ``C`` (default 1; must divide the
    heads), a causal conv of width ``ssm_conv`` (default 4) and a scan chunk of ``ssm_chunk``
    tokens (default 128, Megatron-Core's); see :meth:`mamba_params`.
    """

    name: str
    family: Family
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int
    seq_len: int
    max_position: int = 0
    norm: Norm = Norm.LAYERNORM
    activation: Activation = Activation.GELU
    position: Position = Position.LEARNED
    dropout: bool = False
    tied_embeddings: bool = False
    bias: bool = False
    num_experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    num_shared_experts: int = 0
    capacity_factor: float | None = None
    router_groups: int = 0
    router_group_topk: int = 0
    moe_layer_interval: int = 1
    first_k_dense: int = 0
    qk_norm: bool = False
    #: The attention core's kernel: "fused" (one FlashAttention-style causal kernel),
    #: "unfused" (Megatron-LM 2021's scores/softmax/context kernels over every query-key pair), or
    #: "" for the family's own (unfused for GPT, fused otherwise).
    core_attention: str = ""
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    layer_pattern: str = ""
    sliding_window: int = 0
    attention_sinks: bool = False
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    ssm_state: int = 0
    ssm_groups: int = 0
    ssm_conv: int = 0
    ssm_chunk: int = 0
    #: Multi-token-prediction modules (DeepSeek-V3's D; HF ``num_nextn_predict_layers``,
    #: Megatron-Core ``mtp_num_layers``); 0: none. See :meth:`mtp_params`.
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(
                f"model `name` must be a non-empty string, but got name={self.name!r}"
            )
        for name, kind in (
            ("family", Family),
            ("norm", Norm),
            ("activation", Activation),
            ("position", Position),
        ):
            object.__setattr__(self, name, _coerce_enum(owner, name, getattr(self, name), kind))
        if self.core_attention not in ("", "fused", "unfused"):
            raise ConfigError(
                f"{owner}: `core_attention` must be 'fused', 'unfused' or '' (the family's own), "
                f"but got core_attention={self.core_attention!r}"
            )
        for name in ("dropout", "tied_embeddings", "bias", "qk_norm", "attention_sinks"):
            if not isinstance(getattr(self, name), bool):
                value = getattr(self, name)
                raise ConfigError(f"{owner}: `{name}` must be a bool, but got {name}={value!r}")
        for name in ("layers", "hidden", "ffn", "heads", "vocab", "seq_len", "moe_layer_interval"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(
                    f"{owner}: `{name}` must be a positive int, but got {name}={value!r}"
                )
        for name in (
            *_DERIVED_FROM, "num_experts", "top_k", "num_shared_experts", "first_k_dense",
            *_MLA_FIELDS, "sliding_window", *_SSM_FIELDS, "mtp_layers", "router_groups",
            "router_group_topk",
        ):  # fmt: skip
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ConfigError(
                    f"{owner}: `{name}` must be a non-negative int (0 = default), "
                    f"but got {name}={value!r}"
                )
        self._resolve_and_check_attention(owner)
        self._resolve_and_check_mla(owner)
        if self.max_position == 0:
            object.__setattr__(self, "max_position", self.seq_len)
        if self.position is Position.LEARNED and self.seq_len > self.max_position:
            seq_len, max_position = self.seq_len, self.max_position
            raise ConfigError(
                f"{owner}: learned positions need `seq_len` <= `max_position`, "
                f"but got ({seq_len=}, {max_position=})"
            )
        self._check_pattern(owner)
        self._resolve_and_check_ssm(owner)
        self._resolve_and_check_moe(owner)

    def _resolve_and_check_ssm(self, owner: str) -> None:
        mamba = sum(kind.mixer is Mixer.MAMBA for kind in self.layer_kinds())
        if not self.ssm_heads:
            stray = [f"{k}={getattr(self, k)!r}" for k in _SSM_FIELDS if getattr(self, k)]
            if stray or mamba:
                raise ConfigError(
                    f"{owner}: Mamba layers and the `ssm_*` fields go together, but got "
                    f"ssm_heads=0 with {mamba} mamba layers{', ' if stray else ''}"
                    f"{', '.join(stray)}"
                )
            return
        if not mamba:
            raise ConfigError(
                f"{owner}: `ssm_heads`={self.ssm_heads} needs mamba layers in `layer_pattern`, "
                f"but got layer_pattern={self.layer_pattern!r}"
            )
        for name, default in _SSM_DEFAULTS.items():
            if getattr(self, name) == 0:
                object.__setattr__(self, name, default)
        if self.ssm_head_dim < 1 or self.ssm_state < 1:
            raise ConfigError(
                f"{owner}: Mamba layers need `ssm_head_dim` and `ssm_state` > 0, but got "
                f"(ssm_head_dim={self.ssm_head_dim}, ssm_state={self.ssm_state})"
            )
        heads, groups = self.ssm_heads, self.ssm_groups
        if heads % groups:
            raise ConfigError(
                f"{owner}: `ssm_groups` must divide `ssm_heads`, but got "
                f"(ssm_heads={heads}, ssm_groups={groups})"
            )

    def _check_pattern(self, owner: str) -> None:
        pattern = self.layer_pattern
        if not isinstance(pattern, str):
            raise ConfigError(f"{owner}: `layer_pattern` must be a string, but got {pattern!r}")
        if pattern and (self.first_k_dense or self.moe_layer_interval != 1):
            raise ConfigError(
                f"{owner}: give either `layer_pattern` or `first_k_dense`/`moe_layer_interval`, "
                f"but got layer_pattern={pattern!r} with first_k_dense={self.first_k_dense}, "
                f"moe_layer_interval={self.moe_layer_interval}"
            )
        kinds = self.layer_kinds()
        tokens = {kind.token for kind in kinds}
        if not self.is_moe and any(kind.ffn is Ffn.MOE for kind in kinds):
            raise ConfigError(
                f"{owner}: layer_pattern {pattern!r} has MoE layers but num_experts=0"
            )
        sliding = any(kind.mixer is Mixer.SLIDING for kind in kinds)
        if sliding != (self.sliding_window > 0):
            raise ConfigError(
                f"{owner}: sliding-window layers ('swa') need `sliding_window` > 0 and "
                f"`sliding_window` needs some, but got sliding_window={self.sliding_window} "
                f"with layer kinds {sorted(tokens)}"
            )
        if self.attention_sinks and not any(kind.attends for kind in kinds):
            raise ConfigError(f"{owner}: `attention_sinks` needs attention layers, but got none")

    def _resolve_and_check_attention(self, owner: str) -> None:
        heads, hidden = self.heads, self.hidden
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", heads)
        if self.head_dim == 0:
            if hidden % heads:
                raise ConfigError(
                    f"{owner}: `heads` must divide `hidden` when `head_dim` is not given, "
                    f"but got ({hidden=}, {heads=})"
                )
            object.__setattr__(self, "head_dim", hidden // heads)
        kv_heads = self.kv_heads
        if heads % kv_heads:
            raise ConfigError(
                f"{owner}: `kv_heads` must divide `heads`, but got ({heads=}, {kv_heads=})"
            )

    def _resolve_and_check_mla(self, owner: str) -> None:
        if not self.kv_lora_rank:
            stray = [f"{k}={getattr(self, k)!r}" for k in _MLA_FIELDS if getattr(self, k)]
            if stray:
                raise ConfigError(
                    f"{owner}: latent-attention fields need `kv_lora_rank` > 0, but got "
                    f"kv_lora_rank=0 with {', '.join(stray)}"
                )
            return
        if self.qk_rope_head_dim < 1:
            raise ConfigError(
                f"{owner}: multi-head latent attention needs `qk_rope_head_dim` > 0, but got "
                f"qk_rope_head_dim={self.qk_rope_head_dim}"
            )
        if self.kv_heads != self.heads or self.qk_norm or self.bias:
            raise ConfigError(
                f"{owner}: multi-head latent attention has one key and value per head, no QK-norm "
                f"and no biases, but got (kv_heads={self.kv_heads}, heads={self.heads}, "
                f"qk_norm={self.qk_norm}, bias={self.bias})"
            )
        if self.v_head_dim == 0:
            object.__setattr__(self, "v_head_dim", self.head_dim)

    def _resolve_and_check_moe(self, owner: str) -> None:
        num_experts, top_k = self.num_experts, self.top_k
        if num_experts == 0:
            moe_only = {
                "top_k": 0,
                "expert_ffn": 0,
                "num_shared_experts": 0,
                "capacity_factor": None,
                "moe_layer_interval": 1,
                "first_k_dense": 0,
            }
            stray = [
                f"{k}={getattr(self, k)!r}" for k, v in moe_only.items() if getattr(self, k) != v
            ]
            if stray:
                raise ConfigError(
                    f"{owner}: MoE fields need `num_experts` > 0, but got num_experts=0 with "
                    + ", ".join(stray)
                )
            return
        if self.expert_ffn == 0:
            object.__setattr__(self, "expert_ffn", self.ffn)
        if not 1 <= top_k <= num_experts:
            raise ConfigError(
                f"{owner}: `top_k` must be in 1..`num_experts`, but got ({top_k=}, {num_experts=})"
            )
        groups, group_topk = self.router_groups, self.router_group_topk
        if group_topk > groups or (groups > 0) != (group_topk > 0):
            raise ConfigError(
                f"{owner}: `router_group_topk` must be in 1..`router_groups` (both 0: no "
                f"group-limited routing), but got router_groups={groups}, "
                f"router_group_topk={group_topk}"
            )
        capacity_factor = self.capacity_factor
        if capacity_factor is not None:
            if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, int | float):
                raise ConfigError(
                    f"{owner}: `capacity_factor` must be a number or None (dropless), "
                    f"but got {capacity_factor=}"
                )
            # s36 review9: inf passed `> 0` and ended in an OverflowError traceback where
            # the expert capacity is rounded up (lower/program.py, make_workload)
            if not (capacity_factor > 0 and math.isfinite(capacity_factor)):
                raise ConfigError(
                    f"{owner}: `capacity_factor` must be a finite number > 0 (omit it for "
                    f"dropless routing), but got {capacity_factor=}"
                )
            object.__setattr__(self, "capacity_factor", float(capacity_factor))
        first_k_dense, layers = self.first_k_dense, self.layers
        if first_k_dense >= layers:
            raise ConfigError(
                f"{owner}: `first_k_dense` must be < `layers` so that some layer is MoE, "
                f"but got ({first_k_dense=}, {layers=})"
            )
        if self.num_moe_layers == 0:
            interval = self.moe_layer_interval
            raise ConfigError(
                f"{owner}: no layer is MoE with ({layers=}, {first_k_dense=}, "
                f"moe_layer_interval={interval})"
            )

    # ------------------------------------------------------------------ structure

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The kind of every layer, in order: ``layer_pattern`` expanded over ``layers``
        (:mod:`stage_core.models.layers`), or by default attention (sliding when
        ``sliding_window`` > 0) with an MoE where DeepSeek's rule says, else a dense FFN."""
        return _layer_kinds(
            self.layer_pattern, self.layers, self.is_moe, self.first_k_dense,
            self.moe_layer_interval, self.sliding_window > 0,
        )  # fmt: skip

    def layer_blocks(self) -> tuple[str, ...]:
        """The block kind of every layer (``"layer"``, ``"moe_layer"``, ``"layer_swa_moe"``…)."""
        return tuple(kind.block for kind in self.layer_kinds())

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) holds experts instead of a dense FFN."""
        if not 0 <= index < self.layers:
            raise ConfigError(f"layer index must be in 0..{self.layers - 1}, but got {index}")
        return self.layer_kinds()[index].ffn is Ffn.MOE

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(index) for index in range(self.layers))

    @property
    def num_dense_layers(self) -> int:
        return self.layers - self.num_moe_layers

    # ------------------------------------------------------------------ parameter counts

    def _norm_params(self) -> int:
        shift = self.norm is Norm.LAYERNORM and self.bias
        return self.hidden * (2 if shift else 1)

    def attention_params(self) -> int:
        """``h·(a·d) + 2·h·(k·d) + (a·d)·h`` weights, plus ``a·d + 2·k·d + h`` biases, plus
        ``2·d`` QK-norm scales; latent attention: :meth:`mla_params`."""
        if self.is_mla:
            return self.mla_params()
        h = self.hidden
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        weights = h * q_width + 2 * h * kv_width + q_width * h
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return weights + (q_width + 2 * kv_width + h if self.bias else 0) + qk_norm

    def mla_params(self) -> int:
        """Latent attention (DeepSeek-V2 Section 2.1): queries ``h·q_r + q_r + q_r·a·(d + d_r)``
        (``h·a·(d + d_r)`` without a query latent), keys and values
        ``h·(c + d_r) + c + c·a·(d + d_v)``, output ``a·d_v·h`` (``c`` the kv latent rank,
        ``q_r`` the query's, ``d_r`` the RoPE dim; the ``+ q_r``, ``+ c`` are the latents'
        RMSNorm scales)."""
        h, a, d = self.hidden, self.heads, self.head_dim
        rope, latent, q_rank = self.qk_rope_head_dim, self.kv_lora_rank, self.q_lora_rank
        qk = d + rope
        query = h * q_rank + q_rank + q_rank * a * qk if q_rank else h * a * qk
        key_value = h * (latent + rope) + latent + latent * a * (d + self.v_head_dim)
        return query + key_value + a * self.v_head_dim * h

    def mamba_params(self) -> int:
        """One Mamba-2 mixer (mamba_ssm ``Mamba2``, Megatron-Core ``MambaMixer``):
        ``in_proj`` ``h·(2·d_in + 2·G·N + M)`` (z, x, B, C, dt), the depthwise conv
        ``(d_in + 2·G·N)·(W + 1)`` (weights and bias), ``A_log``, ``D``, ``dt_bias`` ``3·M``,
        the gated norm's scale ``d_in`` and ``out_proj`` ``d_in·h``, with ``d_in = M·P``
        (``M`` heads of ``P``, ``G`` groups, state ``N``, conv width ``W``)."""
        h, m, n = self.hidden, self.ssm_heads, self.ssm_state
        inner, bc = m * self.ssm_head_dim, 2 * self.ssm_groups * n
        in_proj = h * (2 * inner + bc + m)
        conv = (inner + bc) * (self.ssm_conv + 1)
        return in_proj + conv + 3 * m + inner + inner * h

    def mlp_params(self, width: int) -> int:
        """One FFN of ``width``: ``m·h·f`` weights (m = 2 gelu and squared-relu, 3 swiglu),
        ``(m−1)·f + h`` bias."""
        matrices = _MATRICES_PER_MLP[self.activation]
        biases = (matrices - 1) * width + self.hidden if self.bias else 0
        return matrices * self.hidden * width + biases

    def layer_params(self, index: int, *, active: bool = False) -> int:
        """Parameters of layer ``index``: its mixer and its FFN, each with its pre-norm; with
        ``active``, only ``top_k`` routed experts count. Attention sinks add one logit per
        head (GPT-OSS)."""
        kind = self.layer_kinds()[index]
        total = 0
        if kind.mixer is Mixer.MAMBA:
            total += self._norm_params() + self.mamba_params()
        if kind.attends:
            sinks = self.heads if self.attention_sinks else 0
            total += self._norm_params() + self.attention_params() + sinks
        if kind.ffn is Ffn.DENSE:
            total += self._norm_params() + self.mlp_params(self.ffn)
        elif kind.ffn is Ffn.MOE:
            routed = self.top_k if active else self.num_experts
            router = self.hidden * self.num_experts
            experts = (routed + self.num_shared_experts) * self.mlp_params(self.expert_ffn)
            total += self._norm_params() + router + experts
        return total

    def embedding_params(self) -> int:
        """Token embedding ``V·h`` plus learned position embedding ``max_position·h``."""
        positions = self.max_position if self.position is Position.LEARNED else 0
        return (self.vocab + positions) * self.hidden

    def output_params(self) -> int:
        """Final norm plus the output projection ``V·h`` (0 when tied to the embedding)."""
        return self._norm_params() + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        """The exact total number of parameters.

        ``P = embedding + Σ_layers (attention + 2·norm + ffn_or_moe) + norm + output``, with
        embedding ``(V + P_pos)·h`` (``P_pos = max_position`` if learned, else 0), attention
        ``h·(a·d) + 2·h·(k·d) + (a·d)·h`` (+ ``a·d + 2·k·d + h`` with bias), norm ``h`` (``2h``
        for a layer norm with bias), ffn ``m·h·f`` (+ ``(m−1)·f + h`` with bias; m = 2 gelu,
        3 swiglu), moe ``h·E + (E + S)·ffn(f_e)``, output ``V·h`` unless tied.
        The vocabulary is the model's; padding for TP is
        :meth:`stage_core.parallel.ParallelConfig.padded_vocab`.
        For the GPT block this is ``12·L·h² + 13·L·h + (V + s)·h + 2h``, i.e. the formula of
        Narayanan et al. 2021 (arXiv 2104.04473, Section 5.1) plus the final layer norm.
        """
        body = sum(self.layer_params(index) for index in range(self.layers))
        return self.embedding_params() + body + self.output_params()

    def mtp_params(self) -> int:
        """Parameters of the ``mtp_layers`` multi-token-prediction modules (DeepSeek-V3, arXiv
        2412.19437, Section 2.2), not part of :meth:`params`: per module two norms (of the
        previous depth's hidden state and of the token embedding), the projection ``M_k``
        ``2h·h``, one transformer layer of the main model's last layer kind and the module's
        final norm. The embedding and the output layer are shared with the main model and
        not counted again (DeepSeek-V3's checkpoint stores copies of both with the module:
        its 14B MTP figure includes them)."""
        if not self.mtp_layers:
            return 0
        norm, h = self._norm_params(), self.hidden
        module = 2 * norm + 2 * h * h + self.layer_params(self.layers - 1) + norm
        return self.mtp_layers * module

    def active_params(self) -> int:
        """Parameters used per token: as :meth:`params` with ``top_k`` of the routed experts."""
        body = sum(self.layer_params(index, active=True) for index in range(self.layers))
        return self.embedding_params() + body + self.output_params()

    # ------------------------------------------------------------------ values

    def with_overrides(self, **changes: Any) -> ModelSpec:
        """A copy with ``changes`` applied and validated, e.g. ``with_overrides(layers=2)``.

        A derived field that still holds its default follows its sources: overriding
        ``seq_len`` of a model whose ``max_position`` equals its ``seq_len`` moves both.
        """
        names = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ConfigError(
                f"model {self.name!r}: cannot override unknown fields {unknown}; "
                f"known fields are {sorted(names)}"
            )
        values = {name: getattr(self, name) for name in names}
        for derived, sources in _DERIVED_FROM.items():
            follows = derived not in changes and any(source in changes for source in sources)
            if follows and values[derived] == self._default_of(derived):
                values[derived] = 0
        values.update(changes)
        return ModelSpec(**values)

    def _default_of(self, derived: str) -> int:
        defaults = {
            "kv_heads": self.heads,
            "head_dim": self.hidden // self.heads,
            "max_position": self.seq_len,
            "expert_ffn": self.ffn if self.is_moe else 0,
        }
        return defaults[derived]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON- and TOML-friendly values (enums as strings), in field order."""
        result: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            result[field.name] = str(value) if isinstance(value, StrEnum) else value
        return result


@functools.lru_cache(maxsize=256)
def _layer_kinds(
    pattern: str, layers: int, moe: bool, first_k_dense: int, interval: int, sliding: bool
) -> tuple[LayerKind, ...]:
    if pattern:
        return expand_pattern(pattern, layers)
    mixer = Mixer.SLIDING if sliding else Mixer.ATTENTION
    return tuple(
        LayerKind(
            mixer,
            Ffn.MOE if moe and i >= first_k_dense and i % interval == 0 else Ffn.DENSE,
        )
        for i in range(layers)
    )
