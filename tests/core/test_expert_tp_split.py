"""An expert tensor parallel size strictly between 1 and tp (issue #12): tp split in two axes.

The lowering splits the tp mesh axis into ``tpo`` (outer, ``tp/etp``) and ``tp`` (inner,
``etp``) (:mod:`stage_core.lower.experts`, :func:`stage_core.plans.split_tp`). Checked here,
beside the property grid of ``tests/core/test_lower_moe.py``:

- the dense layers are the same program as without the split: every non-expert instruction has
  the same FLOPs, bytes and communicator groups as at etp = tp, and the dense weights the same
  shards;
- the experts' tensor-parallel collectives run over the ``etp`` ranks only, their FLOPs per
  rank are the etp = tp ones × tp/etp (whole groups of tokens routed to fewer, wider shards);
- the all-gather token dispatcher gathers over ``ep·etp`` ranks (Megatron-Core's TP×EP group
  of the experts);
- the analytical backend's tp-overlap rule keeps ``1/tp`` of a dense collective and ``1/etp``
  of an expert one on the path;
- traces pass ``stage check --for astra-sim``; ``stage eval`` and ``stage memory --json`` run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import get_flavor
from stage_core.parallel import MoeDispatcher, ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import overlap_rule
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.cli import main
from stage_explore.system import load_system

MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=256, num_experts=16)
QWEN = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)


def _config(etp: int | None, tp: int = 4, ep: int = 4, **fields: object) -> ParallelConfig:
    options: dict[str, object] = dict(dp=4, global_batch=4, sp=True) | fields
    return ParallelConfig(tp=tp, etp=etp, ep=ep, **options)  # type: ignore[arg-type]


def _expert_region(instr: Instr) -> bool:
    """The experts' GEMMs and the collectives and gradient sums of the routed tokens (comm
    instructions are named ``kind:tensor``)."""
    if instr.is_comm:
        return instr.name.partition(":")[2].removeprefix("d.").startswith(("experts.", "moe.t"))
    return instr.name.startswith("experts.") or instr.name.endswith(".d.moe.tokens")


def _dense(programs: ProgramSet, block: BoundBlock) -> list[tuple[object, ...]]:
    """Every instruction outside the expert region, with its communicator group at a few ranks
    (the mesh axes' names differ between a split and an unsplit mesh; the groups must not)."""
    mesh = programs.workload.mesh
    ranks = range(0, programs.workload.world_size, 3)
    return [
        (
            i.name,
            i.phase,
            i.kind,
            i.flops,
            i.bytes_read,
            i.bytes_written,
            i.collective,
            i.comm_bytes,
            tuple(mesh.group(r, i.axes) for r in ranks) if i.axes else (),
        )  # fmt: skip
        for i in block.fwd + block.bwd
        if not _expert_region(i)
    ]


#: (tp, etp, ep): tp split in two (ep a multiple of tp/etp), or in three (ep below tp/etp,
#: including etp 1 and ep 1).
SPLITS = [(4, 2, 4), (8, 2, 4), (8, 4, 2), (8, 2, 2), (4, 1, 2), (4, 2, 1)]


@pytest.mark.parametrize(("tp", "etp", "ep"), SPLITS)
def test_dense_layers_are_the_unsplit_program(tp: int, etp: int, ep: int) -> None:
    """At the same tp, sp, ep, dp the split changes nothing outside the experts: the
    embedding, the head, the attention and the router lower to the same instructions with the
    same groups (tp consecutive ranks), the dense weights to the same shards."""
    split = lower(MIXTRAL, _config(etp, tp=tp, ep=ep))
    whole = lower(MIXTRAL, _config(None, tp=tp, ep=ep))
    sizes = split.workload.axis_sizes
    assert (sizes["tpr"] * sizes["tpo"], sizes["tp"]) == (tp // etp, etp)
    assert sizes["tpo"] == min(ep, tp // etp)
    assert "tpo" not in whole.workload.mesh and "tpr" not in whole.workload.mesh
    for kind in ("embedding", "head", "moe_layer"):
        assert _dense(split, split.blocks[kind]) == _dense(whole, whole.blocks[kind]), kind
        dense_split = [(w.name, w.elements) for w in split.blocks[kind].weights if not w.expert]
        dense_whole = [(w.name, w.elements) for w in whole.blocks[kind].weights if not w.expert]
        assert dense_split == dense_whole
    assert split.stages[0].boundary_bytes == whole.stages[0].boundary_bytes


@pytest.mark.parametrize(("tp", "etp", "ep"), SPLITS)
def test_expert_collectives_and_flops(tp: int, etp: int, ep: int) -> None:
    """The routed tokens cross one all-to-all over ep ranks each way, then an all-gather over
    the etp ranks (a reduce-scatter back), forward and backward (no all-to-all at ep 1, no
    gather at etp 1). An expert GEMM per rank does the etp = tp work: it sees the tokens
    gathered over etp ranks instead of tp (etp/tp as many) on a shard of the FFN width tp/etp
    times wider."""
    split = lower(MIXTRAL, _config(etp, tp=tp, ep=ep))
    whole = lower(MIXTRAL, _config(None, tp=tp, ep=ep))
    mesh, sizes = split.workload.mesh, split.workload.axis_sizes
    moe = split.blocks["moe_layer"]
    routed = [i for i in moe.fwd + moe.bwd if i.is_comm and _expert_region(i)]
    kinds = [(str(i.collective), len(mesh.group(0, i.axes))) for i in routed]
    a2a, ag, rs = "all_to_all", "all_gather", "reduce_scatter"
    exchange = [(a2a, ep)] if ep > 1 else []
    gather = [(ag, etp), (rs, etp)] if etp > 1 else []
    assert kinds == (exchange + gather + exchange) * 2
    expert_tp = {i.axes for i in routed if str(i.collective) != a2a}
    assert expert_tp == ({("tp",)} if gather else set())
    assert sizes["tp"] == etp
    flops = {i.name: i.flops for i in moe.fwd if i.name.startswith("experts.")}
    flops_whole = {i.name: i.flops for i in whole.blocks["moe_layer"].fwd if i.name in flops}
    assert flops and flops.keys() == flops_whole.keys()
    assert flops == flops_whole


def test_allgather_dispatcher_gathers_over_ep_times_etp() -> None:
    """Megatron-Core's all-gather dispatcher gathers over the experts' TP×EP group: ``ep·etp``
    ranks. Each rank receives (ep·etp − 1) × its own tokens (a chain of hierarchical gathers)."""
    parallel = _config(2, tp=4, ep=4, dp=4, global_batch=4)
    parallel = ParallelConfig(**{**parallel.to_dict(), "moe_dispatcher": MoeDispatcher.ALLGATHER})
    programs = lower(QWEN, parallel)
    sizes = programs.workload.axis_sizes
    own = QWEN.seq_len // parallel.tp * QWEN.hidden * 2
    gathers = [i for i in programs.blocks["moe_layer"].fwd if i.name == "all_gather:ln2"]
    group = 1
    received = 0
    for instr in gathers:  # innermost first: each gathers the already-gathered buffer
        n = 1
        for axis in instr.axes:
            n *= sizes[axis]
        received += (n - 1) * instr.comm_bytes
        group *= n
    assert group == parallel.ep * parallel.expert_tp
    assert received == (group - 1) * own


def test_overlap_rule_keeps_one_tp_chunk_of_dense_and_expert_collectives() -> None:
    profile = get_framework("megatron-core")
    assert profile.tp_comm_overlap
    rule = overlap_rule(TimingPolicy.from_profile(profile), 4, True, 2)
    assert rule is not None

    def gather(axes: tuple[str, ...]) -> Instr:
        return Instr("all_gather:x", "fwd", "comm", collective=CollectiveKind.ALL_GATHER, axes=axes)

    for dense in (("tpo", "tp"), ("tpr", "tpo", "tp"), ("tpr", "tpo"), ("tpr", "tp")):
        assert rule(gather(dense)) == 0.25, dense  # a dense layer's group: all of tp
    assert rule(gather(("tp",))) == 0.5  # the experts' own tp
    assert rule(gather(("ep", "tp"))) is None
    routed = Instr(
        "all_gather:moe.tokens", "fwd", "comm", collective=CollectiveKind.ALL_GATHER, axes=("tp",)
    )
    assert rule(routed) is None  # Megatron-Core's dispatcher: an NCCL call, no userbuffers
    policy = TimingPolicy.from_profile(profile)
    async_tp = overlap_rule(policy, 4, True, 2, expert_tp_overlap=True)
    assert async_tp is not None and async_tp(routed) == 0.5
    unsplit = overlap_rule(TimingPolicy.from_profile(profile), 4, True)
    assert unsplit is not None
    assert unsplit(gather(("tp",))) == 0.25


def test_trace_check_eval_and_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``stage trace`` of a tp 4, etp 2 point passes ``stage check --for astra-sim``; ``stage
    eval --model qwen3-30b-a3b --tp 4 --etp 2`` and ``stage memory --json`` run; the expert
    weights per rank sit between etp = 1 and etp = tp."""
    argv = ["--model", "qwen3-30b-a3b", "--layers", "2", "--seq-len", "1024", "--tp", "4",
            "--sp", "--pp", "2", "--dp", "2", "--ep", "4", "--global-batch", "4"]  # fmt: skip
    out = tmp_path / "traces"
    assert main(["trace", *argv, "--etp", "2", "--out", str(out)]) == 0
    assert main(["check", str(out), "--for", "astra-sim", "--json"]) == 0
    groups = json.loads((out / "comm_group.json").read_text()).values()
    # rank 0's tp group (dense layers), Megatron's ep group (the rest of tp, then dp: ranks
    # 0, 2, 4, 6 of the expert generator tp-ep-dp-pp with tp = etp = 2) and etp group
    assert [0, 1, 2, 3] in groups and [0, 2, 4, 6] in groups and [0, 1] in groups
    capsys.readouterr()
    assert main(["eval", *argv, "--etp", "2", "--system", "h100-80gb", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["feasible"] and result["parallel"]["etp"] == 2
    weights = {}
    wider = [*argv[:-6], "--dp", "4", "--ep", "4", "--global-batch", "8"]  # ep·etp | tp·dp
    for etp in ("1", "2", "4"):
        assert main(["memory", *wider, "--etp", etp, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["parallel"]["etp"] == int(etp)
        weights[etp] = report["ranks"][0]["weights_bytes"]
    assert weights["1"] > weights["2"] > weights["4"]


def test_analytical_evaluations_of_each_etp_are_their_own() -> None:
    """One backend evaluating etp = tp, 1 and 2 in turn (its memo tables shared) gives what a
    fresh backend gives for each: the split mesh is part of every memo key; and the three are
    distinct design points."""
    model = QWEN.with_overrides(layers=4)
    h100 = load_system("h100-80gb")
    configs = [_config(etp, tp=4, ep=4, dp=8, global_batch=16) for etp in (None, 1, 2)]
    shared = AnalyticalBackend(framework="megatron-core")
    steps = [shared.evaluate(model, c, h100).step_time_s for c in configs]
    fresh = [
        AnalyticalBackend(framework="megatron-core").evaluate(model, c, h100).step_time_s
        for c in configs
    ]
    assert steps == fresh
    assert len(set(steps)) == 3
