"""torchtitan's 'selective layer' activation checkpointing in the model's terms (7 Dec 2026, s29
selayer).

torchtitan's ``--activation_checkpoint.mode selective`` takes ``selective_ac_option``: ``'op'``
(the op-level policy, the model's ``recompute_modules ['op']``) or a positive int n, 'selective
layer' AC: ``checkpoint_wrapper`` (``torchtitan/parallelisms/parallelize_llama.py`` of 2024, later
``_apply_layer_sac``) counts the transformer blocks it wraps in a per-process counter (incremented
before the test, so from 1) and wraps a block whole in the non-reentrant
``ptd_checkpoint_wrapper`` when ``count % n == 0``; every other block keeps its activations. In
the model that is ``recompute 'full'`` of every n-th block, ``recompute_method 'every'``
(:func:`stage_core.lower.compact.partial_recompute_pattern`: blocks n, 2n, ... from 1), not
Megatron's selective recompute of the core attention, which a CSV cell 'selective' otherwise
reads as. A row whose text states n (``selective_ac_option 3``, ``every 3rd layer``, ``every
other layer``) takes it; else torchtitan's own default int, :data:`TORCHTITAN_LAYER_AC_DEFAULT`.
Used by the setups of ``setups.toml`` and by the inferred setup alike.
"""

from __future__ import annotations

import re
from typing import Any

from stage_core.errors import ConfigError

#: torchtitan's default interval of 'selective layer' AC: ``config_manager.py``
#: ``--activation_checkpoint.selective_ac_option`` default ``"2"`` ('2 = checkpoint every other
#: layer'; "'int' (e.g., 2) for every nth layer"), set by pytorch/torchtitan#125 (2024-03,
#: 'every 2nd layer was the best bang/buck so I have made that the default') and kept through
#: 2024; the only int torchtitan's code, help text and configs of that time name. Its Llama
#: train configs set ``'op'``, so a 'selective layer' run set its int by hand: where the text
#: does not state it, n = 2 is an assumption (said in the row's note), not a statement.
TORCHTITAN_LAYER_AC_DEFAULT = 2

#: 'selective layer' AC named in a row's text (torchtitan's docs/performance.md column value).
LAYER_AC = re.compile(r"selective[\s_-]*layer", re.IGNORECASE)
#: A stated int option: ``selective_ac_option = 3`` / ``selective_ac_option '3'``.
STATED_OPTION = re.compile(r"selective_ac_option\s*[=:]?\s*['\"]?(\d+)", re.IGNORECASE)
#: A stated interval beside a 'selective layer' name: ``every 3rd layer``, ``every 3 blocks``,
#: ``every other layer`` (2).
STATED_EVERY = re.compile(
    r"every\s+(other|\d+)(?:st|nd|rd|th)?\s+(?:transformer\s+)?(?:layer|block)", re.IGNORECASE
)


def layer_ac_interval(text: str) -> tuple[int, bool] | None:
    """The interval n of a text naming torchtitan's 'selective layer' AC (or stating
    ``selective_ac_option`` as an int) and whether the text states it; None when it names
    neither. A stated n below 1 is a :class:`~stage_core.errors.ConfigError` naming it."""
    option = STATED_OPTION.search(text)
    every = STATED_EVERY.search(text) if LAYER_AC.search(text) else None
    if option is None and not LAYER_AC.search(text):
        return None
    if option is None and every is None:
        return TORCHTITAN_LAYER_AC_DEFAULT, False
    found = option if option is not None else every
    assert found is not None
    word = found.group(1)
    n = 2 if word.lower() == "other" else int(word)
    if n < 1:
        raise ConfigError(f"selective layer AC interval {found.group(0)!r}: expected an int >= 1")
    return n, True


def layer_ac_fields(
    framework: str, recompute_cell: str, text: str
) -> tuple[dict[str, Any], str] | None:
    """The parallel fields (``recompute 'full'``, ``recompute_method 'every'``,
    ``recompute_num_layers n``) and the note of a torchtitan row whose recompute cell says
    'selective' and whose ``text`` names 'selective layer' AC; None for any other row."""
    if framework != "torchtitan" or not re.match(r"\s*selective", recompute_cell, re.I):
        return None
    interval = layer_ac_interval(text)
    if interval is None:
        return None
    n, stated = interval
    source = (
        "the text states it"
        if stated
        else "the text does not state it: torchtitan's default selective_ac_option '2' "
        "(config_manager.py; pytorch/torchtitan#125), an assumption"
    )
    note = (
        f"torchtitan's 'selective layer' AC as one transformer block in every {n} checkpointed "
        f"whole (recompute full, recompute_method every, recompute_num_layers {n}; "
        "parallelize_llama checkpoint_wrapper: count % n == 0, counting from 1), the others "
        f"keeping their activations; n = {n}: {source}"
    )
    fields = {"recompute": "full", "recompute_method": "every", "recompute_num_layers": n}
    return fields, note
