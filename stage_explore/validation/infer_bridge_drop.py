"""Token drop of a Megatron-Bridge MoE row whose table says so, for inferred setups
(6 Dec 2026, s28 hidden23).

Megatron-Bridge's performance summary labels its 25.09 MoE rows ``Qwen3_30B_a3B (tokendrop)``,
``DeepSeekV3 (tokendrop)`` (and one H100 row ``(dropless)``; NVIDIA-NeMo/Megatron-Bridge
0a25f911 ``docs/performance-summary-archive.md``, '25.09 NeMo Container'); later releases force
the routing balanced and drop nothing. The performance scripts drop tokens with one helper,
``apply_moe_token_drop(model_provider, moe_expert_capacity_factor=1.0,
moe_pad_expert_input_to_capacity=True)`` (``src/megatron/bridge/training/utils/
moe_token_drop.py``, stored copies y-okochi/Megatron-Bridge 6726fd09 and
youngeunkwon0405/Megatron-Bridge 958fb9b7), which a stored version of
``scripts/performance/configs/qwen3/qwen3_llm_pretrain.py`` calls with its defaults in
``set_qwen3_common_configs`` (later versions, e.g. e8bd8608, set
``moe_router_force_load_balancing = True  # required for token dropless`` instead) and the
DeepSeek-V3 configs under ``use_tokendrop``. So a Bridge row whose ``model`` or ``moe`` cell
says it dropped tokens pads every expert to capacity factor 1.0 (the model's
``capacity_factor``), as NeMo 2.0's ``MegatronTokenDropCallback`` rows do
(:func:`~stage_explore.validation.infer_nemo2.nemo2_token_drop`). Only those two cells are read:
a note or caveat that merely mentions a token-drop run elsewhere is not the row's setting.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_dgxc import aligned_fp8_padding
from stage_explore.validation.infer_fields import names_bridge
from stage_explore.validation.infer_release import Defaults

#: A cell saying the run dropped tokens (``tokendrop``, ``token drop``, ``token-dropping``),
#: not ``token-dropless`` / ``dropless``.
TOKEN_DROP = re.compile(r"\btoken[\s_-]?drop(?![\s_-]?less)", re.IGNORECASE)
#: A token-drop phrase the cell denies (``no token drop``, ``without token drop``, ``w/o``).
_DENIED = re.compile(r"\b(?:no|not|without|w/o)[\s_-]+token[\s_-]?drop", re.IGNORECASE)
#: The helper's defaults (``apply_moe_token_drop``).
CAPACITY_FACTOR = 1.0
WHY = (
    "Megatron-Bridge's apply_moe_token_drop defaults, moe_expert_capacity_factor 1.0 and "
    "moe_pad_expert_input_to_capacity True (src/megatron/bridge/training/utils/"
    "moe_token_drop.py; the 25.09 Qwen3 performance configs call it in "
    "set_qwen3_common_configs)"
)


def states_token_drop(row: dict[str, str]) -> str:
    """The ``model`` or ``moe`` cell that says the run dropped tokens (:data:`TOKEN_DROP`, not
    denied), else ""."""
    for column in ("model", "moe"):
        cell = row.get(column, "").strip()
        if TOKEN_DROP.search(_DENIED.sub(" ", cell)):
            return cell
    return ""


def bridge_token_drop(
    row: dict[str, str],
    precision: str,
    stated: dict[str, int],
    routing: tuple[int, int],
    out: Defaults,
) -> None:
    """Experts padded to capacity factor 1.0 (model ``capacity_factor``) for a Megatron-Bridge
    MoE row whose ``model`` / ``moe`` cell says it dropped tokens (module docstring); in FP8
    no row padding when every expert's capacity is aligned. ``routing``: the model's (top-k,
    experts); a dense model (no experts) is left alone."""
    if not names_bridge(row) or not all(routing):
        return
    cell = states_token_drop(row)
    if not cell:
        return
    out.model["capacity_factor"] = CAPACITY_FACTOR
    out.notes.append(
        f"experts padded to capacity factor {CAPACITY_FACTOR:g} (model capacity_factor): the "
        f"row says {cell!r}, and a Megatron-Bridge token-drop run is {WHY}"
    )
    if precision == "fp8":
        aligned_fp8_padding(stated, routing, CAPACITY_FACTOR, out)
