"""Two readings of PyTorch FSDP rows the inferred setup shares between its profiles (s25
hidden13): whether a row ran under ``torch.compile``, and what fms-fsdp's 'selective'
activation checkpointing means.

**torch.compile.** A row's text may name ``torch.compile`` for the run (``FSDP +
torch.compile``, a table column ``MFU compile``) or deny it (``no-compile``, ``no
torch.compile``, ``without torch.compile``, ``compile: false``). The row's most specific text
decides: its ``notes``, then its ``source_table``, then its ``source``, the first of them that
only names compile or only denies it (a column doing both, or neither, leaves it to the next):
a source's title may name compile for a table whose eager column the row is, and the table's
caption both (IBM's 'Maximizing Training Throughput Using PyTorch FSDP and Torch.compile', 2024,
Tables 1 and 2, 'MFU results with compile and no compile': 'MFU no-compile' and 'MFU compile'
side by side). Compiled, the profile's
``fused_elementwise`` is on: Inductor fuses each module's elementwise kernels
(:mod:`~stage_explore.analytical.eager`). torchtitan compiles each transformer block
(``--training.compile``); fms-fsdp compiles the FSDP-wrapped model whole (``main_training*.py``:
``if cfg.use_torch_compile: ... model = torch.compile(model)``, with ``FSDP(...,
use_orig_params=cfg.use_torch_compile)``; foundation-model-stack/fms-fsdp 05030cc9); a plain
PyTorch FSDP row naming compile is the same wrapper under ``torch.compile``.

**fms-fsdp's 'selective' checkpointing** is not Megatron's selective recompute of the core
attention: ``apply_fsdp_checkpointing(model, p)`` wraps a fraction ``p`` of the LLaMA blocks,
evenly spaced, in a non-reentrant checkpoint wrapper (``fms_fsdp/policies/ac_handler.py``,
foundation-model-stack/fms-fsdp 4eb97d80: 'p = 1/2: [ac, no-ac, ac, no-ac, ...]'; ``p`` is the
config's ``selective_checkpointing``). A row whose recompute cell states p or the earlier
interval k is read so (:mod:`~stage_explore.validation.infer_fms_ac`, s34 fmssel); one that
says 'selective' on the fms-fsdp profile and states neither is refused: read as Megatron's
selective recompute it ran with (almost) no recompute, whatever fraction the run checkpointed.
"""

from __future__ import annotations

import re

from stage_core.errors import ConfigError
from stage_explore.validation.infer_fms_ac import names_selective, stated_amount

#: A denial of torch.compile: ``no-compile``, ``no torch.compile``, ``without torch.compile``,
#: ``not compiled``, ``non-compiled``, ``w/o compile``, ``uncompiled``; ``compile: false``,
#: ``use_torch_compile = False``, ``compiled: no``, ``compile=0``, ``torch.compile off``,
#: ``compile (off)``; ``torch.compile not used``, ``compile was not enabled``, ``compile
#: unused``. (s26 review: ``compiled: no``, ``compile=0`` and ``torch.compile not used`` read
#: as compiled.)
COMPILE_DENIED = re.compile(
    r"(?:\bno|\bnot|\bwithout|\bnon|\bw/o)[\s_-]+(?:using[\s_-]+)?(?:torch\.)?compiled?\b"
    r"|\bun[\s_-]?compiled\b"
    r"|compile\w*\s*[:=]\s*(?:false|off|disabled|no|none|0(?![.\d]))\b"
    r"|compile\w*\s*\(?(?:false|off|disabled)\b"
    r"|compile\w*\s+(?:(?:was|is)\s+)?(?:not\s+(?:used|enabled|applied)|unused)\b",
    re.IGNORECASE,
)
#: A mention of torch.compile: ``torch.compile``, torchtitan's ``--training.compile``,
#: fms-fsdp's ``use_torch_compile``, the word ``compile`` / ``compiled``.
COMPILE_NAMED = re.compile(
    # ``torch_compile``: Hugging Face TrainingArguments' flag (transformers training_args.py
    # ``torch_compile: bool``; s32 audit)
    r"torch\.compile|training\.compile|use_torch_compile|\btorch_compile\b|\bcompiled?\b",
    re.IGNORECASE,
)

#: The frameworks whose rows the compile reading switches (torchtitan's own defaults apply it
#: per block, :func:`~stage_explore.validation.infer_torch.torchtitan_defaults`).
FSDP_COMPILE_FRAMEWORKS = ("fsdp", "fms-fsdp")

FSDP_COMPILE_NOTE = (
    "torch.compile (fused_elementwise): the text names torch.compile for this run (fms-fsdp's "
    "use_torch_compile compiles the FSDP-wrapped model, main_training*.py, foundation-model-"
    "stack/fms-fsdp 05030cc9; Inductor fuses each module's elementwise kernels)"
)

FMS_SELECTIVE_REFUSED = (
    "recompute {cell!r} on fms-fsdp: its 'selective' activation checkpointing wraps a fraction "
    "p of the blocks (fms_fsdp/policies/ac_handler.py apply_fsdp_checkpointing, the config's "
    "selective_checkpointing), not Megatron's selective recompute of the core attention; the "
    "cell states neither p ('selective_checkpointing 0.5', 'p = 1/2') nor the earlier interval "
    "k ('every_xth_item 2', 'every 2nd block')"
)


#: The columns that may say whether a row was compiled, the most specific first.
COMPILE_COLUMNS = ("notes", "source_table", "source")

#: A clause of the ``uncertain`` cell that leaves something open: what it says of compile is
#: an assumption or an open question ('whether torch.compile was on', 'compile use not
#: stated'), not a statement of the run.
OPEN_CLAUSE = re.compile(
    r"\bnot\s+(?:stated|said|given|known|read|published)\b|\bunstated\b|\bunknown\b"
    r"|\bwhether\b|\bassumed\b",
    re.IGNORECASE,
)


def uncertain_says_compiled(cell: str) -> bool | None:
    """What the ``uncertain`` cell states of torch.compile: :func:`says_compiled` over its
    ``;``-separated clauses that leave nothing open (:data:`OPEN_CLAUSE`). The cell also
    records the settings of the run's stated config (torchtitan's DeepEP README names the two
    tomls its runs took, both ``[compile] enable = true, components = ["model", "loss"]``:
    pytorch/torchtitan ``qwen3_30b_a3b_with_deepep.toml`` 6d356730), beside what is open
    ('whether torch.compile was on', 'compile ran is not stated'); only the former decides.
    (s33 b200native)"""
    return says_compiled(settled_clauses(cell))


def settled_clauses(cell: str) -> str:
    """The ``;``-separated clauses of an ``uncertain`` cell that leave nothing open
    (:data:`OPEN_CLAUSE`), joined: what the cell states of the run rather than assumes."""
    return "; ".join(c for c in cell.split(";") if not OPEN_CLAUSE.search(c))


def says_compiled(text: str) -> bool | None:
    """True when ``text`` names torch.compile and denies it nowhere, False when it denies it
    and names it nowhere else, None when it does both or neither (:data:`COMPILE_NAMED`,
    :data:`COMPILE_DENIED`)."""
    denied = COMPILE_DENIED.search(text) is not None
    named = COMPILE_NAMED.search(COMPILE_DENIED.sub(" ", text)) is not None
    return None if denied == named else named


def names_compile(row: dict[str, str]) -> bool:
    """Whether the row says its run was compiled: the first of :data:`COMPILE_COLUMNS` that
    decides (:func:`says_compiled`; module docstring), then the settled clauses of its
    ``uncertain`` cell (:func:`uncertain_says_compiled`); False when none does."""
    for column in COMPILE_COLUMNS:
        said = says_compiled(row.get(column, ""))
        if said is not None:
            return said
    said = uncertain_says_compiled(row.get("uncertain", ""))
    return bool(said)


def fms_selective_refusal(framework: str, recompute_cell: str) -> str:
    """The reason an fms-fsdp row whose recompute cell says 'selective' and states neither the
    fraction p nor the interval k is not evaluated (module docstring; a stated one is read,
    :mod:`~stage_explore.validation.infer_fms_ac`), or the cell's own error when it states two;
    empty for every other row."""
    if framework != "fms-fsdp":
        return ""
    if not names_selective(recompute_cell):
        return ""
    try:
        if stated_amount(recompute_cell) is not None:
            return ""
    except ConfigError as error:
        return str(error)
    return FMS_SELECTIVE_REFUSED.format(cell=recompute_cell.strip())
