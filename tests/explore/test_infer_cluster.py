"""The cluster a row states (stage_explore.validation.infer_cluster): each recognised form of the
``gpu`` / ``interconnect`` text, text in and figure out, and the system it puts the inferred row
on (a data folder's ``systems/*.toml`` it states, else the preset, said)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_cluster import cluster_system, read_cluster
from stage_explore.validation.setups import data_dir

GRAND_TETON = (
    "Grand Teton: 8x H100 96GB HBM2e (2.4 TB/s) per host fully connected with NVLink, "
    "backend RDMA 400 Gb/s per GPU, 500 W power limit"
)


@pytest.mark.parametrize(("text", "per_gpu_bytes", "per_node"), [
    ("InfiniBand NDR 400 Gb/s per GPU", 50e9, False),
    ("RoCE (Arista 7800 / Minipack2) at 400 Gbps per GPU, three-layer Clos", 50e9, False),
    ("backend RDMA 400 Gb/s (Mellanox CX-7) per GPU", 50e9, False),
    ("8x A100-80GB/node, NVSwitch 600 GB/s, 8x200 Gb/s HDR IB/node", 200e9, True),
    ("Eos: DGX H100, 8x ConnectX-7 IB NDR 400 Gb/s per node (the log's SYSJSON)", 400e9, True),
    ("48 nodes of 8 A100 80GB, 4 Omni-Path 100 Gbps links per node", 50e9, True),
    ("800Gbps inter-node interconnect (the source's words; per node assumed)", 100e9, True),
])  # fmt: skip
def test_an_inter_node_rate_in_bits_per_gpu_or_per_node_is_read(
    text: str, per_gpu_bytes: float, per_node: bool
) -> None:
    cluster = read_cluster("", text)
    assert cluster.scale_out is not None
    assert cluster.scale_out.value == pytest.approx(per_gpu_bytes)
    assert cluster.per_node is per_node


@pytest.mark.parametrize("text", [
    "NVSwitch 600 GB/s",  # bytes: a scale-up link
    "400 Gb/s InfiniBand",  # neither per GPU nor per node
    "DGX-H100 (fabric not stated on page)",
])  # fmt: skip
def test_a_rate_in_bytes_or_without_per_gpu_or_node_is_not_read(text: str) -> None:
    assert read_cluster("", text).scale_out is None


def test_a_rate_neither_per_gpu_nor_per_node_is_named_as_unread() -> None:
    assert read_cluster("", "400 Gb/s InfiniBand").unread == (
        "'400 Gb/s' (neither per GPU nor per node)",
    )


@pytest.mark.parametrize(("text", "gpus"), [
    ("DGX A100 (Selene): 8x A100-80GB/node, NVSwitch 600 GB/s", 8),
    ("8 H200 per host connected via NVLink", 8),
    ("Jean Zay gpu_p5: 48 nodes of 8 A100 80GB", 8),
    ("one 8xB200 node (NVLink 5)", 8),
    (GRAND_TETON, 8),
])  # fmt: skip
def test_gpus_per_node_are_read(text: str, gpus: int) -> None:
    cluster = read_cluster("", text)
    assert cluster.gpus_per_node is not None and cluster.gpus_per_node.value == gpus


def test_a_compute_tray_of_an_nvl72_rack_is_not_a_node() -> None:
    text = "Tyche: DGX GB200 NVL72 racks, 4 GPUs per compute tray (DGXNGPU=4)"
    assert read_cluster("GB200 (B200 in NVL72)", text).gpus_per_node is None


def test_hbm_capacity_type_and_power_cap_are_read_from_the_cells() -> None:
    cluster = read_cluster("H100 96GB HBM2e (500 W)", GRAND_TETON)
    assert cluster.memory_gb is not None and cluster.memory_gb.value == 96
    assert cluster.hbm == "HBM2e"
    assert cluster.power_w is not None and cluster.power_w.value == 500
    assert read_cluster("H200 (141 GB)", "").memory_gb.value == 141  # type: ignore[union-attr]


def test_a_stated_cluster_takes_the_folder_system_file_that_states_it() -> None:
    folder = data_dir()
    teton = cluster_system("H100 96GB HBM2e (500 W)", GRAND_TETON, "h100-80gb", folder)
    assert teton.value == "systems/grand-teton-h100.toml"
    assert "whose figures the row states" in teton.assumption
    ibm = cluster_system(
        "A100 80GB", "128 A100 80GB; 400Gbps inter-node (per node assumed)", "a100-80gb", folder
    )
    assert ibm.value == "systems/ibm-a100-400g.toml"
    h100 = cluster_system("H100 80GB", "800Gbps inter-node (per node assumed)", "h100-80gb", folder)
    assert h100.value == "systems/ibm-h100-800g.toml"


def test_figures_the_preset_has_keep_the_preset_even_beside_system_files() -> None:
    selene = "8x A100-80GB/node, NVSwitch 600 GB/s, 8x200 Gb/s HDR IB/node"
    found = cluster_system("A100-SXM4-80GB", selene, "a100-80gb", data_dir())
    assert found.value == "a100-80gb"
    assert "which has the stated figures" in found.assumption


def test_without_a_matching_file_the_preset_is_kept_and_the_differing_figures_are_said(
    tmp_path: Path,
) -> None:
    found = cluster_system("H100 96GB HBM2e (500 W)", GRAND_TETON, "h100-80gb", tmp_path)
    assert found.value == "h100-80gb"
    assert "although the row states" in found.assumption
    assert "power cap '500 W'" in found.assumption and "not applied" in found.assumption


def test_two_matching_files_keep_the_preset(tmp_path: Path) -> None:
    (tmp_path / "systems").mkdir()
    own = data_dir() / "systems" / "ibm-a100-400g.toml"
    shutil.copy(own, tmp_path / "systems" / "a.toml")
    shutil.copy(own, tmp_path / "systems" / "b.toml")
    found = cluster_system("A100 80GB", "400Gbps inter-node per node", "a100-80gb", tmp_path)
    assert found.value == "a100-80gb" and "2 system files" in found.assumption


def test_an_inferred_row_runs_on_the_folder_file_it_states() -> None:
    row = {
        "id": "X-1", "source": "a blog, FSDP", "model": "Llama 2 7B", "layers": "32",
        "hidden": "4096", "heads": "32", "vocab": "32000", "seq_len": "4096",
        "global_batch_seqs": "256", "num_gpus": "128", "precision": "bf16",
        "gpu": "A100 80GB", "interconnect": "400 Gb/s inter-node per node",
        "tokens_per_s_per_gpu": "3000",
    }  # fmt: skip
    (case,) = row_cases(row, "extra.csv", 1, data_dir())
    assert not case.reason, case.reason
    assert case.system == "systems/ibm-a100-400g.toml"
    assert case.system_file == str((data_dir() / "systems" / "ibm-a100-400g.toml").resolve())
    (bare,) = row_cases(row, "extra.csv", 1)  # no folder: the presets only
    assert bare.system == "a100-80gb" and bare.system_file == ""
