"""FSDP1's flat-gradient concatenation on the compute stream (``fsdp1_flat_grad``,
:func:`stage_explore.analytical.framework_costs.fsdp1_flat_grad_bytes`) against closed forms
computed here."""

from __future__ import annotations

import pytest

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import fsdp1_flat_grad_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.system import load_system

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(
    layers=2, bias=False, dropout=False, core_attention="fused"
)
H100 = load_system("h100-80gb")


def test_bytes_are_one_read_and_one_write_in_the_flat_parameters_dtype() -> None:
    foundry = get_framework("llm-foundry-2023")  # fp32 flat parameters (param_dtype None)
    assert fsdp1_flat_grad_bytes(foundry, 2) == 4 + 4
    bf16_params = foundry.with_overrides({"fsdp_param_fp32": False})
    assert fsdp1_flat_grad_bytes(bf16_params, 2) == 2 + 2
    assert fsdp1_flat_grad_bytes(foundry.with_overrides({"fsdp1_flat_grad": False}), 2) == 0


def _compute(parallel: ParallelConfig, on: bool) -> tuple[float, float]:
    backend = AnalyticalBackend(framework="llm-foundry-2023", overrides={"fsdp1_flat_grad": on})
    result = backend.evaluate(GPT, parallel, H100)
    return result.breakdown["compute"], result.step_time_s


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.FULL])
def test_each_backward_concatenates_every_gradient_element_once(recompute: Recompute) -> None:
    parallel = ParallelConfig(dp=4, zero=3, recompute=recompute, global_batch=8)
    on, on_step = _compute(parallel, True)
    off, off_step = _compute(parallel, False)
    bandwidth = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
    blocks = lower(GPT, parallel).blocks
    elements = sum(
        (GPT.layers if kind == "layer" else 1) * sum(w.elements for w in block.weights)
        for kind, block in blocks.items()
    )
    micro_batches = 8 // 4
    # fp32 views (autocast's cast backward already made them fp32): read 4, write 4; a
    # recomputed forward concatenates nothing
    assert on - off == pytest.approx(micro_batches * elements * (4 + 4) / bandwidth)
    assert on_step > off_step


def test_without_zero3_nothing_is_concatenated() -> None:
    parallel = ParallelConfig(dp=4, zero=1, global_batch=8)
    assert _compute(parallel, True) == _compute(parallel, False)


def test_only_the_llm_foundry_and_fms_fsdp_profiles_run_fsdp1() -> None:
    fsdp1 = [name for name, p in FRAMEWORKS.items() if p.fsdp1_flat_grad]
    assert sorted(fsdp1) == ["fms-fsdp", "llm-foundry-2023"]
