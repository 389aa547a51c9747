"""s19 hidden7b: the NVLink domain of a NeMo 2.0 / Megatron-Bridge performance-script run on
NVL72 racks (the executors' Slurm segment), and the model cell's "w/o MTP"."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fields import infer_model
from stage_explore.validation.infer_segment import perf_script_domain, segment_gpus
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setup_systems import case_system, derive_system

#: A DGX-GB200 MoE row of the Megatron-Bridge 26.02 table (the package's MBX rows' form).
BRIDGE_GB200 = {
    "id": "SEG-1", "source": "NVIDIA Megatron-Bridge performance summary (26.02 container)",
    "source_table": "26.02 NeMo Container, Pre-Training Performance, System: DGX-GB200",
    "model": "Qwen3_235B_a22B", "seq_len": "4096", "global_batch_seqs": "8192",
    "micro_batch": "1", "tp": "1", "pp": "8", "cp": "1", "ep": "32", "precision": "FP8-MX",
    "dp_sharding": "DDP (FSDP 0)", "gpu": "GB200 (B200 in NVL72)", "num_gpus": "256",
    "tokens_per_s_per_gpu": "5448",
}  # fmt: skip


@pytest.mark.parametrize(("gpus", "domain"), [
    (256, 64),    # 64 trays: segments of 16
    (128, 64),    # 32 trays: 16
    (512, 64),    # 128 trays: 16
    (288, 72),    # 72 trays: 18, a whole rack
    (100, 20),    # 25 trays: 5
    (72, None),   # one rack: no segment
    (8, None),
    (258, None),  # not whole trays
])  # fmt: skip
def test_the_segment_is_the_largest_divisor_of_the_trays_up_to_a_rack(
    gpus: int, domain: int | None
) -> None:
    assert segment_gpus(gpus, 4) == domain


def test_a_bridge_gb200_row_beyond_a_rack_runs_in_64_gpu_domains() -> None:
    (case,) = row_cases(BRIDGE_GB200, "extra.csv", 1)
    assert not case.reason, case.reason
    assert case.system == "gb200-nvl72+scale_up=64"
    assert case.system_overrides == (("scale_up_size", 64.0),)
    assert any("NVLink domains of 64 GPUs (16 trays of 4)" in a for a in case.assumptions)
    system = case_system(case)
    preset = load_system("gb200-nvl72")
    assert system.network[0] == replace(preset.network[0], size=64)
    assert system.network[1:] == preset.network[1:]
    # EP 32 over 32 dp ranks of a pipeline stage: with 72-GPU racks some expert groups straddle
    # two racks and their all-to-alls cross InfiniBand; in 64-GPU segments none does
    plain = replace(case, system="gb200-nvl72", system_overrides=())
    segmented, contiguous = evaluate_cases([case, plain])
    assert segmented.evaluated and contiguous.evaluated
    assert segmented.predicted > 1.5 * contiguous.predicted


@pytest.mark.parametrize("gpus", ["256.0", "1,024"])
def test_the_segment_reads_num_gpus_as_the_layout_does(gpus: str) -> None:
    """s19 review2: ``256.0`` and ``1,024`` (integers as a table prints them) are 256 and 1,024
    GPUs for the layout; the segment re-read the cell with ``int()`` and kept the preset's
    72-GPU domains (64 and 256 trays: segments of 16 trays)."""
    (case,) = row_cases({**BRIDGE_GB200, "num_gpus": gpus}, "extra.csv", 1)
    assert not case.reason, case.reason
    assert case.system_overrides == (("scale_up_size", 64.0),)


@pytest.mark.parametrize("cells", [
    {"num_gpus": "64", "global_batch_seqs": "2048"},       # one rack: one segment
    {"source": "MLPerf Training v5.0, NVIDIA closed division (NeMo 25.04)"},
    {"source": "NVIDIA DGX Cloud Benchmarking performance recipes (GSW 25.05.04, NeMo 25.04)"},
    {"source": "NeMo performance summary (24.12 container)"},  # the NeMo 1.x launcher
    {"source": "a Megatron-Bridge run", "source_table": ""},  # no container named
    {"gpu": "B200"},                                          # 8-GPU nodes, no NVL72 rack
])  # fmt: skip
def test_other_launchers_and_single_racks_keep_the_preset(cells: dict[str, str]) -> None:
    (case,) = row_cases({**BRIDGE_GB200, **cells}, "extra.csv", 1)
    assert not any(k == "scale_up_size" for k, _ in case.system_overrides)
    assert "scale_up" not in case.system


def test_perf_script_domain_needs_megatron_core() -> None:
    assert perf_script_domain(BRIDGE_GB200, "megatron-core", "gb200-nvl72") is not None
    assert perf_script_domain(BRIDGE_GB200, "torchtitan", "gb200-nvl72") is None
    assert perf_script_domain(BRIDGE_GB200, "megatron-core", "gb300-nvl72") is not None


@pytest.mark.parametrize("size", [0.0, 73.0])
def test_derive_system_refuses_a_domain_outside_the_preset(size: float) -> None:
    with pytest.raises(ConfigError, match=f"scale_up_size {size:g}: expected 1 to"):
        derive_system(load_system("gb200-nvl72"), (("scale_up_size", size),))


@pytest.mark.parametrize("size", [2, 3])
def test_a_smaller_domain_drops_the_per_group_entries_it_cannot_hold(size: int) -> None:
    """An AMD xGMI dim lists bus efficiency and RCCL channels for 2- and 4-GPU groups: a domain
    of 2 or 3 GPUs keeps the 2-GPU entries and drops the 4-GPU ones rather than refusing."""
    dim = derive_system(load_system("mi300x"), (("scale_up_size", size),)).network[0]
    assert dim.size == size
    assert [n for n, _ in dim.bus_efficiency_by_ranks] == [2]
    assert [n for n, _ in dim.nccl_channels_by_ranks] == [2]


@pytest.mark.parametrize(("model", "mtp"), [
    ("DeepSeekV3 (w/o MTP)", 0),
    ("DeepSeek-V3 without MTP", 0),
    ("DeepSeek V3, no MTP", 0),
    ("DeepSeek V3 671B DistMoE (MTP disabled)", 0),  # torchtitan's DistMoE report (s31 rowsB)
    ("DeepSeek-V3, MTP off", 0),
    ("DeepSeek-V3 with MTP depth 0", 0),
    ("DeepSeek-V3 (disabled MTP)", 0),
    ("DeepSeek V3 671B DistMoE (MTP1)", None),
    ("DeepSeek-V3, MTP depth 1", None),
    ("DeepSeekV3 (w/ MTP)", None),
    ("DeepSeekV3", None),
])  # fmt: skip
def test_a_model_cell_without_mtp_drops_the_flavors_mtp_module(model: str, mtp: int | None) -> None:
    inferred = infer_model({"model": model}, "megatron-core")
    assert inferred.value == "deepseek-v3"
    assert dict(inferred.model).get("mtp_layers") == mtp
    assert ("multi-token-prediction" in inferred.assumption) == (mtp == 0)
