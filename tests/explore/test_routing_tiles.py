"""Row tiles of routed experts' GEMMs under random routing (``analytical/routing_tiles.py``): the
binomial expectation against exact enumeration, which GEMMs and which runs it applies to, and
what it changes in an evaluation."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import comb

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.expert_gemms import routed_rows_share
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.gemm_tiles import gemm_shape, gemm_time_s
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.routing_tiles import expected_row_tiles, routing_share
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # 32 experts, top-4
LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
# 1,024 tokens per rank x 8 ranks x top-4 / 32 experts = 1,024 slots per expert: 8 row tiles
EP8 = ParallelConfig(dp=8, ep=8, zero=1, micro_batch=1, global_batch=8)


def _exact(n: int, p: Fraction, tile: int) -> Fraction:
    """E[ceil(X / tile)] for X ~ Binomial(n, p), summed over every outcome in exact rationals."""
    return sum(
        (comb(n, x) * p**x * (1 - p) ** (n - x) * -(-x // tile) for x in range(n + 1)),
        Fraction(0),
    )


@pytest.mark.parametrize(
    ("n", "p", "tile"),
    [(40, Fraction(1, 4), 4), (96, Fraction(1, 8), 4), (200, Fraction(3, 10), 16)],
)
def test_the_expectation_is_the_binomials(n: int, p: Fraction, tile: int) -> None:
    mean = n * p
    assert mean.denominator == 1
    got = expected_row_tiles(int(mean), float(p), tile)
    assert got == pytest.approx(float(_exact(n, p, tile)), rel=1e-12)


def test_a_mean_on_a_tile_boundary_needs_half_a_tile_more_and_share_one_none() -> None:
    # GPT-OSS-120B on 8 H100s: 32,768 tokens, top-4 of 128 experts -> 1,024 slots (8 tiles);
    # the count's median is the mean, so about half the experts need a ninth tile
    assert expected_row_tiles(1024, 4 / 128, 128) == pytest.approx(8.5, abs=0.01)
    # every token to every expert: the count is the mean
    assert expected_row_tiles(1000, 1.0, 128) == 8.0
    with pytest.raises(ValueError, match="share"):
        expected_row_tiles(1024, 0.0, 128)


def test_which_runs_route_at_random() -> None:
    assert routing_share(GPTOSS, fake_balanced_gate=False) == 4 / 32
    assert routing_share(GPTOSS, fake_balanced_gate=True) == 0.0  # AutoModel's FakeBalancedGate
    assert routing_share(GPTOSS.with_overrides(capacity_factor=1.0), False) == 0.0
    assert routing_share(LLAMA, fake_balanced_gate=False) == 0.0


def test_only_routed_experts_forward_and_input_gradient_gemms_change() -> None:
    layer = bind_all(make_workload(GPTOSS, EP8))["moe_layer"]
    weights = frozenset(w.name for w in layer.weights)
    kernels = H100.accelerator.kernels
    assert kernels is not None
    random = KernelTimer(
        H100.accelerator, kernels, "bf16", weights, keys=1024, head_dim=64, causal=True,
        expert_share=4 / 32,
    )  # fmt: skip
    balanced = replace(random, expert_share=0.0)
    changed = set()
    for instr in (*layer.fwd, *layer.bwd):
        shape = gemm_shape(instr)
        if shape is None:
            continue
        share = routed_rows_share(instr, weights, 4 / 32)
        if share:
            changed.add((instr.name.split(".")[1], gemm_role(instr, weights)))
            assert shape[1] == 1024  # the expert's slots are the rows
            assert random(instr) > balanced(instr)
            rate = (
                H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
            )
            memory_s = (instr.bytes_read + instr.bytes_written) / rate
            alone = gemm_time_s(
                H100.accelerator, kernels, "bf16", shape, instr.flops, memory_s, share
            )
            assert random(instr) - balanced(instr) == pytest.approx(
                alone
                - gemm_time_s(H100.accelerator, kernels, "bf16", shape, instr.flops, memory_s),
                rel=1e-9,
            )
        else:
            assert random(instr) == balanced(instr)
    assert changed == {
        (projection, role) for projection in ("gate", "up", "fc2") for role in ("fprop", "dgrad")
    }


def test_the_effect_in_an_evaluation() -> None:
    """Megatron-Core routing at random is slower than AutoModel's fake gate on the same point;
    with the fake gate the experts run at the mean; a dense model is untouched."""
    random = AnalyticalBackend(framework="megatron-core")
    fake = AnalyticalBackend(framework="megatron-core", overrides={"moe_fake_balanced_gate": True})
    assert (
        random.evaluate(GPTOSS, EP8, H100).step_time_s
        > fake.evaluate(GPTOSS, EP8, H100).step_time_s
    )
    dense = ParallelConfig(dp=8, zero=1, micro_batch=1, global_batch=8)
    assert (
        random.evaluate(LLAMA, dense, H100).step_time_s
        == fake.evaluate(LLAMA, dense, H100).step_time_s
    )
