"""What PyTorch's context-parallel attention costs beyond its attention kernels:
:func:`cp_merge_bytes`, the HBM traffic of merging per-chunk results in fp32.

``torch.distributed.tensor.experimental.context_parallel`` (TorchTitan's context parallelism,
``_templated_ring_attention`` in ``torch/distributed/tensor/experimental/_attention.py``) runs
one SDPA kernel per K/V chunk — ``cp`` of them per rank, K/V all-gathered or passed around the
ring — and merges each chunk's output into the running result with separate element-wise
kernels (``_SDPAMerger``, ``convert_to_f32`` on by default): per chunk after the first, the
chunk's output is cast to fp32 (2 bytes read, 4 written per element), then
``out - sigmoid(block_lse - lse) * (out - block_out)`` runs as three kernels (the difference:
4 + 4 read, 4 written; the scaled product: 4 read, 4 written; the update: 4 + 4 read, 4 written;
the per-row log-sum-exp terms are negligible): 38 bytes per output element. The first chunk's
output is cast once (6) and the result cast back to 16 bits at the end (4 read, 2 written).
With load balancing (on by default for causal attention) the rank holding the last chunks
merges whole outputs at every step (the others merge half of them, plus a concatenation): the
step waits for that rank, which :func:`cp_merge_bytes` counts.

The backward (``_templated_ring_attention_backward``) accumulates each chunk's query and
key/value gradients into fp32 buffers: zero-filled (4 bytes written per element), one add per
chunk (the fp32 accumulator read and written, the 16-bit gradient read: 10) and a cast back to
16 bits (6). The key/value buffers are a chunk's (1/cp of the gathered keys and values).
"""

from __future__ import annotations

from stage_core.lower.bind import Instr

#: Bytes of a 16-bit activation element (the attention's inputs and outputs; as
#: :data:`stage_explore.analytical.kernels.ELEMENT_BYTES`, which imports this module).
ELEMENT_BYTES = 2

#: Casting a 16-bit tensor to fp32 (2 read, 4 written) or back (4 read, 2 written), per element.
CAST_BYTES = 6
#: One merge step per output element: the fp32 cast (6) and three fp32 element-wise kernels
#: (12 + 8 + 12) (module docstring).
MERGE_STEP_BYTES = 38
#: Zero-filling an fp32 gradient accumulator, per element.
ZERO_FILL_BYTES = 4
#: Adding a 16-bit gradient into an fp32 accumulator: 4 + 2 read, 4 written, per element.
ACCUMULATE_BYTES = 10


def cp_merge_bytes(instr: Instr, cp: int) -> int:
    """HBM bytes the most loaded rank moves merging a context-parallel attention instruction's
    per-chunk results (forward or recompute: the outputs; backward: the gradient accumulators),
    0 for other instructions or ``cp`` of 1 (module docstring)."""
    if cp <= 1 or instr.kind != "attention" or not instr.outputs:
        return 0
    if instr.phase in ("fwd", "recompute"):
        out = instr.outputs[0][1] // ELEMENT_BYTES
        return out * (CAST_BYTES + (cp - 1) * MERGE_STEP_BYTES + CAST_BYTES)
    query = instr.outputs[0][1] // ELEMENT_BYTES
    chunk_kv = sum(nbytes for _, nbytes in instr.outputs[1:]) // ELEMENT_BYTES // cp
    per_element = ZERO_FILL_BYTES + cp * ACCUMULATE_BYTES + CAST_BYTES
    return (query + chunk_kv) * per_element
