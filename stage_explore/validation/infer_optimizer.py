"""The optimizer a row's setup cells state, read into the framework options ``optimizer`` and
``bf16_model_states`` (7 Dec 2026, s37 optim; :mod:`stage_core.lower.optimizer_kinds`).

Read: the ``precision`` and ``dp_sharding`` cells (where a row states its setup; ``notes`` and
``uncertain`` also quote what a run did not do and are not read). Rules, each general:

- ``SGD`` named (not after ``no`` / ``not`` / ``without``): ``sgd``, or ``sgd_momentum`` when
  the same clause names momentum (``torch.optim.SGD``'s default is ``momentum=0``, no state);
- BF16 / bfloat16 moments (``BF16 optimizer moments``, ``AdamW moments in BF16``):
  ``adam_bf16_moments`` (DeepSeek-V3 report §3.3);
- the optimizer itself in the run's 16-bit type (``fp16, including SGD optimizer``, ``optimizer
  in fp16``): ``bf16_model_states`` — 16-bit parameters and states, no fp32 master.

A row that states none of these keeps its profile's optimizer (Adam with an fp32 master).
"""

from __future__ import annotations

import re

#: The columns read.
COLUMNS = ("precision", "dp_sharding")
_NOT_BEFORE = r"(?<!\bno\s)(?<!\bnot\s)(?<!\bwithout\s)"
#: SGD named, not negated.
SGD = re.compile(_NOT_BEFORE + r"\bsgd\b", re.IGNORECASE)
#: Momentum in the clause that names SGD (up to a clause break).
SGD_MOMENTUM = re.compile(r"\bsgd\b[^;,()]*\bmomentum\b|\bmomentum\b[^;,()]*\bsgd\b", re.IGNORECASE)
#: Moments stated in BF16.
BF16_MOMENTS = re.compile(
    r"\b(?:bf16|bfloat16)\s+(?:(?:adamw?|optimi[sz]er)\s+)*moments?\b"
    r"|\bmoments?\s+(?:(?:are|kept|stored|held)\s+)?(?:in|as)\s+(?:bf16|bfloat16)\b",
    re.IGNORECASE,
)
#: The optimizer run in the 16-bit type itself (no fp32 master).
HALF_OPTIMIZER = re.compile(
    r"\b(?:fp16|bf16|half)\b,?\s+including\s+(?:the\s+)?(?:\w+\s+)?optimi[sz]er\b"
    r"|\boptimi[sz]er\s+(?:\w+\s+)?in\s+(?:fp16|bf16|half)\b",
    re.IGNORECASE,
)


def named_optimizer(row: dict[str, str]) -> tuple[dict[str, bool | str], str]:
    """The framework options the row's setup cells state for its optimizer (module
    docstring) and the assumption note saying so; ``({}, "")`` when they state none."""
    text = " ; ".join(row.get(column, "") for column in COLUMNS)
    options: dict[str, bool | str] = {}
    said: list[str] = []
    if SGD.search(text):
        options["optimizer"] = "sgd_momentum" if SGD_MOMENTUM.search(text) else "sgd"
        said.append(f"SGD named: optimizer {options['optimizer']}")
    elif BF16_MOMENTS.search(text):
        options["optimizer"] = "adam_bf16_moments"
        said.append("BF16 moments named: optimizer adam_bf16_moments (fp32 master)")
    if HALF_OPTIMIZER.search(text):
        options["bf16_model_states"] = True
        said.append("the optimizer in the 16-bit type: no fp32 master (bf16_model_states)")
    if not options:
        return {}, ""
    return options, "the optimizer the setup states (infer_optimizer): " + "; ".join(said)
