"""The PyTorch FSDP sharding strategy a row's other text names when its ``dp_sharding`` cell is
empty (:func:`named_fsdp_strategy`; 7 Dec 2026, s32 readers7): ``PyTorch FSDP HYBRID_SHARD`` or
``FSDP SHARD_GRAD_OP`` in ``source`` ran as the profile's default, FULL_SHARD (ZeRO-3 over all
of ``dp``), as DeepSpeed's ``ZeRO-3`` in ``source`` once ran as its default stage (s18
csvrobust: :func:`stage_explore.validation.infer_parallel.named_zero_stage`).

The names are PyTorch's ``torch.distributed.fsdp.ShardingStrategy`` members (FULL_SHARD,
SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD; torch/distributed/fsdp/api.py) and
HSDP, the docs' name of HYBRID_SHARD; the cell text handed on is read by
:func:`~stage_explore.validation.infer_fields.infer_zero` as a ``dp_sharding`` cell of it would be.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_fields import FRAMEWORK_COLUMNS, FSDP_PROFILES, TORCH_DDP

#: A ShardingStrategy name, HSDP or PyTorch's DDP (as NO_SHARD), not inside another identifier
#: (``_HYBRID_SHARD_ZERO2``, whose hybrid ZeRO-2 no reader models, is none of them: the
#: profile's default stands).
_STRATEGY = re.compile(
    rf"(?<![A-Za-z_])(FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|HSDP|(?i:{TORCH_DDP}))(?![\w])"
)
#: Two names of one strategy.
_SAME = {"HSDP": "HYBRID_SHARD"}


def _strategy_name(name: str) -> str:
    """A found name as the strategy it is (PyTorch's DDP: NO_SHARD, no FSDP wrapper)."""
    return "DDP" if re.fullmatch(TORCH_DDP, name, re.IGNORECASE) else _SAME.get(name, name)


def named_fsdp_strategy(row: dict[str, str], framework: str) -> tuple[str, str] | None:
    """``(column, name)`` of the one FSDP sharding strategy an FSDP-based row's other text
    names (``source``, ``source_table``, ``url``, ``notes``) when its ``dp_sharding`` cell is
    empty; None for another framework, a stated cell, no name or two different strategies (a
    row comparing FULL_SHARD with HYBRID_SHARD says which it ran nowhere here)."""
    if framework not in FSDP_PROFILES or row.get("dp_sharding", "").strip():
        return None
    found = [
        (column, _strategy_name(match.group(1))) for column in FRAMEWORK_COLUMNS
        for match in _STRATEGY.finditer(row.get(column, ""))
    ]  # fmt: skip
    names = {name for _, name in found}
    if len(names) != 1:
        return None
    return found[0]

