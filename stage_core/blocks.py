"""Transformer blocks, written once for a single device.

A model is a sequence of four kinds of block: the embedding, dense layers, MoE layers and the
head (final norm, output layer, cross-entropy); with multi-token prediction, each MTP module
is an :func:`mtp_block` and an :data:`MTP_HEAD`. Builders here read only the
:class:`~stage_core.models.spec.ModelSpec`; no sharding appears in them.

Dims: ``B`` micro-batch (sequences), ``S`` sequence, ``H`` hidden, ``N`` query heads, ``K`` kv
heads (times the replication Megatron applies when tp exceeds the kv heads), ``D`` head dim,
``F`` dense FFN width, ``G`` expert FFN width, ``Z`` shared-expert FFN width, ``V`` (padded)
vocabulary, ``P`` positions, ``E`` experts, ``C`` expert capacity (token slots per expert).

Attention kernels: ``unfused`` is Megatron's core attention as separate ops (scores einsum,
softmax, dropout, context einsum) — the form Korthikanti et al. 2022 count activation memory
for; ``fused`` is a flash-style kernel (O(S) memory, exact causal FLOPs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from stage_core.graph import Block
from stage_core.models.layers import DENSE_LAYER, Ffn, LayerKind, Mixer, layer_kind_of_block
from stage_core.models.spec import Activation, ModelSpec, Norm, Position
from stage_core.ops_mla import HeadConcat, LatentAttention
from stage_core.ops_moe import Combine, Dispatch
from stage_core.ops_serving import CacheAppend, LastToken
from stage_core.ops_ssm import CausalConv1d, GroupRMSNorm, SSDScan, StateUpdate

#: Ops of the attention core, recomputed by selective recompute (Korthikanti et al. 2022).
ATTENTION_CORE = frozenset(
    {"attn.scores", "attn.softmax", "attn.dropout", "attn.context", "attn.core"}
)

_NORM_OPS = {Norm.LAYERNORM: 5, Norm.RMSNORM: 3}


@dataclass(frozen=True, slots=True)
class Structure:
    """The part of a model that shapes its blocks (sizes are bound later)."""

    family: str
    norm: Norm
    activation: Activation
    position: Position
    bias: bool
    num_shared_experts: int
    qk_norm: bool = False
    #: Multi-head latent attention, and whether its queries come from a latent too.
    latent_attention: bool = False
    query_latent: bool = False
    #: One learned logit per head added to the softmax's denominator (GPT-OSS).
    attention_sinks: bool = False

    @classmethod
    def of(cls, model: ModelSpec) -> Structure:
        return cls(
            str(model.family),
            model.norm,
            model.activation,
            model.position,
            model.bias,
            1 if model.num_shared_experts else 0,
            model.qk_norm,
            model.is_mla,
            model.q_lora_rank > 0,
            model.attention_sinks,
        )


@dataclass(frozen=True, slots=True)
class BlockOptions:
    """Choices that shape the blocks but are not model dims."""

    attention: str = "fused"  # "fused" | "unfused"
    causal: bool = True
    dropout: bool = False
    #: Serving: bytes per element of the KV cache the attention appends to and reads (``T``
    #: cached tokens per sequence); 0 for training, which has no cache.
    kv_cache_bytes: int = 0
    #: Bytes per element of the layers' weights (1: FP8 serving weights).
    weight_bytes: int = 2
    #: Serving decode of latent attention: the key up-projection absorbed into the queries,
    #: attention over the cached latent (prefill up-projects keys and values instead).
    absorb_latent: bool = False
    #: Mesh axes the experts are partitioned over, outermost first (``ep``; with Megatron-Core's
    #: MoE parallel folding also ``cp`` and, with expert tensor parallel size 1, ``tp``; with
    #: one strictly between 1 and tp, ``tpo``: lower/experts.py).
    expert_axes: tuple[str, ...] = ("ep",)


def default_options(model: ModelSpec, dropout: bool | None = None) -> BlockOptions:
    """GPT-family models use Megatron's unfused core attention (as the published runs did);
    the others a fused causal kernel; a model's ``core_attention`` overrides its family's."""
    use_dropout = model.dropout if dropout is None else dropout
    return _default_options(model.core_attention, str(model.family), use_dropout)


@functools.lru_cache(maxsize=64)
def _default_options(core_attention: str, family: str, dropout: bool) -> BlockOptions:
    """:func:`default_options` of the model fields it reads (memoised: a search builds a
    workload, and so these options, for every candidate)."""
    if core_attention:
        return BlockOptions(core_attention, causal=core_attention == "fused", dropout=dropout)
    if family == "gpt":
        return BlockOptions("unfused", causal=False, dropout=dropout)
    return BlockOptions("fused", causal=True, dropout=dropout)


def _norm(b: Block, model: Structure, x: str, out: str, dim: str = "H") -> str:
    scale = b.weight(f"{out}.scale", (dim,))
    inputs: tuple[str, ...] = (x, scale)
    if model.norm == Norm.LAYERNORM and model.bias:
        inputs = (x, scale, b.weight(f"{out}.shift", (dim,)))
    return b.reduction(inputs, out, (dim,), _NORM_OPS[model.norm], saves=(x,))


def _dropout(b: Block, x: str, out: str, options: BlockOptions) -> str:
    if not options.dropout:
        return x
    return b.elementwise(x, out=out, ops_per_element=2, mask_bytes=1, backward_ops_per_element=1)


def _linear(
    b: Block,
    model: Structure,
    subscripts: str,
    x: str,
    w: str,
    out: str,
    bias_dims: tuple[str, ...],
) -> str:
    if not model.bias:
        return b.einsum(subscripts, x, w, out=out)
    raw = b.einsum(subscripts, x, w, out=f"{out}.nobias")
    bias = b.weight(f"{w}.bias", bias_dims)
    return b.elementwise(raw, bias, out=out, linear=True)


def _attention(
    b: Block, model: Structure, x: str, options: BlockOptions, window: bool = False
) -> str:
    ln = _norm(b, model, x, "ln1")
    kv = "N" if options.attention == "unfused" else "K"
    q = _linear(b, model, "bsh,hnd->bsnd", ln, b.weight("wq", ("H", "N", "D")), "q", ("N", "D"))
    k = _linear(b, model, "bsh,hnd->bsnd", ln, b.weight("wk", ("H", kv, "D")), "k", (kv, "D"))
    v = _linear(b, model, "bsh,hnd->bsnd", ln, b.weight("wv", ("H", kv, "D")), "v", (kv, "D"))
    if model.qk_norm:  # RMSNorm over each head's D, one [D] scale shared by the heads (Qwen3)
        q = _head_norm(b, q, "q.norm")
        k = _head_norm(b, k, "k.norm")
    if model.position == Position.ROTARY:
        q = b.elementwise(q, out="q.rope", ops_per_element=3, backward_ops_per_element=3)
        k = b.elementwise(k, out="k.rope", ops_per_element=3, backward_ops_per_element=3)
    if options.kv_cache_bytes:
        context = "TW" if window else "T"  # a sliding layer keeps its window's keys only
        k = _cache(b, k, "k", options.kv_cache_bytes, context)
        v = _cache(b, v, "v", options.kv_cache_bytes, context)
    if options.attention == "unfused":
        scores = b.einsum("bsnd,btnd->bnst", q, k, out="attn.scores")
        probs = b.reduction(
            (scores,),
            "attn.softmax",
            ("S",),
            5,
            saves=("attn.softmax",),
            backward_ops_per_element=3,
        )
        probs = _dropout(b, probs, "attn.dropout", options)
        context = b.einsum("bnst,btnd->bsnd", probs, v, out="attn.context")
    else:
        cached = bool(options.kv_cache_bytes)
        sinks = b.weight("attn.sinks", ("N",)) if model.attention_sinks else ""
        context = b.attention(
            q, k, v, out="attn.core", causal=options.causal, cached=cached,
            window="W" if window else "", sinks=sinks,
        )  # fmt: skip
    proj = _linear(
        b, model, "bsnd,ndh->bsh", context, b.weight("wo", ("N", "D", "H")), "attn.proj", ("H",)
    )
    dropped = _dropout(b, proj, "attn.proj.dropout", options)
    return b.elementwise(x, dropped, out="attn.residual", linear=True)


def _latent_attention(b: Block, model: Structure, x: str, options: BlockOptions) -> str:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Section 2.1), as trained.

    Dims: ``Q`` query latent, ``L`` key-value latent, ``D`` the per-head query/key dim without
    RoPE, ``R`` the decoupled RoPE dim, ``A = D + R``, ``U`` the value dim. Queries: ``ln1``
    (or its RMS-normed down-projection ``[Q]``) up-projected per head to a part without RoPE
    and a RoPE part. Keys and values: a shared latent ``[L]`` (RMS-normed) up-projected per
    head to the key's part without RoPE and to the value, plus one RoPE key ``[R]`` projected
    from ``ln1`` and shared by the heads (:class:`~stage_core.ops_mla.HeadConcat`). DeepSeek
    fuses the ``[L]`` and ``[R]`` down-projections and splits each up-projection's output:
    the same FLOPs and weights as the separate einsums here.

    Serving caches the compressed form: the normed latent ``kv.c[B, T, L]`` and the RoPE key
    ``kv.r[B, T, R]``. Prefill up-projects keys and values from the cached context; decode
    (``options.absorb_latent``) absorbs the key up-projection into the queries and attends over
    the latent itself (:class:`~stage_core.ops_mla.LatentAttention`), then up-projects the
    result to the value dim.
    """
    ln = _norm(b, model, x, "ln1")
    source, width = ln, "H"
    if model.query_latent:
        latent = b.einsum("bsh,hq->bsq", ln, b.weight("wq_a", ("H", "Q")), out="q.latent")
        source, width = _latent_norm(b, latent, "Q", "q.latent.norm"), "Q"
    q_nope = b.einsum(
        "bsc,cnd->bsnd", source, b.weight("wq_b_nope", (width, "N", "D")), out="q.nope"
    )
    q_pe = b.einsum("bsc,cnr->bsnr", source, b.weight("wq_b_rope", (width, "N", "R")), out="q.pe")
    q_pe = b.elementwise(q_pe, out="q.pe.rope", ops_per_element=3, backward_ops_per_element=3)
    q = b.add_op(HeadConcat("q", (q_nope, q_pe), ("q",)), ("B", "S", "N", "A"))
    kv = b.einsum("bsh,hl->bsl", ln, b.weight("wkv_a", ("H", "L")), out="kv.latent")
    kv = _latent_norm(b, kv, "L", "kv.latent.norm")
    k_pe = b.einsum("bsh,hr->bsr", ln, b.weight("wk_rope", ("H", "R")), out="k.pe")
    k_pe = b.elementwise(k_pe, out="k.pe.rope", ops_per_element=3, backward_ops_per_element=3)
    w_k, w_v = b.weight("wkv_b_k", ("L", "N", "D")), b.weight("wkv_b_v", ("L", "N", "U"))
    cached = bool(options.kv_cache_bytes)
    if cached:
        kv = _cache(b, kv, "c", options.kv_cache_bytes)
        k_pe = _cache(b, k_pe, "r", options.kv_cache_bytes)
    if cached and options.absorb_latent:
        q_lat = b.einsum("bsnd,lnd->bsnl", q_nope, w_k, out="q.absorbed")
        op = LatentAttention("attn.latent", (q_lat, q_pe, kv, k_pe), ("attn.latent",))
        latent = b.add_op(op, ("B", "S", "N", "L"))
        context = b.einsum("bsnl,lnu->bsnu", latent, w_v, out="attn.core")
    else:
        keys = b.tensors[kv].dims[1]  # S, or the cached context T
        k_nope = b.einsum("bsl,lnd->bsnd", kv, w_k, out="k.nope")
        v = b.einsum("bsl,lnu->bsnu", kv, w_v, out="v")
        k = b.add_op(HeadConcat("k", (k_nope, k_pe), ("k",)), ("B", keys, "N", "A"))
        context = b.attention(q, k, v, out="attn.core", causal=options.causal, cached=cached)
    proj = b.einsum("bsnu,nuh->bsh", context, b.weight("wo", ("N", "U", "H")), out="attn.proj")
    dropped = _dropout(b, proj, "attn.proj.dropout", options)
    return b.elementwise(x, dropped, out="attn.residual", linear=True)


def _mamba_mixer(b: Block, model: Structure, x: str, options: BlockOptions) -> str:
    """A Mamba-2 mixer (Dao & Gu 2024, arXiv 2405.21060, Section 7; ops in
    :mod:`stage_core.ops_ssm`), as Megatron-Core's ``MambaMixer`` runs it in training.

    ``ln1`` is projected to ``z``, ``x`` ``[Hs, Ps]``, ``B``, ``C`` ``[Gs, Ns]`` and ``dt``
    ``[Hs]`` (one fused ``in_proj`` in Megatron: the same FLOPs and weights as these five
    einsums); ``x``, ``B``, ``C`` are convolved causally (width ``Ws``, bias, SiLU); the SSD scan
    (with the ``D·x`` skip) is gated by ``silu(z)``, normalised per group and projected back by
    ``out_proj``. No biases on the projections (Megatron asserts ``bias=False``).

    Serving (a cache in ``options``) keeps per sequence the conv states ``kv.conv_*`` (the last
    ``Ws − 1`` inputs of each channel) and the SSM state ``kv.ssm[B, Hs, Ps, Ns]``, read and
    rewritten every step (:class:`~stage_core.ops_ssm.StateUpdate`): constant in the context.
    """
    ln = _norm(b, model, x, "ln1")
    parts = {"z": "mp", "x": "mp", "b": "gn", "c": "gn", "dt": "m"}
    dims = {"m": "Hs", "p": "Ps", "g": "Gs", "n": "Ns"}
    proj = {
        name: b.einsum(
            f"bsh,h{labels}->bs{labels}",
            ln,
            b.weight(f"ssm.in_{name}", ("H", *(dims[label] for label in labels))),
            out=f"ssm.{name}",
        )
        for name, labels in parts.items()
    }
    conv = {}
    for name in ("x", "b", "c"):
        channels = tuple(dims[label] for label in parts[name])
        if options.kv_cache_bytes:  # serving: the last Ws − 1 inputs of every channel
            _state(b, proj[name], f"conv_{name}", (*channels, "Wc"), options.kv_cache_bytes)
        weight = b.weight(f"ssm.conv_{name}", (*channels, "Ws"))
        bias = b.weight(f"ssm.conv_{name}.bias", channels)
        op = CausalConv1d(f"ssm.conv.{name}", (proj[name], weight, bias), (f"ssm.conv.{name}",))
        conv[name] = b.add_op(op, ("B", "S", *channels))
    heads = tuple(b.weight(f"ssm.{name}", ("Hs",)) for name in ("a_log", "d", "dt_bias"))
    inputs = (conv["x"], proj["dt"], conv["b"], conv["c"], *heads)
    scan = b.add_op(SSDScan("ssm.scan", inputs, ("ssm.scan",)), ("B", "S", "Hs", "Ps"))
    if options.kv_cache_bytes:  # serving: the SSM state the scan starts from and leaves
        _state(b, scan, "ssm", ("Hs", "Ps", "Ns"), options.kv_cache_bytes)
    gated = b.elementwise(  # y·silu(z), as SwiGLU's product
        scan, proj["z"], out="ssm.gate", ops_per_element=5, saves=(scan, proj["z"]),
        backward_ops_per_element=8,
    )  # fmt: skip
    scale = b.weight("ssm.norm.scale", ("Hs", "Ps"))
    rms = _NORM_OPS[Norm.RMSNORM]
    norm = GroupRMSNorm("ssm.norm", (gated, scale), ("ssm.norm",), ("Ps",), rms, (gated,))
    normed = b.add_op(norm, ("B", "S", "Hs", "Ps"))
    out_proj = b.weight("ssm.out_proj", ("Hs", "Ps", "H"))
    out = b.einsum("bsmp,mph->bsh", normed, out_proj, out="ssm.out")
    dropped = _dropout(b, out, "ssm.dropout", options)
    return b.elementwise(x, dropped, out="ssm.residual", linear=True)


def _state(b: Block, new: str, which: str, dims: tuple[str, ...], dtype_bytes: int) -> None:
    """Serving: a sequence's recurrent state ``kv.{which}[B, …]``, updated from ``new``."""
    state = b.tensor(f"kv.{which}", ("B", *dims), dtype_bytes, "input")
    b.inputs.append(state)
    op = StateUpdate(f"{which}.update", (new, state), (f"{which}.state",))
    b.add_op(op, ("B", *dims), dtype_bytes)


def _latent_norm(b: Block, x: str, dim: str, out: str) -> str:
    """An RMSNorm of a latent over ``dim``, with a ``[dim]`` scale."""
    scale = b.weight(f"{out}.scale", (dim,))
    return b.reduction((x, scale), out, (dim,), _NORM_OPS[Norm.RMSNORM], saves=(x,))


def _cache(b: Block, new: str, which: str, dtype_bytes: int, context: str = "T") -> str:
    """A step's new entries ``new[B, S, …]`` appended to the sequences' cache
    ``kv.{which}[B, T, …]``; returns the whole cached context the attention reads. A
    sliding-window layer's cache holds ``TW = min(T, W + S − 1)`` tokens, the keys its
    queries can see (``W`` in decode)."""
    dims = ("B", context, *b.tensors[new].dims[2:])
    cache = b.tensor(f"kv.{which}", dims, dtype_bytes, "input")
    b.inputs.append(cache)
    op = CacheAppend(f"{which}.append", (new, cache), (f"{which}.ctx",))
    return b.add_op(op, dims, dtype_bytes)


def _head_norm(b: Block, x: str, out: str) -> str:
    """QK-norm: an RMSNorm of ``x[B, S, heads, D]`` over ``D`` with a ``[D]`` scale."""
    scale = b.weight(f"{out}.scale", ("D",))
    return b.reduction((x, scale), out, ("D",), _NORM_OPS[Norm.RMSNORM], saves=(x,))


#: Squared ReLU ``relu(x)²``: forward a compare and a multiply per element; backward
#: ``2·relu(x)·g``: a compare and two multiplies.
_SQUARED_RELU_OPS, _SQUARED_RELU_BACKWARD_OPS = 2, 3


def _activation(b: Block, model: Structure, up: str, out: str) -> str:
    """The non-gated activation: GELU (8 ops per element, as Megatron's bias-GELU) or squared
    ReLU."""
    if model.activation == Activation.SQUARED_RELU:
        ops, backward = _SQUARED_RELU_OPS, _SQUARED_RELU_BACKWARD_OPS
    else:
        ops, backward = 8, 8
    return b.elementwise(
        up, out=out, ops_per_element=ops, saves=(up,), backward_ops_per_element=backward
    )


def _mlp(b: Block, model: Structure, x: str, width: str, prefix: str) -> str:
    """A dense MLP of width ``width`` (GELU: two matrices; SwiGLU: three) on ``x``."""
    if model.activation == Activation.SWIGLU:
        gate = b.einsum(
            "bsh,hf->bsf", x, b.weight(f"{prefix}.wg", ("H", width)), out=f"{prefix}.gate"
        )
        up = b.einsum("bsh,hf->bsf", x, b.weight(f"{prefix}.wu", ("H", width)), out=f"{prefix}.up")
        act = b.elementwise(
            gate,
            up,
            out=f"{prefix}.act",
            ops_per_element=5,
            saves=(gate, up),
            backward_ops_per_element=8,
        )
    else:
        up = _linear(
            b,
            model,
            "bsh,hf->bsf",
            x,
            b.weight(f"{prefix}.w1", ("H", width)),
            f"{prefix}.fc1",
            (width,),
        )
        act = _activation(b, model, up, f"{prefix}.act")
    return _linear(
        b,
        model,
        "bsf,fh->bsh",
        act,
        b.weight(f"{prefix}.w2", (width, "H")),
        f"{prefix}.fc2",
        ("H",),
    )


def _moe(b: Block, model: Structure, x: str, expert_axes: tuple[str, ...]) -> str:
    """Router, top-k dispatch into per-expert capacity slots, expert MLPs, combine, and the
    shared experts."""
    logits = b.einsum("bsh,he->bse", x, b.weight("router", ("H", "E")), out="moe.logits")
    gates = b.reduction(
        (logits,), "moe.gates", ("E",), 8, saves=("moe.gates",), backward_ops_per_element=4
    )
    dispatch = Dispatch("moe.dispatch", (x, gates), ("moe.tokens",), expert_axes)
    tokens = b.add_op(dispatch, ("E", "C", "H"))
    if model.activation == Activation.SWIGLU:  # biased models: one bias per expert and output
        expert_w = b.weight("experts.wg", ("E", "H", "G"))
        gate = _linear(b, model, "ech,ehg->ecg", tokens, expert_w, "experts.gate", ("E", "G"))
        expert_w = b.weight("experts.wu", ("E", "H", "G"))
        up = _linear(b, model, "ech,ehg->ecg", tokens, expert_w, "experts.up", ("E", "G"))
        act = b.elementwise(
            gate,
            up,
            out="experts.act",
            ops_per_element=5,
            saves=(gate, up),
            backward_ops_per_element=8,
        )
    else:
        expert_w = b.weight("experts.w1", ("E", "H", "G"))
        up = _linear(b, model, "ech,ehg->ecg", tokens, expert_w, "experts.fc1", ("E", "G"))
        act = _activation(b, model, up, "experts.act")
    expert_w = b.weight("experts.w2", ("E", "G", "H"))
    down = _linear(b, model, "ecg,egh->ech", act, expert_w, "experts.fc2", ("E", "H"))
    out = b.add_op(Combine("moe.combine", (down, gates), ("moe.out",)), ("B", "S", "H"))
    if model.num_shared_experts:
        shared = _mlp(b, model, x, "Z", "shared")
        out = b.elementwise(out, shared, out="moe.sum", linear=True)
    return out


def layer_block(model: Structure, options: BlockOptions, kind: LayerKind = DENSE_LAYER) -> Block:
    """One decoder layer of ``kind`` (:mod:`stage_core.models.layers`): its mixer (full or
    sliding-window attention) and its FFN (dense MLP or MoE), each pre-normed with a residual;
    a kind without a mixer or without an FFN leaves that half out (Nemotron-H's layers)."""
    b = Block(kind.block, weight_bytes=options.weight_bytes)
    b.output(_layer_body(b, model, options, kind, b.input("x", ("B", "S", "H"))))
    return b.validate()


def _layer_body(b: Block, model: Structure, options: BlockOptions, kind: LayerKind, x: str) -> str:
    """The ops of one decoder layer of ``kind`` on ``x[B, S, H]``; returns its output."""
    h = x
    if kind.mixer is Mixer.MAMBA:
        h = _mamba_mixer(b, model, x, options)
    if kind.attends:
        window = kind.mixer is Mixer.SLIDING
        if model.latent_attention:
            h = _latent_attention(b, model, x, options)
        else:
            h = _attention(b, model, x, options, window=window)
    if kind.ffn is Ffn.NONE:
        return h
    ln = _norm(b, model, h, "ln2")
    if kind.ffn is Ffn.MOE:
        y = _moe(b, model, ln, options.expert_axes)
    else:
        y = _mlp(b, model, ln, "F", "mlp")
    dropped = _dropout(b, y, "mlp.dropout", options)
    return b.elementwise(h, dropped, out="y", linear=True)


#: Block kind of a multi-token-prediction module's loss: the module's final norm, the output
#: layer it shares with the main model, and its cross-entropy (:func:`head_block`'s ops).
MTP_HEAD = "mtp_head"
_MTP_PREFIX = "mtp_"


def mtp_block_name(layer_block_name: str) -> str:
    """The block kind of an MTP module whose transformer layer is ``layer_block_name``."""
    return f"{_MTP_PREFIX}{layer_block_name}"


def mtp_layer_of_block(name: str) -> LayerKind | None:
    """The layer kind inside an MTP module's block ``name`` (None for any other block)."""
    if not name.startswith(_MTP_PREFIX) or name == MTP_HEAD:
        return None
    return layer_kind_of_block(name.removeprefix(_MTP_PREFIX))


def mtp_block(model: Structure, options: BlockOptions, kind: LayerKind) -> Block:
    """One multi-token-prediction module up to its transformer layer's output (DeepSeek-V3
    technical report, arXiv 2412.19437, Section 2.2, Eq. 21-22).

    Module ``k`` gets the previous depth's hidden state ``x`` (``h^{k-1}``, the main model's
    last layer output for ``k = 1``) and the tokens ``k`` positions ahead (``ids``), looked up
    in the embedding table it SHARES with the main model; both are normed (RMSNorm in
    DeepSeek-V3), concatenated and projected back to ``H`` by ``M_k`` (``2H × H``), then run
    through one transformer layer of ``kind`` (DeepSeek-V3: latent attention + MoE, as the main
    model's last layer).
    Its output feeds module ``k + 1``; its loss (final norm, the SHARED output layer,
    cross-entropy) is the :data:`MTP_HEAD` block. The weight of the MTP loss in the total
    loss (DeepSeek's λ, Megatron's ``mtp_loss_scaling_factor``) scales a gradient and
    changes no op's cost.

    The concatenation is written as two einsums into ``H`` (``M_k``'s halves ``[Hc, H]``,
    ``Hc = H`` a dim of its own for the contracted hidden) summed: the same FLOPs and weights
    as one ``2H × H`` projection of the concatenation.
    """
    b = Block(mtp_block_name(kind.block), weight_bytes=options.weight_bytes)
    x = b.input("x", ("B", "S", "Hc"))
    ids = b.tensor("ids", ("B", "S"), 4, "index")
    b.inputs.append(ids)
    embedded = b.embedding(ids, b.weight("embed", ("V", "Hc")), out="embed.tokens")
    halves = []
    for part, source in (("h", x), ("e", embedded)):
        normed = _norm(b, model, source, f"mtp.{part}norm", "Hc")
        weight = b.weight(f"mtp.eh_proj_{part}", ("Hc", "H"))
        halves.append(b.einsum("bsc,ch->bsh", normed, weight, out=f"mtp.proj_{part}"))
    projected = b.elementwise(*halves, out="mtp.proj", linear=True)
    b.output(_layer_body(b, model, options, kind, projected))
    return b.validate()


def embedding_block(model: Structure, options: BlockOptions) -> Block:
    """Token embedding (vocab-parallel under TP), learned positions if any, dropout."""
    b = Block("embedding")
    ids = b.tensor("ids", ("B", "S"), 4, "index")
    b.inputs.append(ids)
    x = b.embedding(ids, b.weight("embed", ("V", "H")), out="embed.tokens")
    if model.position == Position.LEARNED:
        # Positions per token ([B, S], as Megatron's position_ids): the table's gradient is then
        # a partial sum over the token axes, reduced once per step with the other weights.
        pos_ids = b.tensor("pos_ids", ("B", "S"), 4, "index")
        b.inputs.append(pos_ids)
        pos = b.embedding(pos_ids, b.weight("embed.pos", ("P", "H")), out="embed.pos_out")
        x = b.elementwise(x, pos, out="embed.sum", linear=True)
    b.output(_dropout(b, x, "embed.dropout", options))
    return b.validate()


def head_block(model: Structure) -> Block:
    """Final norm, output layer (vocab-parallel under TP) and softmax cross-entropy."""
    b = Block("head")
    x = b.input("x", ("B", "S", "H"))
    ln = _norm(b, model, x, "ln_f")
    logits = b.einsum("bsh,vh->bsv", ln, b.weight("output", ("V", "H")), out="logits")
    targets = b.tensor("targets", ("B", "S"), 4, "index")
    b.inputs.append(targets)
    b.tensor("loss.stats", ("B", "S"), 4, "buffer")
    b.output(b.cross_entropy(logits, targets, out="loss"))
    return b.validate()


def serving_head_block(model: Structure) -> Block:
    """Serving's head: each sequence's last position, final norm, output layer (vocab-parallel
    under TP) and the sampler's softmax over the vocabulary; no loss."""
    b = Block("serving_head")
    x = b.input("x", ("B", "S", "H"))
    last = b.add_op(LastToken("last", (x,), ("last",)), ("B", "H"))
    ln = _norm(b, model, last, "ln_f")
    logits = b.einsum("bh,vh->bv", ln, b.weight("output", ("V", "H")), out="logits")
    b.output(b.reduction((logits,), "sample", ("V",), 5))
    return b.validate()
