"""The cluster a row states (stage_explore.validation.infer_cluster): each recognised form of the
``gpu`` / ``interconnect`` text, text in and figure out, and the system it puts the inferred row
on (a data folder's ``systems/*.toml`` it states, else the preset, said)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.system.loading import load_system_file
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_cluster import (
    cluster_system,
    read_cluster,
    stated_fabric,
    system_fabric,
)
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setup_systems import case_system, derive_system
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
    _assert_scale_out(text, per_gpu_bytes, per_node)


def _assert_scale_out(text: str, per_gpu_bytes: float, per_node: bool) -> None:
    """The cluster read from ``text`` has that scale-out rate per GPU, stated per node or not."""
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
    (bare,) = row_cases(row, "extra.csv", 1)  # no folder: the preset, with the stated link
    assert bare.system == "a100-80gb+scale_out=6.25GB/s" and bare.system_file == ""
    assert bare.system_source == "a100-80gb"


FSDP_ROW = {
    "id": "X-2", "source": "a blog, FSDP", "model": "Llama 2 7B", "layers": "32",
    "hidden": "4096", "heads": "32", "vocab": "32000", "seq_len": "4096",
    "global_batch_seqs": "256", "num_gpus": "128", "precision": "bf16",
    "gpu": "A100 80GB", "tokens_per_s_per_gpu": "3000",
}  # fmt: skip


def _scale_out_file(folder: Path, bandwidth: str, channels: int) -> Path:
    """The a100-80gb preset's file with only its scale-out dim's bandwidth and NCCL channels
    changed, written to ``folder/systems`` (a hand-made system file, as a setups.toml source
    would name)."""
    preset = resources.files("stage_explore.system").joinpath("presets", "a100-80gb.toml")
    text = preset.read_text(encoding="utf-8")
    old = "bandwidth_bytes_per_s = 25e9"
    assert text.count(old) == 1
    (folder / "systems").mkdir()
    path = folder / "systems" / "hand.toml"
    text = text.replace(old, f"bandwidth_bytes_per_s = {bandwidth}")
    assert text.count("nccl_channels = 16 ") == 1  # the scale-out dim's (NVSwitch: 24)
    text = text.replace("nccl_channels = 16 ", f"nccl_channels = {channels} ")
    path.write_text(text, encoding="utf-8")
    return path


def test_a_stated_scale_out_rate_without_a_file_sets_the_preset_dim(tmp_path: Path) -> None:
    row = {**FSDP_ROW, "interconnect": "4x100 Gb/s per node"}
    (derived,) = row_cases(row, "extra.csv", 1, tmp_path)  # a folder without systems/
    assert derived.system == "a100-80gb+scale_out=6.25GB/s"
    assert "with its scale-out dim 'infiniband-hdr' at the stated" in " ".join(
        derived.assumptions
    )
    system = case_system(derived)
    assert system.network[-1].bandwidth_bytes_per_s == pytest.approx(6.25e9)
    preset = load_system("a100-80gb")
    assert system.network[0] == preset.network[0]
    assert system.network[-1].nccl_channels == 4  # 16 for 8 NICs of 25 GB/s -> 2 NICs
    assert replace(
        system.network[-1], bandwidth_bytes_per_s=25e9, nccl_channels=16
    ) == preset.network[-1]
    assert system.accelerator == preset.accelerator
    # the same row with a hand-made file of that figure in its folder runs on the file
    hand_dir = tmp_path / "hand"
    hand_dir.mkdir()
    _scale_out_file(hand_dir, "6.25e9", 4)  # 400 Gb/s per node: 2 HDR NICs, 2 channels each
    (on_file,) = row_cases(row, "extra.csv", 1, hand_dir)
    assert on_file.system == "systems/hand.toml" and on_file.system_overrides == ()
    plain = replace(derived, system="a100-80gb", system_overrides=())
    derived_result, file_result, plain_result = evaluate_cases([derived, on_file, plain])
    assert derived_result.evaluated and file_result.evaluated
    assert derived_result.predicted == pytest.approx(file_result.predicted, rel=1e-12)
    assert derived_result.predicted < 0.99 * plain_result.predicted  # the link is the bottleneck


def test_a_row_stating_no_scale_out_rate_keeps_the_preset(tmp_path: Path) -> None:
    (case,) = row_cases({**FSDP_ROW, "interconnect": "NVSwitch 600 GB/s"}, "extra.csv", 1, tmp_path)
    assert case.system == "a100-80gb" and case.system_overrides == ()
    assert case_system(case) == load_system("a100-80gb")


def test_derive_system_refuses_an_unknown_override() -> None:
    with pytest.raises(ConfigError, match="unknown system override"):
        derive_system(load_system("a100-80gb"), (("power_w", 500.0),))


def test_an_omni_path_row_takes_the_omni_path_file_and_no_other() -> None:
    """Jean Zay's cell states the same 400 Gb/s per node as ibm-a100-400g.toml: the fabric it
    names decides (s28 legacy); a row naming no fabric never takes the Omni-Path file."""
    assert stated_fabric("4 Omni-Path 100 Gbps links per node") == "omni-path"
    assert stated_fabric("Intel OPA 100 Gb/s") == stated_fabric("OmniPath") == "omni-path"
    assert stated_fabric("8x200 Gb/s HDR IB/node") == "" and stated_fabric("OPAL") == ""
    folder = data_dir()
    jz = "Jean Zay gpu_p5: 48 nodes of 8 A100 80GB, 4 Omni-Path 100 Gbps links per node"
    found = cluster_system("A100 80GB", jz, "a100-80gb", folder)
    assert found.value == "systems/jean-zay-a100.toml"
    assert "fabric omni-path" in found.assumption
    plain = cluster_system("A100 80GB", "400Gbps inter-node per node", "a100-80gb", folder)
    assert plain.value == "systems/ibm-a100-400g.toml"


def test_the_jean_zay_file_differs_from_the_ibm_one_only_in_the_scale_out_efficiency() -> None:
    own = data_dir() / "systems"
    jz = load_system_file(own / "jean-zay-a100.toml")
    ibm = load_system_file(own / "ibm-a100-400g.toml")
    assert system_fabric(jz) == "omni-path" and system_fabric(ibm) == ""
    assert jz.accelerator == ibm.accelerator and jz.network[0] == ibm.network[0]
    link, other = jz.network[1], ibm.network[1]
    assert link.bandwidth_bytes_per_s == other.bandwidth_bytes_per_s  # the same line rate
    assert link.bus_efficiency == 0.40 < other.bus_efficiency  # NCCL over hfi1: 39.87 / 100 Gb/s


@pytest.mark.parametrize(("text", "per_gpu_bytes", "per_node"), [
    # AMSP (arXiv 2311.00257), its test-bed: a NIC count by generation in a clause about
    # inter-node links is per node (4 x HDR 200 Gb/s)
    ("8 A800 80GB per server on NVLink; 'inter-node communication is facilitated by 4 Mellanox "
     "HDR InfiniBand without SHARP' (HDR: 200 Gb/s per link)", 100e9, True),
    ("8x NDR per node", 400e9, True),
    ("2 ConnectX-6 HDR per GPU", 50e9, False),
    ("inter-node: 8 XDR InfiniBand", 800e9, True),
    ("4 EDR IB per host", 50e9, True),
])  # fmt: skip
def test_a_nic_count_by_infiniband_generation_is_read_at_its_rate(
    text: str, per_gpu_bytes: float, per_node: bool
) -> None:
    _assert_scale_out(text, per_gpu_bytes, per_node)


@pytest.mark.parametrize("text", [
    "32 nodes with HDR InfiniBand",  # a count of nodes, not of NICs
    "HDR InfiniBand",  # no count
    "4 HDR InfiniBand",  # neither per GPU, nor per node, nor about inter-node links
])  # fmt: skip
def test_a_generation_without_a_nic_count_or_its_unit_is_not_read(text: str) -> None:
    assert read_cluster("", text).scale_out is None


def test_a_nic_count_stated_for_nothing_is_named_as_unread() -> None:
    unread = read_cluster("", "4 HDR InfiniBand").unread
    assert unread == ("'4 HDR' (neither per GPU nor per node)",)


def test_a_stated_rate_takes_precedence_over_a_nic_count() -> None:
    """``8x ConnectX-7 IB NDR 400 Gb/s per node``: the rate pattern reads it (3.2 Tb/s)."""
    cluster = read_cluster("", "8x ConnectX-7 IB NDR 400 Gb/s per node, 4 HDR per node")
    assert cluster.scale_out is not None and cluster.scale_out.value == pytest.approx(400e9)


def test_the_amsp_rows_run_at_four_hdr_per_eight_gpu_server() -> None:
    """AMSP's 1,024-GPU DeepSpeed baselines: the a800 preset's scale-out dim at 100 GB/s per
    8-GPU node (12.5 GB/s per GPU) instead of its 8 x HDR (25 GB/s per GPU)."""
    rows = read_csv(data_dir() / "published_runs_no_setup.csv")
    (row,) = [r for r in rows if r["id"] == "AMSP-A800-ZERO3-LLAMA13B-1024"]
    (case, *_) = row_cases(row, "published_runs_no_setup.csv", 1, data_dir())
    system = case_system(case)
    assert system.network[-1].bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert load_system("a800").network[-1].bandwidth_bytes_per_s == pytest.approx(25e9)
