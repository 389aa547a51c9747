"""What Transformer Engine's ring (P2P) context-parallel attention costs beyond its attention
kernels (``te_cp_merge``, the megatron-core profile): :func:`te_cp_merge_bytes`, the HBM
traffic of the element-wise kernels ``AttnFuncWithCP`` (Megatron-Core's ``cp_comm_type`` p2p)
runs around its per-step attention kernels.

Counted from ``transformer_engine/pytorch/attention.py`` ``AttnFuncWithCP`` of mid-2024
(Transformer Engine 1.8-1.10: ``fused_attn_fwd`` / ``fused_attn_bwd`` per step, ``sbhd``,
causal with load balancing, each rank holding two sequence chunks) on the busiest rank, the
last cp rank, which runs every step on whole chunks. Per element of the rank's queries (``Q``)
and of its local keys and values together (``KV``):

**Forward** (also a recomputed one). ``torch.cat((k, v))`` builds the first send buffer (read
and write: 4 bytes per ``KV``); each later step takes the first half of the received keys and
values with ``.contiguous()`` (2 per ``KV`` and step); ``out = torch.empty_like(q).zero_()``
(2 per ``Q``); then one ``flash_attn_fwd_out_correction`` per step (a fused kernel: the step's
output and the running output read, the running output written: 6 per ``Q``; the per-row
log-sum-exp corrections are negligible). In all ``Q·(2 + 6·cp) + KV·(4 + 2·(cp − 1))``.

**Backward.** ``p2p_comm_buffers[0][0].copy_(kv)`` (4 per ``KV``); the query gradient copied
from the first step's (4 per ``Q``) and added at every later one (6 each); every step
concatenates the step's key and value gradients (``torch.cat((dk_, dv_))``: half the keys at
the steps before the last, 2 per ``KV``, all of them at the last, 4); the key/value-gradient
buffer passed around the ring takes the first step's half by copy (2), the middle steps'
halves by an add (3 each) and the last step's whole by an add (6). In all
``Q·(6·cp − 2) + KV·(5·cp + 8)``.

Under ring context parallelism the generator's attention instruction reads the rank's own
queries, keys and values (the exchanges are a ``ring`` instruction of their own) and writes
its output, so ``Q`` and ``KV`` are its operands' elements (its outputs' in the backward). Later
Transformer Engine versions fold the zero fill into the first correction and keep the
structure (a fused correction per step, the per-step gradient concatenation and accumulation);
the counts above stand for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stage_core.lower.bind import Instr

#: Bytes of a 16-bit activation element (as ``context_parallel.ELEMENT_BYTES``).
ELEMENT_BYTES = 2


def _query_and_local_kv(instr: Instr) -> tuple[int, int]:
    """Elements of the rank's queries and of its keys and values together: the forward's inputs
    ``q, k, v``, the backward's outputs ``dq, dk, dv`` (ring attention: the local shards)."""
    sizes = instr.inputs[:3] if instr.phase in ("fwd", "recompute") else instr.outputs[:3]
    query, *kv = (size // ELEMENT_BYTES for _, size in sizes)
    return query, sum(kv)


def te_cp_merge_bytes(instr: Instr, cp: int) -> int:
    """HBM bytes the busiest rank moves in the element-wise kernels of Transformer Engine's
    ring context-parallel attention around ``instr`` (module docstring): 0 for instructions
    that are not attention or with ``cp`` of 1."""
    if cp <= 1 or instr.kind != "attention" or len(instr.inputs) < 3 or len(instr.outputs) < 1:
        return 0
    query, kv = _query_and_local_kv(instr)
    if instr.phase in ("fwd", "recompute"):
        return query * (2 + 6 * cp) + kv * (4 + 2 * (cp - 1))
    if len(instr.outputs) < 3:
        return 0
    return query * (6 * cp - 2) + kv * (5 * cp + 8)


def te_ring_time_factor(
    cp: int, noncausal_ratio: float, first: float = 1.0, later: float = 1.0
) -> float:
    """The attention kernels' time under Transformer Engine's ring (P2P) context parallelism
    over their time at the kernel's causal rate. ``AttnFuncWithCPAndKVP2P`` (TE 2.x
    ``attention/dot_product_attention/context_parallel.py``; ``AttnFuncWithCP`` in TE 1.x
    ``attention.py``), causal with load balancing, each rank holding chunks ``r`` and
    ``2·cp − 1 − r``: step 0 runs the causal kernel on the rank's own two chunks against its
    own (``2c × 2c`` under a causal mask: ``2c²`` scores, ``c`` a chunk); every later step runs
    the kernel with ``causal=False`` on half blocks — both query chunks against the first
    received key/value chunk, or the second query chunk against both (``2c × c`` or
    ``c × 2c``: ``2c²`` each). Each of the ``cp`` steps is ``1/cp`` of the work; the ``cp − 1``
    non-causal ones run at ``noncausal_ratio`` times the causal rate:
    ``1/cp + (cp − 1)/(cp · noncausal_ratio)``; 1 for ``cp`` of 1. PyTorch's ``context_parallel``
    (``_templated_ring_attention``, load-balanced) runs the same steps and takes the same factor
    (``cp_merge_fp32``; 6 Dec 2026, s21 cp). ``first`` and ``later``: the first and the later
    steps' grids' efficiency over their benchmarks' (:func:`~stage_explore.analytical.
    attention_grid.call_grids`; 1: full grids), each step's time over it:
    ``1/(cp·first) + (cp − 1)/(cp · noncausal_ratio · later)``."""
    if cp <= 1:
        return 1.0 / first
    return 1.0 / (cp * first) + (cp - 1) / (cp * noncausal_ratio * later)


def te_ring_exposed_s(phase: str, cp: int, message_s: float, step_s: float) -> float:
    """Seconds of Transformer Engine's ring (P2P) exchanges that a phase's attention does not
    hide, ``message_s`` the time of one key/value message to the next cp rank and ``step_s``
    one step's attention (forward or backward), per ``AttnFuncWithCP`` (TE 1.x
    ``transformer_engine/pytorch/attention.py``; since TE 2.x ``AttnFuncWithCPAndKVP2P`` in
    ``attention/dot_product_attention/context_parallel.py``: "split attention compute into
    multiple steps, and overlap current-step compute with next-step communication"):

    - forward (and a recomputed one): step ``i`` waits for its keys and values, posts the
      send/receive of step ``i + 1``'s and runs its attention kernel, so each of the ``cp − 1``
      messages is hidden behind one step's attention: ``(cp − 1)·max(0, message − step)``;
    - backward: step ``i`` posts one exchange and runs its attention backward beside it — the
      keys and values alone at the first step, the keys and values with the accumulated key /
      value gradients (``p2p_comm_buffers[i % 2]``, two messages' bytes) at the middle ones, the
      gradients alone at the last — and the next step waits for it:
      ``2·max(0, message − step) + (cp − 2)·max(0, 2·message − step)``.

    The ``cp − 1`` (forward) and ``2·(cp − 1)`` (backward) messages are the lowering's ``ring``
    instruction (``ring_steps`` of them); 0 for ``cp`` of 1."""
    if cp <= 1:
        return 0.0
    if phase in ("fwd", "recompute"):
        return (cp - 1) * max(0.0, message_s - step_s)
    return 2 * max(0.0, message_s - step_s) + (cp - 2) * max(0.0, 2 * message_s - step_s)


def te_ring_comm_timer(
    instrs: Sequence[Instr],
    cp: int,
    comm_s: Callable[[Instr], float],
    attention_s: Callable[[Instr], float],
) -> Callable[[Instr], float]:
    """The communication timer of a block's instructions under Transformer Engine's ring
    context parallelism: a phase's ``ring`` instruction over cp (the key/value exchanges the
    lowering puts before its attention, which depends on it) is charged only
    :func:`te_ring_exposed_s` — one message ``comm_s(ring) / ring_steps``, one step ``1/cp`` of
    that attention instruction (kernels and the per-step merge kernels, ``attention_s``:
    every step's slowest rank does the same work, the load-balanced causal chunks). Every other
    instruction: ``comm_s``."""
    if cp <= 1:
        return comm_s
    charged: dict[Instr, float] = {}
    for attention in instrs:  # the attention that waits for a ring exchange is its consumer
        if attention.kind != "attention":
            continue
        for dep in attention.deps:
            ring = instrs[dep]
            if ring.kind == "ring" and ring.ring_steps > 0:
                message = comm_s(ring) / ring.ring_steps
                step = attention_s(attention) / cp
                charged[ring] = te_ring_exposed_s(ring.phase, cp, message, step)

    def timer(instr: Instr) -> float:
        seconds = charged.get(instr)
        return comm_s(instr) if seconds is None else seconds

    return timer
