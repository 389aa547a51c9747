"""Sparse rows, as a paper's table gives them (6 Dec 2026, s27 spellings2): what the inferred
reader makes of a global batch stated in tokens, of an MoE row's empty expert-parallel cell, of
notes that deny counting recompute FLOPs (:data:`NO_RECOMPUTE_FLOPS`), and of DeepSpeed named
with pipeline stages.

- A global batch in tokens (``global_batch_seqs`` of ``1,048,576 tokens``, or the cell empty
  and the ``notes`` saying ``global batch of 1,048,576 tokens``) was refused, or read as
  missing; it is the sequences per step times the sequence length, so it is read as
  tokens ÷ ``seq_len`` when that divides exactly (:func:`batch_in_tokens`). A count rounded
  to thousands or millions (``4M tokens``: Llama 2's 4,194,304 or 4,000,000?) is refused naming
  the cell: its rounding decides the sequences.
- An MoE row with ``ep`` empty is run with expert parallel size 1 (Megatron-Core's
  ``--expert-model-parallel-size`` default), silently before; now stated
  (:func:`empty_ep_note`).
- A row whose text names DeepSpeed and ZeRO-2 or ZeRO-3 (``DeepSpeed ZeRO-3`` in ``source``)
  with ``pp`` above 1 was set up as both; DeepSpeed cannot run it
  (:func:`deepspeed_pipeline_zero`). A bare ``ZeRO-3`` with no framework named still reads as
  DeepSpeed (s24), and is not refused: its framework is a guess.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_errors import Uninferable

#: Notes that deny counting the recompute's FLOPs (``without recompute FLOPs``, ``excluding
#: activation recomputation FLOPs``): model FLOPs, not the "recompute flop" they contain (such
#: a TFLOP/s row was read as counted with recompute; ``infer._flops``).
NO_RECOMPUTE_FLOPS = re.compile(
    r"\b(?:without|excluding|excludes?|not\s+counting|no|w/o)\s+(?:the\s+)?(?:activation\s+)?"
    r"(?:recomput\w*|rematerializ\w*)\s+(?:t?flop)"
)
#: Tokens in the ``global_batch_seqs`` cell: an exact count (``1,048,576 tokens``,
#: ``1048576 tok``), or a rounded one (``4M tokens``, ``1.5k tokens``) to refuse.
_CELL_TOKENS = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*([kKmM])?\s*(?:tokens?|tok)", re.IGNORECASE)
#: A global batch in tokens in the ``notes``: ``global batch of 1,048,576 tokens``, ``batch
#: size = 4194304 tokens``, ``GBS: 2M tokens``.
_NOTES_TOKENS = re.compile(
    r"(?:global[\s_-]*batch(?:[\s_-]*size)?|batch[\s_-]*size|\bgbs)\s*(?:of|=|:)?\s*"
    r"(\d[\d,]*(?:\.\d+)?)\s*([kKmM])?\s*(?:tokens?|tok)\b",
    re.IGNORECASE,
)


def _sequences(count: str, rounded: str | None, seq_len: str, said: str) -> int:
    """The sequences of a global batch of ``count`` tokens (``rounded``: its K / M suffix) of
    ``seq_len`` each; Uninferable naming ``said`` when the count is rounded, ``seq_len`` is not
    stated, or it does not divide."""
    if rounded:
        unit = "thousands" if rounded in "kK" else "millions"
        raise Uninferable(
            f"{said}: a global batch in tokens rounded to {unit} (which count, so how many "
            "sequences?); write the sequences per step"
        )
    if "." in count:
        raise Uninferable(f"{said}: not a whole number of tokens")
    if not seq_len.isdigit():
        raise Uninferable(f"{said}: a global batch in tokens, but seq_len is not stated")
    tokens, length = int(count.replace(",", "")), int(seq_len)
    if tokens % length:
        raise Uninferable(
            f"{said}: {tokens} tokens is not a whole number of sequences of seq_len {length}"
        )
    return tokens // length


def batch_in_tokens(row: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``row`` with a global batch stated in tokens (the ``global_batch_seqs`` cell, or, when it
    is empty, the ``notes``) read as sequences (tokens ÷ ``seq_len``), and the assumption that
    says so; the row unchanged when neither states one. Uninferable naming the cell when the
    count is rounded or does not divide."""
    cell = row.get("global_batch_seqs", "").strip()
    seq_len = row.get("seq_len", "").strip()
    found = _CELL_TOKENS.fullmatch(cell)
    if found is not None:
        said = f"the global_batch_seqs cell {cell!r}"
    elif not cell:
        stated = {(m.group(1), m.group(2)) for m in _NOTES_TOKENS.finditer(row.get("notes", ""))}
        if len(stated) != 1:
            return row, []
        found = _NOTES_TOKENS.search(row.get("notes", ""))
        assert found is not None
        said = f"global_batch_seqs empty; the notes say {found.group(0)!r}"
    else:
        return row, []
    seqs = _sequences(found.group(1), found.group(2), seq_len, said)
    note = f"global batch {seqs} sequences ({said}: tokens ÷ seq_len {seq_len})"
    return {**row, "global_batch_seqs": str(seqs)}, [note]


def empty_ep_note(moe: bool, stated: dict[str, int], parallel: dict[str, object]) -> str:
    """The assumption of an MoE row whose ``ep`` is empty and that no recipe default sets:
    expert parallel size 1, Megatron-Core's ``--expert-model-parallel-size`` default; "" for a
    dense row or a stated / defaulted ``ep``."""
    if not moe or "ep" in stated or "ep" in parallel:
        return ""
    return (
        "expert parallel size 1 (ep column empty: Megatron-Core's --expert-model-parallel-size "
        "default; every rank holds all of its stage's experts)"
    )


def deepspeed_pipeline_zero(framework: str, zero: int, pp: int) -> str:
    """The reason a DeepSpeed row with ZeRO-2 / ZeRO-3 and pipeline stages is not set up (""
    otherwise): DeepSpeed's PipelineEngine refuses it (deepspeedai/DeepSpeed 03f6f75c
    ``deepspeed/runtime/pipe/engine.py``, ``PipelineEngine.__init__``: ``assert
    self.zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are
    incompatible with pipeline parallelism"``), so one of the two cells is not the run's."""
    if framework != "deepspeed" or zero < 2 or pp <= 1:
        return ""
    return (
        f"DeepSpeed with ZeRO-{zero} and pp {pp}: DeepSpeed's PipelineEngine refuses ZeRO-2 and "
        "ZeRO-3 with pipeline parallelism (deepspeed/runtime/pipe/engine.py), so the ZeRO stage "
        "or pp is not the run's"
    )
