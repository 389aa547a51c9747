"""Pipeline schedules: the order in which a pipeline rank runs its forward and backward tasks.

A task is ``(phase, chunk, micro_batch)``: phase ``"F"`` (forward), ``"B"`` (backward) or
``"W"`` (the weight-gradient part of a backward, when a schedule splits it off), the rank's
model chunk and the micro-batch (0 … m−1). Model chunk ``v`` of pipeline rank ``r`` is global
stage ``v·p + r`` (Megatron's interleaving), except under DualPipe (:func:`global_stage`).

- GPipe: every forward, then every backward (Huang et al. 2019).
- 1F1B: ``p − r − 1`` warm-up forwards, then one forward and one backward alternately, then the
  remaining backwards (PipeDream-Flush, Narayanan et al. 2021).
- Interleaved 1F1B: Megatron's schedule over ``m·vpp`` virtual micro-batches, with
  ``(p − r − 1)·2 + (vpp − 1)·N`` warm-up forwards (Narayanan et al. 2021, Section 2.2.2),
  where ``N`` is the number of contiguous micro-batches a rank runs through one chunk before
  the next (Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``, default
  ``p``; the tunable ``N`` of Llama 3's schedule, arXiv 2407.21783 Section 3.3.2). A kind
  ``"interleaved/N"`` (:func:`grouped`) carries an ``N`` other than ``p``.
- ZB-H1 (``"zb"``; Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv 2401.10241,
  Section 3.1): 1F1B's order and warm-up with every backward split into ``B`` (input gradient,
  on the critical path: its result is sent upstream at once) and ``W`` (weight gradient), each
  ``W`` run in the slot after its ``B``. A rank never holds more micro-batches than under 1F1B
  (``p − r``), and the wait for a downstream ``B`` no longer includes the downstream ``W``:
  with equal F, B and W the bubble is a third of 1F1B's (the paper's ``(p−1)(F+B−W)`` against
  ``(p−1)(F+B+W)``; tests/explore/test_pipeline.py checks it).
- DualPipe (``"dualpipe"``; DeepSeek-V3 technical report, arXiv 2412.19437, Section 3.2.1 and
  Figure 5): the model is cut into ``p`` stages and every rank holds two of them, stage ``r``
  (chunk 0) and stage ``p − 1 − r`` (chunk 1) — two copies of the pipeline in opposite
  directions. Micro-batches ``0 … m/2 − 1`` enter at rank 0 and flow down through chunk 0;
  ``m/2 … m − 1`` enter at rank ``p − 1`` and flow up through chunk 1. The order follows the
  paper's eight phases (warm-up forwards of the rank's own direction, then both, zero-bubble
  ``B``/``W`` pairs, the steady state of overlapped forward-backward pairs, and the cool-down
  whose second half defers ``W``): :func:`overlapped` lists the forward/backward pairs a rank
  runs together, so that the communication of one hides behind the computation of the other.
  It needs an even ``p`` and an even number of micro-batches, at least ``2·p``.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable
from itertools import repeat
from typing import NamedTuple

from stage_core.errors import ConfigError

#: Schedules that split the backward into input-gradient (``B``) and weight-gradient (``W``)
#: tasks.
SPLIT_BACKWARD = frozenset({"zb", "dualpipe"})
#: Accepted spellings of schedule names.
ALIASES = {"zb-h1": "zb", "zbh1": "zb", "zero-bubble": "zb"}
#: Separates an interleaved kind from its micro-batch group size: ``"interleaved/24"``.
GROUP_SEPARATOR = "/"


class Task(NamedTuple):
    phase: str
    chunk: int
    micro_batch: int


#: ``_new(Task, (phase, chunk, micro_batch))`` builds a :class:`Task` without the named tuple's
#: Python-level ``__new__`` (a schedule builds one per forward and backward of every micro-batch).
_new = tuple.__new__

#: A task as a plain tuple ``(phase, chunk, micro_batch)``: equal to its :class:`Task`.
Step = tuple[str, int, int]


def _steps(phase: str, chunks: Iterable[int], micro_batches: Iterable[int]) -> list[Step]:
    """``[(phase, c, mb) for c, mb in zip(chunks, micro_batches)]`` by C-level iterators."""
    return list(zip(repeat(phase), chunks, micro_batches))


def grouped(kind: str, group: int | None) -> str:
    """The schedule kind that carries Megatron's micro-batch group size ``group`` (the ``N`` of
    :func:`megatron_table`): ``kind`` itself when ``group`` is None (the default, ``p``), else
    ``"kind/N"``. The kind is what every memo of a schedule's order, timeline and memory keys
    on, so a group size other than ``p`` is a shape of its own."""
    return kind if group is None else f"{kind}{GROUP_SEPARATOR}{group}"


def ungrouped(kind: str) -> tuple[str, int | None]:
    """:func:`grouped`'s inverse: the kind without its group size, and the group size (None:
    the default, ``p``)."""
    base, separator, group = kind.partition(GROUP_SEPARATOR)
    return base, int(group) if separator else None


def group_size(kind: str, stages: int) -> int:
    """Micro-batches per group of an interleaved kind: its ``N``, or ``stages`` (Megatron's
    default ``microbatch_group_size_per_vp_stage = pp``)."""
    group = ungrouped(kind)[1]
    return stages if group is None else group


def steady_prefix(kind: str, stages: int, micro_batches: int) -> int:
    """Micro-batches of a prefix whose live activations reach the whole step's peak: four
    groups past the warm-up (1F1B, ZB-H1 and interleaved 1F1B repeat per group after it) and
    the step's shorter last group, whose chunk mix the cool-down holds (``m mod N``; 0 under
    the default N = p, whose steps are whole groups)."""
    group = group_size(kind, stages)
    return 4 * group + micro_batches % group


def check_group(stages: int, micro_batches: int, group: int) -> None:
    """Megatron-Core's constraints on the group size ``N`` (``forward_backward_pipelining_with_
    interleaving``, megatron/core/pipeline_parallel/schedules.py): ``p ≤ N ≤ m`` (a ValueError
    there), and the last group, ``m mod N``, either empty or at least ``p`` micro-batches (a
    RuntimeError there: a shorter one leaves dependency bubbles)."""
    p, m, n = stages, micro_batches, group
    if not p <= n <= m:
        raise ConfigError(
            "the interleaved schedule's `microbatch_group_size_per_vp_stage` must lie in "
            f"[pp, micro-batches] (Megatron-Core), but got ({n=}, pp={p}, micro_batches={m})"
        )
    if 0 < m % n < p:
        raise ConfigError(
            "the micro-batches left over after groups of `microbatch_group_size_per_vp_stage` "
            f"must be 0 or at least pp (Megatron-Core), but got {m % n} ({m=}, {n=}, pp={p})"
        )


def megatron_table(
    micro_batches: int, vpp: int, group: int
) -> tuple[list[int], list[int], list[int]]:
    """The virtual micro-batches' order as columns: micro-batch, forward chunk, backward chunk.
    Megatron-Core's ``get_schedule_table``: groups of ``group`` consecutive micro-batches (the
    last group takes what is left), each run through chunk 0, then chunk 1, … ``vpp − 1``; the
    backward order is the same table with chunk ``c`` read as ``vpp − 1 − c``. Built by whole
    groups (list repetition, C-level), not entry by entry."""
    mbs: list[int] = []
    forward: list[int] = []
    backward: list[int] = []
    columns: dict[int, tuple[list[int], list[int]]] = {}  # per group size: its chunk columns
    for start in range(0, micro_batches, group):
        size = min(group, micro_batches - start)
        if size not in columns:
            chunks = [chunk for chunk in range(vpp) for _ in range(size)]
            columns[size] = chunks, [vpp - 1 - chunk for chunk in chunks]
        mbs += [*range(start, start + size)] * vpp
        forward += columns[size][0]
        backward += columns[size][1]
    return mbs, forward, backward


def chunks_per_rank(kind: str, vpp: int) -> int:
    """Model chunks a pipeline rank holds: ``vpp``, or two under DualPipe."""
    return 2 if kind == "dualpipe" else vpp


def global_stages(kind: str, stages: int, vpp: int) -> int:
    """Number of global pipeline stages: ``pp·vpp`` (DualPipe: ``pp``, held twice)."""
    return stages if kind == "dualpipe" else stages * vpp


def global_stage(kind: str, rank: int, chunk: int, stages: int) -> int:
    """The global stage of ``chunk`` on ``rank``: ``chunk·p + rank``; under DualPipe chunk 0 is
    stage ``rank`` and chunk 1 stage ``p − 1 − rank`` (the V-shape mapping)."""
    if kind == "dualpipe":
        return rank if chunk == 0 else stages - 1 - rank
    return chunk * stages + rank


@functools.lru_cache(maxsize=1024)
def schedule(
    kind: str, rank: int, stages: int, micro_batches: int, vpp: int = 1
) -> tuple[Task, ...]:
    """The task order of pipeline rank ``rank`` of ``stages`` for ``micro_batches`` (memoised:
    a pure function of its arguments, called for every candidate of a search)."""
    kind = ALIASES.get(kind, kind)
    if kind == "dualpipe":
        return _dualpipe(rank, stages, micro_batches, vpp)[0]
    steps = _schedule(*ungrouped(kind), rank, stages, micro_batches, vpp)
    return tuple(map(_new, repeat(Task), steps))


def order(kind: str, rank: int, stages: int, micro_batches: int, vpp: int = 1) -> tuple[Step, ...]:
    """:func:`schedule`'s order as plain ``(phase, chunk, micro_batch)`` tuples (equal to its
    tasks), not memoised: what a caller that keeps only its own digest of the order needs (the
    analytical backend's task graphs, :mod:`stage_explore.analytical.taskgraph`), without a
    :class:`Task` object per task (~0.1 µs each; a schedule of 16 ranks × 384 micro-batches ×
    vpp 4 has ~50,000 tasks) or a process-wide memo holding them."""
    kind = ALIASES.get(kind, kind)
    if kind == "dualpipe":
        return _dualpipe(rank, stages, micro_batches, vpp)[0]
    return tuple(_schedule(*ungrouped(kind), rank, stages, micro_batches, vpp))


@functools.lru_cache(maxsize=1024)
def overlapped(
    kind: str, rank: int, stages: int, micro_batches: int, vpp: int = 1
) -> frozenset[int]:
    """Indices ``i`` of the rank's order where the forward ``i`` runs overlapped with the
    backward ``i + 1`` and its weight gradient ``i + 2`` (DualPipe's forward-backward pairs;
    empty for the other schedules)."""
    if ALIASES.get(kind, kind) != "dualpipe":
        return frozenset()
    return _dualpipe(rank, stages, micro_batches, vpp)[1]


def check_dualpipe(stages: int, micro_batches: int, vpp: int = 1) -> None:
    """DualPipe's constraints (DeepSeek-V3 report, Section 3.2.1: "DualPipe only requires that
    the pipeline stages and micro-batches be divisible by 2"; its eight phases need at least
    ``2·p`` micro-batches)."""
    p, m = stages, micro_batches
    if vpp != 1:
        raise ConfigError(
            f"schedule='dualpipe' holds two chunks per rank itself: `vpp` must be 1, got {vpp=}"
        )
    if p < 2 or p % 2:
        raise ConfigError(f"schedule='dualpipe' needs an even `pp` ≥ 2, but got pp={p}")
    if m % 2 or m < 2 * p:
        raise ConfigError(
            "schedule='dualpipe' needs an even number of micro-batches, at least 2·`pp`, "
            f"but got (micro_batches={m}, pp={p})"
        )


def _schedule(
    kind: str, group: int | None, rank: int, stages: int, micro_batches: int, vpp: int
) -> list[Step]:
    p, m = stages, micro_batches
    if not 0 <= rank < p or m < 1 or vpp < 1:
        raise ConfigError(
            f"invalid pipeline position ({rank=}, {stages=}, {micro_batches=}, {vpp=})"
        )
    if group is not None and (kind not in ("interleaved", "1f1b") or vpp == 1):
        raise ConfigError(
            "`microbatch_group_size_per_vp_stage` orders the interleaved schedule's chunks: it "
            f"needs schedule='interleaved' with `vpp` > 1, but got ({kind=}, {vpp=})"
        )
    if kind == "gpipe":
        return _steps("F", repeat(0), range(m)) + _steps("B", repeat(0), range(m))
    if kind == "zb" and vpp == 1:
        return _zero_bubble_h1(rank, p, m)
    if kind == "1f1b" and vpp == 1:
        forwards = _steps("F", repeat(0), range(m))
        backwards = _steps("B", repeat(0), range(m))
        return _one_forward_one_backward(forwards, backwards, min(p - rank - 1, m))
    if kind == "zb":
        raise ConfigError(f"schedule='zb' runs one chunk per rank: `vpp` must be 1, but got {vpp=}")
    if kind in ("interleaved", "1f1b"):
        if group is None and m % p:
            raise ConfigError(
                "the interleaved schedule needs micro-batches divisible by `pp`, "
                f"but got ({m=}, {p=})"
            )
        n = p if group is None else group
        check_group(p, m, n)
        # the k-th forward virtual micro-batch runs entry k of Megatron's table; the k-th
        # backward the same micro-batch through the mirrored chunk vpp − 1 − c
        mbs, forward_chunks, backward_chunks = megatron_table(m, vpp, n)
        forwards = _steps("F", forward_chunks, mbs)
        backwards = _steps("B", backward_chunks, mbs)
        warmup = min((p - rank - 1) * 2 + (vpp - 1) * n, m * vpp)
        return _one_forward_one_backward(forwards, backwards, warmup)
    raise ConfigError(
        f"`schedule` must be gpipe, 1f1b, interleaved, zb or dualpipe, but got {kind!r}"
    )


def _one_forward_one_backward(
    forwards: list[Step], backwards: list[Step], warmup: int
) -> list[Step]:
    """The ``warmup`` first forwards, then the next forward and the next backward alternately
    until the forwards run out, then the remaining backwards."""
    steady = len(forwards) - warmup
    alternating: list[Step] = [forwards[0]] * (2 * steady)
    alternating[0::2] = forwards[warmup:]
    alternating[1::2] = backwards[:steady]
    return forwards[:warmup] + alternating + backwards[steady:]


def _zero_bubble_h1(rank: int, p: int, m: int) -> list[Step]:
    """ZB-H1 on rank ``r``: 1F1B's ``p − r − 1`` warm-up forwards and its F/B alternation, with
    each ``W`` deferred by ``r`` micro-batches (run after the ``B`` of ``r`` micro-batches
    later); in the cool-down a ``W`` follows every ``B`` (filling the wait for the next), and
    the last ``r`` come at the end. Rank ``r`` then holds at most ``p − r + r = p``
    micro-batches, 1F1B's peak (rank 0's): the memory bound of ZB-H1."""
    warmup = min(p - rank - 1, m)
    tasks: list[Step] = [("F", 0, i) for i in range(warmup)]
    pending: deque[int] = deque()
    forward = warmup
    for backward in range(m):
        if forward < m:
            tasks.append(("F", 0, forward))
            forward += 1
        tasks.append(("B", 0, backward))
        pending.append(backward)
        if len(pending) > rank or forward == m:
            tasks.append(("W", 0, pending.popleft()))
    tasks += [("W", 0, i) for i in pending]
    return tasks


class _DualPipe:
    """Builds one rank's DualPipe order: per local phase (0: the direction entering at the
    rank's own end of the pipeline, 1: the other) the next forward and backward micro-batch,
    and the queue of deferred weight gradients."""

    def __init__(self, rank: int, p: int, m: int) -> None:
        half = m // 2
        first_half = rank < p // 2
        # local phase → chunk (direction): the first half of the ranks sees direction 0 first
        self.chunk = (0, 1) if first_half else (1, 0)
        self.base = {0: 0, 1: half}  # direction 0 runs micro-batches 0…m/2−1, 1 the rest
        self.next_forward = [0, 0]
        self.next_backward = [0, 0]
        self.deferred: deque[Task] = deque()
        self.tasks: list[Task] = []
        self.pairs: set[int] = set()

    def _mb(self, phase: int, counter: list[int]) -> tuple[int, int]:
        chunk = self.chunk[phase]
        mb = self.base[chunk] + counter[phase]
        counter[phase] += 1
        return chunk, mb

    def forward(self, phase: int) -> None:
        self.tasks.append(Task("F", *self._mb(phase, self.next_forward)))

    def backward(self, phase: int, defer_weight: bool = False) -> None:
        chunk, mb = self._mb(phase, self.next_backward)
        self.tasks.append(Task("B", chunk, mb))
        if defer_weight:
            self.deferred.append(Task("W", chunk, mb))
        else:
            self.tasks.append(Task("W", chunk, mb))

    def weight(self) -> None:
        self.tasks.append(self.deferred.popleft())

    def forward_backward(self, forward_phase: int, backward_phase: int) -> None:
        self.pairs.add(len(self.tasks))
        self.forward(forward_phase)
        self.backward(backward_phase)


@functools.lru_cache(maxsize=256)
def _dualpipe(rank: int, p: int, m: int, vpp: int) -> tuple[tuple[Task, ...], frozenset[int]]:
    """One rank's DualPipe order and its overlapped pairs (the eight phases of the reference
    schedule published with the report; ``k = min(r, p − 1 − r)``, ``h = p/2``)."""
    if not 0 <= rank < p:
        raise ConfigError(f"invalid pipeline position ({rank=}, stages={p}, micro_batches={m})")
    check_dualpipe(p, m, vpp)
    h, k, half = p // 2, min(rank, p - 1 - rank), m // 2
    s = _DualPipe(rank, p, m)
    for _ in range((h - k - 1) * 2):  # 1: forwards of the rank's own direction
        s.forward(0)
    for _ in range(k + 1):  # 2: forwards of both directions
        s.forward(0)
        s.forward(1)
    for _ in range(h - k - 1):  # 3: B, W, F of the other direction (zero bubble)
        s.backward(1, defer_weight=True)
        s.weight()
        s.forward(1)
    for i in range(half - p + k + 1):  # 4: the steady state, forward-backward pairs
        if i == 0 and k == h - 1:  # the middle ranks do not overlap the first pair
            s.forward(0)
            s.backward(1)
        else:
            s.forward_backward(0, 1)
        s.forward_backward(1, 0)
    for _ in range(h - k - 1):  # 5: B of one direction, a pair
        s.backward(1)
        s.forward_backward(1, 0)
    defer = False
    for i in range(k + 1):  # 6: backwards of both; the second half defers W
        if i == (k + 1) // 2 and k % 2 == 1:
            defer = True
        s.backward(1, defer_weight=defer)
        if i == (k + 1) // 2 and k % 2 == 0:
            defer = True
        s.backward(0, defer_weight=defer)
    for _ in range(h - k - 1):  # 7: a deferred W, then a B whose W is deferred
        s.weight()
        s.backward(0, defer_weight=True)
    for _ in range(k + 1):  # 8: the remaining W
        s.weight()
    assert not s.deferred and s.next_forward == s.next_backward == [half, half]
    return tuple(s.tasks), frozenset(s.pairs)
