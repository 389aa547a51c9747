"""torchtitan's shipped activation checkpointing for a row whose ``recompute`` cell is empty
(:func:`~stage_explore.validation.infer_defaults.recipe_defaults`; 7 Dec 2026, s35 rowsH).

A run started from torchtitan's train config for its model keeps that config's
``[activation_checkpoint] mode`` unless the source says otherwise, so an empty ``recompute``
cell on a torchtitan row of a Llama 3 size torchtitan ships a config for reads that config's
mode, as an empty cell on an AutoModel row reads AutoModel's recipe
(:data:`~stage_explore.validation.infer_torch.AUTOMODEL_DENSE_RECOMPUTE`). The modes, one per
flavor, are those of pytorch/torchtitan ``torchtitan/models/llama3/train_configs/``:
``llama3_8b.toml`` ``mode = 'selective'`` with ``selective_ac_option = 'op'`` (01424cb2),
``llama3_70b.toml`` ``mode = "full"`` (038d5fd1; ``mode = 'full'`` in the older
``train_configs/llama3_70b.toml``, 08e53794), ``llama3_405b.toml`` ``mode = 'full'``
(01424cb2). Other flavors keep the generic empty-cell reading (no recompute).

A row whose text says the run checkpointed nothing (:data:`NO_AC`) keeps no recompute.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import row_text

#: torchtitan's Llama 3 train configs' activation-checkpoint mode, by model flavor (module doc).
TORCHTITAN_SHIPPED_AC = {
    "llama3-8b": ("selective", "llama3_8b.toml mode 'selective', selective_ac_option 'op'"),
    "llama3-70b": ("full", "llama3_70b.toml mode 'full'"),
    "llama3-405b": ("full", "llama3_405b.toml mode 'full'"),
    "llama3.1-405b": ("full", "llama3_405b.toml mode 'full'"),
}

#: A text saying no activation checkpointing ran: 'no activation checkpointing', 'without
#: recompute', torchtitan's ``activation_checkpoint.mode none``.
NO_AC = re.compile(
    r"\b(?:no|without)\s+(?:activation\s+)?(?:checkpointing|recompute|recomputation)\b"
    r"|activation[_\s]checkpoint(?:ing)?(?:\.mode)?\s*[=:]?\s*['\"]?none\b",
    re.IGNORECASE,
)


def torchtitan_shipped_ac(row: dict[str, str], flavor: str) -> tuple[str, str] | None:
    """The recompute mode and note of torchtitan's shipped train config for ``flavor``
    (:data:`TORCHTITAN_SHIPPED_AC`) when ``row``'s ``recompute`` cell is empty and its text does
    not say no checkpointing ran; None otherwise (a stated cell, another flavor)."""
    if row.get("recompute", "").strip() or flavor not in TORCHTITAN_SHIPPED_AC:
        return None
    if NO_AC.search(f"{row_text(row)} {row.get('uncertain', '')}"):
        return None
    mode, config = TORCHTITAN_SHIPPED_AC[flavor]
    return mode, (
        f"recompute {mode}: torchtitan's shipped train config for {flavor} "
        f"(torchtitan/models/llama3/train_configs/{config}); the recompute column is empty"
    )
