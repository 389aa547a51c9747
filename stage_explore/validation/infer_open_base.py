"""The record of one published size of a common open model (:class:`OpenModel`) and the helper
that lists a config's dims as model fields, shared by the open-model tables
(:mod:`~stage_explore.validation.infer_open_models`, :mod:`~stage_explore.validation.
infer_open_more`)."""

from __future__ import annotations

from dataclasses import dataclass

Field = tuple[str, int | str | bool]


@dataclass(frozen=True, slots=True)
class OpenModel:
    """One published size of a family: its name, the billions its name states (``size``) or a
    word naming it (``alias``, matched on the lower-cased model text), an optional further
    pattern the text must hold (``version``), its model fields and where they are published."""

    name: str
    size: float | None
    fields: tuple[Field, ...]
    where: str
    alias: str = ""
    version: str = ""
    #: What the entry's architecture has that the common decoder does not time.
    unmodelled: str = ""


def dims(
    layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int | None = None
) -> tuple[Field, ...]:
    """The six dims of a config as model fields (``vocab`` None: not published with it)."""
    fields: list[Field] = [
        ("layers", layers), ("hidden", hidden), ("ffn", ffn), ("heads", heads),
        ("kv_heads", kv_heads),
    ]  # fmt: skip
    return tuple(fields + ([("vocab", vocab)] if vocab is not None else []))
