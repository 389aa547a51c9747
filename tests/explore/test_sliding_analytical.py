"""The analytical backend on layer patterns: sliding-window layers run as their own block kind,
their attention kernels timed by the keys each query sees inside the window."""

from __future__ import annotations

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system

H100 = load_system("h100-80gb")


def test_windows_shorten_the_attention_time_and_keep_the_rest() -> None:
    full = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=8192)
    local = full.with_overrides(sliding_window=128, layer_pattern="(swa+mlp, attn+mlp)*")
    parallel = ParallelConfig(tp=2, dp=2, global_batch=8, micro_batch=1)
    backend = AnalyticalBackend()
    slow, fast = (backend.evaluate(m, parallel, H100) for m in (full, local))
    assert slow.feasible and fast.feasible
    assert fast.step_time_s < slow.step_time_s
    # the global layers are the same block as the full model's; only the local ones shrink
    blocks = bind_all(make_workload(local, parallel))
    windowed = sum(i.flops for i in blocks["layer_swa_mlp"].fwd if i.kind == "attention")
    causal = sum(i.flops for i in blocks["layer"].fwd if i.kind == "attention")
    assert 0 < windowed < causal / 30
