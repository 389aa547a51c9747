"""The trace simulator's compute beside collectives (:func:`~stage_explore.analytical.tracesim.
simulate`, :meth:`~stage_explore.analytical.trace_models.BaseTimingModel.beside_share`): a GPU
compute node runs at ``1 − Σ share`` of its rate while collectives run on its rank, at full
rate otherwise, re-timed at each start and end (no time stepping) — the levelled mode's
:func:`~stage_explore.analytical.contention.contended_s` where the compute outlasts the
collectives or one collective runs beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.contention import contended_s
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.analytical.trace_models import BaseTimingModel
from stage_explore.analytical.tracesim import simulate


class _Fixed(BaseTimingModel[float]):
    """Seconds by node name; the share each collective takes from any compute node."""

    zero = 0.0

    def __init__(self, seconds: Mapping[str, float], shares: Mapping[str, float]) -> None:
        self.seconds, self.shares = seconds, shares

    def compute(self, node: TraceNode) -> float:
        return self.seconds[node.name]

    def collective(
        self, kind: CollectiveKind, size_bytes: int, group: tuple[int, ...]
    ) -> Mapping[int, float]:
        raise ConfigError("by node")

    def node_collective(self, node: TraceNode, group: tuple[int, ...]) -> dict[int, float]:
        return dict.fromkeys(group, self.seconds[node.name])

    def point_to_point(self, source: int, destination: int, size_bytes: int) -> float:
        raise ConfigError("no transfers")

    def beside_share(self, compute: TraceNode, collective: TraceNode) -> float:
        return self.shares.get(collective.name, 0.0)


#: In order, local start; the collectives do not wait for the compute issued before them.
POLICY: TimingPolicy = replace(
    AnalyticalBackend().policy, collectives_wait_for_issued_compute=False
)


def _compute(node_id: int, name: str) -> TraceNode:
    return TraceNode(node_id, name, NodeKind.COMP, flops=1, tensor_bytes=1)


def _collective(node_id: int, name: str, deps: tuple[int, ...] = ()) -> TraceNode:
    return TraceNode(node_id, name, NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE,
                     comm_bytes=1, group=(0,), data_deps=deps)  # fmt: skip


def _run(
    nodes: list[TraceNode],
    seconds: dict[str, float],
    shares: dict[str, float],
    streams: dict[int, str],
) -> dict[str, tuple[float, float]]:
    result = simulate({0: nodes}, _Fixed(seconds, shares), record_nodes=True, policy=POLICY,
                      streams={0: streams})  # fmt: skip
    assert result.ranks[0].compute == sum(
        seconds[n.name] for n in nodes if n.kind is NodeKind.COMP
    )  # the work, not the wall seconds
    return {n.name: result.node_times[(0, n.id)] for n in nodes}


@pytest.mark.parametrize(
    ("compute_s", "comm_s", "share"), [(10.0, 4.0, 0.25), (2.0, 4.0, 0.25), (3.0, 3.0, 0.4)]
)
def test_compute_beside_one_collective_ends_as_the_levelled_mode_charges_it(
    compute_s: float, comm_s: float, share: float
) -> None:
    times = _run([_compute(0, "gemm"), _collective(1, "bucket")],
                 {"gemm": compute_s, "bucket": comm_s}, {"bucket": share}, {1: "sync"})  # fmt: skip
    assert times["bucket"] == (0.0, comm_s)  # the collective's own duration
    levelled = contended_s(compute_s, compute_s, 0.0, ((comm_s, share),))
    assert times["gemm"][1] == pytest.approx(levelled, rel=1e-12)


def test_the_rate_changes_when_a_collective_starts_and_ends_mid_node() -> None:
    """10 s of work; a free 2 s collective, then one taking half the rate for 4 s on the same
    stream: 2 s done at full rate, 2 s at half, the last 6 s at full rate — it ends at 12 s."""
    nodes = [_compute(0, "gemm"), _collective(1, "free"), _collective(2, "heavy", (1,))]
    times = _run(nodes, {"gemm": 10.0, "free": 2.0, "heavy": 4.0}, {"heavy": 0.5},
                 {1: "sync", 2: "sync"})  # fmt: skip
    assert times["heavy"] == (2.0, 6.0)
    assert times["gemm"] == (0.0, 12.0)


def test_collectives_on_two_streams_take_the_sum_of_their_shares() -> None:
    """0–2 s at 1 − 0.25 − 0.25, 2–4 s at 0.75, then full rate: 1 + 1.5 s done by 4 s, 7.5 s
    left — the end of ``contended_s`` for a compute that outlasts both."""
    nodes = [_compute(0, "gemm"), _collective(1, "bucket"), _collective(2, "gather")]
    times = _run(nodes, {"gemm": 10.0, "bucket": 4.0, "gather": 2.0},
                 {"bucket": 0.25, "gather": 0.25}, {1: "sync", 2: "zero_gather"})  # fmt: skip
    assert times["gemm"][1] == 11.5
    assert contended_s(10.0, 10.0, 0.0, ((4.0, 0.25), (2.0, 0.25))) == 11.5


def test_a_compute_node_issued_beside_a_running_collective_starts_slowed() -> None:
    """The collective runs 0–4 s at half the rate: the first node's 1 s of work takes 0–2 s;
    the second, issued at 2 s, does 1 s of its 2 by 4 s and the last at full rate."""
    first = _compute(0, "first")
    second = TraceNode(2, "second", NodeKind.COMP, flops=1, tensor_bytes=1, data_deps=(0,))
    nodes = [first, _collective(1, "bucket"), second]
    times = _run(nodes, {"first": 1.0, "bucket": 4.0, "second": 2.0},
                 {"bucket": 0.5}, {1: "sync"})  # fmt: skip
    assert times["first"] == (0.0, 2.0)  # also slowed: 1 s of work at half rate
    assert times["second"] == (2.0, 4.0 + 1.0)
