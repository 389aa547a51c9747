"""MoE time mechanisms of DeepEP and NeMo AutoModel: DeepEP's internode all-to-all lasts as long
as its slowest level (its RDMA and NVLink stages run in one kernel), its SMs slow the compute it
overlaps, and the FlexAttention kernel on H100."""

from __future__ import annotations

import pytest

from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.overlap import DEEPEP_SMS, deepep_sm_share_s
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim

A2A = CollectiveKind.ALL_TO_ALL


def _level_s(dim: NetworkDim, ranks: int, size: float) -> float:
    """α–β all-to-all on one dim (collectives module docstring): overhead + (n−1)α + (n−1)/n·S/β."""
    steps = (ranks - 1) * dim.latency_s
    volume = (ranks - 1) / ranks * size / dim.bandwidth_bytes_per_s
    return dim.collective_overhead_s + steps + volume


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.1])
def test_pipelined_all_to_all_lasts_its_slowest_level(fraction: float) -> None:
    system = load_system("h100-80gb")
    group = list(range(32))  # 4 nodes of 8: NVSwitch level of 8, InfiniBand level of 4
    size = 64 * 2**20
    inner = _level_s(system.network[0], 8, size)
    outer = _level_s(system.network[1], 4, size * fraction)
    serial = alpha_beta_collective_s(system, A2A, size, group, fraction)
    pipelined = alpha_beta_collective_s(system, A2A, size, group, fraction, pipelined=True)
    assert serial == pytest.approx(inner + outer, rel=1e-12)
    assert pipelined == pytest.approx(max(inner, outer), rel=1e-12)
    one_node = list(range(8))  # a single level: nothing to pipeline
    assert alpha_beta_collective_s(system, A2A, size, one_node, pipelined=True) == pytest.approx(
        _level_s(system.network[0], 8, size), rel=1e-12
    )


@pytest.mark.parametrize(("a2a", "compute"), [(1.0, 3.0), (3.0, 1.0), (0.0, 2.0)])
def test_deepep_sm_share_is_the_overlapped_work_on_its_sms(a2a: float, compute: float) -> None:
    assert deepep_sm_share_s(a2a, compute, 132) == pytest.approx(
        min(a2a, compute) * DEEPEP_SMS / 132
    )
    assert deepep_sm_share_s(a2a, compute, DEEPEP_SMS) == 0.0


def test_flex_attention_kernel_on_h100_is_a_share_of_fa3() -> None:
    """Dong et al. 2024 (arXiv 2412.05496): on H100 FlexAttention averages 85 % of FA3's forward
    and 76 % of its backward."""
    kernels = load_system("h100-80gb").accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention("flex")
    assert forward == pytest.approx(0.85 * kernels.attention_forward, rel=1e-9)
    assert backward == pytest.approx(0.76 * kernels.attention_backward, rel=1e-9)
