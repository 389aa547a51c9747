"""torchtitan's op-level SAC on a compiled run (``fused_elementwise``: ``training.compile``): the
backend lowers ``op`` as ``op_compiled`` (``op_recompute_sdpa_compiled`` where the policy
re-runs cuDNN attention), keeping only what the compiled backward reads; eager runs keep ``op``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

LAYERS, SEQ = 2, 8192
LLAMA = get_flavor("llama3-8b").with_overrides(layers=LAYERS, seq_len=SEQ)
OP = ParallelConfig(
    dp=8, zero=3, micro_batch=1, global_batch=8,
    recompute=Recompute.SELECTIVE, recompute_modules=("op",),
)  # fmt: skip


@pytest.mark.parametrize(
    ("system", "compiled", "modules"),
    [("h100-80gb", False, ("op",)), ("h100-80gb", True, ("op_compiled",)),
     ("b200", False, ("op_recompute_sdpa",)), ("b200", True, ("op_recompute_sdpa_compiled",))],
)  # fmt: skip
def test_torchtitan_traces_its_policy_only_when_compiled(
    system: str, compiled: bool, modules: tuple[str, ...]
) -> None:
    peaks = load_system(system).accelerator.peak_flops_per_s
    profile = replace(get_framework("torchtitan"), fused_elementwise=compiled)
    assert profile.op_sac_modules(("op",), peaks) == modules
    assert profile.op_sac_modules(("core_attn",), peaks) == ("core_attn",)


def test_a_compiled_run_keeps_the_down_projection_outputs_less() -> None:
    """A compiled torchtitan run evaluates ``op`` as ``op_compiled``; the traced policy's
    peak holds each layer's down projection output (bf16, one hidden-sized row per token)
    less than the eager policy's, all else equal."""
    system = load_system("h100-80gb")
    eager = AnalyticalBackend(framework="torchtitan")
    compiled = AnalyticalBackend(framework="torchtitan", overrides={"fused_elementwise": True})
    traced = replace(OP, recompute_modules=("op_compiled",))
    assert eager.as_run(OP, system) == OP
    assert compiled.as_run(OP, system) == traced
    run, as_traced = compiled.evaluate(LLAMA, OP, system), compiled.evaluate(LLAMA, traced, system)
    assert run.peak_memory_bytes == as_traced.peak_memory_bytes
    assert run.step_time_s == as_traced.step_time_s
    kept = eager.evaluate(LLAMA, OP, system).peak_memory_bytes
    less = eager.evaluate(LLAMA, traced, system).peak_memory_bytes
    down = LAYERS * 2 * SEQ * 4096  # the tensors; the caching allocator's margin on top
    overhead = get_framework("torchtitan").allocator_overhead
    assert abs((kept - less) - down * (1 + overhead)) <= 2
