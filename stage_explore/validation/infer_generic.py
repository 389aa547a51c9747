"""A dense model of a family the inference does not know (Mistral, Qwen2.5, Gemma, Falcon, OLMo,
Yi, Phi, or no model name at all), set up as the common decoder from the row's architecture
columns (:func:`generic_decoder`), as :func:`~stage_explore.validation.infer_fields.infer_model`
falls back to it.

The common decoder is the Llama architecture (the ``llama3-8b`` flavor's block: pre-norm
RMSNorm, rotary positions, no biases, untied input and output embeddings) with the row's
``layers``, ``hidden``, ``ffn``, ``heads``, ``kv_heads``, ``vocab`` and ``seq_len``: grouped-query
attention from ``kv_heads`` (multi-head when the cell is empty), a gated SwiGLU MLP unless
``ffn`` is 4 × ``hidden`` (the non-gated GELU MLP of GPT-NeoX, Falcon and Phi-2, whose FFN is
4 × hidden; a gated MLP of that width is not published for any of them). What the code knows
of a recognised family is kept: Qwen3's q / k RMSNorm (Hugging Face ``qwen3`` configs,
:mod:`stage_core.models.hf`). Everything else the row cannot say (head dim other than
hidden / heads, Gemma's tied embedding, Qwen2's q / k / v biases, Falcon's parallel block) is
not modelled, and the row's assumption says so.
"""

from __future__ import annotations

import re

#: The flavor whose block the common decoder takes (its dims are all replaced by the row's).
BASE = "llama3-8b"
#: Columns the common decoder needs stated: no family can answer them.
ARCHITECTURE = ("layers", "hidden", "ffn", "heads", "vocab", "seq_len")
#: (pattern on the lower-cased model text, model fields, why): what the code knows of a family
#: beyond the common decoder.
TRAITS: tuple[tuple[str, tuple[tuple[str, int | str], ...], str], ...] = (
    # head_dim 128 at every Qwen3 size, also where hidden / heads is not 128 (0.6B: 1024 / 16,
    # 4B: 2560 / 32, 32B: 5120 / 64): pytorch/torchtitan 0310b491 torchtitan/models/qwen3/
    # __init__.py (_0_6b ... _32b: head_dim = 128), the Hugging Face Qwen3 configs' head_dim
    # (s27 hidden22: was hidden / heads, 80 for the 32B, its attention projections 5120 wide
    # for 8192)
    (r"qwen[\s_-]*3", (("qk_norm", True),),
     "Qwen3's RMSNorm on queries and keys (qk_norm; Hugging Face Qwen3Attention q_norm / "
     "k_norm, read for model_type qwen3 by stage_core/models/hf.py)"),
    # not Qwen3.5 / 3.6 / Qwen3-Next, other architectures of other head dims
    (r"qwen[\s_-]*3(?![.\d])(?![\s_-]*next)", (("head_dim", 128),),
     "Qwen3's head dim 128 at every size (head_dim; torchtitan's qwen3 configs, 0310b491 "
     "torchtitan/models/qwen3/__init__.py)"),
)  # fmt: skip
#: Families named in the assumption when the text names one (a recognised name, not a rule).
NAMED = _NAMED = re.compile(
    r"mistral|qwen[\s_-]*[\d.]*|gemma[\s_-]*\d*|falcon|olmo[\s_-]*\d*|\byi\b|phi[\s_-]*\d*|"
    r"internlm\d*|baichuan\d*|starcoder\d*|stablelm|granite|exaone|minicpm|command[\s_-]*r|"
    r"codellama|tinyllama"
)


#: A head dim the row's text states: ``head_dim 128``, ``head dim = 256``, ``head dimension
#: 128``, Megatron's ``--kv-channels 128`` / ``kv_channels: 128`` (the projection size per
#: attention head, NVIDIA/Megatron-LM ``megatron/training/arguments.py``) (s27 hidden22).
HEAD_DIM = re.compile(
    r"\bhead[_\s-]?dim(?:ension)?s?\s*[:=]?\s*(\d+)\b|\bkv[_\s-]channels\s*[:=]?\s*(\d+)\b",
    re.IGNORECASE,
)
#: The columns a stated head dim is read from.
HEAD_DIM_COLUMNS = ("model", "notes")


class GenericRefused(ValueError):
    """The row cannot be set up as the common decoder; the message says what is missing."""


def _cell(row: dict[str, str], column: str) -> str:
    return row.get(column, "").strip()


def stated_head_dim(row: dict[str, str]) -> tuple[int, str] | None:
    """``(head_dim, assumption)`` the row's model or notes cell states (:data:`HEAD_DIM`), where
    the common decoder would take hidden / heads; None when none is stated; refused when two
    different ones are."""
    found = {
        (column, int(m.group(1) or m.group(2)))
        for column in HEAD_DIM_COLUMNS
        for m in HEAD_DIM.finditer(_cell(row, column))
    }
    values = {v for _, v in found}
    if len(values) > 1 or 0 in values:
        raise GenericRefused(
            f"the row states head dims {', '.join(str(v) for v in sorted(values))}: expected one"
        )
    if not values:
        return None
    column, value = sorted(found)[0]
    return value, f"head dim {value}, as the {column} column states (head_dim)"


def generic_decoder(
    row: dict[str, str], model: str, moe: str
) -> tuple[str, str, tuple[tuple[str, int | str], ...]]:
    """``(base flavor, assumption, model fields)`` of a dense row of an unknown family;
    :class:`GenericRefused` with the missing columns when the row does not state its
    architecture, or when it is a mixture of experts (the routed experts' layout, shared experts
    and dense layers are not in the CSV)."""
    if moe:
        raise GenericRefused(f"the moe column says {moe!r}: a mixture of experts of no known "
                             "family (its expert layout is not in the CSV)")  # fmt: skip
    missing = [c for c in ARCHITECTURE if not _cell(row, c)]
    if missing:
        raise GenericRefused(
            f"the CSV does not state {', '.join(missing)} (the common decoder needs "
            f"{', '.join(ARCHITECTURE)})"
        )
    kv = _cell(row, "kv_heads")
    if kv and not kv.isdigit():
        raise GenericRefused(f"kv_heads {kv!r} is not a number of key / value heads")
    text = model.lower().replace("_", " ")
    fields: list[tuple[str, int | str]] = []
    notes = []
    if not kv:
        fields.append(("kv_heads", int(_cell(row, "heads"))))
        notes.append("multi-head attention (kv_heads empty: as many key / value heads as heads)")
    else:
        notes.append(f"grouped-query attention with {kv} key / value heads (kv_heads)")
    if int(_cell(row, "ffn")) == 4 * int(_cell(row, "hidden")):
        fields.append(("activation", "gelu"))
        notes.append("a non-gated GELU MLP (ffn = 4 × hidden, as GPT-NeoX, Falcon and Phi-2)")
    else:
        notes.append("a gated SwiGLU MLP (ffn is not 4 × hidden)")
    known = False
    for pattern, traits, why in TRAITS:
        if re.search(pattern, text):
            fields += traits
            notes.append(why)
            known = True
    stated = stated_head_dim(row)
    if stated is not None:
        fields = [f for f in fields if f[0] != "head_dim"] + [("head_dim", stated[0])]
        notes.append(stated[1])
    named = _NAMED.search(text)
    family = "no known family named"
    if named:
        family = f"family {named.group(0)!r} " + (
            "known, with no flavor of this size" if known else "not known"
        )
    assumption = (
        f"Llama-style decoder from the architecture columns ({family}; the model column says "
        f"{model!r}): pre-norm RMSNorm, rotary positions, no biases, untied embeddings "
        f"(flavor {BASE}'s block), {', '.join(notes)}; "
        + ("" if any(k == "head_dim" for k, _ in fields) else "head dim hidden / heads; ")
        + "a family's own differences the CSV cannot state (another head dim, tied embeddings, "
        "q/k/v biases, a parallel attention / MLP block, sliding-window layers) are not modelled"
    )
    return BASE, assumption, tuple(fields)
