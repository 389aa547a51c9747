"""What torch pipelining's stages keep of their outputs until a step ends
(``pipelining_output_chunks``, ``pipelining_output_fp32``; 7 Dec 2026, s37 ppout).

``torch.distributed.pipelining``'s ``_PipelineStageBase.forward_one_chunk`` appends each
micro-batch's output to ``self.output_chunks`` "for final output merge or reduction"; the
schedule's ``step()`` returns their merge (``_merge_outputs``) and the list is cleared only by
the next step's ``clear_runtime_states``. The output is the same tensor ``fwd_cache`` holds until
the micro-batch's backward, so after that backward its data stays (pytorch/pytorch#138504, Oct
2024, detaches the last stage's outputs after their backward "because we return all the output
chunks in ``merge_output_chunks()`` after the step is over": the graph is freed, the data kept).
By torch version (:data:`OUTPUT_CHUNKS`):

- ``"every"``: every stage appends its output (torch before pytorch/pytorch#153383, merged 13 May
  2025, "we should not keep the outputs of each stage in memory": torch 2.7 and earlier, and the
  nightlies torchtitan ran in December 2024);
- ``"last"``: only the last stage does (``if self.is_last: self.output_chunks.append(output)``,
  torch 2.8 on; pytorch/pytorch 01386103 ``stage.py``) — and from torch 2.10 still, unless the
  caller passes ``return_outputs=False``;
- ``"none"``: the caller passes ``step(..., return_outputs=False)`` (pytorch/pytorch#165822, Oct
  2025, for issue #159251: ``forward_one_chunk(..., save_forward_output=return_outputs)``).

So a chunk keeps, beside what the model already counts (its micro-batches in flight), one output
per micro-batch whose backward has run (:func:`kept_after_backward_bytes`): a boundary tensor on a
chunk before the last, the rank's logits shard on the last, in the model's output dtype. A model
that returns fp32 logits (``pipelining_output_fp32``: torchtitan's December 2024
``Transformer.forward``, ``self.output(h).float()``) also holds the fp32 logits of each of the
last chunk's micro-batches in flight, which ``fwd_cache`` keeps through their loss backward and
the loss's own buffers (:func:`~stage_core.lower.memory.loss_peak_bytes`: log-softmax's output,
its gradients) do not include (:func:`in_flight_output_bytes`); a 16-bit output is the logits the
loss's accounting already counts. :func:`peak_with_kept_outputs` walks a rank's task order for
its saved activations and the outputs kept at once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from stage_core.lower.schedule import SPLIT_BACKWARD, chunks_per_rank
from stage_explore.analytical.taskgraph import rank_order

#: ``pipelining_output_chunks``'s values (module docstring): which stages keep every
#: micro-batch's output until the step ends.
OUTPUT_CHUNKS = ("every", "last", "none")

#: Bytes of an fp32 logit (``pipelining_output_fp32``).
FP32_LOGIT_BYTES = 4


def kept_after_backward_bytes(
    mode: str,
    chunks: Sequence[tuple[bool, bool]],
    boundary: int,
    logits_elements: int,
    output_bytes: int,
) -> tuple[int, ...]:
    """Bytes each of a rank's ``chunks`` (holds the first stage, holds the last stage) keeps,
    per micro-batch whose backward has run, until the step ends under ``mode``
    (:data:`OUTPUT_CHUNKS`): ``boundary`` bytes on a chunk before the last under ``"every"``;
    on the last chunk, under ``"every"`` or ``"last"``, its ``logits_elements`` local logits of
    ``output_bytes`` each; 0 elsewhere."""
    if mode not in OUTPUT_CHUNKS:
        raise ValueError(
            f"kept_after_backward_bytes: mode must be one of {', '.join(OUTPUT_CHUNKS)}, "
            f"but got {mode!r}"
        )
    if boundary < 0 or logits_elements < 0 or output_bytes < 1:
        raise ValueError(
            "kept_after_backward_bytes: expected boundary >= 0, logits_elements >= 0 and "
            f"output_bytes >= 1, but got {boundary!r}, {logits_elements!r}, {output_bytes!r}"
        )
    kept = []
    for _, last in chunks:
        if last:
            kept.append(logits_elements * output_bytes if mode != "none" else 0)
        else:
            kept.append(boundary if mode == "every" else 0)
    return tuple(kept)


def in_flight_output_bytes(
    fp32_output: bool, chunks: Sequence[tuple[bool, bool]], logits_elements: int
) -> tuple[int, ...]:
    """Bytes each of a rank's ``chunks`` holds per micro-batch in flight beyond its saved
    activations and the loss's buffers: the fp32 logits of the last chunk when the model
    returns them (``fp32_output``), whatever ``pipelining_output_chunks`` says (``fwd_cache``
    keeps them until the backward); 0 otherwise."""
    if logits_elements < 0:
        raise ValueError(
            f"in_flight_output_bytes: logits_elements must be >= 0, but got {logits_elements!r}"
        )
    return tuple(
        FP32_LOGIT_BYTES * logits_elements if fp32_output and last else 0 for _, last in chunks
    )


@functools.lru_cache(maxsize=4096)
def peak_with_kept_outputs(
    kind: str,
    stage: int,
    p: int,
    m: int,
    vpp: int,
    sizes: tuple[int, ...],
    kept: tuple[int, ...],
) -> int:
    """Bytes of ``stage``'s saved activations plus its kept outputs at their joint peak:
    walking the rank's task order (every micro-batch: the kept outputs only grow), a forward
    adds ``sizes[c]`` to its chunk ``c``, a backward (``B`` under a split schedule) frees it —
    and, under a split schedule, adds ``sizes[chunks + c]`` until its ``W`` — and leaves
    ``kept[c]`` held until the step ends. ``sizes`` as
    :func:`~stage_explore.analytical.pipeline._peak_activations` takes them."""
    chunks = chunks_per_rank(kind, vpp)
    split = kind in SPLIT_BACKWARD
    if len(kept) != chunks or len(sizes) != (2 * chunks if split else chunks):
        raise ValueError(
            f"peak_with_kept_outputs: expected {chunks} kept sizes and "
            f"{2 * chunks if split else chunks} activation sizes for {kind!r} (vpp {vpp}), "
            f"but got {len(kept)} and {len(sizes)}"
        )
    held = peak = 0
    for phase, chunk, _ in rank_order(kind, stage, p, m, vpp):
        if phase == "F":
            held += sizes[chunk]
        elif not split:
            held += kept[chunk] - sizes[chunk]
        elif phase == "B":
            held += kept[chunk] + sizes[chunks + chunk]
        else:  # W: the micro-batch's activations and pending gradients go
            held -= sizes[chunk] + sizes[chunks + chunk]
        peak = max(peak, held)
    return peak
