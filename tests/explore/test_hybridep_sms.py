"""s22 bridgeaudit: HybridEP's SM count (``moe_hybridep_sms``). Megatron-Bridge's performance
scripts run HybridEP on 32 SMs (``_set_common_perf_overrides``: ``moe_hybridep_num_sms = 32``),
not Megatron-Core's default 16; GB200's table publishes both columns (deepseek-ai/DeepEP
docs/README_Hybrid-EP.md 41cad944, "GB200 Platform", Torch API, BF16 dispatch / combine), the
B200 and H100 tables 16 only, and an inferred 26.xx Megatron-Bridge HybridEP row takes 32."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.hybridep import hybridep_rate, hybridep_table
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim
from tests.explore.infer_helpers import inferred_case
from tests.explore.test_infer_bridge_dispatch import GB200_QWEN3, H100_QWEN3


def _dim(system: str, index: int) -> NetworkDim:
    return load_system(system).network[index]


@pytest.mark.parametrize(("system", "index", "ranks", "dispatch", "sms", "gb_s"), [
    ("gb200-nvl72", 0, 8, True, 32, 545.71),  # GB200 Platform, 32 SMs, BF16 dispatch
    ("gb200-nvl72", 0, 8, False, 32, 568.94),  # ... combine
    ("gb200-nvl72", 0, 16, False, 32, 521.55),
    ("gb200-nvl72", 0, 36, True, 32, 479.02),
    ("gb200-nvl72", 0, 36, True, 48, 479.02),  # more SMs than any column: the 32-SM one
    ("gb200-nvl72", 0, 16, False, 24, 474.48),  # between columns: the 16-SM one
    ("gb200-nvl72", 0, 16, False, 8, 474.48),  # fewer than any column: the smallest (16)
    ("b200", 0, 8, True, 32, 535.94),  # B200 publishes 16 SMs only
    ("h100-80gb", 1, 16, True, 32, 54.47),  # H100's stored column is 16 SMs
])  # fmt: skip
def test_the_table_of_the_most_sms_not_above_the_run_s(
    system: str, index: int, ranks: int, dispatch: bool, sms: int, gb_s: float
) -> None:
    rate = hybridep_rate(system, _dim(system, index), ranks, dispatch, sms)
    assert rate == pytest.approx(gb_s * 1e9, rel=1e-12)


def test_no_table_stays_none_and_zero_sms_are_refused() -> None:
    assert hybridep_table("b300", "nvswitch", 32) is None
    with pytest.raises(ConfigError, match="at least 1 SM, but got 0"):
        hybridep_table("gb200-nvl72", "nvlink-nvl72", 0)


@pytest.mark.parametrize("value", [0, -16, 16.0, True, "32"])
def test_a_bad_sm_count_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(ConfigError, match=r"`moe_hybridep_sms` \(HybridEP's SMs\) must be an int"):
        FRAMEWORKS["megatron-core"].with_overrides({"moe_hybridep_sms": value})


def _all_to_all_s(system: str, **options: object) -> float:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=4, seq_len=1024)
    parallel = ParallelConfig(dp=8, ep=8, micro_batch=1, global_batch=16)
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    result = backend.evaluate(model, parallel, load_system(system))
    return result.breakdown["exposed_all_to_all"]


def test_gb200_at_32_sms_takes_the_32_sm_rates_b200_keeps_its_16_sm_ones() -> None:
    """8 GB200 ranks: the 32-SM combine (568.94 GB/s) beats the 16-SM one (538.44) while the
    dispatch is about even (545.71 vs 550.10), so the exposed all-to-alls shrink; B200 has no
    32-SM column, so nothing moves."""
    at16 = _all_to_all_s("gb200-nvl72", moe_hybridep=True)
    at32 = _all_to_all_s("gb200-nvl72", moe_hybridep=True, moe_hybridep_sms=32)
    assert at32 < at16
    b200 = _all_to_all_s("b200", moe_hybridep=True)
    assert _all_to_all_s("b200", moe_hybridep=True, moe_hybridep_sms=32) == pytest.approx(b200)


@pytest.mark.parametrize("row", [H100_QWEN3, GB200_QWEN3])
def test_an_inferred_bridge_hybridep_row_runs_on_32_sms(row: dict[str, str]) -> None:
    options = dict(inferred_case(row).framework_options)
    assert options["moe_hybridep"] is True
    assert options["moe_hybridep_sms"] == 32
