"""s32 distmoe: torchtitan's Dist-MoE routed experts, whose dispatch and combine run inside the
grouped GEMMs (``moe_fused_expert_comm``; :mod:`stage_explore.analytical.fused_expert_comm`),
and the reading rule that sets it (with ``moe_sort_chunks`` off) on a row naming Dist-MoE."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.fused_expert_comm import (
    fused_elementwise,
    fused_expert_timers,
    fused_partners,
)
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_torch import DIST_MOE
from tests.explore.trace_helpers import optimizer_end

DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data"
EXPERTS = frozenset({"experts.wg", "experts.wu", "experts.w2"})
A2A = CollectiveKind.ALL_TO_ALL


def _op(name: str, kind: str, deps: tuple[int, ...], reads: str, writes: str) -> Instr:
    return Instr(
        name, "fwd", kind, deps=deps,
        inputs=tuple((n, 1) for n in reads.split()), outputs=tuple((n, 1) for n in writes.split()),
    )  # fmt: skip


def _exchange(name: str, deps: tuple[int, ...], tensor: str, axes: tuple[str, ...]) -> Instr:
    return Instr(
        name, "fwd", "comm", collective=A2A, axes=axes, deps=deps,
        inputs=((tensor, 1),), outputs=((tensor, 1),),
    )  # fmt: skip


def _forward(axes: tuple[str, ...] = ("ep",)) -> tuple[Instr, ...]:
    """The generator's routed-expert forward: permute, dispatch, W13 (gate, up), SwiGLU, W2,
    combine exchange, weighted combine."""
    return (
        _op("moe.dispatch", "dispatch", (), "ln2 moe.gates", "moe.tokens"),
        _exchange("all_to_all:moe.tokens", (0,), "moe.tokens", axes),
        _op("experts.gate", "einsum", (1,), "moe.tokens experts.wg", "experts.gate"),
        _op("experts.up", "einsum", (1,), "moe.tokens experts.wu", "experts.up"),
        _op("experts.act", "elementwise", (2, 3), "experts.gate experts.up", "experts.act"),
        _op("experts.fc2", "einsum", (4,), "experts.act experts.w2", "experts.fc2"),
        _exchange("all_to_all:experts.fc2", (5,), "experts.fc2", axes),
        _op("moe.combine", "combine", (6,), "experts.fc2 moe.gates", "moe.out"),
    )


def _backward() -> tuple[Instr, ...]:
    """Its backward from the combine's: the W2 input and weight gradients, SwiGLU backward, the
    W13 input gradients summed, the dispatch's backward."""
    return (
        _op("moe.combine.backward", "backwardop", (), "d.moe.out", "d.experts.fc2"),
        _exchange("all_to_all:d.experts.fc2", (0,), "d.experts.fc2", ("ep",)),
        _op("fc2.dact", "einsum", (1,), "d.experts.fc2 experts.w2", "d.experts.act"),
        _op("fc2.dw2", "einsum", (1,), "d.experts.fc2 experts.act", "d.experts.w2"),
        _op("act.bwd", "backwardop", (2,), "d.experts.act", "d.experts.gate d.experts.up"),
        _op("up.dtokens", "einsum", (4,), "d.experts.up experts.wu", "d.moe.tokens"),
        _op("gate.dtokens", "einsum", (4,), "d.experts.gate experts.wg", "d.moe.tokens"),
        _op("tokens.sum", "elementwise", (6,), "d.moe.tokens d.moe.tokens", "d.moe.tokens"),
        _exchange("all_to_all:d.moe.tokens", (7,), "d.moe.tokens", ("ep",)),
        _op("moe.dispatch.backward", "backwardop", (8,), "d.moe.tokens", "d.ln2"),
    )


def test_the_dispatch_runs_inside_w13_and_the_combine_inside_w2() -> None:
    ops = _forward()
    assert fused_partners(ops, EXPERTS) == {ops[1]: (ops[2], ops[3]), ops[6]: (ops[5],)}
    assert fused_elementwise(ops, EXPERTS) == frozenset({ops[4]})


def test_backward_pairs_input_gradient_gemms_only() -> None:
    """The output-gradient gather runs inside W2's DGRAD (not its WGRAD, a kernel of its own);
    the input-gradient scatter inside the two W13 DGRADs, whose sum is one contraction."""
    ops = _backward()
    assert fused_partners(ops, EXPERTS) == {ops[1]: (ops[2],), ops[8]: (ops[5], ops[6])}
    assert fused_elementwise(ops, EXPERTS) == frozenset({ops[4], ops[7]})


def test_an_exchange_takes_what_its_gemms_leave() -> None:
    """Dispatch 3 s beside W13's 1 + 1 s leaves 1 s; the combine's 1 s under W2's 2 s none; the
    SwiGLU is free and everything else keeps its time."""
    ops = _forward()
    gemm = {"experts.gate": 1.0, "experts.up": 1.0, "experts.fc2": 2.0}
    compute_s, comm_s = fused_expert_timers(
        ops, EXPERTS, lambda i: gemm.get(i.name, 0.5),
        lambda i: 3.0 if i.name == "all_to_all:moe.tokens" else 1.0,
    )  # fmt: skip
    assert comm_s(ops[1]) == pytest.approx(1.0)
    assert comm_s(ops[6]) == 0.0
    assert compute_s(ops[4]) == 0.0
    assert [compute_s(ops[i]) for i in (0, 2, 5, 7)] == [0.5, 1.0, 2.0, 0.5]


def test_expert_gemms_take_their_kernel_alone_without_casts() -> None:
    """Given the GEMM kernel's own time (casts apart), every expert GEMM — weight gradients
    too — is charged it, and an exchange hides under it, not under the casts; the router's and
    other GEMMs keep ``compute_s``."""
    ops = _backward()
    compute_s, comm_s = fused_expert_timers(
        ops, EXPERTS, lambda i: 1.5, lambda i: 2.0, gemm_s=lambda i: 0.5
    )
    assert [compute_s(ops[i]) for i in (2, 3, 5, 6)] == [0.5, 0.5, 0.5, 0.5]
    assert compute_s(ops[0]) == 1.5  # the combine's backward: not a GEMM
    assert comm_s(ops[1]) == pytest.approx(1.5)  # 2 s beside W2 DGRAD's 0.5 s
    assert comm_s(ops[8]) == pytest.approx(1.0)  # 2 s beside the two W13 DGRADs' 1 s


def test_no_expert_parallel_exchange_no_pairing() -> None:
    ops = _forward(axes=("tp",))
    assert fused_partners(ops, EXPERTS) == {}

    def one_s(instr: Instr) -> float:
        return 1.0

    assert fused_expert_timers(ops, frozenset(), one_s, one_s) == (one_s, one_s)


@pytest.mark.parametrize("value", [1, "true", 0.0])
def test_a_bad_option_value_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="moe_fused_expert_comm"):
        FRAMEWORKS["torchtitan"].with_overrides({"moe_fused_expert_comm": value})


def _evaluate(flavor: str, ep: int, **options: object) -> dict[str, float]:
    """``flavor`` (4 layers, sequence 1024) on 8 GB300 GPUs, torchtitan: step and breakdown."""
    model = get_flavor(flavor).with_overrides(layers=4, seq_len=1024)
    parallel = ParallelConfig(dp=8, ep=ep, micro_batch=1, global_batch=16)
    backend = AnalyticalBackend(framework="torchtitan", overrides=options)
    result = backend.evaluate(model, parallel, load_system("gb300-nvl72"))
    return {"step": result.step_time_s, **result.breakdown}


def test_the_fused_experts_hide_the_exchanges_and_the_activation() -> None:
    base = _evaluate("qwen3-30b-a3b", 8)
    fused = _evaluate("qwen3-30b-a3b", 8, moe_fused_expert_comm=True)
    assert fused.get("exposed_all_to_all", 0.0) < base["exposed_all_to_all"]
    assert fused["compute"] < base["compute"]  # the SwiGLU and the gradient sum
    assert fused["step"] < base["step"]


def test_a_dense_model_does_not_move() -> None:
    base = _evaluate("llama3-8b", 1)["step"]
    assert _evaluate("llama3-8b", 1, moe_fused_expert_comm=True)["step"] == base


def test_the_trace_mode_ends_the_step_where_the_levelled_mode_does() -> None:
    """The trace mode times the phase program's timers too: with the fused experts (ep 2) both
    modes end the optimizer at the same moment, on the A100 preset without its NCCL channel
    figures (as tests/explore/test_trace_mode.py checks the modes' contract)."""
    backend = AnalyticalBackend(framework="torchtitan", overrides={"moe_fused_expert_comm": True})
    model = get_flavor("deepseek-v2-lite").with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(dp=4, ep=2, micro_batch=1, global_batch=4)
    real = load_system("a100-80gb")
    system = replace(real, network=tuple(replace(d, nccl_channels=None) for d in real.network))
    evaluation = backend.evaluate(model, parallel, system)
    traced = trace_step(backend, model, parallel, system, record_nodes=True, gathers_ahead=False)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    assert optimizer_end(traced) == pytest.approx(levelled, rel=1e-9)


def _torchtitan_row(row_id: str) -> dict[str, str]:
    with open(DATA / "published_runs_no_setup.csv", newline="") as handle:
        return next(row for row in csv.DictReader(handle) if row["id"] == row_id)


def test_a_dist_moe_row_takes_the_fused_experts_without_torchtitan_s_permute() -> None:
    row = _torchtitan_row("TTITAN-DISTMOE-DSV3-GB300-256-PP1")
    (case,) = row_cases(row, "extra.csv", 1)
    assert "moe_fused_expert_comm=true" in case.backend_key
    assert "moe_sort_chunks=false" in case.backend_key
    assert any("moe_fused_expert_comm" in note for note in case.assumptions)


def test_a_row_not_naming_dist_moe_keeps_the_eager_experts() -> None:
    row = {
        key: DIST_MOE.sub("MoE", value)
        for key, value in _torchtitan_row("TTITAN-DISTMOE-DSV3-GB300-256-PP1").items()
    }
    (case,) = row_cases(row, "extra.csv", 1)
    assert "moe_fused_expert_comm" not in case.backend_key
    assert "moe_sort_chunks" not in case.backend_key
