"""The pipeline simulation of ZB-H1 and DualPipe: the published bubbles in closed form, the
compiled fast path (and ZB-H1's exact extrapolation) against the reference, and activation
profiles against the walk of the whole schedule."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from stage_core.lower.memory import activation_peak
from stage_core.lower.schedule import schedule
from stage_explore.analytical.pipeline import (
    StageTimes,
    activation_profiles,
    pair_seconds,
    step_time,
)
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from stage_explore.analytical.taskgraph import periodic
from tests.explore.pipeline_reference import simulate


@pytest.mark.parametrize("p", [2, 4, 6, 8, 16])
@pytest.mark.parametrize("m", [16, 32, 48])
def test_zb_h1_bubble_is_a_third_of_1f1b_for_equal_f_b_w(p: int, m: int) -> None:
    # Qi et al. 2024, Table 1: 1F1B (p − 1)(F + B + W), ZB-H1 (p − 1)(F + B − W) with the
    # backward split into B and W; with F = B = W = 1 that is 3(p − 1) against p − 1.
    one = simulate("1f1b", [StageTimes((1.0,), (2.0,))] * p, m, 1, 0.0)
    zb = simulate("zb", [StageTimes((1.0,), (1.0,), (1.0,))] * p, m, 1, 0.0)
    assert one.makespan_s - 3 * m == pytest.approx(3 * (p - 1))
    assert zb.makespan_s - 3 * m == pytest.approx(p - 1)
    for rank in range(p):
        assert zb.busy_s[rank] == pytest.approx(3 * m)
        assert zb.bubble_s(rank) == pytest.approx(p - 1)


@pytest.mark.parametrize("p", [2, 4, 6, 8])
@pytest.mark.parametrize("m_per_p", [2, 3, 5])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (0.7, 0.7, 0.7)])
def test_dualpipe_bubble_is_the_reports_formula(
    p: int, m_per_p: int, f: float, b: float, w: float
) -> None:
    # DeepSeek-V3 report, Table 2: DualPipe's bubble is (p/2 − 1)(F&B + B − 3W) with B the whole
    # backward (here b + w) and F&B an overlapped pair; without communication to hide, a pair
    # takes F + B. Every rank's busy time is m(F + B) (each direction m/2 micro-batches
    # through each of its two stages). The report's figure is for equal F, B and W; with
    # others the simulated schedule's bubble differs from it in both directions.
    m = 2 * p * m_per_p
    times = StageTimes((f, f), (b, b), (w, w))
    result = simulate("dualpipe", [times] * p, m, 1, 0.0)
    full = b + w
    assert result.makespan_s - m * (f + full) == pytest.approx(
        (p // 2 - 1) * ((f + full) + full - 3 * w)
    )
    assert step_time("dualpipe", [times] * p, m, 1, 0.0).end_s == pytest.approx(result.end_s)


def test_dualpipe_pairs_hide_communication() -> None:
    # F and B of 1 s, each with 0.4 s of exposed communication: a pair takes
    # max(F, B + W, computation 0.6 + 0.6 + W, communication 0.8) = 1.7 s instead of 2.5 s.
    assert pair_seconds(1.0, 0.6, 1.5, 1.1) == pytest.approx(1.7)
    assert pair_seconds(1.0, 0.1, 1.0, 0.1) == pytest.approx(1.8)  # communication-bound
    p, m = 4, 16
    plain = StageTimes((1.0, 1.0), (1.0, 1.0), (0.5, 0.5))
    paired = StageTimes((1.0, 1.0), (1.0, 1.0), (0.5, 0.5), ((1.7, 1.7), (1.7, 1.7)))
    slow = simulate("dualpipe", [plain] * p, m, 1, 0.0).makespan_s
    fast = simulate("dualpipe", [paired] * p, m, 1, 0.0).makespan_s
    assert fast < slow - 0.7 * (m // 2 - p)


def _random_case(rng: random.Random) -> tuple[str, list[StageTimes], int, float]:
    kind = rng.choice(["zb", "dualpipe"])
    if kind == "dualpipe":
        p = rng.choice([2, 4, 6, 8])
        m = 2 * p * rng.choice([1, 2, 3, 5])
    else:
        p, m = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2, 5, 40, 150])
    chunks = 2 if kind == "dualpipe" else 1

    def times() -> StageTimes:
        f = tuple(rng.uniform(0.5, 2.0) for _ in range(chunks))
        b = tuple(x * rng.uniform(0.8, 1.2) for x in f)
        w = tuple(x * rng.uniform(0.5, 1.2) for x in f)
        pairs = tuple(
            tuple(f[i] + b[j] + w[j] - rng.uniform(0.0, 0.4) for j in range(chunks))
            for i in range(chunks)
        ) if chunks == 2 else ()  # fmt: skip
        return StageTimes(f, b, w, pairs)

    middle = times()
    stages = [times() if rank in (0, p - 1) else middle for rank in range(p)]
    return kind, stages, m, rng.choice([0.0, 0.01, 0.3])


@pytest.mark.parametrize("seed", range(4))
def test_step_time_equals_the_reference_simulation(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        kind, stages, m, transfer = _random_case(rng)
        fast = step_time(kind, stages, m, 1, transfer)
        slow = simulate(kind, stages, m, 1, transfer)
        assert fast.end_s == pytest.approx(slow.end_s, rel=1e-9)
        assert fast.busy_s == pytest.approx(slow.busy_s, rel=1e-9)
        assert fast.send_s == pytest.approx(slow.send_s, rel=1e-9)
        for got, want in zip(fast.last_backward_start_s, slow.last_backward_start_s, strict=True):
            assert got == pytest.approx(want, rel=1e-9)


def test_zb_h1_is_extrapolated_exactly() -> None:
    found = periodic("zb", 8, 1, 9)
    assert found is not None and found.m == 10
    p, m = 8, 320
    middle = StageTimes((0.5,), (0.5,), (0.45,))
    stages = [StageTimes((0.55,), (0.6,), (0.5,)), *[middle] * (p - 2),
              StageTimes((0.6,), (0.7,), (0.6,))]  # fmt: skip
    fast = step_time("zb", stages, m, 1, 0.01)
    slow = simulate("zb", stages, m, 1, 0.01)
    assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)


@dataclass(frozen=True)
class Sized:
    saved_bytes: int
    pending_bytes: int


@pytest.mark.parametrize(("kind", "p", "m"), [("zb", 4, 3), ("zb", 4, 40), ("zb", 8, 64),
                                              ("dualpipe", 4, 8), ("dualpipe", 8, 40)])  # fmt: skip
def test_activation_profiles_give_the_peak_of_the_whole_schedule(kind: str, p: int, m: int) -> None:
    rng = random.Random(p * 1000 + m)
    chunks = 2 if kind == "dualpipe" else 1
    for stage in range(p):
        profiles = activation_profiles(kind, stage, p, m, 1)
        for _ in range(5):
            saved = [rng.randrange(1, 10**9) for _ in range(chunks)]
            pending = [rng.randrange(0, 10**8) for _ in range(chunks)]
            sized = [Sized(s, q) for s, q in zip(saved, pending, strict=True)]
            walked = activation_peak(sized, schedule(kind, stage, p, m, 1))  # type: ignore[arg-type]
            sizes = saved + pending
            assert (
                max(sum(n * s for n, s in zip(c, sizes, strict=True)) for c in profiles) == walked
            )


def test_the_step_of_a_split_schedule_syncs_after_the_last_w() -> None:
    # One rank, two micro-batches: F 1, B 1, W 1 (whole backward 2): F0 B0 W0 F1 B1 W1 (rank 0
    # of one stage defers nothing); the last W starts at 5, the reductions' stream is free at
    # max(3, 5 + 4) = 9.
    sync = SyncCost(total_s=3.0, latest_s=4.0, gather_s=0.0)
    cls = StageClass(
        forward_s=(1.0,), backward_s=(2.0,), sync=(sync,), saved_bytes=(100,), compute_s=3.0,
        exposed_s=(), states_bytes=1000, buffers_bytes=0, optimizer_s=0.5,
        input_grad_s=(1.0,), pending_bytes=(10,),
    )  # fmt: skip
    step = assemble_step(StepPlan((0,), (cls,), 0.0, 0), "zb", 2, 1)
    assert step.step_time_s == pytest.approx(9.0 + 0.5)
    assert step.peak_memory_bytes == 1000 + 110
    assert sum(dict(step.breakdown).values()) == pytest.approx(step.step_time_s)
