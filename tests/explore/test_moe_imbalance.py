"""Expert load imbalance (issue #12): the analytical backend's ``moe_load_imbalance`` framework
option charges the busiest expert-parallel rank — its routed experts' compute at the factor and
the collectives on routed tokens at the factor × their bytes; 1.0 changes nothing."""

from __future__ import annotations

import json
import math

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import (
    imbalanced_timers,
    rank_imbalance,
    routed_instr,
    time_block,
)
from stage_explore.system import load_system

QWEN = get_flavor("qwen3-235b-a22b").with_overrides(layers=4)
H100 = load_system("h100-80gb")
FOLDED = ParallelConfig(tp=2, dp=4, ep=4, etp=1, sp=True, global_batch=8)  # a2a over ep×tp
EXPERT_TP = ParallelConfig(tp=2, dp=4, ep=2, sp=True, global_batch=8)  # etp = tp: gathers too


def _moe_block(parallel: ParallelConfig) -> tuple[tuple[Instr, ...], tuple[Instr, ...]]:
    block = lower(QWEN, parallel).blocks["moe_layer"]
    return block.fwd, block.bwd


def test_routed_instructions_are_the_expert_side_of_dispatch_and_combine() -> None:
    fwd, bwd = _moe_block(EXPERT_TP)
    routed = {i.name for i in (*fwd, *bwd) if routed_instr(i)}
    assert {
        "all_to_all:moe.tokens", "all_gather:moe.tokens", "experts.gate", "experts.up",
        "experts.act", "experts.fc2", "reduce_scatter:experts.fc2", "all_to_all:experts.fc2",
        "all_to_all:d.experts.fc2", "all_gather:d.experts.fc2", "experts.fc2.dexperts.w2",
        "experts.gate.dexperts.wg", "reduce_scatter:d.moe.tokens", "all_to_all:d.moe.tokens",
    } <= routed  # fmt: skip
    # the rank's own tokens (attention, router, dispatch/combine copies) are balanced
    for name in ("q", "attn.core", "moe.logits", "moe.dispatch", "moe.combine",
                 "all_gather:ln1", "reduce_scatter:attn.proj", "moe.combine.backward"):  # fmt: skip
        assert name not in routed


@pytest.mark.parametrize("parallel", [FOLDED, EXPERT_TP], ids=["ep-tp-folded", "etp=tp"])
@pytest.mark.parametrize("factor", [1.0, 1.3, 2.0])
def test_factor_scales_routed_compute_and_routed_bytes_in_closed_form(
    parallel: ParallelConfig, factor: float
) -> None:
    """Per-instruction costs (compute: FLOPs at 1 PFLOP/s; collectives: 5 µs + bytes at
    100 GB/s): busy compute grows by (f − 1) × the routed instructions' time, and the forward's
    all-to-alls — on the critical path, nothing to hide behind — are exposed at
    5 µs + ceil(f × bytes) / 100 GB/s each."""
    fwd, bwd = _moe_block(parallel)

    def compute_s(i: Instr) -> float:
        return i.flops / 1e15 + (i.bytes_read + i.bytes_written) / 3e12

    def comm_s(i: Instr) -> float:
        return 5e-6 + i.comm_bytes / 1e11

    busiest = imbalanced_timers(compute_s, comm_s, factor)
    for instrs in (fwd, bwd):
        base = time_block(instrs, compute_s, comm_s)
        timing = time_block(instrs, *busiest)
        routed_compute = sum(compute_s(i) for i in instrs if not i.is_comm and routed_instr(i))
        assert routed_compute > 0
        assert timing.compute_s == pytest.approx(
            base.compute_s + (factor - 1) * routed_compute, rel=1e-12
        )
        assert timing.flops == base.flops  # the model's FLOPs are not the busiest rank's
        if factor > 1:
            assert timing.duration_s > base.duration_s
    a2a = [i for i in fwd if i.collective is CollectiveKind.ALL_TO_ALL]
    assert len(a2a) == 2
    expected = sum(5e-6 + math.ceil(factor * i.comm_bytes) / 1e11 for i in a2a)
    assert time_block(fwd, *busiest).exposed_s["all_to_all"] == pytest.approx(expected, rel=1e-12)


def test_factor_one_changes_nothing_and_a_dense_model_ignores_the_factor() -> None:
    default = AnalyticalBackend(framework="megatron-core")
    balanced = AnalyticalBackend(framework="megatron-core", overrides={"moe_load_imbalance": 1.0})
    skewed = AnalyticalBackend(framework="megatron-core", overrides={"moe_load_imbalance": 1.5})
    moe = default.evaluate(QWEN, FOLDED, H100)
    assert moe.feasible
    assert balanced.evaluate(QWEN, FOLDED, H100).to_dict() == moe.to_dict()
    worse = skewed.evaluate(QWEN, FOLDED, H100)
    assert worse.step_time_s > moe.step_time_s
    # timing only: the memory model is the balanced one
    assert worse.peak_memory_bytes == moe.peak_memory_bytes
    dense = get_flavor("llama3-8b").with_overrides(layers=4)
    parallel = ParallelConfig(tp=2, dp=4, sp=True, global_batch=8)
    assert (
        skewed.evaluate(dense, parallel, H100).to_dict()
        == default.evaluate(dense, parallel, H100).to_dict()
    )


@pytest.mark.parametrize("bad", [0.5, 0, -1.0, float("nan"), float("inf"), True, "1.2", None])
def test_bad_factors_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ConfigError, match="moe_load_imbalance") as error:
        AnalyticalBackend(overrides={"moe_load_imbalance": bad})
    assert "\n" not in str(error.value)
    assert ">= 1" in str(error.value)


def test_stage_eval_moe_load_imbalance(capsys: pytest.CaptureFixture[str]) -> None:
    """``stage eval --moe-load-imbalance F``: the analytical step of the busiest rank; a bad F
    is the one-line error (exit 2), and another backend without --compare is refused."""
    from stage_explore.cli import main

    base = ["eval", "--model", "qwen3-30b-a3b", "--layers", "2", "--tp", "2", "--dp", "4",
            "--ep", "4", "--etp", "1", "--sp", "--global-batch", "8", "--system", "h100-80gb",
            "--framework", "megatron-core", "--json"]  # fmt: skip
    steps = []
    for argv in (base, [*base, "--moe-load-imbalance", "1"], [*base, "--moe-load-imbalance", "2"]):
        assert main(argv) == 0
        steps.append(json.loads(capsys.readouterr().out)["step_time_s"])
    assert steps[0] == steps[1] < steps[2]
    assert main([*base, "--moe-load-imbalance", "0.9"]) == 2
    assert "--moe-load-imbalance: expected a finite number >= 1" in capsys.readouterr().err
    assert main([*base[:-3], "--backend", "astra-sim", "--moe-load-imbalance", "2"]) == 2
    assert "--moe-load-imbalance applies to the analytical backend" in capsys.readouterr().err


def test_factor_is_charged_under_expert_parallelism_only() -> None:
    """At ep 1 every rank holds every expert and computes exactly its own tokens × top-k expert
    rows, whatever the experts' shares: the factor changes nothing there (it did before s27
    moeimbal: the whole routed compute was charged at the factor); at ep 2 it is charged."""
    default = AnalyticalBackend(framework="megatron-core")
    skewed = AnalyticalBackend(framework="megatron-core", overrides={"moe_load_imbalance": 1.5})
    no_ep = ParallelConfig(tp=2, dp=4, sp=True, global_batch=8)
    assert (
        skewed.evaluate(QWEN, no_ep, H100).to_dict()
        == default.evaluate(QWEN, no_ep, H100).to_dict()
    )
    two = ParallelConfig(tp=2, dp=4, ep=2, etp=1, sp=True, global_batch=8)
    assert (
        skewed.evaluate(QWEN, two, H100).step_time_s > default.evaluate(QWEN, two, H100).step_time_s
    )


@pytest.mark.parametrize(
    ("factor", "ep", "expected"), [(1.4, 1, 1.0), (1.4, 2, 1.4), (1.0, 8, 1.0)]
)
def test_rank_imbalance(factor: float, ep: int, expected: float) -> None:
    assert rank_imbalance(factor, ep) == expected
