"""torchtitan's op-level selective checkpointing on Blackwell: its save list named the flash
and efficient SDPA kernels but not cuDNN's until pytorch/torchtitan#2095 (December 2025), and
torchtitan runs cuDNN attention on compute capability 10.0+ (pytorch/torchtitan#1196), so the
policy re-runs the attention there (``op_sac_saves_cudnn_attention`` off: the backend lowers
``op`` as ``op_recompute_sdpa``); elsewhere, and with the option on, ``op`` as given."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
OP = ParallelConfig(
    dp=8, zero=3, micro_batch=1, global_batch=8,
    recompute=Recompute.SELECTIVE, recompute_modules=("op",),
)  # fmt: skip
SDPA = replace(OP, recompute_modules=("op_recompute_sdpa",))


def _backends() -> tuple[AnalyticalBackend, AnalyticalBackend]:
    """torchtitan as profiled (cuDNN attention not in the op-level save list) and with
    ``op_sac_saves_cudnn_attention`` on (torchtitan after #2095)."""
    tt = AnalyticalBackend(framework="torchtitan")
    fixed = AnalyticalBackend(
        framework="torchtitan", overrides={"op_sac_saves_cudnn_attention": True}
    )
    return tt, fixed


@pytest.mark.parametrize(
    ("system", "modules"),
    [("b200", ("op_recompute_sdpa",)), ("gb200-nvl72", ("op_recompute_sdpa",)),
     ("h100-80gb", ("op",)), ("mi300x", ("op",))],
)  # fmt: skip
def test_torchtitan_re_runs_the_attention_only_where_it_runs_cudnn(
    system: str, modules: tuple[str, ...]
) -> None:
    peaks = load_system(system).accelerator.peak_flops_per_s
    assert get_framework("torchtitan").op_sac_modules(("op",), peaks) == modules
    assert get_framework("torchtitan").op_sac_modules(("core_attn",), peaks) == ("core_attn",)
    saved = replace(get_framework("torchtitan"), op_sac_saves_cudnn_attention=True)
    assert saved.op_sac_modules(("op",), peaks) == ("op",)


def test_on_b200_torchtitan_evaluates_op_as_op_recompute_sdpa() -> None:
    system = load_system("b200")
    tt, fixed = _backends()
    op, sdpa = tt.evaluate(LLAMA, OP, system), fixed.evaluate(LLAMA, SDPA, system)
    kept = fixed.evaluate(LLAMA, OP, system)
    assert (op.step_time_s, op.peak_memory_bytes) == (sdpa.step_time_s, sdpa.peak_memory_bytes)
    assert op.peak_memory_bytes < kept.peak_memory_bytes  # no attention output kept
    assert op.step_time_s > kept.step_time_s  # the attention's forward re-run in the backward


def test_on_h100_the_option_changes_nothing() -> None:
    system = load_system("h100-80gb")
    tt, fixed = _backends()
    a, b = tt.evaluate(LLAMA, OP, system), fixed.evaluate(LLAMA, OP, system)
    assert (a.step_time_s, a.peak_memory_bytes) == (b.step_time_s, b.peak_memory_bytes)


def test_the_trace_mode_lowers_the_layout_the_levelled_mode_does() -> None:
    """``trace_step`` runs the same ``op_recompute_sdpa`` layout as ``evaluate`` (s20 review:
    the substitution was the levelled mode's alone, so ``stage eval --trace`` timed torchtitan's
    op-level SAC on Blackwell with the attention kept)."""
    system = load_system("b200")
    tt, fixed = _backends()
    assert tt.as_run(OP, system) == SDPA and fixed.as_run(OP, system) == OP
    op = trace_step(tt, LLAMA, OP, system).result.makespan
    assert op == trace_step(fixed, LLAMA, SDPA, system).result.makespan
    assert op > trace_step(fixed, LLAMA, OP, system).result.makespan  # the attention re-run
