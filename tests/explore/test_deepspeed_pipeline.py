"""DeepSpeed's pipeline engine (``pipeline_p2p_separate``): ``TrainSchedule`` runs each send
and receive as a blocking instruction of its own. A reference simulation of that instruction
stream (below, test code: every rank runs its ``deepspeed/runtime/pipe/schedule.py``
``TrainSchedule.steps`` commands in order; a send and its matching receive start together
when both ranks reach them and hold both for the message time) checks that:

- with free messages it is 1F1B: the analytical schedule simulation's step time exactly;
- with messages of ``t`` seconds what they add is within 15 % of what the analytical
  simulation adds with ``2t`` per transfer (the link time counted for the sender and for the
  receiver), the costing the option selects (``stage_transfer_s(..., BLOCKING_SEPARATE)``).
"""

from __future__ import annotations

import pytest

from stage_core.lower.emit import GroupTable
from stage_core.lower.program import make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_point_to_point_s
from stage_explore.analytical.costs import stage_transfer_s
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.pipeline import StageTimes, step_time
from stage_explore.analytical.policy import PointToPoint, TimingPolicy
from stage_explore.system import load_system

BLOCKING, OVERLAPPED = PointToPoint.BLOCKING, PointToPoint.OVERLAPPED

Command = tuple[str, ...]


def _step_to_micro_batch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """``TrainSchedule._step_to_micro_batch``: even stages run forwards on even steps, odd
    stages on odd steps, backwards on the others."""
    even_step, even_stage = step % 2 == 0, stage % 2 == 0
    if even_step and even_stage:
        return step // 2 - stage // 2, True
    if not even_step and not even_stage:
        return (step - 1) // 2 - stage // 2, True
    if even_step and not even_stage:
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def _commands(stage: int, stages: int, micro_batches: int) -> list[Command]:
    """One stage's instructions over a step (``TrainSchedule.steps``), compute and p2p."""

    def valid(mb: int) -> bool:
        return 0 <= mb < micro_batches

    out: list[Command] = []
    previous = -1
    for step in range(2 * (micro_batches + stages - 1)):
        mb, forward = _step_to_micro_batch(step, stage, stages)
        if forward and stage > 0:
            if valid(mb):
                out.append(("recv", "act", str(stage - 1), str(mb)))
            if valid(previous):
                out.append(("send", "grad", str(stage - 1), str(previous)))
        if not forward and stage < stages - 1:
            if valid(previous):
                out.append(("send", "act", str(stage + 1), str(previous)))
            if valid(mb):
                out.append(("recv", "grad", str(stage + 1), str(mb)))
        if valid(mb):
            out.append(("F" if forward else "B", str(mb)))
        previous = mb
    return out


def deepspeed_step_s(
    stages: int, micro_batches: int, forward_s: float, backward_s: float, message_s: float
) -> float:
    """The reference: every rank runs its commands in order; a send and the matching receive
    start when both ranks reach them and hold both ``message_s``."""
    programs = [_commands(s, stages, micro_batches) for s in range(stages)]
    pc, clock = [0] * stages, [0.0] * stages
    remaining = sum(len(p) for p in programs)
    while remaining:
        moved = False
        for s in range(stages):
            while pc[s] < len(programs[s]):
                command = programs[s][pc[s]]
                if command[0] in ("F", "B"):
                    clock[s] += forward_s if command[0] == "F" else backward_s
                    pc[s], remaining, moved = pc[s] + 1, remaining - 1, True
                    continue
                kind, what, peer_name, mb = command
                peer = int(peer_name)
                matching = ("recv" if kind == "send" else "send", what, str(s), mb)
                if pc[peer] < len(programs[peer]) and programs[peer][pc[peer]] == matching:
                    clock[s] = clock[peer] = max(clock[s], clock[peer]) + message_s
                    pc[s], pc[peer] = pc[s] + 1, pc[peer] + 1
                    remaining, moved = remaining - 2, True
                    continue
                break
        assert moved, "TrainSchedule deadlocked"
    return max(clock)


def _analytical_s(stages: int, micro_batches: int, transfer_s: float) -> float:
    times = [StageTimes((1.0,), (3.0,)) for _ in range(stages)]
    return max(step_time("1f1b", times, micro_batches, 1, transfer_s).end_s)


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 8), (4, 24), (8, 24), (16, 48)])
def test_deepspeeds_schedule_is_one_f_one_b_with_free_messages(
    stages: int, micro_batches: int
) -> None:
    reference = deepspeed_step_s(stages, micro_batches, 1.0, 3.0, 0.0)
    assert reference == pytest.approx((micro_batches + stages - 1) * 4.0)
    assert _analytical_s(stages, micro_batches, 0.0) == pytest.approx(reference)


@pytest.mark.parametrize(("stages", "micro_batches"), [(4, 24), (8, 24), (16, 48), (35, 120)])
def test_separate_blocking_messages_cost_the_link_time_twice(
    stages: int, micro_batches: int
) -> None:
    message = 0.01
    free = deepspeed_step_s(stages, micro_batches, 1.0, 3.0, 0.0)
    reference = deepspeed_step_s(stages, micro_batches, 1.0, 3.0, message) - free
    doubled = _analytical_s(stages, micro_batches, 2 * message) - free
    single = _analytical_s(stages, micro_batches, message) - free
    # what the messages add: the doubled costing within 15 % of the reference (above it: the
    # analytical simulation also delays the receiver's start by the doubled time), the single
    # one (Megatron's batched exchange) 45-50 % below it
    assert doubled == pytest.approx(reference, rel=0.15)
    assert single < 0.6 * reference


def test_the_option_adds_the_receivers_hold_of_the_link_time() -> None:
    system = load_system("a100-80gb")
    parallel = ParallelConfig(tp=8, pp=2, dp=1, global_batch=2)
    workload = make_workload(get_flavor("megatron-gpt-1.7b").with_overrides(layers=2), parallel)
    table = GroupTable(workload.mesh)
    first, second = workload.mesh.rank_of({"pp": 0}), workload.mesh.rank_of({"pp": 1})
    size = 2 * 2048 * 8192 * 2
    for scatter in (1, 8):  # the whole activation, or Megatron's / DeepSpeed's 1/tp of it
        link = alpha_beta_point_to_point_s(system, first, second, size // scatter)
        batched = stage_transfer_s(system, table, (first, second), size, scatter, BLOCKING)
        separate = stage_transfer_s(
            system, table, (first, second), size, scatter, PointToPoint.BLOCKING_SEPARATE
        )
        assert separate == pytest.approx(batched + link)  # the all-gather once
    # not blocking: only the latency
    overlapped = stage_transfer_s(system, table, (first, second), size, 8, OVERLAPPED)
    assert overlapped == alpha_beta_point_to_point_s(system, first, second, 0)
    # the DeepSpeed profile's policy is the separate one; without blocking, overlapped
    deepspeed = get_framework("deepspeed")
    assert TimingPolicy.from_profile(deepspeed).point_to_point is PointToPoint.BLOCKING_SEPARATE
    unblocked = deepspeed.with_overrides({"pipeline_p2p_blocking": False})
    assert TimingPolicy.from_profile(unblocked).point_to_point is OVERLAPPED


def test_the_deepspeed_profile_pays_its_separate_transfers() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(tp=1, pp=4, dp=1, global_batch=8, micro_batch=1)
    system = load_system("a100-80gb")
    assert get_framework("deepspeed").pipeline_p2p_separate is True
    assert get_framework("megatron-lm-2021").pipeline_p2p_separate is False
    on = AnalyticalBackend(framework="deepspeed").evaluate(model, parallel, system)
    off = AnalyticalBackend(
        framework="deepspeed", overrides={"pipeline_p2p_separate": False}
    ).evaluate(model, parallel, system)
    assert on.step_time_s > off.step_time_s  # two configurations differing only in the option
    # tp = 1: no all-gather, the whole transfer is link time, held twice as long
    assert on.breakdown["pipeline_p2p"] == pytest.approx(2 * off.breakdown["pipeline_p2p"])
