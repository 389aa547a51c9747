"""Pipeline schedules: the order in which a pipeline rank runs its forward and backward tasks.

A task is ``(phase, chunk, micro_batch)``: phase ``"F"`` or ``"B"``, the rank's model chunk
(0 … vpp−1) and the micro-batch (0 … m−1). Model chunk ``v`` of pipeline rank ``r`` is global
stage ``v·p + r`` (Megatron's interleaving).

- GPipe: every forward, then every backward (Huang et al. 2019).
- 1F1B: ``p − r − 1`` warm-up forwards, then one forward and one backward alternately, then the
  remaining backwards (PipeDream-Flush, Narayanan et al. 2021).
- Interleaved 1F1B: Megatron's schedule over ``m·vpp`` virtual micro-batches, with
  ``(p − r − 1)·2 + (vpp − 1)·p`` warm-up forwards (Narayanan et al. 2021, Section 2.2.2).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from stage_core.errors import ConfigError


class Task(NamedTuple):
    phase: str
    chunk: int
    micro_batch: int


def _interleaved_ids(k: int, p: int, vpp: int, forward: bool) -> tuple[int, int]:
    """Chunk and micro-batch of the ``k``-th forward (or backward) virtual micro-batch."""
    group = k % (p * vpp)
    chunk = group // p
    if not forward:
        chunk = vpp - 1 - chunk
    micro_batch = (k // (p * vpp)) * p + group % p
    return chunk, micro_batch


@functools.lru_cache(maxsize=1024)
def schedule(
    kind: str, rank: int, stages: int, micro_batches: int, vpp: int = 1
) -> tuple[Task, ...]:
    """The task order of pipeline rank ``rank`` of ``stages`` for ``micro_batches`` (memoised:
    a pure function of its arguments, called for every candidate of a search)."""
    return tuple(_schedule(kind, rank, stages, micro_batches, vpp))


def _schedule(kind: str, rank: int, stages: int, micro_batches: int, vpp: int) -> list[Task]:
    p, m = stages, micro_batches
    if not 0 <= rank < p or m < 1 or vpp < 1:
        raise ConfigError(
            f"invalid pipeline position ({rank=}, {stages=}, {micro_batches=}, {vpp=})"
        )
    if kind == "gpipe":
        return [Task("F", 0, i) for i in range(m)] + [Task("B", 0, i) for i in range(m)]
    if kind == "1f1b" and vpp == 1:
        warmup = min(p - rank - 1, m)
        tasks = [Task("F", 0, i) for i in range(warmup)]
        forward, backward = warmup, 0
        while forward < m:
            tasks.append(Task("F", 0, forward))
            forward += 1
            tasks.append(Task("B", 0, backward))
            backward += 1
        tasks += [Task("B", 0, i) for i in range(backward, m)]
        return tasks
    if kind in ("interleaved", "1f1b"):
        if m % p:
            raise ConfigError(
                "the interleaved schedule needs micro-batches divisible by `pp`, "
                f"but got ({m=}, {p=})"
            )
        total = m * vpp
        warmup = min((p - rank - 1) * 2 + (vpp - 1) * p, total)
        tasks = [Task("F", *_interleaved_ids(k, p, vpp, True)) for k in range(warmup)]
        forward, backward = warmup, 0
        while forward < total:
            tasks.append(Task("F", *_interleaved_ids(forward, p, vpp, True)))
            forward += 1
            tasks.append(Task("B", *_interleaved_ids(backward, p, vpp, False)))
            backward += 1
        tasks += [Task("B", *_interleaved_ids(k, p, vpp, False)) for k in range(backward, total)]
        return tasks
    raise ConfigError(f"`schedule` must be gpipe, 1f1b or interleaved, but got {kind!r}")
