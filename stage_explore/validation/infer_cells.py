"""Normalisers of the free-text cells a published-runs row spells another way than the package
data does (6 Dec 2026, s24 spellings): one per column, each rewriting a cell into the form the
inferred setup reads and returning the assumption that says so, or leaving the cell as written.

- ``dp_sharding`` (:func:`read_sharding`): a ZeRO stage spelled ``ZeRO Stage-3``,
  ``zero_stage: 3``, ``ZeRO-DP stage 2`` (DeepSpeed's config key is ``zero_optimization.stage``)
  as ``ZeRO-N``; PyTorch FSDP written out (``Fully Sharded Data Parallel``, ``fully sharded``,
  ``full shard``) as ``FSDP``. These read as the distributed optimizer (the megatron-core
  default) before: ZeRO-3 / FSDP ran as ZeRO-1 on Megatron-Core.
- ``sp`` (:func:`read_sp`): ``SP``, ``SP on``, ``sequence parallel`` as on, ``SP off``,
  ``none`` as off (refused before: the cell must start with yes / no).
- ``moe`` (:func:`moe_counts`): experts and top-k spelled ``top-k=4``, ``k=4``, ``4 active``,
  ``topk=4``, ``Top-k: 4``, ``num_experts=128``, ``Experts: 128``, ``E=8`` (a ``top-k=4`` or
  ``4 active`` was dropped for the flavor's top-k, silently).
"""

from __future__ import annotations

import re

from stage_explore.validation.csv_cells import NO, YES
from stage_explore.validation.infer_errors import Uninferable

#: A ZeRO stage however a source spells it: ``ZeRO-3``, ``ZeRO3``, ``ZeRO stage 3``, ``ZeRO
#: Stage-3``, ``zero_stage: 3``, ``zero_stage=3``, ``ZeRO-DP stage 3`` (Rajbhandari et al. 2020
#: call the stages ZeRO-DP), ``zero_optimization.stage 3``.
ZERO_STAGE = re.compile(
    r"\bzero(?:[-_\s]*dp)?(?:[-_\s]*optimization)?[-_\s.]*(?:stage)?[-_\s]*[:=]?\s*([0-3])\b",
    re.IGNORECASE,
)
#: The canonical forms :func:`~stage_explore.validation.infer_fields.infer_zero` and the
#: framework rules read (``ZeRO-3``, ``ZeRO3``, ``ZeRO stage 3``): left as written.
_CANONICAL_STAGE = re.compile(r"zero[-\s]?[0-3]\b|zero stage [0-3]\b", re.IGNORECASE)
#: PyTorch FSDP written out (torch.distributed.fsdp.FullyShardedDataParallel); not ``FULL_SHARD``
#: (ShardingStrategy's name, read as it is).
FSDP_WORDS = re.compile(
    r"\bfully[-\s]+sharded(?:[-\s]+data[-\s]+parallel(?:ism)?)?|\bfull[-\s]+shard(?:ing)?\b",
    re.IGNORECASE,
)


def read_sharding(cell: str) -> tuple[str, str]:
    """``(cell, assumption)``: a ``dp_sharding`` cell with its ZeRO stage spelled another way
    (:data:`ZERO_STAGE`) rewritten to ``ZeRO-N`` and PyTorch FSDP written out
    (:data:`FSDP_WORDS`) to ``FSDP``, the rest kept; "" when the cell is already read as
    written."""
    text = cell.strip()
    out = ZERO_STAGE.sub(
        lambda m: m.group(0) if _CANONICAL_STAGE.fullmatch(m.group(0)) else f"ZeRO-{m.group(1)}",
        text,
    )
    out = FSDP_WORDS.sub("FSDP", out)
    if out == text:
        return cell, ""
    return out, f"dp_sharding {out!r} (the dp_sharding column says {text!r})"


#: An ``sp`` cell naming sequence parallelism, with an on / off word after it or none (on).
_SP_NAMED = re.compile(r"(?:sp|sequence[-_\s]*parallel(?:ism)?)\b\s*[:=]?\s*(\w*)", re.IGNORECASE)


def read_sp(cell: str) -> tuple[str, str]:
    """``(cell, assumption)``: an ``sp`` cell that names sequence parallelism (``SP``, ``SP
    on``, ``sequence parallel``, ``SP: off``) or denies it (``SP off``, ``none``) rewritten to
    start with yes / no, the original kept in parentheses; a cell starting with a yes / no word
    or one no spelling reads is returned as it is (the setup path names it as the reason)."""
    text = cell.strip()
    words = text.lower().split()
    if not words or words[0].rstrip(",;:") in (*YES, *NO):
        return cell, ""
    if words[0].rstrip(",;:") == "none":
        value = "no"
    else:
        named = _SP_NAMED.match(text)
        if named is None:
            return cell, ""
        after = named.group(1).lower()
        if after and after not in (*YES, *NO):
            return cell, ""
        value = "no" if after in NO else "yes"
    state = "on" if value == "yes" else "off"
    return f"{value} ({text})", f"sequence parallelism {state} (the sp column says {text!r})"


#: The experts a ``moe`` cell states: ``128 experts``, ``256 routed``, ``8E``, ``top-2 of 8``,
#: ``num_experts=128``, ``Experts: 128``, ``E=8``.
_EXPERTS = re.compile(
    r"(\d+)\s*(?:routed\s*)?experts?\b|(\d+)\s*routed|(\d+)\s*e\b|"
    r"top[-\s_]?(?:k[-\s_]*[:=]?\s*)?\d+\s*(?:of|/)\s*(\d+)|"
    r"(?:num[-_\s]*)?experts?\s*[:=]\s*(\d+)|\be\s*=\s*(\d+)",
    re.IGNORECASE,
)
#: The top-k a ``moe`` cell states: ``top-8``, ``top8``, ``top-k=8``, ``top-k 8``, ``topk=8``,
#: ``Top-k: 8``, ``k=8``, ``8 active`` / ``8 activated`` (experts per token; not ``37B
#: active``, active parameters).
_TOP_K = re.compile(
    r"top[-\s_]?(?:k[-\s_]*[:=]?\s*)?(\d+)|\bk\s*[:=]\s*(\d+)|(\d+)\s+(?:experts?\s+)?activ",
    re.IGNORECASE,
)


def moe_counts(cell: str) -> tuple[dict[str, int], list[str]]:
    """Experts and top-k the ``moe`` column states (``128 experts, top-8``, ``num_experts=128,
    topk=8``, ``8 experts, 2 active``); numbers that are neither are :class:`Uninferable`."""
    fields = {}
    experts = _EXPERTS.search(cell)
    top = _TOP_K.search(cell)
    if experts:
        fields["num_experts"] = int(next(g for g in experts.groups() if g))
    if top:
        fields["top_k"] = int(next(g for g in top.groups() if g))
    if not fields and re.search(r"\d", cell):
        raise Uninferable(
            f"moe {cell!r}: numbers that are neither 'N experts' nor 'top-K' (expected "
            "'8 experts, top-2'; '8/2' could be either order)"
        )
    return fields, ([f"experts and top-k from the moe column ({cell!r})"] if fields else [])
