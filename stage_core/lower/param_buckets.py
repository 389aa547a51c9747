"""The parameter buckets of a chunk's first forward (:func:`param_buckets`): where each
bucket's all-gather must have ended when the next step's parameter gathers overlap its first
forward (Megatron-Core's ``overlap_param_gather``; the trace mode's ``gathers_ahead``,
:func:`stage_core.lower.nodes.stage_nodes`).

Megatron-Core keeps a bucket's parameters and gradients in one buffer
(``megatron/core/distributed/param_and_grad_buffer.py``: buckets filled in reverse parameter
order, the backward's), so the parameter buckets are the gradient buckets read in forward
order; each forward pre-hook's ``finish_param_sync`` waits for its bucket's all-gather (and
dispatches it first if nothing has: the first bucket) and then starts the next bucket's.
"""

from __future__ import annotations

from stage_core.lower.program import StageProgram

#: Per forward position of a chunk's first forward where a parameter bucket starts: the index
#: of the chunk's step-end all-gather in ``StageProgram.sync`` and the bucket's bytes of it.
ParamBuckets = dict[int, tuple[int, int]]


def param_buckets(stage: StageProgram, chunk: int) -> ParamBuckets | None:
    """The parameter buckets of ``chunk`` in forward order: the gradient buckets' layout (one
    buffer holds a bucket's parameters and gradients; Megatron-Core's
    ``param_and_grad_buffer.py``), the backward's last gradient bucket first, each from the
    forward position of its first block; a bucket's all-gather is its share of the chunk's
    step-end parameter all-gather, by its gradient bytes. None when the chunk has no step-end
    gather or reduces its gradients in more than one group (expert and dense buffers)."""
    gathers = [(i, op) for i, op in enumerate(stage.sync) if op.after == -1 and op.chunk == chunk]
    if len(gathers) != 1:
        return None
    ((index, gather),) = gathers
    grads = [  # the buckets of the gathered parameters' gradients (not sp's tp all-reduces)
        op
        for op in stage.sync
        if op.chunk == chunk and op.after >= 0 and op.name.startswith("grad_")
        and op.axes == gather.axes
    ]  # fmt: skip
    if not grads or len({op.collective for op in grads}) > 1:
        return None
    last = len(stage.chunks[chunk].blocks) - 1
    shares: dict[int, int] = {}  # forward start → gradient bytes
    for op in grads:  # issued after backward position a: from forward position last − a on
        start = max(0, last - op.after)
        shares[start] = shares.get(start, 0) + op.comm_bytes
    first = min(shares)
    if first:  # the forward's first bucket holds its first blocks too
        shares[0] = shares.pop(first)
    starts = sorted(shares)
    total = sum(shares.values())
    sizes = [gather.comm_bytes * shares[start] // total for start in starts]
    sizes[-1] += gather.comm_bytes - sum(sizes)
    return {start: (index, size) for start, size in zip(starts, sizes, strict=True)}
