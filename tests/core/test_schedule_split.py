"""Schedules that split the backward: ZB-H1 (Qi et al. 2024) and DualPipe (DeepSeek-V3 report,
Section 3.2.1); the B/W split of a block's derived backward; their activation memory.

Per rank: every (chunk, micro-batch) runs F, B and W once, in that order; the ranks' orders
never deadlock; ZB-H1 keeps 1F1B's peak of ``p`` micro-batches in flight; DualPipe holds
stages ``r`` and ``p − 1 − r`` and feeds half the micro-batches from each end.
"""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import activation_peak, memory_report
from stage_core.lower.program import lower
from stage_core.lower.schedule import global_stage, global_stages, overlapped, schedule
from stage_core.lower.weightgrad import split_backward
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

CASES = [("zb", 1, 3), ("zb", 2, 1), ("zb", 4, 2), ("zb", 4, 8), ("zb", 8, 20),
         ("dualpipe", 2, 4), ("dualpipe", 4, 8), ("dualpipe", 4, 14), ("dualpipe", 8, 16),
         ("dualpipe", 6, 30)]  # fmt: skip
IDS = [f"{k}-p{p}-m{m}" for k, p, m in CASES]


def _chunks(kind: str) -> int:
    return 2 if kind == "dualpipe" else 1


@pytest.mark.parametrize(("kind", "p", "m"), CASES, ids=IDS)
def test_every_task_once_in_the_order_f_b_w(kind: str, p: int, m: int) -> None:
    for rank in range(p):
        tasks = schedule(kind, rank, p, m)
        position = {(t.phase, t.chunk, t.micro_batch): i for i, t in enumerate(tasks)}
        assert len(position) == len(tasks) == 3 * m
        for chunk in range(_chunks(kind)):
            mbs = [t.micro_batch for t in tasks if t.chunk == chunk and t.phase == "F"]
            if kind == "dualpipe":  # direction 0 runs the first half, direction 1 the rest
                assert mbs == list(range(chunk * m // 2, (chunk + 1) * m // 2))
            else:
                assert mbs == list(range(m))
            for mb in mbs:
                assert position[("F", chunk, mb)] < position[("B", chunk, mb)]
                assert position[("B", chunk, mb)] < position[("W", chunk, mb)]


def _rounds(kind: str, p: int, m: int) -> int:
    """Unit-time rounds: a forward needs the previous global stage's forward, a backward the
    next stage's backward (the last stage its own forward), a W its own B (same rank)."""
    orders = [schedule(kind, r, p, m) for r in range(p)]
    last = global_stages(kind, p, 1) - 1
    done: set[tuple[str, int, int]] = set()
    cursor = [0] * p
    rounds = 0
    while any(cursor[r] < len(orders[r]) for r in range(p)):
        progressed = []
        for r in range(p):
            if cursor[r] == len(orders[r]):
                continue
            t = orders[r][cursor[r]]
            j = global_stage(kind, r, t.chunk, p)
            if t.phase == "F":
                ready = j == 0 or ("F", j - 1, t.micro_batch) in done
            elif t.phase == "B":
                ready = ("F", j, t.micro_batch) in done and (
                    j == last or ("B", j + 1, t.micro_batch) in done
                )
            else:
                ready = ("B", j, t.micro_batch) in done
            if ready:
                progressed.append((r, (t.phase, j, t.micro_batch)))
        assert progressed, f"deadlock at {cursor} for {kind} p={p} m={m}"
        for r, key in progressed:
            done.add(key)
            cursor[r] += 1
        rounds += 1
    return rounds


@pytest.mark.parametrize(("kind", "p", "m"), CASES, ids=IDS)
def test_the_ranks_orders_never_deadlock(kind: str, p: int, m: int) -> None:
    assert _rounds(kind, p, m) >= 3 * m


@pytest.mark.parametrize(("p", "m"), [(1, 3), (4, 2), (4, 8), (8, 20)])
def test_zb_h1_holds_at_most_1f1b_peak_of_p_micro_batches(p: int, m: int) -> None:
    """A micro-batch is in flight from its F to its W; rank r keeps 1F1B's warm-up of p − r − 1
    forwards and defers W by r, so every rank's peak is min(p, m), 1F1B's rank-0 peak."""
    for rank in range(p):
        live = peak = 0
        for t in schedule("zb", rank, p, m):
            live += {"F": 1, "B": 0, "W": -1}[t.phase]
            peak = max(peak, live)
        assert peak == min(p, m)
        warmup = next(i for i, t in enumerate(schedule("zb", rank, p, m)) if t.phase != "F")
        assert warmup == min(p - rank, m)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (8, 16), (8, 40)])
def test_dualpipe_v_shape_and_pairs(p: int, m: int) -> None:
    for rank in range(p):
        assert global_stage("dualpipe", rank, 0, p) == rank
        assert global_stage("dualpipe", rank, 1, p) == p - 1 - rank
        tasks = schedule("dualpipe", rank, p, m)
        pairs = overlapped("dualpipe", rank, p, m)
        # the steady state: (m/2 − p + k + 1) iterations of two pairs (one fewer on the middle
        # ranks, which run their first forward and backward apart) and (p/2 − k − 1) more
        k = min(rank, p - 1 - rank)
        expected = 2 * (m // 2 - p + k + 1) + (p // 2 - k - 1) - (k == p // 2 - 1)
        assert len(pairs) == expected
        for i in pairs:
            f, b, w = tasks[i], tasks[i + 1], tasks[i + 2]
            assert (f.phase, b.phase, w.phase) == ("F", "B", "W")
            assert (b.chunk, b.micro_batch) == (w.chunk, w.micro_batch) and f.chunk != b.chunk


def test_bad_dualpipe_and_zb_shapes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="even `pp`"):
        schedule("dualpipe", 0, 3, 12)
    with pytest.raises(ConfigError, match="at least 2·`pp`"):
        schedule("dualpipe", 0, 4, 6)
    with pytest.raises(ConfigError, match="`vpp` must be 1"):
        schedule("zb", 0, 4, 8, 2)
    assert schedule("zb-h1", 1, 4, 8) == schedule("zb", 1, 4, 8)
    assert ParallelConfig(pp=4, schedule="zb-h1", global_batch=8).schedule == "zb"  # type: ignore[arg-type]


# -- the B/W split of the derived backward -----------------------------------------------------


def _programs(schedule_kind: str = "1f1b", **overrides: object) -> object:
    model = get_flavor("deepseek-v2-lite").with_overrides(layers=4, seq_len=256)
    fields: dict[str, object] = dict(
        dp=2, tp=2, ep=2, pp=2, sp=True, global_batch=8, schedule=schedule_kind
    )
    fields.update(overrides)
    return lower(model, ParallelConfig(**fields))  # type: ignore[arg-type]


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_w_is_every_weight_gradient_and_b_the_rest(recompute: str) -> None:
    programs = _programs(recompute=recompute)
    for kind, block in programs.blocks.items():  # type: ignore[attr-defined]
        split = split_backward(block)
        assert sorted(split.input_grad_index + split.weight_grad_index) == list(
            range(len(block.bwd))
        )
        grads = {f"d.{w.name}" for w in block.weights}
        for index, instr in enumerate(block.bwd):
            names = {name for name, _ in instr.outputs}
            only_weight_grads = bool(names) and names <= grads and instr.collective is None
            assert (index in split.weight_grad_index) >= only_weight_grads
            if index in split.weight_grad_index:
                # nothing in B reads what W computes
                assert not any(index in block.bwd[b].deps for b in split.input_grad_index)
        flops = sum(i.flops for i in block.bwd)
        assert (
            sum(i.flops for i in split.input_grad) + sum(i.flops for i in split.weight_grad)
            == flops
        )
        if kind in ("layer", "moe_layer"):
            # every projection has an input- and a weight-gradient GEMM of equal FLOPs
            w_flops = sum(i.flops for i in split.weight_grad if i.kind == "einsum")
            assert 0 < w_flops < flops / 2
            assert split.pending_bytes > 0
        for instr in split.weight_grad + split.input_grad:
            assert all(0 <= d < len(block.bwd) for d in instr.deps)


def test_split_schedules_hold_activations_until_w() -> None:
    """Same model and pipeline: ZB-H1's rank 0 holds what 1F1B's does plus, per micro-batch
    whose W is pending, the gradients W reads; the last rank defers W by p − 1 and holds p
    micro-batches instead of one; DualPipe holds two stages' weights (2× the parameters)."""
    one = memory_report(_programs("1f1b", global_batch=16))  # type: ignore[arg-type]
    zb = memory_report(_programs("zb", global_batch=16))  # type: ignore[arg-type]
    dual = memory_report(_programs("dualpipe", global_batch=16))  # type: ignore[arg-type]
    assert zb[0].activations_bytes > one[0].activations_bytes
    assert zb[1].activations_bytes > one[1].activations_bytes
    for a, b in zip(one, zb, strict=True):
        assert a.weights_bytes == b.weights_bytes
    assert (
        dual[0].weights_bytes
        == dual[1].weights_bytes
        == one[0].weights_bytes + one[1].weights_bytes
    )


def test_activation_peak_of_a_split_order_by_hand() -> None:
    class C:
        saved_bytes = 10
        pending_bytes = 3

    tasks = schedule("zb", 0, 2, 3)  # F0 F1 B0 W0 F2 B1 W1 B2 W2
    # F0 F1 → 20; B0 → 23; W0 → 10; F2 → 20; B1 → 23 …
    assert activation_peak([C()], tasks) == 23  # type: ignore[list-item]
