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
#: Column → the words that name its axis (``… size`` / ``degree`` optional after them; the short
#: names too, so that ``CP 2 (ring attention)`` reads with its remark).
_NAMES = {
    "tp": rf"tensor{_PAR}|tp",
    "pp": rf"pipeline{_PAR}|pp",
    "dp": rf"data{_PAR}|dp",
    "cp": rf"context{_PAR}|cp",
    "ep": rf"expert{_PAR}|ep",
    "vpp": rf"virtual{_SEP}pipeline(?:{_PAR})?|vpp?",
    "micro_batch": rf"micro{_SEP}batch|mbs",
    "global_batch_seqs": rf"global{_SEP}batch|gbs",
}
#: Column → its short names, which :mod:`~stage_explore.validation.infer_spelling` reads alone.
_SHORT = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "vpp": "vpp|vp"}
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


#: A remark that names pipeline interleaving, with its virtual stages when it states them
#: (``interleaved, vpp 5``, ``5 virtual stages``, ``VP=5``, ``5 model chunks``).
_INTERLEAVED = re.compile(r"interleav|virtual|\bvpp?\b|chunks?", re.IGNORECASE)
_CHUNKS = re.compile(
    r"\bvpp?\s*[=:]?\s*(\d+)|(\d+)\s*(?:virtual|(?:model\s+)?chunks)"
    r"|virtual\s+(?:pipeline\s+)?(?:size|stages?)?\s*[=:]?\s*(\d+)",
    re.IGNORECASE,
)
#: A remark on the cp cell naming all-to-all context parallelism (DeepSpeed-Ulysses, Megatron's
#: ``cp_comm_type a2a``), which the model does not have (all-gather or ring only).
_CP_A2A = re.compile(r"ulysses|all[-\s]?to[-\s]?all|\ba2a\b", re.IGNORECASE)
#: A remark on the dp cell naming how the data-parallel ranks shard (``16 (ZeRO-1)``), read as
#: the ``dp_sharding`` cell when that is empty (its remark was dropped: ZeRO-1 ran as none).
_SHARDED = re.compile(r"zero|fsdp|shard|hsdp|distributed\s+optimi", re.IGNORECASE)
#: A number with a remark after it, or an axis form with one (``4 (interleaved, vpp 5)``).
_WITH_REMARK = re.compile(r"(.*?\S)\s*\((.*)\)")


class RemarkError(ValueError):
    """A layout cell's remark that contradicts or goes beyond what the row's columns say; the
    message is the row's one-line reason (raised only when the caller is strict)."""


def _remark(out: dict[str, str], column: str, cell: str, remark: str) -> list[str]:
    """Check (and where it states one, read) what a layout cell's remark says of pipeline
    interleaving (the pp cell) or the context-parallel style (the cp cell); the notes."""
    if column == "cp" and _CP_A2A.search(remark):
        raise RemarkError(
            f"the cp cell {cell!r} names all-to-all context parallelism (Ulysses / "
            "cp_comm_type a2a), which is not modelled (expected all-gather or ring / p2p)"
        )
    if column == "dp" and _SHARDED.search(remark) and not out.get("dp_sharding", "").strip():
        out["dp_sharding"] = remark
        return [f"dp_sharding {remark!r} (dp_sharding empty; the dp cell says {cell!r})"]
    if column != "pp" or not _INTERLEAVED.search(remark):
        return []
    found = _CHUNKS.search(remark)
    stated = out.get("vpp", "").strip()
    if found is None:
        if stated in ("", "1", "-"):
            raise RemarkError(
                f"the pp cell {cell!r} names interleaving but the row states no virtual "
                "stages (expected the vpp column)"
            )
        return []
    chunks = next(g for g in found.groups() if g)
    if stated in ("", "-"):
        out["vpp"] = chunks
        return [f"vpp {chunks} (the pp cell says {cell!r})"]
    if stated != chunks:
        raise RemarkError(
            f"the pp cell {cell!r} names {chunks} virtual stages but the vpp column says "
            f"{stated!r}: expected one count"
        )
    return []


def axis_words(row: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``row`` with each layout / batch cell that names its own axis in words read as the
    number (module docstring), a pp cell's remark of interleaving read into ``vpp`` (or refused
    when it states no count or another one), a dp cell's remark of sharding into an empty
    ``dp_sharding``, a cp cell's remark of all-to-all refused
    (:class:`RemarkError`), and the assumptions that say so."""
    out, notes = dict(row), []
    for column in _NAMES:
        cell = out.get(column, "").strip()
        remarked = _WITH_REMARK.fullmatch(cell)
        head, remark = (remarked.group(1), remarked.group(2)) if remarked else (cell, "")
        if remark and re.fullmatch(r"\d+", head):
            notes += _remark(out, column, cell, remark)
            continue  # ``8 (remark)``: the number is read as before (infer_spelling)
        if not remark and re.fullmatch(rf"(?:{_SHORT.get(column, '-')})\s*[=:]?\s*\d+", cell, re.I):
            continue  # ``TP=8``: read by infer_spelling's AXIS_NAMES, its note as before
        value = _named(column, head) if head else None
        if value is None and column == "global_batch_seqs" and cell:
            seqs = _SEQS_OF.fullmatch(cell)
            length = out.get("seq_len", "").replace(",", "").strip()
            if seqs and seqs.group(2).replace(",", "") == length:
                value = seqs.group(1).replace(",", "")
        if value is not None:
            notes += _remark(out, column, cell, remark) if remark else []
            out[column] = value
            notes.append(f"{column} {value} (the {column} column says {cell!r}: its own axis "
                         "named)")  # fmt: skip
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
