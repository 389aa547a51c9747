"""Rows that name Megatron-LM itself as what ran, read by an inferred setup (6 Dec 2026, s27
hidden20): Megatron-LM's own launcher, ``pretrain_gpt.py`` with its argument defaults, not a
NeMo / Megatron-Bridge / MLPerf recipe.

The ``megatron-core`` profile holds the switches those recipes turn on (the overlap of the
data-parallel gradient reduce and parameter gather, TP communication overlap, sequence
parallelism with TP, the distributed optimizer). Megatron-LM leaves every one of them off unless
its command line names it: ``--overlap-grad-reduce``, ``--overlap-param-gather``,
``--tp-comm-overlap``, ``--sequence-parallel`` and ``--use-distributed-optimizer`` are all
``action='store_true'`` (NVIDIA/Megatron-LM 307dcf37 ``megatron/training/arguments.py``; the
first with ``default=False`` spelled out). A paper that benchmarks "Megatron-LM" as its baseline
(MegaScale, NSDI 2024: the baseline is "the original Megatron-LM", to which MegaScale adds TP,
PP and DP communication overlap, its Table 3) ran those defaults unless it says otherwise.

Read only when the row's text names Megatron-LM and no framework rule of
:data:`stage_explore.validation.infer_fields.FRAMEWORK_RULES` (a NeMo, Megatron-Core, Bridge,
MLPerf, DGX Cloud or Primus recipe keeps its own reading) nor a framework the model has no
profile of (GPT-NeoX, Nanotron … stay refused). A switch the row's text names as on keeps the
profile's value. The attention kernel is the profile's (Megatron-LM's Transformer Engine path
picks a fused kernel by default; its legacy path of 2023 ran unfused attention unless
``--use-flash-attn``, which a row's date alone does not settle).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import Defaults, row_text

#: Megatron-LM named as a framework (``Megatron-LM``, ``Megatron LM``, ``megatron_lm``); not
#: Megatron-DeepSpeed nor Megatron-Core, whose rules read them first.
MEGATRON_LM = re.compile(r"megatron[\s_-]?lm\b", re.IGNORECASE)
#: How :func:`stage_explore.validation.infer_fields.infer_framework`'s reading of such a row
#: begins (the test of :func:`megatron_lm_launch`).
MEGATRON_LM_READING = "framework profile megatron-core, Megatron-LM's own launcher"
ARGUMENTS = "NVIDIA/Megatron-LM 307dcf37 megatron/training/arguments.py"
#: (option, what the row's text must name to keep the profile's value on, Megatron-LM's flag).
LAUNCH_OFF: tuple[tuple[str, str, str], ...] = (
    ("overlap_grad_reduce", r"overlap[-_\s]grad[-_\s]reduce", "--overlap-grad-reduce"),
    ("overlap_param_gather", r"overlap[-_\s]param[-_\s]gather", "--overlap-param-gather"),
    ("tp_comm_overlap", r"tp[-_\s]comm[-_\s]overlap", "--tp-comm-overlap"),
)
#: A named switch turned off (``no --tp-comm-overlap``, ``tp_comm_overlap=False``) is not on.
_DENIED = r"(?:\bno\s+|\bwithout\s+)(?:--)?{0}|{0}[\s:=]*(?:false|off|0)\b"


def megatron_lm_reading(column: str, said: str) -> str:
    """The framework reading of a row whose ``column`` names Megatron-LM (``said``)."""
    return (
        f"{MEGATRON_LM_READING} (the {column} column names {said!r}: pretrain_gpt.py with its "
        "argument defaults, not a NeMo / Megatron-Bridge recipe's)"
    )


def megatron_lm_launch(framework_reading: str) -> bool:
    """Whether a row's framework was read as Megatron-LM's own launcher."""
    return framework_reading.startswith(MEGATRON_LM_READING)


def _named_on(text: str, pattern: str) -> bool:
    return bool(re.search(pattern, text, re.IGNORECASE)) and not re.search(
        _DENIED.format(pattern), text, re.IGNORECASE
    )


def launch_options(row: dict[str, str], out: Defaults) -> None:
    """Megatron-LM's argument defaults for the overlaps of :data:`LAUNCH_OFF`: off unless the
    row's text names the flag as on."""
    text = row_text(row, ("source", "source_table", "notes", "dp_sharding"))
    for option, pattern, flag in LAUNCH_OFF:
        if _named_on(text, pattern):
            continue
        out.options[option] = False
        out.notes.append(
            f"{option} false: Megatron-LM's {flag} is store_true ({ARGUMENTS}) and the row "
            "does not name it"
        )


def launch_sequence_parallel(row: dict[str, str]) -> tuple[bool, str]:
    """Sequence parallelism of a Megatron-LM launch whose ``sp`` cell is empty: off unless the
    text names ``--sequence-parallel``."""
    if _named_on(row_text(row), r"sequence[-_\s]parallel(?:ism)?"):
        return True, "sequence parallelism on (column empty; the text names it)"
    return False, (
        f"sequence parallelism off (column empty; Megatron-LM's --sequence-parallel is "
        f"store_true, {ARGUMENTS})"
    )


def launch_zero(row: dict[str, str]) -> tuple[int, str] | None:
    """No optimizer sharding for a Megatron-LM launch whose ``dp_sharding`` cell is empty and
    whose text names no distributed optimizer; ``None`` when the cell or text says otherwise."""
    if row.get("dp_sharding", "").strip():
        return None
    if _named_on(row_text(row), r"distributed[-_\s]optimi[sz]er"):
        return None
    return 0, (
        f"zero 0 (dp_sharding empty; Megatron-LM's --use-distributed-optimizer is store_true, "
        f"{ARGUMENTS})"
    )
