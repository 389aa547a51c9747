"""fms-fsdp's sharding strategy when a row leaves it open (7 Dec 2026, s37 ivs).

A ``dp_sharding`` cell on the fms-fsdp profile that names both PyTorch FSDP strategies as
alternatives (``FULL_SHARD or HYBRID_SHARD, not stated``) does not say which ran; the reader
took its first word, FULL_SHARD (ZeRO-3 over all GPUs), and an empty cell as the FSDP-based
profiles' ZeRO-3 over all GPUs. fms-fsdp decides it itself:

- its training config defaults ``sharding_strategy`` to ``"hsdp"``
  (foundation-model-stack/fms-fsdp ``pretraining/config/training.py`` at 240a2748, with
  ``sharding_group_size: int = 8``, and ``fms_fsdp/config/training.py`` at 00f20d5e:
  ``sharding_strategy: str = "hsdp"``), which it maps to
  PyTorch ``HYBRID_SHARD`` with no process groups: shards within the node, replicas across
  nodes (``dp_shard`` = the GPUs per node; ``docs/analytical.md``, fms-fsdp);
- its ``docs/configurations.md`` (fms-fsdp cc4b276b, "Tune the configs"): "For smaller models
  like 7b and 13b, HSDP is preferred ...; while for larger models like 34b and 70b, FSDP will be
  a necessity as the model is too large to be fitted into only 8 gpus".

So an open cell (empty, or naming both) reads as HSDP in groups of 8 for a model no larger
than fms-fsdp's 13b variant (:data:`HSDP_LARGEST_B`, the largest size the page calls small) and
as FULL_SHARD above it (the page names no size between 13b and 34b; FULL_SHARD, the strategy
that fits more, is taken there). A cell naming one strategy, or a row on another profile, is
not read here (:func:`~stage_explore.validation.infer_fields.infer_zero`).
"""

from __future__ import annotations

import re

#: Both strategies named in one cell: a full-sharding word and a hybrid-sharding word.
FULL = re.compile(r"full[_\s-]?shard|fully[_\s-]+shard", re.IGNORECASE)
HYBRID = re.compile(r"hybrid[_\s-]?shard|\bhsdp\b", re.IGNORECASE)
#: ... as alternatives, or with the strategy said not to be stated.
OPEN = re.compile(
    r"\bor\b|\beither\b|not\s+(?:stated|given|said|known|specified)|unstated|unknown",
    re.IGNORECASE,
)
#: The largest fms-fsdp Llama variant its docs/configurations.md prefers HSDP for: "13b"
#: (Llama 2 13B, 13.0 B parameters; fms_fsdp/utils/config_utils.py get_model_config), read to
#: the half billion so 13.0-13.4 spellings of that size count.
HSDP_LARGEST_B = 13.5
#: The node fms-fsdp's HSDP shards within (``--nproc_per_node=8`` in its scripts; the page's
#: "8 gpus in each node").
NODE_GPUS = 8


def open_strategy(cell: str) -> bool:
    """True when ``cell`` is empty or names both full and hybrid sharding as alternatives or
    unstated."""
    if not cell.strip():
        return True
    return bool(FULL.search(cell) and HYBRID.search(cell) and OPEN.search(cell))


def fms_open_sharding(
    cell: str, framework: str, params_b: str
) -> tuple[int, int | None, str] | None:
    """``(zero, dp_shard, assumption)`` of an fms-fsdp row whose ``dp_sharding`` cell leaves
    the strategy open (module docstring); None for another profile, a cell naming one
    strategy, or a row without a readable ``params_b`` (the caller's reading stands)."""
    if framework != "fms-fsdp" or not open_strategy(cell):
        return None
    try:
        size = float(params_b)
    except ValueError:
        return None
    says = f"says {cell.strip()!r}, both strategies" if cell.strip() else "is empty"
    said = (
        f"the dp_sharding column {says}; fms-fsdp's default "
        "sharding_strategy is hsdp and its docs/configurations.md prefers HSDP for 7b / 13b, "
        "FSDP 'a necessity' for 34b / 70b"
    )
    if size <= HSDP_LARGEST_B:
        return 3, NODE_GPUS, (
            f"zero 3 inside shard groups of {NODE_GPUS} GPUs, one node (HSDP, dp_shard "
            f"{NODE_GPUS}) for a {size:g} B model, no larger than the 13b variant ({said})"
        )
    return 3, None, (
        f"zero 3 over all GPUs (FULL_SHARD) for a {size:g} B model, larger than the 13b "
        f"variant ({said})"
    )
