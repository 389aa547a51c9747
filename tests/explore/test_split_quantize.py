"""Per-expert quantize kernels of the grouped expert GEMMs (framework option
``moe_split_quantize``, :func:`~stage_explore.analytical.fp8_casts.split_quantize_kernels`):
Transformer Engine's ``GroupedLinear`` quantizes each local expert's FP8 operand with a kernel of
its own under every recipe but delayed scaling, so each cast kernel of such a GEMM counts once
per local expert and pays ``memory_kernel_s`` each time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.expert_gemms import GROUPED_EXPERT_GEMMS, grouped_gemm_groups
from stage_explore.analytical.fp8_casts import split_quantize_kernels
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

H100 = load_system("h100-80gb")
B200 = load_system("b200")
MOE = get_flavor("mixtral-8x7b").with_overrides(layers=2, vocab=32000, seq_len=2048)  # 8 experts


def _launches(recipe: str, system: Any = H100, ep: int = 2, **over: Any) -> dict[str, float]:
    """Cast kernels (``memory_kernel_s`` units) of each FP8 GEMM of the MoE layer."""
    backend = AnalyticalBackend(framework="megatron-core", overrides=over)
    parallel = ParallelConfig(
        tp=4,
        dp=2,
        sp=True,
        zero=1,
        global_batch=16,
        ep=ep,
        etp=1,
        precision="fp8",
        fp8_recipe=recipe,
    )
    point = bound_point(backend, MOE, parallel, system)
    timer = backend._compute_timer(point, "moe_layer")
    assert isinstance(timer, KernelTimer) and timer.memory_kernel_s > 0
    block = point.blocks["moe_layer"]
    weights = frozenset(w.name for w in block.weights)
    free = replace(timer, memory_kernel_s=0.0)
    launches = {}
    for instr in backend._timed_instrs(block, weights):
        role = gemm_role(instr, weights)
        if instr.kind != "einsum" or role is None or instr.flops == 0:
            continue
        extra = timer._cast_s(instr, role) - free._cast_s(instr, role)
        launches[f"{instr.phase}:{instr.name}"] = round(extra / timer.memory_kernel_s, 9)
    return launches


def test_one_kernel_per_expert_unless_delayed_scaling_or_off() -> None:
    assert split_quantize_kernels(16, "mxfp8", True) == 16
    assert split_quantize_kernels(4, "tensorwise", True) == 4
    assert split_quantize_kernels(4, "blockwise", True) == 4
    assert split_quantize_kernels(16, "delayed", True) == 1  # nvte_multi_cast_transpose
    assert split_quantize_kernels(16, "mxfp8", False) == 1
    assert split_quantize_kernels(1, "mxfp8", True) == 1
    assert split_quantize_kernels(0, "mxfp8", True) == 1  # not a grouped expert GEMM


@pytest.mark.parametrize(("recipe", "system"), [("tensorwise", H100), ("mxfp8", B200)])
def test_the_expert_gemms_casts_count_per_local_expert(recipe: str, system: Any) -> None:
    """With the option, every cast kernel of a grouped expert GEMM counts ep-local-experts
    times (8 experts over ep 2: 4), and no other GEMM's changes."""
    on = _launches(recipe, system)
    off = _launches(recipe, system, moe_split_quantize=False)
    assert on.keys() == off.keys()
    grouped = 0
    for name, count in on.items():
        if name.split(":", 1)[1].startswith(GROUPED_EXPERT_GEMMS):
            assert count == pytest.approx(4 * off[name], rel=1e-9), name
            grouped += off[name] > 0
        else:
            assert count == pytest.approx(off[name], rel=1e-9), name
    assert grouped >= 2  # the forward input casts and the backward output-gradient casts


def test_delayed_scaling_and_one_local_expert_are_unchanged() -> None:
    assert _launches("delayed") == _launches("delayed", moe_split_quantize=False)
    assert _launches("tensorwise", ep=8) == _launches("tensorwise", ep=8, moe_split_quantize=False)


def test_the_groups_are_the_grouped_gemms_batch() -> None:
    backend = AnalyticalBackend(framework="megatron-core")
    parallel = ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=16, ep=2, etp=1)
    point = bound_point(backend, MOE, parallel, H100)
    found = {
        i.name: grouped_gemm_groups(i, shape)
        for i in point.blocks["moe_layer"].fwd
        if (shape := gemm_shape(i)) is not None and i.name.startswith("experts.")
    }
    assert found == {"experts.up": 4, "experts.gate": 0, "experts.fc2": 4}  # gate: fused into up


def test_which_profiles_quantize_per_expert() -> None:
    assert FRAMEWORKS["megatron-core"].moe_split_quantize
    assert not FRAMEWORKS["automodel"].moe_split_quantize
    assert not FRAMEWORKS["megatron-lm-2021"].moe_split_quantize
