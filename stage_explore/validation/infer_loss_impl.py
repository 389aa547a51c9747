"""The fused cross-entropy a Megatron-Core row's text states, read over the container's default
(s36 rowsJ).

Megatron-Core's GPTModel calls a fused cross-entropy when ``cross_entropy_loss_fusion`` is on,
and ``cross_entropy_fusion_impl`` picks which: ``'native'`` (Megatron-Core's own fused kernel,
the default) or ``'te'`` (Transformer Engine's Triton one) — Megatron-LM's
``--cross-entropy-fusion-impl`` with ``choices=['native', 'te']``, default ``'native'``
(megatron/training/arguments.py), Megatron-Core's ``TransformerConfig.cross_entropy_fusion_impl``.
Without a statement the reader takes the impl a container's recipes set
(:data:`~stage_explore.validation.infer_megatron.LOSS_ERAS`: ``te`` from 25.03 on, the
performance scripts' setting). A row whose text names the impl it ran — the config key
(``cross_entropy_fusion_impl te``, ``--cross-entropy-fusion-impl native``,
``CE_FUSION_IMPL=te``) or the README wording (``native cross-entropy fusion``, ``TE
cross-entropy fusion``) — ran that one: Megatron-LM's own example scripts on a NeMo container
(the Megatron-FSDP Qwen3-30B-A3B case study, NVIDIA/Megatron-LM
``examples/megatron_fsdp_v2_prototype/qwen3_30b_a3b_mxfp8/README.md``: "native cross-entropy
fusion") do not run NeMo's performance scripts. Two different impls stated leave the reading
as it was, with a note saying so.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import CONTAINER_COLUMNS, Defaults, row_text

#: The impl as a config key or launcher flag states it (``cross_entropy_fusion_impl: 'te'``,
#: ``--cross-entropy-fusion-impl native``, MLPerf's ``CE_FUSION_IMPL=te``), and as a README
#: words it (``native cross-entropy fusion``, ``TE cross-entropy loss fusion``, ``Transformer
#: Engine cross-entropy fusion``).
STATED_IMPL = (
    re.compile(
        r"(?:cross[-_ ]entropy[-_ ]fusion[-_ ]impl|\bce_fusion_impl)\s*[=:]?\s*['\"]?(te|native)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(native|te|transformer\s+engine)\s+(?:fused\s+)?cross[-\s]entropy(?:\s+loss)?"
        r"\s+fusion\b",
        re.IGNORECASE,
    ),
)
#: Each stated impl's framework option (:mod:`stage_explore.analytical.profile_kernels`).
OPTIONS = {"te": "te_cross_entropy", "native": "native_cross_entropy"}
#: How the option's note names the kernel.
KERNELS = {
    "te": "Transformer Engine's fused cross-entropy (te_cross_entropy)",
    "native": "Megatron-Core's native fused cross-entropy (native_cross_entropy)",
}
#: The prefix every loss note of the Megatron-Core path starts with (container eras, launcher
#: yamls, MLPerf): the reading this rule replaces.
LOSS_NOTE = "the loss as "


def stated_impls(row: dict[str, str]) -> dict[str, str]:
    """Each impl (``te`` / ``native``) the row's text states, with the words that state it."""
    text = row_text(row, CONTAINER_COLUMNS)
    found: dict[str, str] = {}
    for pattern in STATED_IMPL:
        for match in pattern.finditer(text):
            said = " ".join(match.group(1).lower().split())  # any spacing of the words
            impl = "te" if said in ("te", "transformer engine") else "native"
            found.setdefault(impl, " ".join(match.group(0).split()))
    return found


def stated_loss_impl(row: dict[str, str], out: Defaults) -> None:
    """The fused loss the row's text states (:data:`STATED_IMPL`), over the reading the
    container's or the implementation's defaults gave (``out``); none stated: unchanged."""
    impls = stated_impls(row)
    if not impls:
        return
    if len(impls) > 1:
        words = " and ".join(repr(w) for w in impls.values())
        out.notes.append(f"the text states two cross-entropy fusion impls ({words}): not read")
        return
    ((impl, words),) = impls.items()
    for option in OPTIONS.values():
        out.options.pop(option, None)
    out.notes[:] = [n for n in out.notes if not n.startswith(LOSS_NOTE)]
    out.options[OPTIONS[impl]] = True
    out.notes.append(
        f"{LOSS_NOTE}{KERNELS[impl]}: the text states {words!r} (Megatron-Core's "
        "cross_entropy_fusion_impl, choices 'native' / 'te'), over the container's default"
    )
