"""ZeRO-2/3 parameter gathers and gradient reduce-scatters as the frameworks queue them: one
pass (a chunk's forward or backward of one micro-batch) on a rank's compute stream and one
ZeRO queue, with the replica all-reduce of hybrid sharding on a stream of its own; the pass
ends when all three are done.

**The queue** (docs/analytical.md, "ZeRO-3 gathers as the frameworks queue them"). A ZeRO-3
framework all-gathers a unit's parameters before its compute and reduce-scatters its gradients
after its backward, both over the same data-parallel process group: one NCCL communicator,
whose kernels run in the order they are issued whichever CUDA stream issues them (NCCL
serialises a communicator's operations: ``src/enqueue.cc``, the communicator's strong
``deviceStream``; PyTorch's ``ProcessGroupNCCL`` runs a group's work on its own NCCL stream).
So gathers and scatters share one queue, in issue order, and one set of links. A gather runs
at most ``depth`` units ahead of the compute that needs it: the gather of block ``k`` is issued
once the compute of block ``k − depth − 1`` has ended, before that block's successor's
reduce-scatter (FSDP2: ``FSDPParamGroup.unshard`` waits for the previous all-gather's copy-out
event on the compute stream, so the next unit's all-gather starts when the current unit's
compute starts — one unit; FSDP1: ``limit_all_gathers``' rate limiter, at most two all-gathers
in flight, the third waits for the first unit's free event after its compute — one unit;
FSDP1's and FSDP2's backward prefetch issue the next unit's all-gather at the current unit's
pre-backward, before its reduce-scatter; Megatron-FSDP prefetches at the previous unit's
pre-forward after ``ag_stream.wait_stream(current_stream())``; DeepSpeed ZeRO-3's
``stage3_prefetch_bucket_size`` per sub-module, one unit at block granularity). Depth 0: no
prefetch, a unit's gather is issued when the compute before it has ended.

**The pass's end.** A backward pass ends once its reduce-scatters and replica all-reduces
have, in every framework with a per-micro-batch gradient reduction: DeepSpeed ZeRO-2/3's
``independent_gradient_partition_epilogue`` (``overlap_comm``: ``torch.cuda.synchronize()``
in stage 1/2's, ``reduce_and_partition_stream.synchronize()`` in stage 3's; microsoft/
DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py``, ``stage3.py``), run by the engine's
``allreduce_gradients`` after every backward under ZeRO ≥ 2; FSDP1's
``_post_backward_final_callback`` (``current_stream.wait_stream`` of the post-backward and,
with hybrid sharding, the all-reduce stream; ``torch/distributed/fsdp/_runtime_utils.py``);
FSDP2's ``_root_post_backward_final_callback`` (the current stream waits for the last
reduce-scatter's event, ``finalize_backward`` for the all-reduce's; ``_fsdp_state.py``,
``_fsdp_param_group.py``). So ZeRO-2's backlog — its scatters, one after the other behind
the blocks that produced them — is exposed at the pass's end, not run beside the next
forward, and the next pass starts with every stream free (:func:`pass_time` is the maximum
of the three clocks). A block without a gather waits for nothing at depth 0 either.

**Closed form.** :func:`pass_time` runs the recurrence over the pass's runs of identical blocks
and, once a block leaves every stream's clock shifted by the same period (the steady state:
``max(compute, gathers + scatters, replica)`` per block), adds the run's remaining blocks at
that period; :func:`expanded_pass_time` is the same recurrence block by block (the tests' oracle
of the closed form). Per block the steady state is the levelled mode's former
``max(compute, comm)``; what the queue adds is at a pass's edges: the first block's gather has
no compute before it to hide behind, and the last block's reduce-scatter none after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueBlock:
    """One block of a pass: ``compute_s`` on the compute stream (slowed by the NCCL kernels
    beside it), the ``gather_s`` of the ZeRO queue it waits for before, the ``scatter_s`` it
    queues after (the backward's reduce-scatter), and the ``replica_s`` all-reduce of its
    gradient shard over the replicas that follows the scatter on a stream of its own."""

    compute_s: float
    gather_s: float = 0.0
    scatter_s: float = 0.0
    replica_s: float = 0.0


@dataclass(slots=True)
class _Clock:
    """The streams' state after some blocks: when the last compute ended, when the queue and
    the replica stream are free, and when the gathers already queued for the next blocks end
    (``ready``, oldest first) — each kept at least that compute's end (the earliest its next
    use can be: a no-op on the result), so that the steady state shows as one shift of all."""

    end: float = 0.0
    queue: float = 0.0
    replica: float = 0.0
    ready: tuple[float, ...] = ()

    def state(self) -> tuple[float, ...]:
        return self.end, self.queue, self.replica, *self.ready

    def shift(self, seconds: float) -> None:
        self.end += seconds
        self.queue += seconds
        self.replica += seconds
        self.ready = tuple(r + seconds for r in self.ready)


def _step(clock: _Clock, block: QueueBlock, ahead: QueueBlock | None, depth: int) -> None:
    """Run ``block`` and queue the gather of the block ``depth`` after it (``ahead``; None past
    the pass's end) before this block's scatter, as the frameworks issue them (at this block's
    pre-forward or pre-backward hook; its reduce-scatter at its post-backward); a gather
    starts no earlier than the end of the compute before this block. At depth 0 the block's
    own gather is issued then."""
    queue = clock.queue
    if depth == 0:  # its own gather, if any, issued now
        gathered = 0.0  # none: nothing to wait for
        if block.gather_s:
            gathered = queue = max(queue, clock.end) + block.gather_s
        ready: tuple[float, ...] = ()
    else:
        gathered, ready = clock.ready[0], clock.ready[1:]
        if ahead is not None and ahead.gather_s > 0.0:
            queue = max(queue, clock.end) + ahead.gather_s
            ready = (*ready, queue)
        else:  # nothing to wait for
            ready = (*ready, 0.0)
    end = max(clock.end, gathered) + block.compute_s
    if block.scatter_s > 0.0:
        queue = max(queue, end) + block.scatter_s
    replica = clock.replica
    if block.replica_s > 0.0:
        replica = max(replica, queue) + block.replica_s
    clock.end, clock.queue, clock.replica = end, max(queue, end), max(replica, end)
    clock.ready = tuple(max(r, end) for r in ready)


def _start(blocks: Sequence[QueueBlock], depth: int) -> _Clock:
    """The clock at the pass's start: the first ``depth`` blocks' gathers issued (the first
    unit's pre-forward or pre-backward prefetches the ones after it)."""
    if depth < 0:
        raise ValueError(f"prefetch depth must be >= 0, not {depth}")
    ready = []
    queue = 0.0
    for block in blocks[:depth]:
        queue += block.gather_s
        ready.append(queue if block.gather_s > 0.0 else 0.0)
    ready.extend([0.0] * (depth - len(ready)))
    return _Clock(0.0, queue, 0.0, tuple(ready))


def expanded_pass_time(blocks: Sequence[QueueBlock], depth: int) -> float:
    """The pass's seconds, block by block: when its compute, its queue and its replica stream
    are all done, from a pass start with every stream free."""
    clock = _start(blocks, depth)
    for k, block in enumerate(blocks):
        ahead = blocks[k + depth] if depth and k + depth < len(blocks) else None
        _step(clock, block, ahead, depth)
    return max(clock.state())


def pass_time(runs: Sequence[tuple[QueueBlock, int]], depth: int) -> float:
    """:func:`expanded_pass_time` of the blocks ``runs`` (block, count) expand to, each run cut
    short once one of its blocks shifts all three clocks by the same period (translation
    invariance: every further block of the run whose ``depth``-ahead block is in the run too
    shifts them by that period again)."""
    flat = [(block, count) for block, count in runs if count > 0]
    head: list[QueueBlock] = []
    for block, count in flat:
        head.extend([block] * min(count, depth - len(head)))
    clock = _start(head, depth)
    for index, (block, count) in enumerate(flat):
        done = 0
        while done < count:
            before = clock.state()
            _step(clock, block, _ahead(flat, index, done, depth), depth)
            done += 1
            after = clock.state()
            period = after[0] - before[0]
            repeat = count - done - depth  # the next blocks whose `ahead` is in the run
            if (
                repeat > 0
                and all(
                    abs(a - b - period) <= 1e-12 * max(1.0, abs(a))
                    for a, b in zip(after, before, strict=True)
                )
                and done + depth <= count
            ):  # this block's `ahead` was in the run too
                clock.shift(period * repeat)
                done += repeat
    return max(clock.state())


def _ahead(
    flat: Sequence[tuple[QueueBlock, int]], index: int, done: int, depth: int
) -> QueueBlock | None:
    """The block ``depth`` after the ``done``-th block of run ``index`` (None past the end or
    with depth 0)."""
    if depth == 0:
        return None
    offset = done + depth
    for block, count in flat[index:]:
        if offset < count:
            return block
        offset -= count
    return None
