"""Whether a row's text names a technique as the run's own, not as negated or as what the run is
compared against (7 Dec 2026, s32 audit).

A paper's or report's row text names a backend, framework or kernel in three ways: as what the
run used (``torchtitan with the Dist-MoE backend``), as what it did not use (``Dist-MoE
disabled``, ``without FlashAttention``), and as a baseline (``1.4x faster than Megatron-LM``,
``vs. Dist-MoE``). Only the first says how the run was set up. :func:`names_used` reads a
pattern's mentions and keeps one that no negation or comparison word stands right before (up to
an article) and no ``disabled`` / ``off`` / ``not used`` / ``= false`` right after.
"""

from __future__ import annotations

import re

#: Words right before a mention (an article between allowed) that make it not the run's own: a
#: negation (``without``, ``no``, ``not``, ``non-``), or a comparison (``than``, ``vs.``,
#: ``versus``, ``against``, ``instead of``, ``compared to / with``, ``relative to``, a speed-up
#: or gain ``over``).
_BEFORE = re.compile(
    r"(?:\bwithout|\bno|\bnot|\bnon-?|\bthan|\bvs\.?|\bversus|\bagainst|\binstead\s+of|"
    r"\bcompared\s+(?:to|with)|\brelative\s+to|"
    r"\b(?:speed[-\s]?ups?|faster|improvements?|gains?)\s+(?:of\s+[\d.]+\s*[x×%]\s+)?over)"
    r"\s*[(\"']?\s*(?:the\s+|a\s+|an\s+)?$",
    re.IGNORECASE,
)
#: Words right after a mention that switch it off: ``disabled``, ``off``, ``not used`` /
#: ``enabled``, ``turned off``, ``= false`` / ``: off`` (a flag's value).
_AFTER = re.compile(
    r"^(?:\s*[\w-]*\s*(?:backend|kernels?)?)?\s*[)\"']?\s*"
    r"(?:disabled\b|off\b|not\s+(?:used|enabled)\b|turned\s+off\b|[=:]\s*(?:false|off|no|0)\b)",
    re.IGNORECASE,
)


def names_used(pattern: re.Pattern[str], text: str) -> bool:
    """Whether ``text`` names ``pattern`` at least once as the run's own: a mention with no
    negation or comparison right before it and no switch-off right after it (module
    docstring)."""
    for found in pattern.finditer(text):
        before = text[max(0, found.start() - 60) : found.start()]
        after = text[found.end() : found.end() + 40]
        if not _BEFORE.search(before) and not _AFTER.match(after):
            return True
    return False
