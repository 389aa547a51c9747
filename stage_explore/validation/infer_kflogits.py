"""The loss of a row trained with KempnerForge, read from its code (7 Dec 2026, s35 kflogits):
the cross-entropy runs on the bf16 logits themselves and, under tensor parallelism, on the
whole vocabulary on every rank (:func:`kempnerforge_loss_defaults`)."""

from __future__ import annotations

from typing import Any

from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_stated import names_kempnerforge, stated_or_inferred

#: 16-bit logits-sized buffers eager ``F.cross_entropy`` on bf16 logits holds in its backward
#: beside the logits: ``log_softmax``'s saved bf16 output, the ``nll_loss`` gradient and
#: ``log_softmax``'s backward result. KempnerForge computes ``F.cross_entropy(logits.view(-1,
#: logits.size(-1)), labels.view(-1))`` outside the compiled model (``scripts/train.py``
#: 01b461a7; ``training/loss.py`` ``cross_entropy_loss`` 3309cff7, the chunked variant only
#: with ``ce_chunk_size`` > 0), with no autocast, on the logits of a model cast to bf16
#: (``OutputHead.forward`` returns ``self.proj(x)``, no ``.float()``: ``model/embedding.py``
#: 21248ca1).
KEMPNERFORGE_LOSS_16BIT_BUFFERS = 3

KEMPNERFORGE_LOSS_NOTE = (
    "the loss on the bf16 logits (loss_16bit_buffers {buffers}, not the profile's fp32 "
    "upcast): the row names KempnerForge, whose train step runs F.cross_entropy eagerly on the "
    "logits of the bf16-cast model with no autocast and no .float() (scripts/train.py "
    "01b461a7, model/embedding.py OutputHead), so log_softmax and nll_loss run in bf16 and "
    "their backward holds the saved log-probabilities, the nll_loss gradient and its result "
    "beside the logits the step still references"
)
KEMPNERFORGE_GATHERED_NOTE = (
    "the logits gathered to the whole vocabulary on every tensor-parallel rank "
    "(loss_logits_gathered): KempnerForge's plan puts ColwiseParallel(input_layouts=Shard(1), "
    "output_layouts=Replicate()) on output_head.proj and has no loss_parallel "
    "(kempnerforge/distributed/tensor_parallel.py 0c4eba1e; without sequence parallelism the "
    "head is not parallelized at all, its logits whole as well)"
)


def kempnerforge_loss_defaults(
    row: dict[str, str], parallel: dict[str, Any], stated: dict[str, int], out: Defaults
) -> None:
    """For a row of the ``fsdp`` profile naming KempnerForge (:func:`names_kempnerforge`): with its
    model states in bf16 (``bf16_model_states``, set before from the row's stated cast) the
    loss on the bf16 logits (``loss_16bit_buffers`` =
    :data:`KEMPNERFORGE_LOSS_16BIT_BUFFERS`), and with tp > 1 the logits whole on every rank
    (``loss_logits_gathered``, which the step time also charges: s35 kfthru)."""
    if not names_kempnerforge(row):
        return
    if out.options.get("bf16_model_states"):
        out.options["loss_16bit_buffers"] = KEMPNERFORGE_LOSS_16BIT_BUFFERS
        out.notes.append(KEMPNERFORGE_LOSS_NOTE.format(buffers=KEMPNERFORGE_LOSS_16BIT_BUFFERS))
    if stated_or_inferred(stated, parallel, "tp") > 1:
        out.options["loss_logits_gathered"] = True
        out.notes.append(KEMPNERFORGE_GATHERED_NOTE)
