"""s28 bwmoe: NVIDIA's MLPerf Training configs on NVL72 racks — the ``SEGMENT`` they export sets
the NVLink domain (``infer_segment.mlperf_domain``), and the DeepSeek-V3 configs' stated pipeline
layout and fused grouped MLP are read (``infer_mlperf_moe.mlperf_moe_switches``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_mlperf_moe import mlperf_moe_switches
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_segment import mlperf_domain
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"
DSV3_GB300 = "MLPERF-DSV3-GB300-V60-256"
LAYOUT = "Et*4|(t*4|)*14tmL"


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


#: An MLPerf GB200 row in the form the package's rows state their config.
MLPERF_GB200 = {
    "id": "SEG-MLPERF", "source": "MLPerf Training v6.0, NVIDIA closed division (NeMo 26.04)",
    "model": "Llama 3.1 8B", "seq_len": "8192", "global_batch_seqs": "64", "micro_batch": "1",
    "tp": "2", "pp": "1", "cp": "4", "precision": "FP8", "gpu": "GB200", "num_gpus": "512",
    "interconnect": "NVL72 racks, SEGMENT=16 (the config's export)",
    "tokens_per_s_per_gpu": "11000",
}  # fmt: skip


@pytest.mark.parametrize(("text", "size"), [
    ("SEGMENT=16 (64-GPU NVLink segments)", 64),
    ("SEGMENT = TP x PP x CP / 4 = 16 (16 trays)", 64),
    ("SEGMENT = TP x EP x CP / 4 = 8 nodes (32 GPUs)", 32),
    ("SEGMENT = 16;", 64),
    ("SEGMENT=18", None),   # a whole rack: the preset's 72
    ("SEGMENT=20", None),   # more trays than a rack holds: not read
    ("no segment stated", None),
])  # fmt: skip
def test_the_segment_the_config_exports_sets_the_domain(text: str, size: int | None) -> None:
    found = mlperf_domain({**MLPERF_GB200, "interconnect": text}, "gb200-nvl72")
    assert (found[0] if found else None) == size


@pytest.mark.parametrize("cells", [
    {"source": "a cloud provider's GB200 benchmark"},                    # not MLPerf
    {"num_gpus": "64"},                                                  # one segment
    {"gpu": "B200"},                                                     # no NVL72 rack
])  # fmt: skip
def test_other_sources_single_segments_and_other_systems_keep_the_preset(
    cells: dict[str, str],
) -> None:
    (case,) = row_cases({**MLPERF_GB200, **cells}, "extra.csv", 1)
    assert not any(k == "scale_up_size" for k, _ in case.system_overrides)


def test_an_mlperf_row_stating_segment_16_runs_in_64_gpu_domains() -> None:
    (case,) = row_cases(MLPERF_GB200, "extra.csv", 1)
    assert not case.reason, case.reason
    assert case.system == "gb200-nvl72+scale_up=64"
    assert any("exports SEGMENT=16" in a for a in case.assumptions)


def test_the_deepseek_v3_row_keeps_its_expert_groups_inside_a_rack() -> None:
    """EP 32 in pipeline stages of 64 GPUs: in 72-GPU racks the second stage's first expert
    group straddles two racks and its HybridEP crosses InfiniBand; in the segments none does."""
    (case,) = row_cases(_package(DSV3_GB300), FILE, 1)
    assert case.system == "gb300-nvl72+scale_up=64"
    plain = replace(case, system="gb300-nvl72", system_overrides=())
    segmented, contiguous = evaluate_cases([case, plain])
    assert segmented.evaluated and contiguous.evaluated
    assert segmented.predicted > 1.3 * contiguous.predicted


def test_the_deepseek_v3_row_reads_its_layout_and_fused_grouped_mlp() -> None:
    (case,) = row_cases(_package(DSV3_GB300), FILE, 1)
    assert case.parallel is not None and case.parallel.pp_layout == LAYOUT
    assert "moe_grouped_kernel=true" in case.backend_key


@pytest.mark.parametrize(("notes", "stated", "layout", "grouped"), [
    (f"PIPELINE_LAYOUT '{LAYOUT}', NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", {"pp": 4, "ep": 32},
     LAYOUT, True),
    (f'PIPELINE_LAYOUT="{LAYOUT}"', {"pp": 4, "ep": 32}, LAYOUT, False),
    (f"PIPELINE_LAYOUT '{LAYOUT}'", {"pp": 1, "ep": 32}, None, False),       # no pipeline
    ("NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", {"pp": 4, "ep": 1}, None, False),  # no experts
    ("NVTE_CUTEDSL_FUSED_GROUPED_MLP=0", {"pp": 4, "ep": 8}, None, False),
    (f"PIPELINE_LAYOUT '{LAYOUT}'; PIPELINE_LAYOUT 'Et*8|(t*8|)*6t*5mL'", {"pp": 4}, None,
     False),  # two layouts stated: neither taken
])  # fmt: skip
def test_only_what_the_text_states_is_read(
    notes: str, stated: dict[str, int], layout: str | None, grouped: bool
) -> None:
    out = Defaults()
    mlperf_moe_switches({"notes": notes}, stated, out)
    assert out.parallel.get("pp_layout") == layout
    assert out.options.get("moe_grouped_kernel", False) is grouped
