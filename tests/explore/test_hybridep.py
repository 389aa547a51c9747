"""s21 hybridep: HybridEP as its own dispatcher option (``moe_hybridep``) — DeepEP's traffic at
HybridEP's published rates (deepseek-ai/DeepEP docs/README_Hybrid-EP.md 41cad944, Torch API, 16
SMs), the link's own rate where no table exists, and its 16 SMs beside overlapped compute."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.hybridep import (
    HYBRIDEP_SMS,
    copied_per_counted,
    hybridep_dispatch_kernel,
    hybridep_level_rates,
    hybridep_rate,
    megatron_rate,
)
from stage_explore.analytical.overlap import DEEPEP_SMS, deepep_sm_share_s
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim

A2A = CollectiveKind.ALL_TO_ALL


def _dim(system: str, index: int) -> NetworkDim:
    return load_system(system).network[index]


@pytest.mark.parametrize(("system", "index", "ranks", "dispatch", "gb_s"), [
    ("b200", 0, 8, True, 535.94),  # B200 Platform, HybridEP Torch API 16 SMs, BF16 dispatch
    ("b200", 0, 8, False, 530.86),  # ... combine
    ("b200", 0, 4, True, 535.94),  # fewer ranks than any row: the smallest row
    ("gb200-nvl72", 0, 8, True, 550.10),
    ("gb200-nvl72", 0, 16, False, 474.48),
    ("gb200-nvl72", 0, 20, True, 472.84),  # between rows: the largest published count below
    ("gb200-nvl72", 0, 32, False, 423.19),
    ("gb200-nvl72", 0, 64, True, 469.96),  # beyond the table: its 36-rank row
    ("gb200-nvl72+scale_up=64", 0, 64, False, 418.27),  # a smaller domain of the same links
    ("h100-80gb", 1, 16, True, 54.47),  # H100 Platform, IB bandwidth, Torch API 16 SMs
    ("h100-80gb", 1, 32, False, 52.53),
    ("h100-80gb", 1, 64, True, 41.24),
])  # fmt: skip
def test_rates_read_as_the_tables_publish_them(
    system: str, index: int, ranks: int, dispatch: bool, gb_s: float
) -> None:
    dim = _dim(system.split("+")[0], index)
    assert hybridep_rate(system, dim, ranks, dispatch) == pytest.approx(gb_s * 1e9, rel=1e-12)


@pytest.mark.parametrize(("system", "index"), [
    ("b300", 0), ("gb300-nvl72", 0),  # no B300 / GB300 table
    ("h100-80gb", 0),  # no H100 NVLink table (its table is InfiniBand's)
    ("b200", 1), ("gb200-nvl72", 1),  # no Blackwell InfiniBand table
    ("h100-80gb+scale_out=6.25GB/s", 1),  # a stated NIC, not the measured one
])  # fmt: skip
def test_a_part_without_a_table_falls_back_to_the_link_s_rate(system: str, index: int) -> None:
    assert hybridep_rate(system, _dim(system.split("+")[0], index), 16, True) is None


def test_a_group_of_one_rank_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 2 ranks, but got 1"):
        hybridep_rate("b200", _dim("b200", 0), 1, True)


@pytest.mark.parametrize(("name", "dispatch"), [
    ("all_to_all:moe.tokens", True), ("all_to_all:d.experts.fc2", True),
    ("all_to_all:experts.fc2", False), ("all_to_all:d.moe.tokens", False),
])  # fmt: skip
def test_backward_of_a_dispatch_runs_the_combine_kernel(name: str, dispatch: bool) -> None:
    assert hybridep_dispatch_kernel(name) is dispatch


def test_a_rated_level_lasts_its_counted_bytes_over_the_rate() -> None:
    """H100, two nodes: the InfiniBand level at a rate counting the local node (buffer × share /
    rate, no latency), the NVLink level at its own α–β time; pipelined, the slower one."""
    system = load_system("h100-80gb")
    group, size, shares = list(range(16)), 256 * 2**20, (0.8, 0.25)
    deepep = alpha_beta_collective_s(
        system, A2A, size, group, pipelined=True, level_fractions=shares, nccl=False
    )
    inner = alpha_beta_collective_s(system, A2A, int(size * 0.8), list(range(8)), nccl=False)
    rated = alpha_beta_collective_s(
        system, A2A, size, group, pipelined=True, level_fractions=shares, nccl=False,
        level_rates=(None, 54.47e9),
    )  # fmt: skip
    assert rated == pytest.approx(max(inner, size * 0.25 / 54.47e9), rel=1e-12)
    assert rated > deepep
    with pytest.raises(ConfigError, match="one rate per level the group spans"):
        alpha_beta_collective_s(
            system, A2A, size, group, level_fractions=shares, level_rates=(1e9,)
        )


def test_hybridep_sm_share_is_its_16_sms() -> None:
    assert HYBRIDEP_SMS == 16 < DEEPEP_SMS
    assert deepep_sm_share_s(2.0, 3.0, 132, HYBRIDEP_SMS) == pytest.approx(2.0 * 16 / 132)


def test_one_flex_backend_at_a_time() -> None:
    with pytest.raises(ConfigError, match="at most one of them True, but got both"):
        FRAMEWORKS["megatron-core"].with_overrides({"moe_deepep": True, "moe_hybridep": True})


def _step(system: str, parallel: ParallelConfig, **options: bool) -> dict[str, float]:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=4, seq_len=1024)
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    result = backend.evaluate(model, parallel, load_system(system))
    return {"step": result.step_time_s, **result.breakdown}


def test_hybridep_over_h100_infiniband_is_slower_than_the_model_s_deepep() -> None:
    """Two DGX-H100 nodes: HybridEP's published ~27 GB/s really sent per NIC (54.47 counting the
    local node) against the link's 47; one B300 node (no table) is timed as DeepEP's traffic."""
    across = ParallelConfig(dp=16, ep=16, micro_batch=1, global_batch=32)
    hybrid = _step("h100-80gb", across, moe_hybridep=True)
    deepep = _step("h100-80gb", across, moe_deepep=True)
    assert hybrid["exposed_all_to_all"] > 1.3 * deepep["exposed_all_to_all"]
    node = ParallelConfig(dp=8, ep=8, micro_batch=1, global_batch=16)
    b300 = _step("b300", node, moe_hybridep=True), _step("b300", node, moe_deepep=True)
    assert b300[0]["exposed_all_to_all"] == pytest.approx(b300[1]["exposed_all_to_all"])


def test_stage_eval_moe_hybridep(capsys: pytest.CaptureFixture[str]) -> None:
    """``stage eval --moe-hybridep``: EP 16 over two DGX-H100 nodes is slower on it than on
    ``--moe-deepep`` (HybridEP's published InfiniBand rate); with both, the one-line error."""
    base = ["eval", "--model", "qwen3-30b-a3b", "--layers", "2", "--seq-len", "1024",
            "--dp", "16", "--ep", "16", "--global-batch", "32", "--system", "h100-80gb",
            "--framework", "megatron-core", "--json"]  # fmt: skip
    steps = []
    for flag in ("--moe-deepep", "--moe-hybridep"):
        assert main([*base, flag]) == 0
        steps.append(json.loads(capsys.readouterr().out)["step_time_s"])
    assert steps[1] > steps[0]
    assert main([*base, "--moe-deepep", "--moe-hybridep"]) == 2
    assert "at most one of them True, but got both" in capsys.readouterr().err


# s21 hybridep2: the README's "Kernel Only" columns (16 SMs, BF16 dispatch / combine, GB/s) beside
# the Torch API ones, per (system, ranks): deepseek-ai/DeepEP docs/README_Hybrid-EP.md 41cad944
KERNEL_ONLY = {
    ("b200", 8): (734.95, 673.84),
    ("gb200-nvl72", 8): (750.15, 684.27), ("gb200-nvl72", 16): (661.93, 600.75),
    ("gb200-nvl72", 24): (637.80, 565.53), ("gb200-nvl72", 32): (629.79, 547.25),
    ("gb200-nvl72", 36): (612.85, 543.27),
}  # fmt: skip


@pytest.mark.parametrize(("system", "ranks"), sorted(KERNEL_ONLY))
@pytest.mark.parametrize("dispatch", [True, False])
def test_megatron_s_path_drops_the_torch_api_copy(system: str, ranks: int, dispatch: bool) -> None:
    """Megatron-Core calls ``dispatch_with_permute`` / ``combine_with_unpermute``, whose permute
    (the model's own ``moe.dispatch`` / ``moe.combine`` op) replaces the Torch API call's copy of
    the received tokens: the NVLink level's time loses that copy's read and write at the achieved
    HBM rate, and the rate lands between the Torch API and the Kernel Only figures (the host
    work Megatron-Core pays too stays in)."""
    spec = load_system(system)
    dim, hbm = spec.network[0], spec.accelerator.achieved_memory_bandwidth_bytes_per_s
    torch_api = hybridep_rate(system, dim, ranks, dispatch)
    assert torch_api is not None
    rate = megatron_rate(torch_api, dim, hbm)
    assert 1.0 / rate == pytest.approx(1.0 / torch_api - 2.0 / hbm, rel=1e-12)
    kernel_only = KERNEL_ONLY[system, ranks][0 if dispatch else 1] * 1e9
    assert torch_api < rate < kernel_only
    assert hybridep_level_rates(system, [dim], ranks, dispatch, hbm) == (rate,)


# s21 bridgefix: the H100 InfiniBand "Kernel Only" columns (16 SMs, BF16 dispatch / combine,
# GB/s) per ranks: deepseek-ai/DeepEP docs/README_Hybrid-EP.md 41cad944 "H100 Platform"
IB_KERNEL_ONLY = {16: (71.71, 62.95), 32: (57.69, 57.46), 64: (49.97, 49.77)}


@pytest.mark.parametrize("ranks", sorted(IB_KERNEL_ONLY))
@pytest.mark.parametrize("dispatch", [True, False])
def test_infiniband_drops_the_copy_of_the_received_tokens(ranks: int, dispatch: bool) -> None:
    """Over InfiniBand the Torch API call copies the rank's received tokens too, but the table
    counts per-node sends: the copy per counted byte is the benchmark's received-to-sent ratio,
    and the rate lands between the Torch API and the Kernel Only figures; the NVLink level
    still falls back (None)."""
    spec = load_system("h100-80gb")
    hbm = spec.accelerator.achieved_memory_bandwidth_bytes_per_s
    ib = spec.network[1]
    torch_api = hybridep_rate("h100-80gb", ib, ranks, dispatch)
    assert torch_api is not None
    rates = hybridep_level_rates("h100-80gb", spec.network[:2], ranks, dispatch, hbm)
    assert rates[0] is None
    rate = rates[1]
    assert rate is not None
    copied = copied_per_counted(ranks)
    assert 1.0 / rate == pytest.approx(1.0 / torch_api - 2.0 * copied / hbm, rel=1e-12)
    kernel_only = IB_KERNEL_ONLY[ranks][0 if dispatch else 1] * 1e9
    assert torch_api < rate < kernel_only


@pytest.mark.parametrize("ranks", [16, 32, 64])
def test_copied_per_counted_matches_the_benchmark_routing(ranks: int) -> None:
    """The exact expectation against the benchmark's own routing drawn at random (each token's
    8 experts a random permutation's first 8 of 8 per rank; a rank's received tokens over its
    tokens' distinct destination nodes)."""
    rng = np.random.default_rng(7)
    tokens, experts = 2048, 8 * ranks
    picks = np.argsort(rng.random((ranks * tokens, experts)), axis=1)[:, :8]
    rank_of = picks // 8
    received = sum(len(np.unique(row)) for row in rank_of) / ranks
    sent = sum(len(np.unique(row // 8)) for row in rank_of) / ranks
    assert copied_per_counted(ranks) == pytest.approx(received / sent, rel=0.01)


def test_copied_per_counted_refuses_a_non_table_rank_count() -> None:
    with pytest.raises(ConfigError, match="multiple of 8 ranks over at least 2 nodes"):
        copied_per_counted(12)


def test_an_hbm_rate_too_slow_for_the_copy_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs an HBM rate above twice it"):
        megatron_rate(535.94e9, _dim("b200", 0), 1.0e12)
