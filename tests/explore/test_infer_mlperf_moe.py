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
