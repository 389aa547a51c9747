"""Sharding plans: how a parallel configuration lays out each block's tensors.

The plans are data — layout strings per tensor — chosen from a few structural flags, so one
symbolic sharded block serves every degree (dp, tp, cp, ep are symbols bound at lowering; an
axis of size 1 yields no communication). Mesh axes, outermost first: ``pp, dp, ep, cp, tp``.
Tokens (``B``) are partitioned over ``dp*ep`` (expert parallelism is carved out of data
parallelism, as in Megatron-core), the sequence over ``cp`` (and ``tp`` between blocks under
sequence parallelism). Megatron's column/row tensor parallelism partitions heads and FFN width
over ``tp``; experts are partitioned over the dispatch's expert axes (``ep``, folded over
``cp`` and ``tp`` as Megatron-Core's MoE parallel folding does: :mod:`stage_core.lower.experts`)
and their FFN width over ``tp`` unless tp is one of those axes (expert tensor parallel size 1).
With an expert tensor parallel size strictly between 1 and tp, or an expert-parallel group
smaller than the tp ranks outside the experts' own (``PlanFlags.tp_split``), the mesh splits tp
into ``tpr`` (outermost, expert data parallel), ``tpo`` (folded into the expert-parallel group)
and ``tp`` (innermost, ``etp``): every dense layout's ``tp`` becomes ``(tpr*tpo*tp)``
(:func:`split_tp`), the expert region's layouts keep ``tp`` (the experts' tensor-parallel
ranks), fold ``tpo`` into the expert axes and keep the routed tokens apart over ``tpr``.
Under hybrid sharding (``PlanFlags.dp_split``) every layout's ``dp`` becomes ``(dpr*dp)``
(:func:`split_dp`): replicas outermost, then the ZeRO shard group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.graph import Block
from stage_core.layout import Layout
from stage_core.models.layers import is_layer_block
from stage_core.ops_moe import Dispatch
from stage_core.sharding import ShardingPlan

TOKENS = "B/(dp*ep)"


@dataclass(frozen=True, slots=True)
class PlanFlags:
    """The structural choices a plan depends on."""

    sp: bool = False
    attention: str = "fused"
    cp_ring: bool = False
    moe_allgather: bool = False  # Megatron's all-gather token dispatcher (_moe_allgather)
    tp_split: bool = False  # tp is three mesh axes tpr, tpo, tp (lower/experts.py)
    dp_split: bool = False  # dp is two mesh axes dpr, dp: hybrid sharding (split_dp)
    embedding_replicated: bool = False  # the token embedding whole on every tp rank


#: The sub-axis of tp folded into the expert-parallel group when tp is split (lower/experts.py).
TP_OUTER = "tpo"
#: The outermost sub-axis of tp when tp is split: the tp ranks over which the experts are
#: replicated (part of Megatron's expert data parallel group; size 1 unless ``ep < tp/etp``).
TP_REST = "tpr"
#: The axes of a dense layer's tensor parallelism on a split mesh, outermost first.
SPLIT_TP = (TP_REST, TP_OUTER, "tp")
#: The outer sub-axis of dp under hybrid sharding (HSDP, ``ParallelConfig.dp_shard``): the
#: replicas; the inner ``dp`` is a ZeRO shard group.
DP_REPLICATE = "dpr"
#: The axes data parallelism spans on a mesh split for hybrid sharding, outermost first.
SPLIT_DP = (DP_REPLICATE, "dp")


def _tp_axes(flags: PlanFlags) -> list[str]:
    """The mesh axes a dense layer's tensor parallelism spans: ``tpr, tpo, tp`` or ``tp``."""
    return list(SPLIT_TP) if flags.tp_split else ["tp"]


def _seq_stored(flags: PlanFlags) -> str:
    return "S/(cp*tp)" if flags.sp else "S/cp"


def _activation(flags: PlanFlags) -> str:
    return f"[{TOKENS}, {_seq_stored(flags)}, H]"


_GATHERED = f"[{TOKENS}, S/cp, H]"


def _op_name(block: Block, tensor: str) -> str:
    """The einsum producing ``tensor`` (or its pre-bias output)."""
    return f"{tensor}.nobias" if f"{tensor}.nobias" in block.tensors else tensor


#: Multi-head latent attention's per-head up-projections (its down-projections, the RoPE key's
#: projection and the latents' norms are replicated over tp, as Megatron-Core's MLA does).
_LATENT_UP = frozenset({"wq_b_nope", "wq_b_rope", "wkv_b_k", "wkv_b_v"})


def _expert_axes(block: Block) -> tuple[str, ...]:
    """The mesh axes partitioning the experts, from the block's dispatch (``("ep",)`` if none)."""
    for op in block.ops:
        if isinstance(op, Dispatch):
            return op.expert_axes
    return ("ep",)


def _over(axes: Sequence[str]) -> str:
    """``/ep`` or ``/(ep*tp)``: the partition suffix of a dim over ``axes`` (none if empty)."""
    if not axes:
        return ""
    return f"/{axes[0]}" if len(axes) == 1 else "/(" + "*".join(axes) + ")"


def _expert_weight(dims: Sequence[str], expert_axes: tuple[str, ...]) -> str:
    """``experts.*`` (weights ``[E, ·, ·]``, biases ``[E, ·]``): experts over the expert axes;
    their FFN width over tp unless tp is one of them (expert tensor parallel size 1)."""
    inner = [d if d == "H" or "tp" in expert_axes else f"{d}/tp" for d in dims[1:]]
    return "[" + ", ".join([f"E{_over(expert_axes)}", *inner]) + "]"


def _moe_layouts(
    names: Mapping[str, object], flags: PlanFlags, expert_axes: tuple[str, ...]
) -> dict[str, str]:
    """Routed tokens and expert outputs, stored after the dispatch and before the combine.

    The saved tensors are the permuted ones, as in Megatron-Core. Under sequence parallelism
    each rank routes its own sequence shard (Megatron-Core's all-to-all dispatcher): the slots
    ``C`` are partitioned over every token axis, the expert axes innermost (the dispatch's
    natural layout). Forward: one all-to-all over the expert axes (``ep``, with MoE parallel
    folding also ``cp`` and ``tp``), then, when the experts are tensor-parallel over tp, an
    all-gather over tp; back, a reduce-scatter over tp, then the all-to-all.
    """
    token_axes = ["dp", "ep", "cp"] + (_tp_axes(flags) if flags.sp else [])
    routed = [a for a in token_axes if a not in expert_axes] + list(expert_axes)
    held = ("dp", "ep", "cp") + ((TP_REST,) if flags.tp_split else ())
    kept = [a for a in held if a not in expert_axes]  # token axes the routed slots keep
    tp_whole = "tp" in expert_axes or flags.sp
    layouts = {"moe.tokens": f"[E{_over(expert_axes)}, C{_over(kept)}, H]"}
    if "experts.fc2.nobias" in names:  # a bias per expert, added after the tp reduction
        reduced = kept + (["tp"] if flags.sp and "tp" not in expert_axes else [])
        layouts["experts.fc2.nobias"] = f"[E{_over(expert_axes)}, C{_over(reduced)}, H]"
        layouts["experts.fc2"] = f"[E, C{_over(routed)}, H]"
    elif tp_whole:
        layouts["experts.fc2"] = f"[E, C{_over(routed)}, H]"
    else:  # no sequence parallelism: tp ranks route the same tokens; outputs partial over tp
        layouts["experts.fc2"] = f"[E, C{_over(routed)}, H @ 1/tp]"
    layouts["moe.sum" if "moe.sum" in names else "moe.out"] = _activation(flags)
    return layouts


def _moe_allgather(flags: PlanFlags, expert_axes: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """Megatron-Core's all-gather token dispatcher (``--moe-token-dispatcher-type allgather``,
    ``MoEAllGatherTokenDispatcher``: "this allgather spans the communication domain of TP*EP"):
    the router runs on the rank's own tokens; the dispatch and the combine read the tokens and
    gates gathered over the expert axes and, under sequence parallelism, tp. From that layout
    change alone the planner derives one all-gather of the rank's own tokens (and gates) over
    the group, the dispatch fills only the rank's local experts' slots
    (:class:`~stage_core.ops_moe.Dispatch`), the combine's output is partial over the expert
    axes and is reduce-scattered back; the backward mirrors it."""
    gathered = set(expert_axes) | ({"tp"} if flags.sp else set())
    seq_axes = ["cp"] + (_tp_axes(flags) if flags.sp else [])
    seq = "S" + _over([a for a in seq_axes if a not in gathered])  # ep is always gathered
    tokens, gates = f"[B/dp, {seq}, H]", f"[B/dp, {seq}, E]"
    return {
        ("moe.dispatch", "ln2"): tokens,
        ("moe.dispatch", "moe.gates"): gates,
        ("moe.combine", "moe.gates"): gates,
    }


def _weights(block: Block, stored: dict[str, str], experts: dict[str, str]) -> None:
    """Column/row-parallel weights and biases into ``stored``, expert weights into ``experts``;
    the rest replicated."""
    column = {
        "wq": "[H, N/tp, D]",
        "wk": "[H, K/tp, D]",
        "wv": "[H, K/tp, D]",
        "wo": "[N/tp, D, H]",
    }
    expert_axes = _expert_axes(block)
    for name, tensor in block.tensors.items():
        if tensor.role != "weight":
            continue
        dims = tensor.dims
        if name.startswith("ssm."):  # Mamba-2 (Megatron-Core's MambaMixer): heads, groups /tp
            layout = "[" + ", ".join(f"{d}/tp" if d in ("Hs", "Gs") else d for d in dims) + "]"
        elif name == "wo":  # row-parallel; latent attention's value dim is ``U``
            layout = f"[N/tp, {dims[1]}, H]"
        elif name in column:
            layout = column[name].replace("K/tp", f"{dims[1]}/tp")
        elif name in _LATENT_UP:  # latent attention's per-head up-projections: column-parallel
            layout = f"[{dims[0]}, N/tp, {dims[2]}]"
        elif name.startswith("experts."):
            experts[name] = _expert_weight(dims, expert_axes)
            continue
        elif name.endswith((".w1", ".wg", ".wu")):
            layout = f"[H, {dims[1]}/tp]"
        elif name.endswith(".w2"):
            layout = f"[{dims[0]}/tp, H]"
        elif name == "attn.sinks":  # one logit per query head (GPT-OSS), with its head
            layout = "[N/tp]"
        elif name in ("embed", "output"):
            layout = "[V/tp, H]"
        elif name.endswith(".bias") and dims and dims[0] in ("N", "K", "F", "G", "Z"):
            layout = "[" + ", ".join(f"{d}/tp" if i == 0 else d for i, d in enumerate(dims)) + "]"
        else:
            continue
        stored[name] = layout


def _mamba_context_parallel(
    block: Block, stored: dict[str, str], consumed: dict[tuple[str, str], str]
) -> None:
    """Megatron-Core's ``MambaContextParallel``: the in-projection's outputs go from sequence
    shards over cp to head (and group) shards over cp by one all-to-all each (stored that way:
    what the fused kernel saves), the conv and the scan run over whole sequences on
    ``Hs/(tp*cp)`` heads with the matching slice of their weights, and the gated output comes
    back to sequence shards by an all-to-all before the norm. At cp = 1 none of it moves."""
    split = {"Hs": "Hs/(tp*cp)", "Gs": "Gs/(tp*cp)"}
    for name in ("ssm.z", "ssm.x", "ssm.b", "ssm.c", "ssm.dt"):
        dims = block.tensors[name].dims
        stored[name] = f"[{TOKENS}, S, " + ", ".join(split.get(d, d) for d in dims[2:]) + "]"
    stored["ssm.gate"] = f"[{TOKENS}, S/cp, Hs/tp, Ps]"
    for op in block.ops:
        if op.name.startswith(("ssm.conv.", "ssm.scan")):
            for name in op.inputs:
                if block.tensors[name].role == "weight":
                    dims = block.tensors[name].dims
                    consumed[(op.name, name)] = "[" + ", ".join(split.get(d, d) for d in dims) + "]"


def plan_for(block: Block, flags: PlanFlags) -> ShardingPlan:
    """The sharding plan of ``block`` (a layer, MoE layer, embedding or head block)."""
    stored: dict[str, str] = {}
    consumed: dict[tuple[str, str], str] = {}
    expert_stored: dict[str, str] = {}  # the expert region: its tp is the experts' own
    expert_consumed: dict[tuple[str, str], str] = {}
    _weights(block, stored, expert_stored)
    act = _activation(flags)
    names = block.tensors
    if "x" in names:
        stored["x"] = act
    mtp = block.name.startswith("mtp_")  # a multi-token-prediction module (blocks.mtp_block)
    if is_layer_block(block.name) or mtp:
        for op in block.ops:  # q/k/v projections, or latent attention's down-projections
            if "ln1" in op.inputs:
                consumed[(op.name, "ln1")] = _GATHERED
        if "kv.c" in names:  # latent attention's compressed cache, replicated over tp
            stored["kv.c"] = f"[{TOKENS}, T, L]"
            stored["kv.r"] = f"[{TOKENS}, T, R]"
        kv = [t for t in ("k.rope", "k.norm", "k") if t in names][0] if "k" in names else ""
        heads = names[kv].dims[2] if kv else "N"

        def kv_layout(tensor: str) -> str:
            dims = names[tensor].dims  # the sequence is S, or T over a cache
            seq = f"{dims[1]}/cp" if flags.cp_ring else dims[1]
            return f"[{TOKENS}, {seq}, {heads}/tp, {dims[3]}]"

        if "k.ctx" in names:  # serving: a KV cache of T tokens per sequence, heads over tp
            cache = f"[{TOKENS}, {names['kv.k'].dims[1]}, {heads}/tp, D]"  # T, or TW (window)
            stored["kv.k"] = stored["kv.v"] = cache
            consumed[("attn.core", "k.ctx")] = consumed[("attn.core", "v.ctx")] = cache
        elif "attn.latent" in names:  # absorbed decode: the latent attention reads the caches
            pass
        elif "attn.core" in names:
            consumed[("attn.core", kv)] = kv_layout(kv)
            consumed[("attn.core", "v")] = kv_layout("v")
        elif "attn.scores" in names:
            consumed[("attn.scores", kv)] = kv_layout(kv)
            consumed[("attn.context", "v")] = kv_layout("v")
        if _op_name(block, "attn.proj") in names:  # a layer without attention has none
            stored[_op_name(block, "attn.proj")] = act
        if "ssm.out" in names:  # Mamba-2's row-parallel out_proj, like the attention's
            stored["ssm.out"] = act
            _mamba_context_parallel(block, stored, consumed)
        for state in ("kv.ssm", "kv.conv_x", "kv.conv_b", "kv.conv_c"):  # serving Mamba states
            if state in names:  # sharded like the heads the scan runs (cp is 1 in serving)
                dims = names[state].dims
                stored[state] = f"[{TOKENS}, {dims[1]}/(tp*cp), {dims[2]}, {dims[3]}]"
        ops = {op.name for op in block.ops}
        for consumer in (
            "mlp.fc1",
            "mlp.gate",
            "mlp.up",
            "shared.fc1",
            "shared.gate",
            "shared.up",
        ):
            if _op_name(block, consumer) in ops:
                consumed[(_op_name(block, consumer), "ln2")] = _GATHERED
        if not flags.sp:  # the router and the dispatch see the tokens every tp rank holds
            for consumer in ("moe.logits", "moe.dispatch"):
                if consumer in ops:
                    consumed[(consumer, "ln2")] = _GATHERED
        if "mlp.fc2" in names:
            stored[_op_name(block, "mlp.fc2")] = act
        if "shared.fc2" in names and flags.sp:  # summed with the routed experts' shard output
            stored[_op_name(block, "shared.fc2")] = act
        if "moe.tokens" in names and flags.moe_allgather:
            expert_consumed.update(_moe_allgather(flags, _expert_axes(block)))
            stored.update({t: act for t in ("moe.out", "moe.sum") if t in names})
        elif "moe.tokens" in names:
            for name, layout in _moe_layouts(names, flags, _expert_axes(block)).items():
                region = name == "moe.tokens" or name.startswith("experts.")
                (expert_stored if region else stored)[name] = layout
    if mtp:  # its inputs like the embedding's; M_k column-parallel as in Megatron-Core
        hidden = f"[{TOKENS}, {_seq_stored(flags)}, Hc]"
        stored.update({"x": hidden, "embed.tokens": hidden, "ids": f"[{TOKENS}, S/cp]"})
        stored.update({"embed": "[V/tp, Hc]", "mtp.proj": act})
        for part in ("h", "e"):
            stored[f"mtp.eh_proj_{part}"] = "[Hc, H/tp]"
            consumed[(f"mtp.proj_{part}", f"mtp.{part}norm")] = f"[{TOKENS}, S/cp, Hc]"
    elif block.name == "embedding":
        stored["ids"] = f"[{TOKENS}, S/cp]"
        stored["embed.tokens"] = act
        if flags.embedding_replicated:  # the whole table: its lookup is whole, then cut to act
            stored["embed"] = "[V, H]"
        if "pos_ids" in names:
            stored["pos_ids"] = f"[{TOKENS}, S/cp]"
            consumed[("embed.sum", "embed.pos_out")] = act
    elif block.name == "serving_head":
        consumed[("logits", "ln_f")] = f"[{TOKENS}, H]"
        consumed[("sample", "logits")] = f"[{TOKENS}, V]"
    elif block.name == "head":
        stored["targets"] = f"[{TOKENS}, S/cp]"
        consumed[("logits", "ln_f")] = _GATHERED
    dense = ShardingPlan.from_strings(block, stored, consumed)
    experts = ShardingPlan.from_strings(block, expert_stored, expert_consumed)
    dense_stored, dense_consumed = dense.stored, dense.consumed
    if flags.tp_split:
        dense_stored = {name: split_tp(layout) for name, layout in dense_stored.items()}
        dense_consumed = {key: split_tp(layout) for key, layout in dense_consumed.items()}
    layouts = {**dense_stored, **experts.stored}
    consumed_layouts = {**dense_consumed, **experts.consumed}
    if flags.dp_split:
        layouts = {name: split_dp(layout) for name, layout in layouts.items()}
        consumed_layouts = {key: split_dp(layout) for key, layout in consumed_layouts.items()}
    return ShardingPlan(layouts, consumed_layouts)


def _split_axis(layout: Layout, axis: str, parts: tuple[str, ...]) -> Layout:
    """``layout`` with mesh ``axis`` replaced by its sub-axes ``parts`` (outermost first) in
    every dim's partition and in the partial-sum axes."""

    def split(axes: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(part for a in axes for part in (parts if a == axis else (a,)))

    shards = tuple(split(axes) for axes in layout.shards)
    return Layout(layout.dims, shards, split(layout.partial), layout.name, layout.sizes)


def split_dp(layout: Layout) -> Layout:
    """``layout`` with the whole dp axis as its sub-axes ``dpr``, ``dp`` (hybrid sharding):
    ``[B/(dp*ep), S, H]`` → ``[B/(dpr*dp*ep), S, H]``. Data-parallel rank ``d`` is
    ``dpr·|dp| + dp`` on the split mesh, so every rank holds the same tokens as before; a
    weight's gradient is then partial over both, and the lowering reduces it over the shard
    group ``dp`` (reduce-scatter) and the replicas ``dpr`` (all-reduce)."""
    return _split_axis(layout, "dp", SPLIT_DP)


def split_tp(layout: Layout) -> Layout:
    """``layout`` with the whole tp axis as its sub-axes ``tpr``, ``tpo``, ``tp`` (outermost
    first): ``[N/tp, H @ 1/tp]`` → ``[N/(tpr*tpo*tp), H @ 1/(tpr*tpo*tp)]``. Rank ``t`` of the
    tp group is ``(tpr·|tpo| + tpo)·|tp| + tp`` on the split mesh, so every rank holds the same
    shard as before."""
    return _split_axis(layout, "tp", SPLIT_TP)
