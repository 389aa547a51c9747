"""What PyTorch's context-parallel attention costs beyond its attention kernels, as torch's
``context_parallel`` ran under TorchTitan's Llama in Dec 2024 (``cp_merge_fp32``):
:func:`cp_merge_bytes`, the HBM traffic of its element-wise kernels, :func:`cp_comm_timer`,
the exposed time of its key/value all-gather and of its key/value-gradient ring, and
:func:`cp_ring_held_bytes`, the buffers it holds beside the program's tensors (memory).

``torch.distributed.tensor.experimental.context_parallel`` (``_templated_ring_attention`` and
``_templated_ring_attention_backward`` in ``torch/distributed/tensor/experimental/
_attention.py``; load balancing and the all-gather rotater on by default) runs one SDPA kernel
per key/value chunk — ``cp`` of them per rank — and does the rest in separate kernels. The
first chunk's SDPA is causal (the rank's own two chunks), every later one non-causal
(``_is_causal_behavior``: ``NOT_IS_CAUSAL`` for ``i > 0`` under load balancing) on half blocks of
``2c²`` scores — the steps of Transformer Engine's ring, so the kernel timer applies the same
:func:`~stage_explore.analytical.te_context_parallel.te_ring_time_factor` (6 Dec 2026, s21 cp):

**Forward** (also the recomputed one). Per output element: the first chunk's output cast to
fp32 (``_SDPAMerger``, ``convert_to_f32``: 2 bytes read, 4 written), each later chunk's cast (6)
and its merge ``out - sigmoid(block_lse - lse) * (out - block_out)`` as three fp32 kernels (the
difference 4 + 4 read, 4 written; the scaled product 4 read, 4 written; the update 4 + 4 read, 4
written; the per-row log-sum-exp terms are negligible): 38 bytes per step; the result cast back
to 16 bits at the end (4 read, 2 written). With load balancing the rank holding the last chunks
merges whole outputs at every step (the others merge half of them, plus a concatenation): the
step waits for that rank. Per key/value element: ``key.contiguous()`` / ``value.contiguous()``
copy the transposed inputs (2 read, 2 written), and every step but the last concatenates them
into the buffer it would send (``torch.cat([key.flatten(), value.flatten()])``, 4 more; the
all-gather rotater sends only the first).

**Backward.** Per query element: an fp32 zero-filled accumulator (4), one add per chunk (the
accumulator read and written, the 16-bit gradient read: 10), the cast back (6). Per key/value
element: the zero fill (4), the ``contiguous()`` copy (4), the send-buffer concatenation of
every step but the last (4), the first chunk's add (10), then on the busiest rank — it takes
only the first local half of each later chunk (``i <= rank``) — ``_partial_update``: the add on
half the elements (5) and a ``torch.cat`` of the chunks (4 read, 4 written); every step
concatenates the fp32 key and value gradients into the message of the gradient ring (8), and the
last message is cast back to 16 bits (6).

**Keys and values** reach SDPA already repeated to the query heads: TorchTitan's Llama calls
``repeat_kv`` before ``F.scaled_dot_product_attention`` (``models/llama/model.py``), so every
copy, accumulator and message above is query-sized per tensor (:func:`kv_repeat`: the query heads
per key/value head). The generator's instructions carry the un-repeated grouped-query sizes.

**Communication.** The all-gather rotater gathers the (repeated) keys and values once per
attention call, launched before the first chunk's SDPA and waited for before the second: it
hides behind that first (local, causal) chunk — ``1/cp`` of the attention's time — and the rest
is exposed. The backward gathers them again the same way, and sends the fp32 key/value gradient
accumulators around the ring: after each chunk's SDPA backward, ``dkv_rotater`` (an all-to-all
with one peer, ``_RotateMethod.ALL_TO_ALL``) passes the rank's accumulators to the next cp rank,
and the next step waits for the previous rank's. ``cp`` messages of the local keys' and values'
fp32 gradients, each hidden behind the next chunk's SDPA backward except the last one, and
whatever a message takes beyond a chunk's compute. The backward returns the query, key and
value gradients together after the last message is received, so whatever reads any of them
waits for the whole ring. The trace mode runs this structure node by node
(:func:`~stage_explore.analytical.trace_ring.torch_ring_program`) and finds the same step.

**Compiled** (``traced``: the torchtitan profile's ``cp_traced_ring`` on a row run with
``training.compile``, ``fused_elementwise``). TorchTitan compiles each transformer block with
``torch.compile(block, fullgraph=True)`` (``apply_compile``), so the ring above, reached through
the DTensor SDPA handler, is traced into the block's graph, forward and backward. A functional
collective traced there is waited for at once: ``_maybe_wrap_tensor`` returns
``wait_tensor(self)`` when ``_are_we_tracing()`` (``torch/distributed/_functional_collectives.py``),
and Inductor keeps that order — its ``reorder_for_compute_comm_overlap`` (``raise_comms``,
``sink_waits``) is off by default (``torch/_inductor/config.py``). So the key/value all-gather
(forward, recompute, backward) and every one of the ``cp`` key/value-gradient messages are
exposed in full. Inductor fuses the element-wise kernels between the SDPA calls instead
(:data:`FUSED_MERGE_BYTES`, :func:`cp_merge_bytes` with ``compiled``), and the send buffers
the all-gather rotater never sends after the first are dead code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind

#: Bytes of a 16-bit activation element (the attention's inputs and outputs; as
#: :data:`stage_explore.analytical.gemm_tiles.ELEMENT_BYTES`, which imports this module).
ELEMENT_BYTES = 2
#: Bytes of an fp32 element (the merged outputs, the gradient accumulators and ring messages).
FP32_BYTES = 4

#: Casting a 16-bit tensor to fp32 (2 read, 4 written) or back (4 read, 2 written), per element.
CAST_BYTES = 6
#: One merge step per output element: the fp32 cast (6) and three fp32 element-wise kernels
#: (12 + 8 + 12) (module docstring).
MERGE_STEP_BYTES = 38
#: Copying a 16-bit tensor (``contiguous()``, a concatenation): 2 read, 2 written.
COPY_BYTES = 4
#: Zero-filling an fp32 gradient accumulator, per element.
ZERO_FILL_BYTES = 4
#: Adding a 16-bit gradient into an fp32 accumulator: 4 + 2 read, 4 written, per element.
ACCUMULATE_BYTES = 10
#: The busiest rank's key/value accumulation per later chunk: the add on half the elements (5)
#: and ``_partial_update``'s concatenation of the fp32 chunks (4 read, 4 written).
PARTIAL_UPDATE_BYTES = ACCUMULATE_BYTES // 2 + 2 * FP32_BYTES
#: Concatenating the fp32 key and value gradients into the ring's message (4 read, 4 written).
RING_MESSAGE_COPY_BYTES = 2 * FP32_BYTES

#: Compiled (module docstring): one fused merge kernel per later chunk, per output element —
#: the running fp32 output read (4), the chunk's 16-bit output read (2), the new fp32 output
#: written (4); the first merge reads the first chunk's 16-bit output instead (2 less), the last
#: writes the 16-bit result (2 less).
FUSED_MERGE_BYTES = FP32_BYTES + ELEMENT_BYTES + FP32_BYTES
#: Compiled: a key/value-gradient step fused into one kernel writing the next ring message —
#: the received fp32 message read (4), the chunk's 16-bit gradient added on the half it covers
#: (2 on half the elements: 1), the message written (4); the first step reads only the 16-bit
#: gradient (2) into the zero-initialised accumulator and writes the message (4).
FUSED_RING_STEP_BYTES = FP32_BYTES + ELEMENT_BYTES // 2 + FP32_BYTES
FUSED_FIRST_STEP_BYTES = ELEMENT_BYTES + FP32_BYTES


def _query_and_kv(instr: Instr) -> tuple[int, tuple[int, ...]]:
    """Elements of the rank's queries and of the gathered keys and values an attention
    instruction reads (forward: its inputs ``q, k, v``) or whose gradients it writes
    (backward: its outputs ``dq, dk, dv``)."""
    if instr.phase in ("fwd", "recompute"):
        query, *kv = (size // ELEMENT_BYTES for _, size in instr.inputs[:3])
    else:
        query, *kv = (size // ELEMENT_BYTES for _, size in instr.outputs[:3])
    return query, tuple(kv)


def kv_repeat(instr: Instr, cp: int) -> int:
    """Query heads per key/value head of an attention instruction whose keys and values are
    gathered over ``cp`` ranks (1 without grouped-query attention): the rank's query elements
    over its local key elements (equal head dims)."""
    query, kv = _query_and_kv(instr)
    local_key = kv[0] // cp if kv else 0
    return max(1, query // local_key) if local_key > 0 else 1


def cp_merge_bytes(instr: Instr, cp: int, repeat: bool = True, compiled: bool = False) -> int:
    """HBM bytes the most loaded rank moves in the element-wise kernels of a context-parallel
    attention instruction (forward or recompute: the merges and the key/value copies; backward:
    the gradient accumulators and ring messages), 0 for other instructions or ``cp`` of 1
    (module docstring). ``repeat``: keys and values repeated to the query heads before SDPA;
    ``compiled``: the ring traced into a compiled graph, its element-wise kernels fused."""
    if cp <= 1 or instr.kind != "attention" or not instr.outputs:
        return 0
    query, kv = _query_and_kv(instr)
    factor = kv_repeat(instr, cp) if repeat else 1
    local_kv = sum(kv) // cp * factor
    if compiled:
        return _compiled_merge_bytes(instr, cp, query, local_kv)
    if instr.phase in ("fwd", "recompute"):
        out = instr.outputs[0][1] // ELEMENT_BYTES
        merges = out * (CAST_BYTES + (cp - 1) * MERGE_STEP_BYTES + CAST_BYTES)
        return merges + local_kv * (COPY_BYTES + (cp - 1) * COPY_BYTES)
    per_query = ZERO_FILL_BYTES + cp * ACCUMULATE_BYTES + CAST_BYTES
    per_kv = (
        ZERO_FILL_BYTES
        + COPY_BYTES  # contiguous()
        + (cp - 1) * COPY_BYTES  # the all-gather rotater's send buffers
        + ACCUMULATE_BYTES  # the first (local) chunk
        + (cp - 1) * PARTIAL_UPDATE_BYTES
        + cp * RING_MESSAGE_COPY_BYTES
        + CAST_BYTES
    )
    return query * per_query + local_kv * per_kv


def _compiled_merge_bytes(instr: Instr, cp: int, query: int, local_kv: int) -> int:
    """:func:`cp_merge_bytes` of a ring traced into a compiled graph (module docstring): per
    output element ``cp − 1`` fused merges (:data:`FUSED_MERGE_BYTES`, 4 less at the ends);
    per repeated key/value element the ``contiguous()`` copy and the one send buffer the
    all-gather rotater gathers. Backward: per query element ``cp`` fused accumulations (10
    each, the zero fill and the final cast folded into the first and last: 6 less); per key/
    value element the copy and the gathered buffer, the first step and ``cp − 1`` fused ring
    steps (:data:`FUSED_FIRST_STEP_BYTES`, :data:`FUSED_RING_STEP_BYTES`) and the last
    message's cast back to 16 bits."""
    if instr.phase in ("fwd", "recompute"):
        out = instr.outputs[0][1] // ELEMENT_BYTES
        return out * (FUSED_MERGE_BYTES * (cp - 1) - 2 * ELEMENT_BYTES) + local_kv * 2 * COPY_BYTES
    per_query = ACCUMULATE_BYTES * cp - CAST_BYTES
    per_kv = (
        2 * COPY_BYTES  # contiguous(), the gathered send buffer
        + FUSED_FIRST_STEP_BYTES
        + (cp - 1) * FUSED_RING_STEP_BYTES
        + CAST_BYTES
    )
    return query * per_query + local_kv * per_kv


#: The busiest rank's fp32 merge at its peak, per query element: the merged output, the
#: chunk's output cast to fp32 and the 16-bit chunk output it came from, the scaled difference
#: and the new merged output (4 + 4 + 2 + 4 + 4 bytes; ``_SDPAMerger._merge_one``).
MERGE_PEAK_BYTES = 18


def cp_ring_held_bytes(instr: Instr, cp: int, repeat: bool = True) -> int:
    """Bytes torch's ring attention holds while a context-parallel attention instruction runs,
    beyond the tensors the program names for it (its gathered keys and values and its
    outputs): 0 for other instructions or ``cp`` of 1. Counted from ``_templated_ring_attention``
    and its backward (Dec 2024) on keys and values repeated to the query heads (``repeat``),
    ``q`` the rank's query elements and ``kv`` its local repeated elements per tensor:

    - both: the all-gather rotater's buffer of every rank's keys and values (``cp`` x 2 x ``kv``
      16-bit elements, held for the whole loop) and the send buffer ``torch.cat`` of the local
      ones made at every step (2 x ``kv``);
    - forward and recompute: the fp32 merge at its peak (:data:`MERGE_PEAK_BYTES` per query
      element);
    - backward, during a chunk's SDPA backward: the fp32 query-gradient accumulator (4 per query
      element), the key/value-gradient accumulators received from the previous rank, the
      message sent to the next one still in flight and the permute's receive buffer (3 x 2 x
      ``kv`` fp32), the previous and the new chunk's 16-bit gradients, and the flash backward's
      fp32 ``dq_accum`` (``flash_api.cpp`` ``mha_bwd``) — on rank 0 the chunks take half the
      queries and all keys (q + 4 kv bytes a set, 2 q of ``dq_accum``), on the last rank all the
      queries and half the keys (2 q + 2 kv, 4 q), the larger of the two."""
    if cp <= 1 or instr.kind != "attention" or not instr.outputs:
        return 0
    query, kv = _query_and_kv(instr)
    local = sum(kv) // len(kv) // cp * (kv_repeat(instr, cp) if repeat else 1) if kv else 0
    ring = (cp + 1) * 2 * local * ELEMENT_BYTES
    if instr.phase in ("fwd", "recompute"):
        ring += MERGE_PEAK_BYTES * query
        named = sum(size for _, size in instr.inputs[1:3]) + sum(s for _, s in instr.outputs)
    else:
        accumulators = FP32_BYTES * query + 3 * 2 * FP32_BYTES * local
        first = 2 * (query + 4 * local) + 2 * query  # rank 0: half the queries
        last = 2 * (2 * query + 2 * local) + 4 * query  # the last rank: half the keys
        ring += accumulators + max(first, last)
        named = sum(size for _, size in instr.inputs[2:4]) + sum(s for _, s in instr.outputs)
    return max(0, ring - named)


def _is_cp_collective(instr: Instr, kind: CollectiveKind) -> bool:
    return instr.collective is kind and instr.axes == ("cp",)


def is_cp_gather(instr: Instr) -> bool:
    """A key/value all-gather over cp (what torch's all-gather rotater gathers)."""
    return _is_cp_collective(instr, CollectiveKind.ALL_GATHER)


def is_cp_scatter(instr: Instr) -> bool:
    """A key/value-gradient reduce-scatter over cp (what torch's gradient ring returns)."""
    return _is_cp_collective(instr, CollectiveKind.REDUCE_SCATTER)


def repeated_gather(gather: Instr, attention: Instr, cp: int) -> Instr:
    """A key/value all-gather over ``cp`` with the bytes torch moves: the keys or values
    repeated to the query heads (:func:`kv_repeat` of the attention that reads them)."""
    return replace(gather, comm_bytes=gather.comm_bytes * kv_repeat(attention, cp))


def ring_message_sizes(scatters: Sequence[Instr], attention: Instr, cp: int) -> list[int]:
    """Each key/value-gradient reduce-scatter's part of one message of torch's gradient ring:
    the rank's local, repeated gradient in fp32 (one message carries them all)."""
    repeat = kv_repeat(attention, cp)
    return [i.comm_bytes // cp * repeat * FP32_BYTES // ELEMENT_BYTES for i in scatters]


def cp_comm_timer(
    instrs: Sequence[Instr],
    cp: int,
    comm_s: Callable[[Instr], float],
    attention_s: Callable[[Instr], float],
    message_s: Callable[[int], float],
    traced: bool = False,
) -> Callable[[Instr], float]:
    """The communication timer of a block's instructions under torch's ``context_parallel``
    (module docstring): a key/value all-gather over ``cp`` moves the repeated keys or values
    and is charged only what the first chunk's SDPA (``1/cp`` of the same phase's attention,
    ``attention_s``) does not hide; a key/value-gradient reduce-scatter over ``cp`` becomes the
    fp32 gradient ring — ``cp`` messages of the local repeated keys' and values' gradients
    (``message_s``: seconds of one message to the next cp rank), each hidden behind a chunk's
    SDPA backward but the last, plus what a message takes beyond a chunk's compute — charged
    to the first of the phase's reduce-scatters (in program order), the others none: the
    ring's backward returns the query, key and value gradients together once the last message
    is received (``_templated_ring_attention_backward`` ends with ``dkv_rotater.next_buffer()``
    before returning; pytorch/pytorch 0123248 ``torch/distributed/tensor/experimental/
    _attention.py``), so what reads any of them waits for the whole ring (the keys' rope
    backward, and the queries' behind it in issue order). ``traced`` (the ring compiled, module
    docstring): every collective waited for where it is issued — the all-gather in full, the
    ``cp`` messages one after another. Every other instruction: ``comm_s``."""
    if cp <= 1:
        return comm_s
    attention = {i.phase: i for i in instrs if i.kind == "attention"}
    gathers: dict[str, list[Instr]] = {}
    scatters: dict[str, list[Instr]] = {}
    for instr in instrs:
        if instr.phase not in attention:
            continue
        if is_cp_gather(instr):
            gathers.setdefault(instr.phase, []).append(instr)
        elif is_cp_scatter(instr):
            scatters.setdefault(instr.phase, []).append(instr)
    charged: dict[Instr, float] = {}
    for phase, group in gathers.items():
        seconds = [comm_s(repeated_gather(i, attention[phase], cp)) for i in group]
        hidden = attention_s(attention[phase]) / cp  # the first chunk's SDPA
        exposed = max(0.0, 1.0 - hidden / sum(seconds)) if sum(seconds) > 0 else 0.0
        if traced:
            exposed = 1.0
        for instr, time_s in zip(group, seconds, strict=True):
            charged[instr] = time_s * exposed
    for phase, group in scatters.items():
        sizes = ring_message_sizes(group, attention[phase], cp)
        message = message_s(sum(sizes))
        step = attention_s(attention[phase]) / cp  # one chunk's SDPA backward
        ring = cp * message if traced else message + (cp - 1) * max(0.0, message - step)
        for k, instr in enumerate(group):  # the first waits for the ring, the rest with it
            charged[instr] = ring if k == 0 else 0.0

    def timer(instr: Instr) -> float:
        seconds = charged.get(instr)
        return comm_s(instr) if seconds is None else seconds

    return timer
