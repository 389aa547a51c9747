"""How the cells of a published-runs row read when a person typed them as a table printed
them: integer columns with a remark (``8 (assumed)``) or a footnote mark (``8*``), sequence
lengths and vocabularies in thousands (``8K``, ``128K``), measured cells with their column's unit
(``1.2 s``, ``850 ms``, ``14.1k``) and the reasons a measured cell in another unit is refused
(per node, the job's total, PFLOP/s, minutes). Moved out of :mod:`~stage_explore.validation.infer`
(s18 split6), which reads a row through :func:`spelled_cells` and :func:`other_unit`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from stage_explore.validation.csv_cells import (
    DEGREE_COLUMNS,
    LAYOUT_COLUMNS,
    STRICT_DIM_COLUMNS,
)
from stage_explore.validation.infer_axis_words import RemarkError, axis_words
from stage_explore.validation.infer_cells import read_sharding, read_sp
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_layout_cells import layout_lists
from stage_explore.validation.infer_recompute import read_recompute

#: Cells that must be integers when stated (a row's layout, its GPUs and dims; ``ffn`` and
#: ``kv_heads`` may be text such as ``1536 per expert`` or ``MLA``, which the flavor answers).
INTEGER_COLUMNS = (*LAYOUT_COLUMNS, "num_gpus", *STRICT_DIM_COLUMNS)

#: Model columns whose text the flavor answers (pattern on the cell): an MoE row's ``ffn`` of
#: ``1536 per expert``, DeepSeek-V3's ``kv_heads`` of ``MLA``. Other text there was dropped
#: silently for the flavor's value (s18 csvrobust: ``MHA`` on a grouped-query flavor).
TEXT_ALLOWED = {"ffn": r"expert", "kv_heads": r"\bmla\b"}
TEXT_ALLOWED_SAID = {"ffn": "an MoE row's '… per expert'", "kv_heads": "'MLA'"}


#: An integer cell with a remark: ``8 (assumed)``.
_REMARKED = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)\s*\((.*)\)")
#: A number with a table's footnote mark after it: ``8*``, ``1,533†`` (not ``~``: approximate).
_FOOTNOTE = re.compile(r"(\d[\d,.]*)\s*[*†‡§¶]+")
#: A sequence length in thousands of tokens as tables print it: ``8K`` = 8,192.
_SEQ_K = re.compile(r"(\d+)\s*[kK]")
#: "per GPU" after a rate's unit: ``/GPU``, ``per GPU`` (``tokens/GPU/s``: its own pattern).
_PER_GPU = r"\s*(?:/|per)\s*gpu"
#: A measured cell with its column's unit (or a thousands ``k`` on a rate): the unit, its
#: factor to the column's unit. A rate's unit must say per GPU (``14,451 tokens/s/GPU``,
#: ``TPS/GPU``): ``tokens/s`` alone may be the job's total (s18 csvrobust: ``98,112
#: tokens/s`` was read as per GPU), and is a reason (:data:`MEASURED_OTHER`), as per node is;
#: ``peak_mem_gib`` of ``70 GB`` stays a reason (GB or GiB?).
MEASURED_UNITS: dict[str, tuple[tuple[str, float], ...]] = {
    "iter_time_s": ((r"(?:s|sec|secs|seconds?)(?:\s*(?:/|per)\s*(?:step|iter(?:ation)?))?",
                     1.0), (r"ms(?:\s*(?:/|per)\s*(?:step|iter(?:ation)?))?", 1e-3)),
    "tokens_per_s_per_gpu": ((rf"(?:tokens?|tok)\s*(?:/|per)\s*s(?:ec(?:ond)?)?{_PER_GPU}", 1.0),
                             (r"(?:tokens?|tok)\s*/\s*(?:gpu|device)\s*/\s*s(?:ec)?", 1.0),
                             (rf"tps{_PER_GPU}", 1.0), (r"k", 1e3)),
    "tflops_per_gpu": ((rf"(?:tflop/?s|tflops)(?:{_PER_GPU})?", 1.0),),
    "peak_mem_gib": ((r"gib", 1.0),),
}  # fmt: skip
#: Units a measured cell may carry that are not its column's, each the reason the row names
#: (on the number's unit: the words after it, lower-cased).
MEASURED_OTHER: dict[str, tuple[tuple[str, str], ...]] = {
    "tokens_per_s_per_gpu": (
        (r"(?:per|/)\s*(?:node|host|server)", "a rate per node (divide by its GPUs per node)"),
        (r"(?:total|cluster|aggregate|global)", "the job's total rate (divide by num_gpus)"),
        (r"(?:tokens?|tok|tps)\b(?:\s*/\s*s(?:ec)?)?", "a rate that does not say per GPU "
         "(per GPU, per node or the job's total?); write tokens/s/GPU or the number alone"),
    ),
    "tflops_per_gpu": ((r"pflop", "PFLOP/s (write TFLOP/s per GPU)"),
                       (r".*(?:per|/)\s*(?:node|host)|.*total", "not per GPU")),
    "iter_time_s": ((r"min", "minutes (write seconds)"),),
}  # fmt: skip
_MEASURED = re.compile(r"(\d+(?:\.\d+)?)\s*(\S.*)")
#: A vocabulary in thousands of tokens as model cards print it: ``128K`` (Llama 3's 128,256),
#: ``32K`` (Llama 2's 32,000), ``152K`` (Qwen's 151,936), ``256K`` (Gemma's 256,000).
_VOCAB_K = re.compile(r"(\d+(?:\.\d+)?)\s*[kK]")
#: A layout cell naming its own axis, as tables print a layout: ``TP=8``, ``TP 8``, ``tp8`` in the
#: tp column, ``VP=5`` in vpp (column → the names it may carry). Another axis's name (``PP=4`` in
#: tp) is not read: the cell stays not an integer and the row is refused.
AXIS_NAMES: dict[str, tuple[str, ...]] = {column: (column,) for column in DEGREE_COLUMNS} | {
    "vpp": ("vpp", "vp")
}


#: Integer cells with their column's own unit after the number (6 Dec 2026, s24 spellings: were
#: refused as not integers): ``64 GPUs``, ``8192 tokens`` / ``8K tokens``, ``512 sequences``.
COLUMN_UNITS = {
    "num_gpus": r"gpus?|accelerators?",
    "seq_len": r"tokens?",
    "global_batch_seqs": r"seq(?:uence)?s?|samples?",
    # the column's own meaning said (s29 readers2): "2 per GPU", "4 sequences / GPU"
    "micro_batch": r"(?:(?:seq(?:uence)?s?|samples?)\s*)?(?:/|per)\s*(?:gpu|device)",
}
#: :data:`COLUMN_UNITS` as patterns: a number (``8K`` too) followed by its column's unit.
_UNITED = {
    column: re.compile(rf"(\d[\d,]*(?:\s*[kK])?)\s*(?:{words})", re.IGNORECASE)
    for column, words in COLUMN_UNITS.items()
}
#: :data:`AXIS_NAMES` as patterns: an axis named with its degree (``TP=8``, ``vp 5``).
_NAMED = {
    column: re.compile(rf"(?:{'|'.join(names)})\s*[=:]?\s*(\d+)", re.IGNORECASE)
    for column, names in AXIS_NAMES.items()
}


def spelled_cells(
    row: dict[str, str], *, strict: bool = False
) -> tuple[dict[str, str], list[str]]:
    """``row`` with the cells written another way read into the schema's form, and the
    assumptions that say so: a number with its column's own unit (:data:`COLUMN_UNITS`:
    ``64 GPUs``) as the number, a layout cell naming its own axis (``TP=8``, :data:`AXIS_NAMES`)
    as its degree, a number with a footnote mark (``8*``) as the number, an integer
    column holding ``N (remark)`` as ``N``, a ``seq_len``
    of ``8K`` as 8,192 tokens (a power-of-two thousand, as model configs give it), a ``vocab``
    of ``128K`` as 128,000 tokens, a measured cell with its column's unit
    (:data:`MEASURED_UNITS`: ``1.2 s``, ``850 ms``, ``14.1k`` tokens/s), a ``recompute`` cell
    by :func:`~stage_explore.validation.infer_recompute.read_recompute`, ``dp_sharding`` and ``sp``
    by :mod:`~stage_explore.validation.infer_cells`; a layout cell naming several axes
    (``TP=2, PP=4``) by :func:`~stage_explore.validation.infer_layout_cells.layout_lists`
    (``strict``: an ambiguous one is Uninferable, else left as written)."""
    out, notes = layout_lists(row, strict)
    try:  # ``tensor model parallel size 8``, ``4 (interleaved, vpp 5)`` (s32 readers7)
        out, worded = axis_words(out)
    except RemarkError as error:
        if strict:
            raise Uninferable(str(error)) from None
        worded = []
    notes += worded
    _keep_number(out, notes, _UNITED.items(), "the column's own unit")
    marked = [(column, _FOOTNOTE) for column in (*INTEGER_COLUMNS, *MEASURED_UNITS)]
    _keep_number(out, notes, marked, "a footnote mark")
    _keep_number(out, notes, _NAMED.items(), "the degree with its own axis named")
    remarked = [(column, _REMARKED) for column in (*INTEGER_COLUMNS, *TEXT_ALLOWED)]
    _keep_number(out, notes, remarked, "")
    seq = _SEQ_K.fullmatch(out.get("seq_len", "").strip())
    if seq:
        out["seq_len"] = str(int(seq.group(1)) * 1024)
        notes.append(
            f"seq_len {out['seq_len']} tokens (the seq_len column says {seq.group(0)!r}: "
            "thousands of tokens read as 1,024 each)"
        )
    for column, units in MEASURED_UNITS.items():
        cell = out.get(column, "").strip()
        found = _MEASURED.fullmatch(cell.replace(",", ""))
        unit = next((f for u, f in units if found and re.fullmatch(u, found.group(2), re.I)), None)
        if found and unit is not None:
            out[column] = f"{float(found.group(1)) * unit:g}"
            notes.append(f"{column} {out[column]} (the {column} column says {cell!r})")
    vocab = _VOCAB_K.fullmatch(out.get("vocab", "").strip())
    if vocab:
        out["vocab"] = str(round(float(vocab.group(1)) * 1000))
        notes.append(
            f"vocab {out['vocab']} tokens (the vocab column says {vocab.group(0)!r}: thousands "
            "of tokens read as 1,000 each, as vocabularies are rounded: Llama 3's 128,256 is "
            "'128K'; the logits GEMM is within the rounding)"
        )
    readers = (("recompute", read_recompute), ("dp_sharding", read_sharding), ("sp", read_sp))
    for column, read in readers:
        out[column], spelled = read(out.get(column, ""))
        notes += [spelled] if spelled else []
    return out, notes


def _keep_number(
    out: dict[str, str],
    notes: list[str],
    patterns: Iterable[tuple[str, re.Pattern[str]]],
    said: str,
) -> None:
    """Each ``(column, pattern)``: a cell of ``out`` that ``pattern`` matches whole becomes the
    match's first group (the number), with a note quoting the cell and, when given, what the
    rest of it was (``said``: ``"a footnote mark"``)."""
    for column, pattern in patterns:
        cell = out.get(column, "").strip()
        match = pattern.fullmatch(cell)
        if match:
            out[column] = match.group(1)
            rest = f": {said}" if said else ""
            notes.append(f"{column} {match.group(1)} (the {column} column says {cell!r}{rest})")


def other_unit(row: dict[str, str], metric: str) -> str:
    """The reason a ``metric`` cell that :func:`spelled_cells` left as written is not read,
    when its unit is another than the column's (:data:`MEASURED_OTHER`: ``12,264
    tokens/s/node``, ``98,112 tokens/s``, ``0.74 PFLOP/s``), naming the cell; else ""."""
    cell = row.get(metric, "").strip()
    found = _MEASURED.fullmatch(cell.replace(",", ""))
    if found is None:
        return ""
    unit = found.group(2).lower()
    for pattern, what in MEASURED_OTHER.get(metric, ()):
        if re.search(pattern, unit):
            return f"the {metric} cell {cell!r} is {what}: the column is per GPU" if (
                metric != "iter_time_s") else f"the {metric} cell {cell!r} is in {what}"
    return ""
