"""Layout and batch cells that name their own axis in words, as papers' and launchers' tables
print a layout (7 Dec 2026, s32 readers7: ``benchmarks/system_phrasings.py``; each was refused
as not an integer): ``tensor model parallel size 8`` / ``8-way tensor parallel`` /
``--tensor-model-parallel-size 8`` in ``tp`` (Megatron-LM's argument names,
megatron/training/arguments.py), ``4-way pipeline`` in ``pp``, ``context parallel 2`` in
``cp``, ``expert parallel 64`` in ``ep``, ``virtual pipeline 5`` in ``vpp``, ``micro batch 1`` /
``mbs=1`` in ``micro_batch``, ``global batch 1536`` / ``gbs=1536`` and ``1536 sequences of
4096`` / ``1536 x 4096 tokens`` (when 4096 is the row's ``seq_len``) in ``global_batch_seqs``.

Only the column's own axis is read: another axis's words (``pipeline parallel 4`` in ``tp``), a
count of layers (``num_layers_per_virtual_pipeline_stage 2`` in ``vpp``) or an interleaving
without its count (``2-way pipeline with 1F1B interleaving``) leave the cell as written, refused
in one line as not an integer (:func:`stage_explore.validation.infer._checked`)."""

from __future__ import annotations

import re

_SEP = r"[-_\s]?"
_PAR = rf"(?:{_SEP}model)?{_SEP}parallel(?:ism)?"
#: Column → the words that name its axis in full (``… size`` / ``degree`` optional after them).
_NAMES = {
    "tp": rf"tensor{_PAR}|tp{_SEP}size",
    "pp": rf"pipeline{_PAR}|pp{_SEP}size",
    "dp": rf"data{_PAR}|dp{_SEP}size",
    "cp": rf"context{_PAR}|cp{_SEP}size",
    "ep": rf"expert{_PAR}|ep{_SEP}size",
    "vpp": rf"virtual{_SEP}pipeline(?:{_PAR})?|vpp{_SEP}size",
    "micro_batch": rf"micro{_SEP}batch|mbs",
    "global_batch_seqs": rf"global{_SEP}batch|gbs",
}
#: Column → the first word of its ``N-way …`` form (``8-way tensor parallel``, ``4-way TP``).
_WAY = {"tp": r"tensor|tp", "pp": r"pipeline|pp", "dp": r"data|dp", "cp": r"context|cp",
        "ep": r"expert|ep"}  # fmt: skip
_SIZE = rf"(?:{_SEP}(?:size|degree))?"
#: ``1536 sequences of 4096 (tokens)``, ``1536 x 4096 tokens``: the sequences and their length.
_SEQS_OF = re.compile(
    r"(\d[\d,]*)\s*(?:(?:seq(?:uence)?s?|samples?)\s*(?:of|x|×)|x|×)\s*(\d[\d,]*)\s*(?:tokens?)?",
    re.IGNORECASE,
)


def _named(column: str, cell: str) -> str | None:
    """The degree a ``column`` cell states with its own axis in words, else None."""
    named = re.fullmatch(
        rf"(?:--)?(?:{_NAMES[column]}){_SIZE}\s*[=:]?\s*(\d+)", cell, re.IGNORECASE
    )
    if named:
        return named.group(1)
    if column in _WAY:
        way = re.fullmatch(
            rf"(\d+)[-\s]?way\s+(?:{_WAY[column]})(?:{_SEP}(?:model{_SEP})?parallel(?:ism)?)?",
            cell, re.IGNORECASE,
        )  # fmt: skip
        if way:
            return way.group(1)
    return None


def axis_words(row: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``row`` with each layout / batch cell that names its own axis in words read as the
    number (module docstring), and the assumptions that say so."""
    out, notes = dict(row), []
    for column in _NAMES:
        cell = out.get(column, "").strip()
        value = _named(column, cell) if cell else None
        if value is None and column == "global_batch_seqs" and cell:
            seqs = _SEQS_OF.fullmatch(cell)
            length = out.get("seq_len", "").replace(",", "").strip()
            if seqs and seqs.group(2).replace(",", "") == length:
                value = seqs.group(1).replace(",", "")
        if value is not None:
            out[column] = value
            notes.append(f"{column} {value} (the {column} column says {cell!r}: its own axis "
                         "named in words)")  # fmt: skip
    return out, notes


#: A gradient accumulation a batch cell's remark states: ``1 (gradient accumulation 16)``,
#: ``GA 16``, ``grad accum 16``, ``16 accumulation steps``.
_ACCUMULATION = re.compile(
    r"(?:gradient[-_\s]?accumulation(?:[-_\s]?steps)?|grad[-_\s]?accum\w*|\bGA)\s*[=:]?\s*(\d+)"
    r"|(\d+)\s*(?:gradient\s+)?accumulation\s+steps",
    re.IGNORECASE,
)


def accumulation_reason(row: dict[str, str], global_batch: int, micro_batch: int, dp: int) -> str:
    """The one-line reason a row whose ``micro_batch`` or ``global_batch_seqs`` cell states a
    gradient accumulation other than global batch / (micro batch x dp) is not evaluated (its
    remark was dropped: ``1 (gradient accumulation 16)`` read micro batch 1 whatever the
    accumulation said); "" when none is stated or it agrees."""
    for column in ("micro_batch", "global_batch_seqs"):
        found = _ACCUMULATION.search(row.get(column, ""))
        if found is None:
            continue
        stated = int(found.group(1) or found.group(2))
        if stated * micro_batch * dp != global_batch:
            return (
                f"the {column} cell {row[column].strip()!r} states gradient accumulation "
                f"{stated}, but global batch {global_batch} / (micro batch {micro_batch} x dp "
                f"{dp}) = {global_batch / (micro_batch * dp):g}: one of them is not the run's"
            )
    return ""
