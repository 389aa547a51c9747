"""The parallel configuration an unclaimed row leaves unstated, inferred with its assumptions
(split from :mod:`~stage_explore.validation.infer`, s33 simplify).

Holds :func:`parallel_layout` (dp, micro-batch, sequence parallelism, recompute, context
parallelism's style, the ZeRO stage and hybrid sharding group a row's cells leave empty),
:func:`named_zero_stage` (a DeepSpeed row's ZeRO stage named in its other text),
:func:`stated_etp` and :func:`folded_etp` (the experts' tensor parallel size a row states, or
the one its expert parallelism forces), and :data:`NO_RECOMPUTE` / :data:`ETP_DEFAULT_NOTE`
(how the assumptions a recipe default replaces begin).
"""

from __future__ import annotations

import re
from typing import Any

from stage_explore.validation import infer_sparse as sparse
from stage_explore.validation.infer_batch import default_micro_batch
from stage_explore.validation.infer_fields import (
    FRAMEWORK_COLUMNS,
    Uninferable,
    infer_framework,
    infer_zero,
)
from stage_explore.validation.infer_fms_shard import fms_open_sharding
from stage_explore.validation.infer_megatron_lm import (
    launch_sequence_parallel,
    launch_zero,
    megatron_lm_launch,
)
from stage_explore.validation.infer_named_shard import named_fsdp_strategy
from stage_explore.validation.infer_recompute import named_modules
from stage_explore.validation.infer_shard import stated_group
from stage_explore.validation.infer_stated import stated_or_inferred

#: The assumption of an empty recompute column (dropped when a recipe default sets one).
NO_RECOMPUTE = "no activation recompute (column empty)"

#: How an inferred default expert tensor parallel size's assumption begins.
ETP_DEFAULT_NOTE = "expert tensor parallel size"
_ETP = re.compile(r"\bETP\s*[:=]?\s*(\d+)\b", re.IGNORECASE)  # s30 fuzz: ``etp 4`` too


def stated_etp(row: dict[str, str]) -> tuple[int, str] | None:
    """The experts' tensor parallel size a row's ``source_table`` layout states (``ETP 4``, as
    the DGX Cloud Benchmarking layout tables print it), else its ``notes`` (the source table's
    ETP column transcribed there, as the Megatron-MoE-ModelZoo rows carry it), with its
    assumption; it replaces a recipe default's."""
    for column in ("source_table", "notes"):
        found = _ETP.search(row.get(column, ""))
        if found is not None:
            etp = int(found.group(1))
            said = f"the {column} column says {found.group(0)!r}"
            return etp, f"expert tensor parallel size {etp} ({said})"
    return None


def folded_etp(
    parallel: dict[str, Any], stated: dict[str, int], moe: bool
) -> tuple[int, str] | None:
    """Expert TP 1 for an MoE row whose experts' TP nothing sets when Megatron-Core's default,
    ``tp``, cannot fold the stated EP over ``tp·dp·cp`` (the run could not have started with
    it: ``--expert-tensor-parallel-size`` was set) and 1 can, with its assumption."""
    if not moe or "etp" in parallel:
        return None
    tp, cp, ep = stated.get("tp", 1), stated.get("cp", 1), stated.get("ep", 1)
    ranks = tp * cp * stated_or_inferred(stated, parallel, "dp")
    if ranks % (ep * tp) == 0 or ranks % ep:
        return None
    return 1, (
        f"expert tensor parallel size 1 (etp 1): Megatron-Core's default, tp {tp}, cannot fold "
        f"ep {ep} over tp·dp·cp = {ranks} ranks, so the run set --expert-tensor-parallel-size; "
        "1, as the NeMo 2.0 / Megatron-Bridge MoE performance configs set it"
    )


_ZERO_STAGE = re.compile(r"zero[-_\s]?(?:stage[-_\s]?)?([0-3])\b", re.IGNORECASE)


def named_zero_stage(row: dict[str, str]) -> tuple[str, str, str] | None:
    """``(column, text, stage)`` of the one ZeRO stage a DeepSpeed row's other text names
    (``DeepSpeed ZeRO-3`` in ``source``: ``'3'``) for an empty ``dp_sharding`` (it was read as
    the profile's default stage, s18 csvrobust); None when none or several stages are named."""
    found = [
        (column, match) for column in FRAMEWORK_COLUMNS
        for match in _ZERO_STAGE.finditer(row.get(column, ""))
    ]  # fmt: skip
    stages = {match.group(1) for _, match in found}
    if len(stages) != 1:
        return None
    column, match = found[0]
    return column, match.group(0), match.group(1)


def parallel_layout(
    row: dict[str, str], stated: dict[str, int], framework: str
) -> tuple[dict[str, Any], list[str]]:
    """The parallel fields ``row`` leaves empty (``stated``: its integer cells), each with its
    assumption, for ``framework`` (the inferred profile): dp from the GPUs, the micro-batch,
    sequence parallelism, recompute, the context-parallel style, the ZeRO stage and hybrid
    sharding group; :class:`~stage_explore.validation.infer_fields.Uninferable` when the
    layout is missing or inconsistent."""
    tp, pp, cp = (stated.get(k, 1) for k in ("tp", "pp", "cp"))
    fields: dict[str, Any] = {}
    notes = []
    if "global_batch_seqs" not in stated:
        what = ("the file has no global_batch_seqs column" if "global_batch_seqs" not in row
                else "global_batch_seqs is empty")  # fmt: skip
        raise Uninferable(f"{what}: the sequences per step are needed")
    gpus = stated.get("num_gpus")
    if "dp" not in stated:
        if gpus is None:
            raise Uninferable("dp and num_gpus are both empty: one is needed for the layout")
        if gpus % (tp * pp * cp):
            raise Uninferable(
                f"inconsistent layout: dp is empty and num_gpus {gpus} is not a multiple of "
                f"tp·pp·cp = {tp * pp * cp}"
            )
        fields["dp"] = gpus // (tp * pp * cp)
        notes.append(f"dp {fields['dp']} = num_gpus / (tp·pp·cp)")
    elif gpus is not None and gpus != tp * pp * cp * stated["dp"]:
        raise Uninferable(
            f"inconsistent layout: tp·pp·cp·dp = {tp * pp * cp * stated['dp']} but num_gpus "
            f"is {gpus}"
        )
    if "micro_batch" not in stated:
        fields["micro_batch"], why = default_micro_batch(row, framework, stated, fields)
        notes.append(why)
    if "vpp" not in stated:
        notes.append("no interleaving, vpp 1 (column empty)")
    launch = megatron_lm_launch(infer_framework(row).assumption)
    if not row.get("sp", "").strip() and launch and tp > 1:
        fields["sp"], why = launch_sequence_parallel(row)
        notes.append(why)
    elif not row.get("sp", "").strip():
        fields["sp"] = tp > 1 and framework in ("megatron-core", "torchtitan")
        notes.append(
            f"sequence parallelism {'on' if fields['sp'] else 'off'} (column empty; on with "
            "TP for Megatron-Core recipes and torchtitan's TP plan, else off)"
        )
    if not row.get("recompute", "").strip():
        fields["recompute"] = "none"
        notes.append(NO_RECOMPUTE)
    modules = named_modules(row.get("recompute", ""))
    if modules:
        fields["recompute_modules"] = modules
        notes.append(
            f"selective recompute of {', '.join(modules)} (recompute_modules): the modules the "
            "recompute column names, Megatron-Core's --recompute-modules names"
        )
    if cp > 1 and framework in ("megatron-core", "automodel"):
        fields["cp_style"] = "ring"
        notes.append(
            "context parallelism as ring attention (Transformer Engine's DotProductAttention "
            "with cp_comm_type p2p: Megatron-Core's default, AutoModel's TE attention)"
        )
    named = named_zero_stage(row) if framework == "deepspeed" else None
    fsdp_named = named_fsdp_strategy(row, framework)  # s32 readers7: HYBRID_SHARD in source
    if fsdp_named is not None:
        said = f"dp_sharding empty; the {fsdp_named[0]} column names {fsdp_named[1]!r}"
        zero, shard, why = infer_zero(fsdp_named[1], framework, said, pp=pp)
    elif named is not None and not row.get("dp_sharding", "").strip():
        column, text, stage = named
        said = f"dp_sharding empty; the {column} column names {text!r}"
        # the stage as infer_zero spells it (``zero_2``, ``ZeRO stage-2``, ``ZeRO-0`` are not)
        zero, shard, why = infer_zero("0" if stage == "0" else f"zero-{stage}", framework, said)
    else:
        zero, shard, why = fms_open_sharding(  # s37 ivs: fms-fsdp's own choice
            row.get("dp_sharding", ""), framework, row.get("params_b", "")
        ) or infer_zero(row.get("dp_sharding", ""), framework, pp=pp)
    if zero in (1, 3) and shard is None:  # a group size the sharded cell states (s27 hidden22)
        dp_all = stated_or_inferred(stated, fields, "dp")
        group = stated_group(row.get("dp_sharding", ""), dp_all, zero)
        zero, shard, why = group if group is not None else (zero, shard, why)
    plain = launch_zero(row) if launch else None
    if plain is not None:
        zero, why = plain
    fields["zero"] = zero
    notes.append(why)
    says_ds = any(re.search("deepspeed", row.get(c, ""), re.I) for c in FRAMEWORK_COLUMNS)
    refused = sparse.deepspeed_pipeline_zero(framework if says_ds else "", zero, pp)
    if refused:
        raise Uninferable(refused)
    if shard is not None:
        dp = stated_or_inferred(stated, fields, "dp")
        if dp % shard:
            raise Uninferable(
                f"hybrid sharding in groups of {shard}, but dp {dp} is not a multiple"
            )
        fields["dp_shard"] = shard
    return fields, notes
