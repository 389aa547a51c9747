"""Overlapped pipeline transfers (Megatron-Core's ``--overlap-p2p-communication``): the
receiver waits for the message, the sender is not held (``step_time``'s ``arrival_s``,
``costs.stage_arrival_s``); Megatron-Core's 1F1B without interleaving stays blocking.

Closed forms, computed here:

- interleaved 1F1B with equal stages (F and B per rank and micro-batch, vpp chunks each),
  free messages: ``(m + (p − 1)/vpp)·(F + B)`` (Narayanan et al. 2021, §2.2.2); with messages
  of ``T`` seconds that hold no rank, the fill crosses every one of the ``p·vpp − 1`` stage
  boundaries once forwards and the drain once backwards, the steady state hides them:
  ``+ 2·(p·vpp − 1)·T``;
- two stages, two micro-batches of 1F1B (worked out by hand in the test): a message of ``T``
  that holds the sender gives ``3·(F + B) + 3·T``, one that only delays the receiver
  ``3·(F + B) + 2·T``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.lower.emit import GroupTable
from stage_core.lower.program import Workload, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.vocab import Schedule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_point_to_point_s
from stage_explore.analytical.costs import stage_arrival_s, stage_transfer_s
from stage_explore.analytical.pipeline import StageTimes, step_time
from stage_explore.analytical.policy import PointToPoint
from stage_explore.system import load_system
from stage_explore.system.model import System

F, B = 1.0, 2.0


@pytest.mark.parametrize("vpp", [2, 3, 4])
@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("groups", [1, 2, 5])
def test_interleaved_fill_and_drain_expose_every_boundary_once(
    vpp: int, p: int, groups: int
) -> None:
    m, t = groups * p, 0.01
    stages = [StageTimes((F / vpp,) * vpp, (B / vpp,) * vpp)] * p
    free = step_time("interleaved", stages, m, vpp, 0.0).makespan_s
    assert free == pytest.approx((m + (p - 1) / vpp) * (F + B))
    flying = step_time("interleaved", stages, m, vpp, 0.0, t)
    assert flying.makespan_s == pytest.approx(free + 2 * (p * vpp - 1) * t)
    assert sum(flying.send_s) == 0.0  # no rank is held by a send


def test_two_stage_1f1b_hold_against_arrival() -> None:
    t = 0.1
    stages = [StageTimes((F,), (B,))] * 2
    held = step_time("1f1b", stages, 2, 1, t).makespan_s
    arriving = step_time("1f1b", stages, 2, 1, 0.0, t).makespan_s
    assert held == pytest.approx(3 * (F + B) + 3 * t)
    assert arriving == pytest.approx(3 * (F + B) + 2 * t)


def _workload(schedule: str, vpp: int) -> tuple[Workload, GroupTable, int, int]:
    parallel = ParallelConfig(
        tp=8,
        pp=2,
        dp=1,
        sp=True,
        global_batch=8,
        micro_batch=1,
        schedule=Schedule(schedule),
        vpp=vpp,
    )
    model = get_flavor("llama3-8b").with_overrides(layers=8)
    workload = make_workload(model, parallel)
    first, second = workload.mesh.rank_of({"pp": 0}), workload.mesh.rank_of({"pp": 1})
    return workload, GroupTable(workload.mesh), first, second


def test_arrival_is_the_message_time_beyond_the_hold() -> None:
    system = load_system("h100-80gb")
    _, table, first, second = _workload("interleaved", 2)
    size = 8192 * 4096 * 2 // 8  # a sequence-parallel shard of an activation
    link = alpha_beta_point_to_point_s(system, first, second, size)
    latency = alpha_beta_point_to_point_s(system, first, second, 0)
    overlapped = PointToPoint.OVERLAPPED
    hold = stage_transfer_s(system, table, (first, second), size, 1, overlapped)
    arrival = stage_arrival_s(system, table, (first, second), size, 1, overlapped)
    assert hold == latency
    assert hold + arrival == pytest.approx(link)  # the receiver waits for the whole message
    blocking = PointToPoint.BLOCKING
    assert stage_arrival_s(system, table, (first, second), size, 1, blocking) == 0.0
    assert stage_transfer_s(system, table, (first, second), size, 1, blocking) == link


def _slower_scale_out(factor: float) -> System:
    """h100-80gb with its scale-out (the pipeline boundary's dim with tp = 8) ``factor``
    times slower: with dp = 1 and tp inside a node nothing else crosses it."""
    system = load_system("h100-80gb")
    inner, outer = system.network[0], system.network[1]
    slower = replace(outer, bandwidth_bytes_per_s=outer.bandwidth_bytes_per_s / factor)
    return replace(system, network=(inner, slower))


def test_megatron_core_interleaved_pays_the_link_time_and_the_memo_tells_them_apart() -> None:
    """One backend, two systems differing only in the link the stage boundary crosses: the
    interleaved step is slower on the slower link (the arrival is part of the memo keys),
    by at least the fill and drain's 2·(p·vpp − 1) extra message times when the stages
    are balanced, and never by less than one message time each way."""
    backend = AnalyticalBackend(framework="megatron-core")
    workload, _, first, second = _workload("interleaved", 2)
    model, parallel = workload.model, workload.parallel
    fast, slow = load_system("h100-80gb"), _slower_scale_out(8.0)
    assert fast.coordinates(first)[1] != fast.coordinates(second)[1]  # pp crosses nodes
    quick = backend.evaluate(model, parallel, fast).step_time_s
    slowed = backend.evaluate(model, parallel, slow).step_time_s
    assert backend.evaluate(model, parallel, fast).step_time_s == quick  # memo: unchanged
    size = 8192 * 4096 * 2 // 8
    extra = size / (slow.network[1].bandwidth_bytes_per_s) - size / (
        fast.network[1].bandwidth_bytes_per_s
    )
    assert slowed - quick >= 2 * extra * 0.999


def test_megatron_core_1f1b_without_interleaving_stays_blocking() -> None:
    """Megatron-Core raises for overlap_p2p_comm without interleaving: its 1F1B transfers hold
    the sender (a send per forward but the last stage's and per backward but the first's)."""
    backend = AnalyticalBackend(framework="megatron-core")
    workload, _, _, _ = _workload("1f1b", 1)
    model, parallel = workload.model, workload.parallel
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert dict(result.breakdown).get("pipeline_p2p", 0.0) > 0.0
    interleaved, _, _, _ = _workload("interleaved", 2)
    other = backend.evaluate(interleaved.model, interleaved.parallel, load_system("h100-80gb"))
    assert dict(other.breakdown).get("pipeline_p2p", 0.0) < 1e-3
