"""Defaults of a row on the ``fsdp`` profile read from what the row states of its own
training code (:mod:`stage_explore.validation.infer_defaults`): DTensor tensor parallelism with
sequence parallelism (DTensor's functional-collective copies and saved gathered inputs, as
torchtitan's profile has them) and a model cast to bf16 (bf16 model states). Every default is
cited where it is set and reported as the row's assumption (7 Dec 2026, s34 kempner: the
KempnerForge rows, whose ``sp`` and ``precision`` cells state both).
"""

from __future__ import annotations

import re
from typing import Any

from stage_explore.validation.csv_cells import YES, first_word
from stage_explore.validation.infer_release import TEXT_COLUMNS, Defaults, row_text
from stage_explore.validation.infer_stated import stated_or_inferred
from stage_explore.validation.infer_torch import FP32_MASTER

#: A row naming PyTorch's DTensor tensor parallelism: ``DTensor``, its ``parallelize_module``
#: or its plan styles ``ColwiseParallel`` / ``RowwiseParallel`` / ``SequenceParallel``
#: (torch/distributed/tensor/parallel/style.py).
DTENSOR_TP = re.compile(
    r"\bDTensor\b|\bparallelize_module\b|\b(?:Colwise|Rowwise|Sequence)Parallel\b"
)
#: Where a row may name it: the ``sp`` and ``dp_sharding`` cells and its text.
DTENSOR_COLUMNS = ("sp", "dp_sharding", *TEXT_COLUMNS)
DTENSOR_NOTE = (
    "DTensor tensor parallelism with sequence parallelism (funcol_seq_copies, "
    "tp_saves_gathered_input): the row names DTensor's plan ({named!r}); its activations are "
    "[batch, seq, hidden] sharded on dim 1 (SequenceParallel: Shard(1)), whose all-gathers and "
    "reduce-scatters are funcol.all_gather_tensor / reduce_scatter_tensor copying the whole "
    "tensor through torch.cat (torch/distributed/_functional_collectives.py), and a "
    "ColwiseParallel linear's mm saves the gathered input (torchtitan's profile reads the same "
    "code)"
)


def dtensor_tp_defaults(
    row: dict[str, str], parallel: dict[str, Any], stated: dict[str, int], out: Defaults
) -> None:
    """DTensor's sequence-parallel copies and saved gathered inputs (:data:`DTENSOR_NOTE`) for
    a row of the ``fsdp`` profile with tp > 1 and sequence parallelism whose text names DTensor
    tensor parallelism (:data:`DTENSOR_TP`); the profile's default is Megatron's sequence-first
    collectives (no copy) and saved sequence shards."""
    tp = stated_or_inferred(stated, parallel, "tp")
    sp = first_word(row.get("sp", "")) in YES or bool(parallel.get("sp"))
    named = DTENSOR_TP.search(row_text(row, DTENSOR_COLUMNS))
    if tp <= 1 or not sp or named is None:
        return
    out.options.update(funcol_seq_copies=True, tp_saves_gathered_input=True)
    out.notes.append(DTENSOR_NOTE.format(named=named.group(0)))


#: A row stating that its model (parameters) is cast to bf16 before training: ``the model cast
#: to bf16``, ``parameters are cast to bfloat16``, ``cast the model to bf16``; not after ``not`` /
#: ``no``. KempnerForge's ``build_parallel_model`` (kempnerforge/distributed/parallel.py
#: 01b461a7) ends with ``model.to(dtype=param_dtype)`` (bf16 by default, after ``fully_shard`` on
#: the tensor-parallel path, before it otherwise), and ``scripts/train.py`` builds the optimizer on
#: that model (7 Dec 2026, s34 kempner).
BF16_CAST = re.compile(
    r"(?<!\bnot\s)(?<!\bno\s)\b(?:model|parameters?|params|weights)\s+(?:is\s+|are\s+)?"
    r"cast\s+to\s+(?:bf16|bfloat16)\b"
    r"|(?<!\bnot\s)\bcast\s+(?:the\s+)?(?:model|parameters?|params|weights)\s+to\s+"
    r"(?:bf16|bfloat16)\b",
    re.IGNORECASE,
)
#: Where a row may state the cast: its precision cell and its text.
BF16_CAST_COLUMNS = ("precision", *TEXT_COLUMNS)


def bf16_cast_defaults(row: dict[str, str], out: Defaults) -> None:
    """bf16 model states (``bf16_model_states``: no fp32 master, the gradient and Adam's two
    moments in bf16) for a row of the ``fsdp`` profile that states its model is cast to bf16
    (:data:`BF16_CAST`) and does not state fp32 master weights (:data:`FP32_MASTER`): a
    parameter cast before the optimizer is built leaves no fp32 copy, and ``torch.optim.AdamW``
    creates its moments like the parameter (torch/optim/adam.py ``_init_group``:
    ``torch.zeros_like(p, memory_format=torch.preserve_format)``, the fused kernel's states too).
    Memory only (the optimizer step and the gradient reduce-scatter are timed as before: an
    FSDP2 policy's fp32 ``reduce_dtype`` still reduces in fp32)."""
    text = row_text(row, BF16_CAST_COLUMNS)
    cast = BF16_CAST.search(text)
    if cast is None or FP32_MASTER.search(text):
        return
    out.options["bf16_model_states"] = True
    out.notes.append(
        f"the model states in bf16 (bf16_model_states: no fp32 master, AdamW's moments in "
        f"bf16): the row states the cast ({cast.group(0)!r}), as KempnerForge's "
        "build_parallel_model does (model.to(dtype=param_dtype), kempnerforge/distributed/"
        "parallel.py 01b461a7), and torch.optim.AdamW keeps its moments in the parameter's dtype"
    )
