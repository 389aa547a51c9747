"""The rules a parallel configuration must satisfy for a given model (divisibility of heads,
FFN sizes, experts, sequence length; pipeline layers and partial recompute):
:func:`model_violations`, which :meth:`ParallelConfig.violations` returns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stage_core.errors import ConfigError
from stage_core.models.layers import Ffn
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config_fields import axis_order_ok
from stage_core.parallel.layout import layout_mtp

if TYPE_CHECKING:
    from stage_core.parallel.config import ParallelConfig


def model_violations(config: ParallelConfig, model: ModelSpec) -> tuple[str, ...]:
    """Every rule ``config`` breaks for ``model``, one message each (empty when valid)."""
    try:
        model = config.resolve(model)
    except ConfigError as error:
        return (str(error),)
    problems: list[str] = []
    tp, ep, cp = config.tp, config.ep, config.cp
    heads, kv_heads = model.heads, model.kv_heads
    kinds = model.layer_kinds()
    attends = any(kind.attends for kind in kinds)  # a pure Mamba stack has no attention
    if attends and heads % tp:
        problems.append(f"`tp` must divide `heads`, but got ({tp=}, {heads=})")
    if attends and kv_heads % tp and tp % kv_heads:
        problems.append(
            "`tp` must divide `kv_heads`, or `kv_heads` divide `tp` (KV heads replicated), "
            f"but got ({tp=}, {kv_heads=})"
        )
    if model.ssm_heads:  # Mamba-2: Megatron-Core's MambaMixer asserts tp | heads, groups
        ssm_heads, ssm_groups = model.ssm_heads, model.ssm_groups
        if ssm_heads % (tp * cp) or ssm_groups % (tp * cp):
            problems.append(
                "`tp`·`cp` must divide `ssm_heads` and `ssm_groups` (each rank holds whole "
                "Mamba-2 groups; MambaContextParallel splits a tp rank's heads and groups "
                f"over cp), but got ({tp=}, {cp=}, {ssm_heads=}, {ssm_groups=})"
            )
    ffn, expert_ffn = model.ffn, model.expert_ffn
    if any(kind.ffn is Ffn.DENSE for kind in kinds) and ffn % tp:
        problems.append(f"`tp` must divide `ffn`, but got ({tp=}, {ffn=})")
    etp = config.expert_tp
    if model.is_moe and expert_ffn % etp:
        problems.append(
            f"`etp` (expert tensor parallel size) must divide `expert_ffn`, "
            f"but got ({etp=}, {expert_ffn=})"
        )
    if config.etp is not None and config.etp != tp and not model.is_moe:
        problems.append(f"`etp` needs an MoE model, but got ({etp=}, {tp=})")
    try:
        counts = config.stage_layers(model)
    except ConfigError as error:
        problems.append(str(error))
    else:
        mtp = layout_mtp(config.pp_layout) if config.pp_layout else model.mtp_layers
        if mtp != model.mtp_layers:
            problems.append(
                f"`pp_layout` must place the model's {model.mtp_layers} MTP layers ('m'), but "
                f"got {mtp} in pp_layout={config.pp_layout!r}"
            )
        count = config.recompute_num_layers
        every = config.recompute_method in ("every", "spread")  # counted over a rank's blocks
        limit = min(sum(counts[r :: config.pp]) for r in range(config.pp)) if every else min(counts)
        if count is not None and count > limit:  # a rank's layers ('every'), else a chunk's
            problems.append(
                "`recompute_num_layers` must be at most the layers of every pipeline "
                f"{'rank' if every else 'stage chunk'} ({limit}), "
                f"but got recompute_num_layers={count}"
            )
    num_experts = model.num_experts
    if model.is_moe and not axis_order_ok(config.axis_order):
        problems.append(
            "an MoE model's expert layers refold the dp×cp ranks (MoE parallel folding): "
            "`axis_order` needs dp, ep and cp adjacent and ep right after dp, but got "
            f"axis_order={config.axis_order!r}"
        )
    if ep > 1 and not model.is_moe:
        problems.append(f"`ep` > 1 needs an MoE model, but got ({ep=}, {num_experts=})")
    elif model.is_moe and num_experts % ep:
        problems.append(f"`ep` must divide `num_experts`, but got ({ep=}, {num_experts=})")
    seq_len = model.seq_len
    if cp > 1 and seq_len % (2 * cp):
        problems.append(
            "2·`cp` must divide `seq_len` (causal load balancing splits it in 2·cp chunks), "
            f"but got ({cp=}, {seq_len=})"
        )
    if config.sequence_parallel and seq_len % (cp * tp):
        problems.append(
            "`cp`·`tp` must divide `seq_len` with sequence parallelism, "
            f"but got ({cp=}, {tp=}, {seq_len=})"
        )
    return tuple(problems)
