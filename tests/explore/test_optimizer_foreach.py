"""PyTorch's foreach AdamW and gradient clipping as the optimizer step (``optimizer_foreach``,
:func:`stage_explore.analytical.costs.foreach_optimizer_bytes`) against closed forms written
out here pass by pass."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.costs import foreach_optimizer_bytes, optimizer_step_s
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

P = 4  # fp32 parameter, moments and denominator


def _passes(g: int) -> int:
    # mul_(p); lerp_(m, g); mul_(v); addcmul_(v, g, g); sqrt(v); div_; add_; addcdiv_(p, m, d)
    step = 2 * P + (2 * P + g) + 2 * P + (2 * P + g) + 2 * P + 2 * P + 2 * P + 4 * P
    clip = g + 2 * g  # the norms read g; the always-applied _foreach_mul_ reads and writes g
    return step + clip


@pytest.mark.parametrize("grad_bytes", [2, 4])
def test_the_bytes_are_the_passes_of_the_code(grad_bytes: int) -> None:
    assert foreach_optimizer_bytes(grad_bytes) == _passes(grad_bytes)
    assert foreach_optimizer_bytes(4) == 92


def test_the_step_is_memory_bound_on_those_bytes() -> None:
    accelerator = load_system("h100-80gb").accelerator
    params = 10**9
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    foreach = optimizer_step_s(accelerator, "bf16", params, 4, foreach=True)
    assert foreach == pytest.approx(92 * params / bandwidth)
    assert foreach > optimizer_step_s(accelerator, "bf16", params, 4)


def test_the_option_moves_the_optimizer_and_nothing_else() -> None:
    # two configurations differing only in the option give different steps (no stale memo)
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)
    parallel = ParallelConfig(dp=8, zero=3, global_batch=16)
    system = load_system("h100-80gb")
    on, off = (
        AnalyticalBackend(framework="torchtitan", overrides={"optimizer_foreach": value})
        .evaluate(model, parallel, system)
        .breakdown
        for value in (True, False)
    )
    assert on["optimizer"] > off["optimizer"]
    for key in (set(on) | set(off)) - {"optimizer"}:  # the rest unchanged (up to rounding)
        assert on.get(key, 0.0) == pytest.approx(off.get(key, 0.0), abs=1e-12)


def test_the_torchtitan_and_fms_fsdp_profiles_step_with_foreach() -> None:
    # torchtitan's AdamW(foreach=not fused); fms-fsdp's AdamW with neither argument (torch's
    # default on CUDA is foreach)
    stepping = sorted(name for name, p in FRAMEWORKS.items() if p.optimizer_foreach)
    # ... and InternEvo's torch.optim.AdamW (neither fused nor foreach) on its flat partition
    assert stepping == ["fms-fsdp", "internevo", "torchtitan"]
