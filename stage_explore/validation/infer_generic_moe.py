"""A mixture of experts of a family the inference does not know, set up as the common MoE block
from the row's stated dims (7 Dec 2026, s33 readers8): :func:`generic_moe`, which
:func:`~stage_explore.validation.infer_fields.infer_model` takes where the dense rows take
:func:`~stage_explore.validation.infer_generic.generic_decoder`.

The common MoE block is Mixtral's (the ``mixtral-8x7b`` flavor's block: pre-norm RMSNorm,
rotary positions, no biases, untied embeddings, SwiGLU experts, dropless top-k routing, an MoE
FFN in every layer), the block Megatron-Core builds for every GPT-style MoE (``--num-experts``,
``--moe-router-topk``, ``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``),
with the row's ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``vocab`` and ``seq_len``, the
``moe`` cell's experts and top-k, the experts' FFN width from ``ffn`` (``1408`` or ``1408 per
expert``; or the ``moe`` cell's ``experts (ffn 1408)``) and the shared experts the ``moe`` cell
states (``2 shared experts``; ``1 shared expert (ffn 5632)``: N shared experts each of that
width, timed as N × width / expert width shared experts of the experts' width, the generator's
one shared MLP). A row that leaves one of these unstated, or whose ``moe`` cell names dense or
interleaved layers (their FFN width and place are no CSV column), is refused in one line naming
it. What the code knows of a family (:data:`~stage_explore.validation.infer_generic.TRAITS`:
Qwen3's query / key norm and head dim) and a head dim the row states are kept.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_cells import moe_counts
from stage_explore.validation.infer_generic import NAMED, TRAITS, GenericRefused, stated_head_dim

#: The flavor whose block the common MoE block takes (its dims are all replaced by the row's).
BASE = "mixtral-8x7b"
#: Columns the common MoE block needs stated beside the experts' FFN width.
ARCHITECTURE = ("layers", "hidden", "heads", "vocab", "seq_len")
#: An ``ffn`` cell giving the experts' width: ``1408``, or one number beside the word expert
#: (``1408 per expert``, ``expert FFN 1408``); not two numbers (``1408 per expert, 10944
#: dense``: a dense width the common MoE block has no layer for).
_EXPERT_FFN_CELL = re.compile(
    r"\d+|[^\d]*\bexperts?\b[^\d]*(\d+)[^\d]*|[^\d]*(\d+)[^\d]*"
    r"\bexperts?\b[^\d]*",
    re.I,
)
#: The experts' width in the ``moe`` cell: ``60 routed experts (ffn 1408)``, ``64 experts of
#: 1408``, ``experts ffn=1024``.
_EXPERT_FFN_MOE = re.compile(
    r"(?<!shared[\s_-])\bexperts?\s*(?:\(\s*)?(?:ffn|width|of|intermediate"
    r"(?:[\s_-]*size)?)\s*[:=]?\s*(\d+)",
    re.I,
)
#: The shared experts' count: ``2 shared experts``, ``1 gated shared expert``, ``shared experts:
#: 2``; and their width: ``shared expert (ffn 5632)``, ``shared expert of 5632``.
_SHARED_COUNT = re.compile(
    r"(\d+)\s*(?:[a-z-]+\s+)?shared\b|\bshared[\s_-]*experts?\s*[:=]\s*(\d+)", re.I
)
_SHARED_WIDTH = re.compile(
    r"\bshared[\s_-]*experts?\s*(?:\(\s*)?(?:ffn|width|of|intermediate(?:[\s_-]*size)?)\s*"
    r"[:=]?\s*(\d+)",
    re.I,
)
_NO_SHARED = re.compile(r"\bno\s+shared\b", re.I)
#: A model name that says mixture of experts: ``…-MoE``, ``8x7B``, ``…-A3B`` / ``…-A800M`` (active
#: parameters), ``experts``.
_MOE_NAME = re.compile(
    r"moe|mixture|experts?|\d+\s*[x×]\s*\d+(?:\.\d+)?\s*b|(?:^|[\s_-])a\d+(?:\.\d+)?\s*[bm]\b",
    re.I,
)
#: ``moe`` cell words naming layers without experts or experts in some layers only.
_DENSE_LAYERS = re.compile(
    r"\bdense\b|every\s+(?:other|second|\d+(?:st|nd|rd|th)?)\s+layer|interleav|alternat|"
    r"layer[\s_-]*freq",
    re.I,
)


def _cell(row: dict[str, str], column: str) -> str:
    return row.get(column, "").strip()


def expert_ffn(row: dict[str, str], moe: str) -> tuple[int, str]:
    """``(width, where)`` of the routed experts' FFN: the ``ffn`` cell (a number, ``… per
    expert``), else the ``moe`` cell's ``experts (ffn N)``; :class:`GenericRefused` naming
    ``ffn`` when neither states it, or when the two disagree."""
    cell = _cell(row, "ffn")
    found = _EXPERT_FFN_CELL.fullmatch(cell)
    if cell and found is None:
        raise GenericRefused(
            f"the ffn column says {cell!r}: expected the experts' FFN width, one number "
            "('1408' or '1408 per expert')"
        )
    in_moe = _EXPERT_FFN_MOE.search(moe)
    width = int(next(g for g in (*found.groups(), found.group(0)) if g)) if found else 0
    if found and in_moe and width != int(in_moe.group(1)):
        raise GenericRefused(
            f"the ffn column says {cell!r} but the moe column {in_moe.group(0)!r}: expected "
            "one expert FFN width"
        )
    if found:
        return width, f"the ffn column's {cell!r}"
    if in_moe:
        return int(in_moe.group(1)), f"the moe column's {in_moe.group(0)!r}"
    raise GenericRefused(
        "the CSV does not state ffn, the experts' FFN width (expected the ffn column, e.g. "
        "'1408 per expert', or the moe column's 'experts (ffn 1408)')"
    )


def shared_experts(moe: str, width: int) -> tuple[int, str]:
    """``(num_shared_experts, note)`` the ``moe`` cell states, in units of the experts' FFN
    ``width``: N shared experts each ``W`` wide are ``N × W / width`` (the generator times the
    shared experts as one MLP of ``num_shared_experts × width``); :class:`GenericRefused` when
    ``W`` is not a multiple of ``width`` or the cell names shared experts but not how many."""
    if not re.search(r"\bshared\b", moe, re.I) or _NO_SHARED.search(moe):
        return 0, "no shared expert (the moe column names none)"
    count = _SHARED_COUNT.search(moe)
    said = re.search(r"\bshared[\s_-]*expert\b(?!s)", moe, re.I)
    if count is None and said is None:
        raise GenericRefused(
            f"the moe column says {moe!r}: shared experts, but not how many (expected "
            "'2 shared experts' or '1 shared expert (ffn 5632)')"
        )
    number = int(next(g for g in count.groups() if g)) if count else 1
    stated = _SHARED_WIDTH.search(moe)
    each = int(stated.group(1)) if stated else width
    if each % width:
        raise GenericRefused(
            f"the moe column's shared expert width {each} is not a multiple of the experts' "
            f"{width}: the generator's shared experts are of the experts' width"
        )
    shared = number * each // width
    return shared, (
        f"{number} shared expert(s) of {each} (the moe column), timed as {shared} of the "
        f"experts' width {width} (one always-active MLP of {shared * width}); a shared expert's "
        "gate (Qwen2-MoE's sigmoid scalar) is not timed"
    )


def generic_moe(
    row: dict[str, str], model: str, moe: str
) -> tuple[str, str, tuple[tuple[str, int | str], ...]]:
    """``(base flavor, assumption, model fields)`` of an MoE row of an unknown family set up
    as the common MoE block (module docstring); :class:`GenericRefused` naming what is missing
    (a dim, the experts or top-k, the experts' FFN width) or not expressible (dense layers,
    latent attention)."""
    text = model.lower().replace("_", " ")
    family = NAMED.search(text)
    if family and not _MOE_NAME.search(text):
        raise GenericRefused(
            f"the model column names {family.group(0)!r}, a dense family, and no mixture of "
            f"experts ('-MoE', '8x7B', '-A3B'), but the moe column says {moe!r}"
        )
    dense = _DENSE_LAYERS.search(moe)
    if dense:
        raise GenericRefused(
            f"the moe column says {moe!r}: {dense.group(0)!r} layers beside the MoE ones, "
            "whose FFN width and place are no CSV column (the common MoE block has experts in "
            "every layer)"
        )
    counts, _ = moe_counts(moe)
    missing = [c for c in ARCHITECTURE if not _cell(row, c)]
    missing += [f"{k} in the moe column" for k in ("num_experts", "top_k") if k not in counts]
    if missing:
        raise GenericRefused(
            f"the CSV does not state {', '.join(missing)} (the common MoE block needs "
            f"{', '.join(ARCHITECTURE)}, the experts, top-k and the experts' FFN width)"
        )
    width, where = expert_ffn(row, moe)
    kv = _cell(row, "kv_heads")
    if kv and not kv.isdigit():
        raise GenericRefused(
            f"kv_heads {kv!r} is not a number of key / value heads (the common MoE block's "
            "attention is grouped-query or multi-head, not latent)"
        )
    fields: list[tuple[str, int | str]] = [("expert_ffn", width)]
    if not _cell(row, "ffn").isdigit():
        fields.append(("ffn", width))  # no dense layer reads it; not the base flavor's
    notes = [
        f"{counts['num_experts']} experts choosing {counts['top_k']} in every layer, each "
        f"{width} wide ({where})"
    ]
    shared, said = shared_experts(moe, width)
    if shared:
        fields.append(("num_shared_experts", shared))
    notes.append(said)
    if not kv:
        fields.append(("kv_heads", int(_cell(row, "heads"))))
        notes.append("multi-head attention (kv_heads empty)")
    else:
        notes.append(f"grouped-query attention with {kv} key / value heads (kv_heads)")
    for pattern, traits, why in TRAITS:
        if re.search(pattern, text):
            fields += traits
            notes.append(why)
    stated = stated_head_dim(row)
    if stated is not None:
        fields = [f for f in fields if f[0] != "head_dim"] + [("head_dim", stated[0])]
        notes.append(stated[1])
    head = "" if any(k == "head_dim" for k, _ in fields) else "head dim hidden / heads; "
    assumption = (
        f"common MoE block from the stated dims (model {model!r} of no known MoE family): "
        f"flavor {BASE}'s block (pre-norm RMSNorm, rotary positions, no biases, untied "
        f"embeddings, SwiGLU experts, dropless routing), {', '.join(notes)}; {head}what the "
        "CSV cannot state (dense first layers, biases, the router's score function, a "
        "family's own attention) is not modelled"
    )
    return BASE, assumption, tuple(fields)


#: The MoE families read by name, as a refusal lists them.
KNOWN_MOE = (
    "DeepSeek-V3 / R1 / V2 / V2.5 / V2-Lite / MoE 16B, Moonlight, Kimi K2, Qwen3 30B-A3B / "
    "235B-A22B / Coder 480B-A35B, Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B, OLMoE-1B-7B, GLM-4.5 / "
    "4.5-Air, GPT-OSS 20B / 120B, Mixtral 8x7B / 8x22B, DBRX, Phi-3.5-MoE, Llama 4 Scout / "
    "Maverick, Grok-1"
)


def moe_refusal(model: str, error: str) -> str:
    """The one-line reason of an MoE row of no known family that :func:`generic_moe` refused
    with ``error``."""
    return (
        f"model {model!r}: a mixture of experts of no known family (expected {KNOWN_MOE}, or "
        f"the common MoE block from stated dims), not set up as the common MoE block: {error}"
    )
