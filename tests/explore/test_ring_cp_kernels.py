"""Ring context parallelism runs its attention kernels on S/cp-long chunks (Transformer
Engine's AttnFuncWithCPAndKVP2P): the kernel timer sees S/cp keys, the all-gather style the
whole sequence; the attention time follows the kernel's efficiency curve in closed form."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import CpStyle
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import KernelTimer, attention_efficiency
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

SEQ = 8192


def _timer(system_name: str, cp_style: CpStyle) -> KernelTimer:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=SEQ)
    parallel = ParallelConfig(cp=2, dp=2, global_batch=4, cp_style=cp_style)
    system = load_system(system_name)
    backend = AnalyticalBackend(framework="megatron-core")
    point = bound_point(backend, model, parallel, system)
    timer = backend._compute_timer(point, "layer")
    assert isinstance(timer, KernelTimer)
    return timer


@pytest.mark.parametrize("system_name", ["b200", "h100-80gb"])
def test_ring_cp_kernels_see_a_chunk_and_allgather_the_sequence(system_name: str) -> None:
    ring = _timer(system_name, CpStyle.RING)
    gathered = _timer(system_name, CpStyle.ALLGATHER)
    assert ring.keys == SEQ // 2
    assert gathered.keys == SEQ
    kernels = ring.kernels
    for backward in (False, True):
        short = attention_efficiency(kernels, SEQ // 2, 128, True, backward, ring.attention_kernel)
        long = attention_efficiency(kernels, SEQ, 128, True, backward, ring.attention_kernel)
        seen_short, seen_long = SEQ // 4, SEQ // 2
        half = kernels.half_keys(ring.attention_kernel)
        assert short / long == pytest.approx(
            (seen_short / (seen_short + half)) / (seen_long / (seen_long + half))
        )
