"""The pipeline simulation: exact bubbles without communication, blocking transfers by hand,
the compiled fast path against the reference on many shapes, activation profiles against the
walk of the whole schedule, and the step assembly."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from stage_core.lower.memory import activation_peak
from stage_core.lower.schedule import schedule
from stage_explore.analytical import pipeline
from stage_explore.analytical.pipeline import StageTimes, _periodic, activation_profiles, step_time
from stage_explore.analytical.step import StageClass, StepPlan, SyncCost, assemble_step
from tests.explore.pipeline_reference import simulate


def uniform(p: int, vpp: int, forward_s: float, backward_s: float) -> list[StageTimes]:
    """Identical ranks: a micro-batch costs forward_s + backward_s per rank, split over chunks."""
    return [StageTimes((forward_s / vpp,) * vpp, (backward_s / vpp,) * vpp)] * p


# -- bubbles without communication --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 1), (2, 5), (4, 4), (4, 16), (8, 3), (8, 32)])
@pytest.mark.parametrize(("f", "b"), [(1.0, 2.0), (1.0, 1.0), (0.3, 1.7)])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(
    kind: str, p: int, m: int, f: float, b: float
) -> None:
    # With identical stages and free transfers every schedule fills and drains the pipeline
    # once: the makespan is (m + p − 1)(f + b), each rank's busy time m(f + b), so each rank
    # idles (p − 1)/(m + p − 1) of the step (rank 0 last, inside its timeline).
    result = simulate(kind, uniform(p, 1, f, b), m, 1, 0.0)
    step = result.makespan_s
    assert step == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    assert result.end_s[0] == step
    for rank in range(p):
        assert result.busy_s[rank] == pytest.approx(m * (f + b), rel=1e-12)
        fraction = (step - result.busy_s[rank]) / step
        assert fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-9, abs=1e-12)
    assert result.bubble_s(0) / step == pytest.approx((p - 1) / (m + p - 1), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    ("p", "m", "vpp"),
    [(2, 2, 2), (2, 4, 4), (4, 4, 2), (4, 8, 2), (4, 16, 3), (8, 16, 2), (3, 9, 3)],
)
@pytest.mark.parametrize(("f", "b"), [(1.0, 2.0), (1.0, 1.0), (0.5, 3.0)])
def test_interleaved_bubble_is_p_minus_1_over_vpp_m_plus_p_minus_1(
    p: int, m: int, vpp: int, f: float, b: float
) -> None:
    # Megatron's interleaving: chunks of 1/vpp of a stage shrink the fill and drain to
    # (p − 1)(f + b)/vpp, so the makespan is m(f + b) + (p − 1)(f + b)/vpp and the bubble
    # fraction (p − 1)/(vpp·m + p − 1).
    result = simulate("interleaved", uniform(p, vpp, f, b), m, vpp, 0.0)
    step = result.makespan_s
    assert step == pytest.approx(m * (f + b) + (p - 1) * (f + b) / vpp, rel=1e-12)
    for rank in range(p):
        fraction = (step - result.busy_s[rank]) / step
        assert fraction == pytest.approx((p - 1) / (vpp * m + p - 1), rel=1e-9)


# -- blocking transfers ------------------------------------------------------------------------


def test_a_transfer_holds_the_sender_and_delays_the_receiver() -> None:
    # p=2, one micro-batch, f=1, b=2, t=0.5. Rank 0: F 0–1, send 1–1.5; rank 1: F 1.5–2.5 (last
    # stage: no send), B 2.5–4.5, send 4.5–5; rank 0: B 5–7 (global stage 0: no send).
    result = simulate("1f1b", uniform(2, 1, 1.0, 2.0), 1, 1, 0.5)
    assert result.end_s == pytest.approx((7.0, 5.0))
    assert result.busy_s == pytest.approx((3.0, 3.0))
    assert result.send_s == pytest.approx((0.5, 0.5))
    assert result.last_backward_start_s == ((5.0,), (2.5,))
    assert result.bubble_s(0) == pytest.approx(3.5)


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_transfers_add_to_every_micro_batch_in_the_steady_state(kind: str) -> None:
    # A synchronous send keeps its rank: each rank sends once per micro-batch and direction.
    p, m, f, b, t = 4, 12, 1.0, 2.0, 0.1
    free = simulate(kind, uniform(p, 1, f, b), m, 1, 0.0).makespan_s
    blocked = simulate(kind, uniform(p, 1, f, b), m, 1, t).makespan_s
    assert blocked > free + m * t


# -- the compiled fast path is the reference ---------------------------------------------------


def _random_case(rng: random.Random) -> tuple[str, list[StageTimes], int, int, float]:
    kind = rng.choice(["gpipe", "1f1b", "interleaved"])
    vpp = rng.choice([2, 3, 4]) if kind == "interleaved" else 1
    p = rng.choice([2, 3, 4, 8]) if kind == "interleaved" else rng.choice([1, 2, 3, 4, 8])
    if kind == "interleaved":
        m = p * rng.choice([1, 2, 3, 7, 12, 30])
    else:
        m = rng.choice([1, 2, 5, 40, 150])

    def times() -> StageTimes:
        forward = tuple(rng.uniform(0.5, 2.0) for _ in range(vpp))
        return StageTimes(forward, tuple(x * rng.uniform(1.5, 2.5) for x in forward))

    middle = times()  # the first and last stages differ (embedding, head), the rest do not
    stages = [times() if rank in (0, p - 1) else middle for rank in range(p)]
    return kind, stages, m, vpp, rng.choice([0.0, 0.01, 0.3])


@pytest.mark.parametrize("seed", range(6))
def test_step_time_equals_the_reference_simulation(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        kind, stages, m, vpp, transfer = _random_case(rng)
        fast = step_time(kind, stages, m, vpp, transfer)
        slow = simulate(kind, stages, m, vpp, transfer)
        assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)
        assert fast.busy_s == pytest.approx(slow.busy_s, rel=1e-12)
        assert fast.send_s == pytest.approx(slow.send_s, rel=1e-12)
        for got, want in zip(fast.last_backward_start_s, slow.last_backward_start_s, strict=True):
            assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_a_longer_first_forward_and_last_backward_equal_the_reference(seed: int) -> None:
    # A held FSDP2 stage's once-per-step gathers and reduce-scatters (StageTimes' extras),
    # including ZB-H1 (the extra on the last W) and DualPipe (on the pairs); simulated whole
    rng = random.Random(100 + seed)
    for _ in range(30):
        kind, stages, m, vpp, transfer = _random_case(rng)
        if rng.random() < 0.3:
            kind, vpp = rng.choice(["zb", "dualpipe"]), 1
            m = 2 * len(stages) * rng.choice([1, 3, 5])
            chunks = 2 if kind == "dualpipe" else 1
            stages = [StageTimes(s.forward_s[:1] * chunks, s.backward_s[:1] * chunks,
                                 (0.4,) * chunks) for s in stages]  # fmt: skip
        p = len(stages)
        if kind == "dualpipe" and p % 2:
            continue
        chunks = len(stages[0].forward_s)
        stages = [
            s._replace(
                first_forward_extra_s=tuple(rng.uniform(0.0, 1.0) for _ in range(chunks)),
                last_grad_extra_s=tuple(rng.uniform(0.0, 2.0) for _ in range(chunks)),
            )
            for s in stages
        ]
        fast = step_time(kind, stages, m, vpp, transfer)
        slow = simulate(kind, stages, m, vpp, transfer)
        plain = step_time(kind, [StageTimes(*s[:4]) for s in stages], m, vpp, transfer)
        assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)
        assert fast.busy_s == pytest.approx(slow.busy_s, rel=1e-12)
        assert fast.makespan_s > plain.makespan_s
        for got, want in zip(fast.last_backward_start_s, slow.last_backward_start_s, strict=True):
            assert got == pytest.approx(want, rel=1e-12)


def test_a_faster_rank_changes_rate_long_after_the_warm_up() -> None:
    # Why step_time simulates every task: here the last rank keeps the middle ranks' rate for
    # ten periods before the slow first rank's delay reaches it, so extrapolating from the
    # first few periods would be wrong. The fast path must still match the reference.
    stages = [
        StageTimes((1.8905, 1.4167), (4.1277, 3.0494)),
        StageTimes((1.8055, 1.5647), (3.8075, 3.1768)),
        StageTimes((1.8055, 1.5647), (3.8075, 3.1768)),
        StageTimes((0.9166, 0.7381), (1.7172, 1.6094)),
    ]
    ends = [simulate("interleaved", stages, m, 2, 0.0).end_s[3] for m in range(8, 80, 4)]
    steps = [round(b - a, 9) for a, b in zip(ends, ends[1:], strict=False)]
    assert steps[0] == steps[5] != steps[-1]
    for m in (8, 40, 48, 76, 200, 400):
        fast = step_time("interleaved", stages, m, 2, 0.0)
        slow = simulate("interleaved", stages, m, 2, 0.0)
        assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)
        for got, want in zip(fast.last_backward_start_s, slow.last_backward_start_s, strict=True):
            assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("kind", "p", "vpp", "base", "periodic"),
    [("1f1b", 4, 1, 5, True), ("1f1b", 16, 1, 17, True), ("interleaved", 4, 2, 16, True),
     ("interleaved", 4, 2, 8, False), ("gpipe", 4, 1, 10, False)],
)  # fmt: skip
def test_the_periodic_structure_is_found_where_it_exists(
    kind: str, p: int, vpp: int, base: int, periodic: bool
) -> None:
    # GPipe inserts a micro-batch at two places (forwards, backwards): never extrapolated; the
    # interleaved schedule needs a few periods of steady state before its state is one period.
    found = _periodic(kind, p, vpp, base)
    assert (found is not None) == periodic
    if found is not None:
        assert found.m == base + (p if kind == "interleaved" else 1)
        assert all(a < b for a, b in found.pairs)


@pytest.mark.parametrize("kind", ["1f1b", "interleaved", "interleaved/12"])
def test_long_steps_are_extrapolated_exactly(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Realistic stages (heavier first and last), transfers: the fast path simulates a prefix
    # only, and matches the reference to rounding; with Megatron's groups of 12 micro-batches
    # (--microbatch-group-size-per-virtual-pipeline-stage) the period is the group.
    p, vpp, m = 8, (2 if kind.startswith("interleaved") else 1), 8 * 40
    if kind == "interleaved/12":
        m = 12 * 24  # whole groups (a shorter last group: the next test)
    middle = StageTimes((0.5,) * vpp, (1.0,) * vpp)
    stages = [StageTimes((0.55,) * vpp, (1.1,) * vpp), *[middle] * (p - 2),
              StageTimes((0.6,) * vpp, (1.3,) * vpp)]  # fmt: skip
    simulated: list[int] = []
    original = pipeline._releases

    def counting(compiled, *args):  # type: ignore[no-untyped-def]
        simulated.append(len(compiled.tasks))
        return original(compiled, *args)

    monkeypatch.setattr(pipeline, "_releases", counting)
    fast = step_time(kind, stages, m, vpp, 0.01)
    assert max(simulated) < 2 * m * p * vpp / 4  # never the whole step
    slow = simulate(kind, stages, m, vpp, 0.01)
    assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)


def test_a_shorter_last_group_is_timed_exactly() -> None:
    # 100 micro-batches in groups of 12 leave 4 (≥ pp, as Megatron requires); where no period
    # is proven (periodic() None) the whole step is simulated, either way the reference's ends
    stages = [StageTimes((0.55, 0.5), (1.1, 1.0)), StageTimes((0.5, 0.6), (1.0, 1.3))] * 2
    fast = step_time("interleaved/12", stages, 100, 2, 0.01)
    slow = simulate("interleaved/12", stages, 100, 2, 0.01)
    assert fast.end_s == pytest.approx(slow.end_s, rel=1e-12)
    for m in (28, 40, 52, 64):
        assert step_time("interleaved/12", stages, m, 2, 0.01).end_s == pytest.approx(
            simulate("interleaved/12", stages, m, 2, 0.01).end_s, rel=1e-12
        )


# -- activation profiles ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "p", "m", "vpp"),
    [("1f1b", 4, 3, 1), ("1f1b", 4, 40, 1), ("1f1b", 8, 64, 1), ("interleaved", 4, 8, 2),
     ("interleaved", 4, 24, 3), ("interleaved", 8, 64, 2), ("interleaved", 2, 40, 4),
     ("interleaved/6", 4, 40, 2), ("interleaved/16", 8, 64, 3), ("interleaved/3", 2, 41, 4)],
)  # fmt: skip
def test_activation_profiles_give_the_peak_of_the_whole_schedule(
    kind: str, p: int, m: int, vpp: int
) -> None:
    rng = random.Random(p * 1000 + m * 10 + vpp)
    for stage in range(p):
        profiles = activation_profiles(kind, stage, p, m, vpp)
        for _ in range(5):
            saved = [rng.randrange(1, 10**9) for _ in range(vpp)]
            chunks = [Sized(size) for size in saved]
            walked = activation_peak(chunks, schedule(kind, stage, p, m, vpp))  # type: ignore[arg-type]
            assert (
                max(sum(n * s for n, s in zip(c, saved, strict=True)) for c in profiles) == walked
            )


@dataclass(frozen=True)
class Sized:
    """A chunk as :func:`activation_peak` sees it: its saved bytes per micro-batch."""

    saved_bytes: int


# -- the step assembly ---------------------------------------------------------------------------


def _stage_class(forward: float, backward: float, sync: SyncCost, optimizer: float) -> StageClass:
    return StageClass(
        forward_s=(forward,), backward_s=(backward,), sync=(sync,), saved_bytes=(100,),
        compute_s=forward + backward, exposed_s=(), states_bytes=1000, buffers_bytes=0,
        optimizer_s=optimizer,
    )  # fmt: skip


def test_gradient_sync_overlaps_the_last_backward_and_the_breakdown_adds_up() -> None:
    # One rank, two micro-batches of f=1, b=2; the reductions take 3 s in all and the last of
    # them cannot start before 1 s into the last backward: it starts at 4 + 1 = 5 and the
    # stream is free at max(0 + 3, 4 + 4) = 8 > the pipeline end 6.
    sync = SyncCost(total_s=3.0, latest_s=4.0, gather_s=0.25)
    plan = StepPlan((0,), (_stage_class(1.0, 2.0, sync, 0.5),), 0.0, 7)
    step = assemble_step(plan, "1f1b", 2, 1)
    assert step.step_time_s == pytest.approx(8.0 + 0.5 + 0.25)
    breakdown = dict(step.breakdown)
    assert breakdown["compute"] == pytest.approx(6.0)
    assert breakdown["exposed_gradient_sync"] == pytest.approx(2.0)
    assert sum(breakdown.values()) == pytest.approx(step.step_time_s, rel=1e-12)
    assert step.peak_memory_bytes == 1000 + 100 + 7  # one micro-batch live at a time
