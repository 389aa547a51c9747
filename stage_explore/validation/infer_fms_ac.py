"""fms-fsdp's 'selective' activation checkpointing in the model's terms, when a row states how
much (7 Dec 2026, s34 fmssel).

fms-fsdp's 'selective' checkpointing wraps some of the LLaMA blocks whole in a non-reentrant
``checkpoint_wrapper`` and leaves the others' activations in place (not Megatron's selective
recompute of the core attention). Its knob changed once:

- until 22 Mar 2024, an integer k (``pretraining/policies/ac_handler.py``,
  foundation-model-stack/fms-fsdp 27e655d4: ``apply_fsdp_checkpointing(model, every_xth_item)``
  checkpoints a block when its count, from 1, is a multiple of k; issue #56, 2024-03-21: 'the
  current design of selective ac is to checkpoint one block every k blocks'). In the model that
  is ``recompute_method 'every'`` with ``recompute_num_layers`` k (blocks k, 2k, ...), as
  torchtitan's 'selective layer' AC (:mod:`~stage_explore.validation.infer_layer_ac`);
- since PR #57 (March 2024: opened 2024-03-21, after the blog), a fraction p of the blocks
  (``fms_fsdp/policies/ac_handler.py`` 4eb97d80, the config's ``selective_checkpointing``: a
  block checkpointed when ``block_idx · p >= cut_off``, ``cut_off`` from 1/2 up by 1 per
  checkpointed block; p = 0 none, p >= 1 every block, per fms-fsdp's
  ``tests/test_selective_ac.py``). In the model that is
  ``recompute_method 'spread'`` with N the number of blocks the rule picks
  (:func:`stage_core.lower.compact.partial_recompute_pattern`).

A row whose ``recompute`` cell says 'selective' on the fms-fsdp profile and states p
(``selective_checkpointing 0.5``, ``p = 1/2``) or k (``every_xth_item 2``, ``every 2nd
block``, ``every other block``) takes it; one that states neither is refused
(:func:`~stage_explore.validation.infer_compile.fms_selective_refusal`): how many blocks the run
recomputed is the whole question. fms-fsdp runs no pipeline parallelism, so the fraction is of
the model's L blocks.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from stage_core.errors import ConfigError

#: A number as a cell writes a fraction: ``0.5``, ``1/2``, ``.5``, ``2 / 3``.
_NUMBER = r"(\d*\.?\d+(?:\s*/\s*\d*\.?\d+)?)"
#: A stated fraction p: fms-fsdp's key ``selective_checkpointing`` (``=`` / ``:`` / a space,
#: optionally ``p``) or ``p = ...`` on its own.
_FRACTION = re.compile(
    rf"selective[_\s-]checkpointing\s*(?:p\s*)?[=:]?\s*{_NUMBER}|\bp\s*=\s*{_NUMBER}",
    re.IGNORECASE,
)
#: A stated interval k: the 2024 key ``every_xth_item`` or ``every k-th block`` / ``every other
#: block`` (layer, transformer block, LLaMA block).
_INTERVAL = re.compile(
    r"every[_\s]xth[_\s]item\s*[=:]?\s*(\d+)"
    r"|every\s+(other|\d+)(?:st|nd|rd|th)?\s+(?:transformer\s+|llama\s+)?(?:layer|block)s?\b",
    re.IGNORECASE,
)
#: A recompute cell that says fms-fsdp's 'selective': the word anywhere (``recompute:
#: selective``, ``activation checkpointing: selective``), or ``sel`` / ``sac`` first.
_SELECTIVE = re.compile(r"\bselective\b|^\s*(?:sel|sac)\b", re.IGNORECASE)


def names_selective(recompute_cell: str) -> bool:
    """Whether a recompute cell names 'selective' checkpointing (:data:`_SELECTIVE`)."""
    return _SELECTIVE.search(recompute_cell) is not None


def _fraction(text: str) -> Fraction:
    """``text`` (``0.5``, ``1/2``) as an exact fraction; a zero denominator is a
    :class:`ConfigError` naming it."""
    top, _, bottom = text.replace(" ", "").partition("/")
    if bottom and Fraction(bottom) == 0:
        raise ConfigError(f"selective checkpointing fraction {text!r}: expected p in [0, 1]")
    return Fraction(top) / (Fraction(bottom) if bottom else 1)


def stated_amount(cell: str) -> tuple[str, Fraction] | None:
    """``('p', p)`` or ``('k', k)`` when ``cell`` states fms-fsdp's fraction p or its earlier
    interval k (module docstring), None when it states neither; two different values of one,
    or both p and k, are a :class:`ConfigError` naming them."""
    fractions = {_fraction(m.group(1) or m.group(2)) for m in _FRACTION.finditer(cell)}
    intervals = {
        Fraction(2 if (w := m.group(1) or m.group(2)).lower() == "other" else int(w))
        for m in _INTERVAL.finditer(cell)
    }
    if len(fractions) + len(intervals) > 1:
        raise ConfigError(
            f"recompute {cell.strip()!r} states more than one amount of fms-fsdp's selective "
            "checkpointing: expected one fraction p or one interval k"
        )
    if fractions:
        return "p", fractions.pop()
    if intervals:
        k = intervals.pop()
        if k < 1:
            raise ConfigError(
                f"recompute {cell.strip()!r}: fms-fsdp's every_xth_item must be an int >= 1"
            )
        return "k", k
    return None


def checkpointed_blocks(p: Fraction, layers: int) -> int:
    """How many of ``layers`` blocks fms-fsdp's fraction rule checkpoints for ``p``: a block
    (counted from 1) when ``count · p >= cut_off``, ``cut_off`` from 1/2 up by 1 at each one
    (fms_fsdp/policies/ac_handler.py ``apply_fsdp_checkpointing``, 4eb97d80). The j-th falls
    at the least count c with c·p >= j - 1/2, within the L blocks when j <= L·p + 1/2: so
    floor(L·p + 1/2) of them, none for p <= 0, all L for p >= 1."""
    if p <= 0:
        return 0
    return min(layers, math.floor(layers * p + Fraction(1, 2)))


def fms_ac_fields(
    framework: str, recompute_cell: str, layers: int
) -> tuple[dict[str, Any], str] | None:
    """The parallel fields and the note of an fms-fsdp row whose recompute cell says
    'selective' and states p or k (module docstring) for a model of ``layers`` blocks; None for
    any other row (another framework, another granularity, nothing stated)."""
    if framework != "fms-fsdp" or not names_selective(recompute_cell):
        return None
    amount = stated_amount(recompute_cell)
    if amount is None:
        return None
    kind, value = amount
    if kind == "p":
        count = checkpointed_blocks(value, layers)
        method, n = "spread", count
        rule = (
            f"selective_checkpointing p = {value} (fms_fsdp/policies/ac_handler.py since "
            "fms-fsdp#57, March 2024: a block when block_idx · p >= cut_off, evenly spaced)"
        )
    else:
        n = int(value)
        count = len(range(n, layers + 1, n))
        method = "every"
        rule = (
            f"every_xth_item k = {n} (fms-fsdp's ac_handler.py before fms-fsdp#57: a block "
            "when its count from 1 is a multiple of k)"
        )
    said = f"the recompute column states it ({recompute_cell.strip()!r})"
    if count == 0:
        return {"recompute": "none"}, f"no block checkpointed: {rule}; {said}"
    if count >= layers:
        return {"recompute": "full"}, f"every block checkpointed (full recompute): {rule}; {said}"
    fields = {"recompute": "full", "recompute_method": method, "recompute_num_layers": n}
    note = (
        f"fms-fsdp's 'selective' activation checkpointing as {count} of the {layers} blocks "
        f"checkpointed whole (recompute full, recompute_method {method}, recompute_num_layers "
        f"{n}), the others keeping their activations: {rule}; {said}"
    )
    return fields, note
