"""The dims a known family's base flavor may answer for a model of another size (6 Dec 2026,
s27 spellings2).

A row naming a family the inference knows (Llama 2, Llama 3, GPT, Nemotron-4) at a size none
of its flavors has is set up as the family's base flavor with the row's dims
(:func:`~stage_explore.validation.infer_fields.infer_model`). The base's norm, activation,
position and vocabulary are the family's; its FFN width and key / value heads are its own
size's, not the family's, and a row leaving them empty took them silently: ``Llama 2 34B``
with 48 layers, hidden 8192 and 64 heads was timed with Llama 2 7B's FFN of 11008 (22016 in
the model) and 64 key / value heads (8 in the model); ``GPT 40B`` with hidden 8192 with
GPT-3 175B's FFN of 49152 (6 × hidden). :func:`base_size_dims` fills them only where the
family fixes them, and refuses the row naming the column otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from stage_core.models import get_flavor
from stage_core.models.spec import Activation
from stage_explore.validation.infer_errors import Uninferable

#: A non-gated family's FFN width per hidden: Megatron-LM's ``ffn_hidden_size`` default
#: (``megatron/training/arguments.py``: ``if args.ffn_hidden_size is None:
#: args.ffn_hidden_size = 4 * args.hidden_size``), every GPT / Nemotron-4 flavor's ratio.
NON_GATED_FFN_PER_HIDDEN = 4


def _kv_layout(flavor: str) -> str:
    """``"multi-head"`` or the number of key / value heads of a flavor."""
    spec = get_flavor(flavor)
    return "multi-head" if spec.kv_heads in (0, spec.heads) else str(spec.kv_heads)


def base_size_dims(
    row: dict[str, str], model: str, base: str, family: Sequence[str]
) -> tuple[tuple[tuple[str, int], ...], str]:
    """``(model fields, assumption)`` for the FFN width and key / value heads a dense row of
    no flavor's size leaves empty, set up as ``base`` of a family whose flavors are ``family``:
    a non-gated base whose FFN is 4 × hidden gives 4 × the row's hidden (the family's rule); a
    gated one (SwiGLU: Llama's width is rounded from 8/3 × hidden times a per-size multiplier)
    gives nothing, and the row is :class:`Uninferable` naming ``ffn``. Empty ``kv_heads`` keeps
    the base's layout (no assumption added: the base's, as before) only when every flavor of the
    family has it (all Llama 3 sizes 8 key / value heads, every GPT multi-head), else
    :class:`Uninferable` naming ``kv_heads`` (Llama 2: 7B / 13B multi-head, 70B 8)."""
    spec = get_flavor(base)
    fields: list[tuple[str, int]] = []
    notes = []
    if not row.get("ffn", "").strip():
        rule = spec.ffn == NON_GATED_FFN_PER_HIDDEN * spec.hidden
        if spec.activation == Activation.SWIGLU or not rule:
            raise Uninferable(
                f"model {model!r}: no flavor of that size, and the CSV does not state ffn "
                f"(flavor {base}'s {spec.activation} FFN width is its own size's, not a fixed "
                "multiple of hidden)"
            )
        fields.append(("ffn_per_hidden", NON_GATED_FFN_PER_HIDDEN))
        notes.append(
            f"ffn {NON_GATED_FFN_PER_HIDDEN} × hidden (column empty: the family's "
            f"non-gated {spec.activation} MLP, Megatron-LM's ffn_hidden_size default)"
        )
    if not row.get("kv_heads", "").strip():
        layouts = sorted({_kv_layout(f) for f in (base, *family)})
        if len(layouts) > 1:
            raise Uninferable(
                f"model {model!r}: no flavor of that size, and the CSV does not state kv_heads "
                f"(the family's flavors differ: {' / '.join(layouts)} key / value heads)"
            )
    return tuple(fields), "; ".join(notes)
