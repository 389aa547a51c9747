"""ZB-H1 and DualPipe traces: sound for ``stage check``, and run by the real ASTRA-sim binary
with every rank finishing and the ASTRA-sim-exact model (tracesim) agreeing to the cycle
(skipped, with the reason, without the binary). The W nodes wait for their own B's results,
never for the previous stage; DualPipe's second chunk talks to the other neighbour."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import lower
from stage_core.trace import NodeKind
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.astrasim import run_astra_sim
from stage_explore.system import astra_config_from_files
from tests.explore.astrasim_matrix import Case, write_case
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()

CASES = {
    "zb": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
               {"pp": 4, "schedule": "zb", "global_batch": 8}, what="pipeline, ZB-H1"),
    "zb-sp-zero2": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                        {"pp": 2, "tp": 2, "dp": 2, "sp": True, "zero": 2, "schedule": "zb",
                         "global_batch": 8}, what="ZB-H1 with TP+SP and ZeRO-2"),
    "dualpipe": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                     {"pp": 4, "schedule": "dualpipe", "global_batch": 8},
                     what="pipeline, DualPipe"),
    "dualpipe-dp": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                        {"pp": 2, "dp": 2, "schedule": "dualpipe", "global_batch": 8},
                        what="DualPipe with data parallelism"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_traces_are_sound_and_w_follows_its_b(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    write_case(case, tmp_path)
    trace_set = read_trace_set(tmp_path)
    assert check_trace_set(trace_set, for_astra_sim=True).violations == ()
    programs = lower(case.model(), case.parallel_config())
    for stage in programs.stages:
        nodes = [item.node for item in stage_nodes(programs, stage)]
        by_id = {node.id: node for node in nodes}
        weight = [n for n in nodes if n.name.startswith("W")]
        assert weight, "no W nodes"
        for node in weight:
            assert node.kind in (NodeKind.COMP, NodeKind.COLL)
            for dep in node.data_deps:  # a W node reads its own B or W, never a receive
                assert by_id[dep].name[0] in "BW" and by_id[dep].kind != NodeKind.RECV
        # the step's gradient reductions follow a W (the weight gradients are made there)
        for node in nodes:
            if node.name.startswith("step.") and "grad" in node.name and node.data_deps:
                assert by_id[node.data_deps[0]].name.startswith(("W", "step."))


@pytest.mark.skipif(BINARY is None, reason=WHY)
@pytest.mark.parametrize("name", sorted(CASES))
def test_astra_sim_runs_the_traces_and_tracesim_matches(name: str, tmp_path: Path) -> None:
    assert BINARY is not None
    case = CASES[name]
    inputs = write_case(case, tmp_path)
    run = run_astra_sim(BINARY, inputs, timeout_s=300)  # every rank finished, or it raises
    assert sorted(run.report.ranks) == list(range(inputs.world_size))
    trace_set = read_trace_set(tmp_path)
    config = astra_config_from_files(inputs.system_json, inputs.network_yml)
    sim = simulate(trace_set.ranks, AstraTimingModel(config), record_nodes=True)
    for rank, timing in sim.ranks.items():
        assert run.report.ranks[rank].finished_cycles == timing.finish, case.what


def test_dualpipe_sums_the_two_copies_of_each_stage(tmp_path: Path) -> None:
    """Ranks r and p − 1 − r hold the same two stages: one all-reduce of their gradients, over
    exactly those two ranks, of the same bytes on both, after the whole backward."""
    case = CASES["dualpipe-dp"]  # pp 2, dp 2: ranks (stage, dp) = 2·stage + dp
    write_case(case, tmp_path)
    trace_set = read_trace_set(tmp_path)
    found = {}
    for rank, nodes in trace_set.ranks.items():
        (node,) = [n for n in nodes if n.name.endswith("mirror_grad_all_reduce")]
        found[rank] = (node.group, node.comm_bytes)
    assert found[0][0] == found[2][0] == (0, 2) and found[1][0] == found[3][0] == (1, 3)
    programs = lower(case.model(), case.parallel_config())
    elements = sum(
        w.elements for c in programs.stages[0].chunks for b in c.blocks for w in b.weights
    )
    assert {size for _, size in found.values()} == {elements * programs.workload.grad_bytes}
