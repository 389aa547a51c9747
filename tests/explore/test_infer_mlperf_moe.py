"""s28 bwmoe: NVIDIA's MLPerf Training DeepSeek-V3 configs on NVL72 racks — their stated pipeline
layout and fused grouped MLP are read (``infer_mlperf_moe.mlperf_moe_switches``). The ``SEGMENT``
they export is not read as the NVLink domain (docs/analytical.md, s28 bwmoe: found, not landed)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_mlperf_moe import mlperf_moe_switches
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"
DSV3_GB300 = "MLPERF-DSV3-GB300-V60-256"
LAYOUT = "Et*4|(t*4|)*14tmL"


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def test_the_deepseek_v3_row_reads_its_layout_and_fused_grouped_mlp() -> None:
    (case,) = row_cases(_package(DSV3_GB300), FILE, 1)
    assert case.parallel is not None and case.parallel.pp_layout == LAYOUT
    assert "moe_grouped_kernel=true" in case.backend_key


@pytest.mark.parametrize(("notes", "stated", "moe", "layout", "grouped"), [
    (f"PIPELINE_LAYOUT '{LAYOUT}', NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", {"pp": 4, "ep": 32},
     True, LAYOUT, True),
    (f'PIPELINE_LAYOUT="{LAYOUT}"', {"pp": 4, "ep": 32}, True, LAYOUT, False),
    (f"PIPELINE_LAYOUT '{LAYOUT}'", {"pp": 1, "ep": 32}, True, None, False),  # no pipeline
    ("NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", {"pp": 4, "ep": 1}, False, None, False),  # dense model
    ("NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", {"pp": 1, "ep": 1}, True, None, True),  # MoE at EP 1
    ("NVTE_CUTEDSL_FUSED_GROUPED_MLP=0", {"pp": 4, "ep": 8}, True, None, False),
    (f"PIPELINE_LAYOUT '{LAYOUT}'; PIPELINE_LAYOUT 'Et*8|(t*8|)*6t*5mL'", {"pp": 4}, True, None,
     False),  # two layouts stated: neither taken
])  # fmt: skip
def test_only_what_the_text_states_is_read(
    notes: str, stated: dict[str, int], moe: bool, layout: str | None, grouped: bool
) -> None:
    out = Defaults()
    mlperf_moe_switches({"notes": notes}, stated, out, moe)
    assert out.parallel.get("pp_layout") == layout
    assert out.options.get("moe_grouped_kernel", False) is grouped


def test_the_deepseek_v3_row_places_its_expert_groups_in_one_nvlink_domain() -> None:
    """s30 epdomain: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32 at EP 32, read as
    ``moe_hybridep_domain_ranks`` 32 beside HybridEP."""
    (case,) = row_cases(_package(DSV3_GB300), FILE, 1)
    assert "moe_hybridep=true" in case.backend_key
    assert "moe_hybridep_domain_ranks=32" in case.backend_key


@pytest.mark.parametrize(("notes", "ep", "ranks"), [
    ("HybridEP (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32, USE_MNNVL=1)", 32, 32),
    ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=$EXPERT_PARALLEL, USE_MNNVL=1", 8, 8),
    ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32", 64, 32),  # two domains of 32
    ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32", 16, None),  # does not divide ep: noted
    ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8; NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=4",
     8, None),  # two values stated
    ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8", 1, None),  # no expert parallelism
    ("NVLINK_DOMAIN_SIZE=72, USE_MNNVL=1", 32, None),  # the count not stated
])  # fmt: skip
def test_hybridep_ranks_per_domain_only_as_stated(notes: str, ep: int, ranks: int | None) -> None:
    out = Defaults()
    mlperf_moe_switches({"notes": notes}, {"pp": 1, "ep": ep}, out, True)
    assert out.options.get("moe_hybridep_domain_ranks") == ranks
    if ranks is None and ep == 16:
        assert any("does not divide ep 16" in note for note in out.notes)
