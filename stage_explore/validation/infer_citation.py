"""A paper cited for its FLOP count names no training code (7 Dec 2026, s34 rowsF).

The framework rule for Megatron-LM's 2021-22 papers (:data:`stage_explore.validation.
infer_fields.FRAMEWORK_RULES`: "Narayanan", "Korthikanti", "SC'21", their arXiv numbers) reads
a row whose text cites them as a run of that code: the papers' own tables are (their rows'
``source`` names them). Sources of other frameworks cite the same papers for the FLOP count
behind a TFLOP/s or MFU column: InternLM's training-performance page says "The computational
workload of model training is based on the FLOPS calculation method described in the Megatron
paper" (InternLM/InternLM 20fe5ac2 ``doc/en/train_performance.md``, 'FLOPS Testing'); AMSP
computes its MFU with Megatron-LM's model FLOPs (arXiv 2311.00257, footnote 2, as the
``AMSP-A800-*`` rows record it). Such a citation was read as
the framework: the InternLM rows became ``megatron-lm-2021`` runs (local DDP without the
distributed optimizer, unfused attention) through their notes' "Megatron's formula (Narayanan
et al.)".

:func:`flop_citation` tells the two apart by the clause before the citation: when it names a
formula, FLOPs, TFLOP/s, MFU / HFU or utilization, the citation is the count's, not the code's.
Words after the citation are not read: a table caption following the papers' own names
("Narayanan et al. SC'21, Table 1 (achieved TFLOP/s)") is their run's.
"""

from __future__ import annotations

import re

#: Words of a FLOP count.
FLOP_COUNT = re.compile(
    r"\b(?:formula|equation|eq\.|t?flop(?:s|/s)?|[mh]fu|utili[sz]ation)(?![a-z])", re.IGNORECASE
)
#: How far before a citation its clause is read (characters).
CLAUSE_CHARS = 80


def flop_citation(cell: str, start: int) -> bool:
    """Whether the citation at ``start`` in ``cell`` is cited for a FLOP count: the clause before
    it (back to a ``;`` or a sentence's end, at most :data:`CLAUSE_CHARS` characters) names one
    (:data:`FLOP_COUNT`)."""
    if start < 0 or start > len(cell):
        raise ValueError(f"start {start} is outside the cell (0..{len(cell)})")
    clause = re.split(r";|\.\s", cell[max(0, start - CLAUSE_CHARS) : start])[-1]
    return FLOP_COUNT.search(clause) is not None
