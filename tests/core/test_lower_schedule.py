"""Pipeline schedules: task orders of GPipe, 1F1B and interleaved 1F1B (Narayanan et al. 2021).

Per pipeline rank: every (chunk, micro-batch) runs its forward once and its backward once, the
forward first; the warm-up (forwards before the first backward) has the published length; and
the ranks' orders together never deadlock (a simulation runs every rank in its order, a task
waiting for its neighbour's forward or backward of the same micro-batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.lower.schedule import Task, order, schedule
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

CASES = [
    # (kind, p, m, v)
    ("gpipe", 1, 3, 1), ("gpipe", 4, 4, 1), ("gpipe", 4, 7, 1),
    ("1f1b", 1, 3, 1), ("1f1b", 2, 1, 1), ("1f1b", 4, 2, 1), ("1f1b", 4, 4, 1), ("1f1b", 4, 9, 1),
    ("1f1b", 8, 16, 1),
    ("interleaved", 2, 2, 2), ("interleaved", 2, 4, 3), ("interleaved", 4, 4, 2),
    ("interleaved", 4, 8, 2), ("interleaved", 4, 12, 4), ("interleaved", 8, 16, 2),
]
IDS = [f"{k}-p{p}-m{m}-v{v}" for k, p, m, v in CASES]


def _leading_forwards(tasks: Sequence[Task]) -> int:
    return next((i for i, t in enumerate(tasks) if t.phase == "B"), len(tasks))


def expected_warmup(kind: str, rank: int, p: int, m: int, v: int) -> int:
    """Forwards before the first backward: GPipe all; 1F1B ``p − r − 1`` warm-up forwards plus
    the first steady-state forward; interleaved ``(p − r − 1)·2 + (v − 1)·p`` plus one."""
    if kind == "gpipe":
        return m
    if v == 1:
        return min(p - rank, m)
    return min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES, ids=IDS)
def test_every_task_once_forward_before_backward(kind: str, p: int, m: int, v: int) -> None:
    for rank in range(p):
        tasks = schedule(kind, rank, p, m, v)
        assert len(tasks) == 2 * m * v
        expected = {(c, i) for c in range(v) for i in range(m)}
        forwards = [(t.chunk, t.micro_batch) for t in tasks if t.phase == "F"]
        backwards = [(t.chunk, t.micro_batch) for t in tasks if t.phase == "B"]
        assert set(forwards) == set(backwards) == expected
        assert len(forwards) == len(backwards) == m * v
        position = {(t.phase, t.chunk, t.micro_batch): i for i, t in enumerate(tasks)}
        assert all(position[("F", c, i)] < position[("B", c, i)] for c, i in expected)
        # micro-batches enter a chunk in order, and leave it in order
        for c in range(v):
            assert [i for cc, i in forwards if cc == c] == list(range(m))
            assert [i for cc, i in backwards if cc == c] == list(range(m))


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES, ids=IDS)
def test_warmup_lengths(kind: str, p: int, m: int, v: int) -> None:
    for rank in range(p):
        tasks = schedule(kind, rank, p, m, v)
        assert _leading_forwards(tasks) == expected_warmup(kind, rank, p, m, v)


@pytest.mark.parametrize(("kind", "p", "m", "v"), [c for c in CASES if c[0] == "1f1b"])
def test_1f1b_alternates_after_warmup_and_bounds_in_flight(
    kind: str, p: int, m: int, v: int,
) -> None:
    for rank in range(p):
        tasks = schedule(kind, rank, p, m, v)
        warmup = expected_warmup(kind, rank, p, m, v)
        steady = tasks[warmup - 1: 2 * m - warmup + 1]
        assert [t.phase for t in steady] == ["F", "B"] * (len(steady) // 2)
        live = peak = 0
        for task in tasks:
            live += 1 if task.phase == "F" else -1
            peak = max(peak, live)
        assert peak == min(p - rank, m)


def _global_stage(rank: int, chunk: int, p: int) -> int:
    return chunk * p + rank


def simulate(kind: str, p: int, m: int, v: int) -> int:
    """Run every rank in its task order; a forward needs the previous global stage's forward of
    the micro-batch, a backward the next global stage's backward (the last global stage's
    backward needs its own forward). Returns the number of rounds; raises on a deadlock."""
    orders = [schedule(kind, rank, p, m, v) for rank in range(p)]
    done: set[tuple[str, int, int]] = set()  # (phase, global stage, micro-batch)
    cursor = [0] * p
    last = p * v - 1
    rounds = 0
    while any(cursor[r] < len(orders[r]) for r in range(p)):
        progressed = []
        for rank in range(p):
            if cursor[rank] == len(orders[rank]):
                continue
            task = orders[rank][cursor[rank]]
            stage = _global_stage(rank, task.chunk, p)
            if task.phase == "F":
                ready = stage == 0 or ("F", stage - 1, task.micro_batch) in done
            else:
                ready = ("F", stage, task.micro_batch) in done and (
                    stage == last or ("B", stage + 1, task.micro_batch) in done
                )
            if ready:
                progressed.append((rank, (task.phase, stage, task.micro_batch)))
        if not progressed:
            raise AssertionError(f"deadlock at {cursor} for {kind} p={p} m={m} v={v}")
        for rank, key in progressed:
            done.add(key)
            cursor[rank] += 1
        rounds += 1
    return rounds


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES, ids=IDS)
def test_the_ranks_orders_never_deadlock(kind: str, p: int, m: int, v: int) -> None:
    rounds = simulate(kind, p, m, v)
    # in unit-time rounds a step takes at least the ideal 2·m·v tasks plus the bubble
    assert rounds >= 2 * m * v + 2 * (p - 1)


def test_1f1b_and_gpipe_take_the_same_rounds_interleaving_shortens_the_bubble() -> None:
    """Same bubble for GPipe and 1F1B (1F1B saves memory, not time); interleaving divides the
    bubble by v in units of a full stage (here chunks take 1/v of a stage's time)."""
    p, m = 4, 8
    assert simulate("gpipe", p, m, 1) == simulate("1f1b", p, m, 1) == 2 * m + 2 * (p - 1)
    v = 2
    assert simulate("interleaved", p, m, v) < v * (2 * m + 2 * (p - 1))


def test_interleaving_needs_micro_batches_divisible_by_pp() -> None:
    with pytest.raises(ConfigError, match="divisible by `pp`"):
        schedule("interleaved", 0, 4, 6, 2)
    with pytest.raises(ConfigError, match="`pp` to divide the number of micro-batches"):
        ParallelConfig(pp=4, vpp=2, schedule="interleaved", global_batch=6)


def test_bad_positions_and_kinds_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="invalid pipeline position"):
        schedule("1f1b", 4, 4, 8)
    with pytest.raises(ConfigError, match="`schedule` must be"):
        schedule("zigzag", 0, 2, 2)


def test_stage_programs_follow_the_schedule_and_assign_chunks() -> None:
    """``lower`` gives each stage its schedule's tasks and chunk ``v`` of rank ``r`` the global
    stage ``v·p + r`` with ``L/(p·v)`` layers; embedding first, head last."""
    model = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=512)
    p, v, m = 2, 2, 4
    programs = lower(model, ParallelConfig(pp=p, vpp=v, schedule="interleaved", global_batch=m))
    for stage in programs.stages:
        assert tuple(stage.tasks) == tuple(schedule("interleaved", stage.stage, p, m, v))
        for index, chunk in enumerate(stage.chunks):
            j = index * p + stage.stage
            assert chunk.stage == j and chunk.index == index
            assert chunk.layers == tuple(range(2 * j, 2 * j + 2))
            kinds = [b.kind for b in chunk.blocks]
            assert kinds == (["embedding"] if j == 0 else []) + ["layer", "layer"] + (
                ["head"] if j == p * v - 1 else []
            )


@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "interleaved", "zb", "zb-h1", "dualpipe"])
def test_the_plain_order_is_the_schedule_and_the_schedule_its_tasks(kind: str) -> None:
    """``order`` (plain tuples, what the analytical backend's task graphs read) and
    ``schedule`` (:class:`Task` objects) list the same tasks, built from one code path."""
    shapes = [
        (p, m, v)
        for p in (1, 2, 3, 4, 6, 8)
        for m in (1, 2, 4, 6, 12, 16, 24)
        for v in ((1, 2, 3) if kind in ("interleaved", "1f1b") else (1,))
        if (kind != "interleaved" or m % p == 0)
        and (kind != "dualpipe" or (p % 2 == 0 and m % 2 == 0 and m >= 2 * p))
        and (kind != "1f1b" or v == 1 or m % p == 0)
    ]
    assert shapes
    for p, m, v in shapes:
        for rank in range(p):
            tasks, plain = schedule(kind, rank, p, m, v), order(kind, rank, p, m, v)
            split = kind in ("zb", "zb-h1", "dualpipe")  # F, B and W of every micro-batch
            assert plain == tasks
            assert len(plain) == (3 * m if split else 2 * m * v)
            assert all(type(task) is Task for task in tasks)
            if kind != "dualpipe":  # DualPipe's builder makes Task objects for both
                assert all(type(step) is tuple for step in plain)
