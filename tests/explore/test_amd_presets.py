"""The AMD Instinct presets (mi300x, mi325x, mi355x; 5 Dec 2026, s14 amd) against the figures they
cite: dense peaks from compute units x FLOP per CU per clock x peak engine clock, HBM capacity and
bandwidth, AMD's max-achievable GEMM rates (ROCm blogs, "Measuring Max-Achievable FLOPs - Part 2",
Table 1) and hipBLASLt's FP8 rate on MI355X, the Azure ND MI300X v5 RCCL all-reduce table; the
fully connected xGMI mesh, modelled through ``bus_efficiency_by_ranks`` (a group of n GPUs of the
node has n - 1 links among its members); RCCL's 64 channels (CUs held beside the compute, s20);
the inference of AMD ``gpu`` texts (and of Primus / ROCm
Megatron-LM as the megatron-core profile); and the held-out MLPerf v5.1 MI355X row, evaluated
through the inferred setup. Each expected value is computed here from the cited figures."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.contention import NcclLoad, nccl_channels, nccl_load, on_fewer_sms
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.system.model import Topology
from stage_explore.validation.infer_fields import Uninferable, infer_framework
from stage_explore.validation.infer_system import infer_system
from stage_explore.validation.run import analytical_factory, evaluate_case
from tests.explore.gemm_helpers import bf16_gemm
from tests.explore.package_cases import package_cases

GIB = 2**30
#: (CUs, dense BF16 FLOP per CU per clock, peak engine clock Hz): CDNA 3 (MI300X / MI325X) and
#: CDNA 4 (MI355X); FP8 runs at twice the BF16 rate on both.
CDNA = {"mi300x": (304, 2048, 2.1e9), "mi325x": (304, 2048, 2.1e9), "mi355x": (256, 4096, 2.4e9)}
#: datasheet HBM (GiB), bandwidth (B/s) and board power (W).
HBM = {"mi300x": (192, 5.3e12, 750), "mi325x": (256, 6.0e12, 1000), "mi355x": (288, 8.0e12, 1400)}
#: Infinity Fabric link rate per direction (B/s): 128 / 153.6 GB/s bidirectional.
LINK = {"mi300x": 64e9, "mi325x": 64e9, "mi355x": 76.8e9}
#: RCCL all_reduce busbw (GB/s), 8 MI300X, 1 / 2 / 4 / 8 GB (Azure ND MI300X v5).
RCCL_8GPU = (313.92, 315.06, 314.85, 316.82)
SYSTEMS = {name: load_system(name) for name in CDNA}


@pytest.mark.parametrize("name", CDNA)
def test_peaks_are_compute_units_times_rate_times_clock(name: str) -> None:
    units, per_clock, clock = CDNA[name]
    accelerator = SYSTEMS[name].accelerator
    assert accelerator.peak("bf16") == pytest.approx(units * per_clock * clock, rel=1e-3)
    assert accelerator.peak("fp8") == pytest.approx(2 * units * per_clock * clock, rel=1e-3)
    assert accelerator.kernels is not None and accelerator.kernels.sm_count == units


@pytest.mark.parametrize("name", CDNA)
def test_memory_and_power_are_the_datasheet_figures(name: str) -> None:
    gib, bandwidth, watts = HBM[name]
    system = SYSTEMS[name]
    assert system.accelerator.memory_bytes == gib * GIB
    assert system.accelerator.memory_bandwidth_bytes_per_s == bandwidth
    assert system.power_w == watts
    # the achieved HBM fraction: Azure's stream Copy 4.11 TB/s of MI300X's 5.3 (the others carry it)
    assert system.accelerator.efficiency.memory == pytest.approx(4.11 / 5.3, abs=5e-4)


@pytest.mark.parametrize("name", CDNA)
def test_the_xgmi_dim_is_a_fully_connected_mesh_of_seven_links(name: str) -> None:
    xgmi, scale_out = SYSTEMS[name].network
    assert xgmi.topology is Topology.FULLY_CONNECTED and xgmi.size == 8
    assert xgmi.bandwidth_bytes_per_s == pytest.approx(7 * LINK[name])
    measured = statistics.mean(RCCL_8GPU) * 1e9 / (7 * 64e9)
    assert xgmi.bus_efficiency == pytest.approx(measured, abs=0.005)
    # a group of n GPUs has n - 1 links among its members: (n - 1) / 7 of the 8-GPU figure
    assert xgmi.bus_efficiency is not None
    for ranks, fraction in xgmi.bus_efficiency_by_ranks:
        assert fraction == pytest.approx(xgmi.bus_efficiency * (ranks - 1) / 7, abs=1e-3)
    assert scale_out.bandwidth_bytes_per_s == 400e9 / 8


def test_a_small_group_of_the_mesh_gets_its_own_links_only() -> None:
    """An all-reduce over 2 GPUs of an MI300X node moves its bytes over one link, over 8 GPUs
    over seven: the bus bandwidth (size x 2(n-1)/n over the time) differs 7x; on an NVSwitch
    node (no by-ranks figure on H100) a pair reaches the 8-GPU figure."""
    size = 8 * GIB

    def busbw(system_name: str, ranks: int) -> float:
        achieved = AnalyticalBackend().achieved_network(load_system(system_name))
        seconds = alpha_beta_collective_s(
            achieved, CollectiveKind.ALL_REDUCE, size, list(range(ranks))
        )
        return size * 2 * (ranks - 1) / ranks / seconds

    assert busbw("mi300x", 2) / busbw("mi300x", 8) == pytest.approx(1 / 7, rel=0.02)
    assert busbw("mi300x", 4) / busbw("mi300x", 8) == pytest.approx(3 / 7, rel=0.02)
    assert busbw("mi300x", 8) == pytest.approx(statistics.mean(RCCL_8GPU) * 1e9, rel=0.02)
    assert busbw("h100-80gb", 2) / busbw("h100-80gb", 8) == pytest.approx(1.0, rel=0.02)


#: RCCL's channels on an MI300-class node, intra- and inter-node: the 64 rings of its 8-GPU
#: 7-link topology model under ncclTopoPostset's cap of 64 for gfx942 / gfx950 (s20 amd).
RCCL_CHANNELS = 64


@pytest.mark.parametrize("name", CDNA)
def test_rccl_holds_64_compute_units_beside_the_compute(name: str) -> None:
    """A collective over the node or across nodes holds 64 CUs; a GEMM of many whole waves
    beside it runs on the CUs left, at (CUs - 64) / CUs of its rate."""
    system = SYSTEMS[name]
    assert nccl_channels(system, (8, 1)) == RCCL_CHANNELS
    assert nccl_channels(system, (8, 4)) == RCCL_CHANNELS
    assert nccl_channels(system, (1, 1)) == 0
    achieved = AnalyticalBackend().achieved_network(system)
    xgmi = system.network[0]
    assert xgmi.bus_efficiency is not None
    load = nccl_load(achieved, (8, 1), CollectiveKind.ALL_GATHER)
    hbm = system.accelerator.memory_bandwidth_bytes_per_s
    assert load.channels == RCCL_CHANNELS
    assert load.hbm_share == pytest.approx(
        2 * xgmi.bandwidth_bytes_per_s * xgmi.bus_efficiency / hbm, rel=1e-12
    )
    kernels = system.accelerator.kernels
    assert kernels is not None
    timer = KernelTimer(
        system.accelerator, kernels, "bf16", frozenset(), keys=4096, head_dim=128, causal=True
    )
    fewer = on_fewer_sms(timer, NcclLoad(RCCL_CHANNELS))
    assert fewer is not None
    units = CDNA[name][0]
    tm, tn = kernels.gemm_tile
    tiles = 4 * math.lcm(units, units - RCCL_CHANNELS)  # whole waves on both CU counts
    gemm = bf16_gemm(tm * tiles // 12, tn * 12, 448)
    assert fewer(gemm) / timer(gemm) == pytest.approx(units / (units - RCCL_CHANNELS), rel=1e-9)


#: RCCL's channel multiplier ``nc`` for a one-node communicator of 2 / 4 GPUs (init.cc: gfx942
#: 16 / 4, ROCm/rccl src/init.cc at 0067dbf6; gfx950 16 / 8, ROCm/rocm-systems
#: projects/rccl/src/init.cc at 006a440c).
RCCL_NC = {"mi300x": {2: 16, 4: 4}, "mi325x": {2: 16, 4: 4}, "mi355x": {2: 16, 4: 8}}


@pytest.mark.parametrize("name", CDNA)
def test_rccl_opens_fewer_channels_for_2_and_4_gpu_groups(name: str) -> None:
    """ncclTopoPostset opens nc x the ring search's channels: the n - 1 links among n GPUs of
    the mesh carry n - 1 rings (a pair: one), which ncclTopoDupChannels doubles — 2 for a pair,
    6 for four (gfx942: 32 / 24, RCCL's README); all 8 GPUs and every ring across nodes keep
    the 64 channels; a GEMM beside a 2-GPU collective keeps more CUs than beside an 8-GPU one."""
    system = SYSTEMS[name]
    for ranks, multiplier in RCCL_NC[name].items():
        search = 2 * (ranks - 1)
        assert nccl_channels(system, (ranks, 1)) == multiplier * search
        load = nccl_load(system, (ranks, 1), CollectiveKind.REDUCE_SCATTER)
        assert load.channels == multiplier * search
    assert nccl_channels(system, (8, 1)) == RCCL_CHANNELS
    assert nccl_channels(system, (2, 2)) == RCCL_CHANNELS  # outermost: the scale-out dim
    assert nccl_channels(system, (1, 2)) == RCCL_CHANNELS
    if name != "mi355x":
        assert (nccl_channels(system, (2, 1)), nccl_channels(system, (4, 1))) == (32, 24)


@pytest.mark.parametrize(
    ("text", "preset"),
    [
        ("AMD Instinct MI300X", "mi300x"),
        ("MI300X 192GB", "mi300x"),
        ("8x AMD MI325X (256 GB HBM3E)", "mi325x"),
        ("AMD Instinct MI355X (288 GB HBM3e)", "mi355x"),
    ],
)
def test_amd_gpu_texts_map_to_their_presets(text: str, preset: str) -> None:
    assert infer_system(text).value == preset


def test_an_amd_part_without_a_preset_is_refused_in_one_line() -> None:
    with pytest.raises(Uninferable, match="'MI350X' matches no system preset"):
        infer_system("MI350X")
    # a node's total (8 x 192 GB), not one GPU's memory (s33 hbmcap: a memory within half to
    # twice the preset's is applied as its capacity; this one is not)
    with pytest.raises(Uninferable, match="memory of 1536GB is not one GPU's memory"):
        infer_system("MI300X 1536GB")


@pytest.mark.parametrize(
    ("source", "framework"),
    [
        ("AMD Primus (Megatron backend), ROCm 7.0", "megatron-core"),
        ("ROCm/Megatron-LM Llama 3 8B benchmark", "megatron-core"),
        ("AMD Primus with the TorchTitan backend", "torchtitan"),
    ],
)
def test_amds_training_frameworks_map_to_the_closest_profile(source: str, framework: str) -> None:
    assert infer_framework({"source": source}).value == framework


def test_stage_eval_runs_on_an_amd_preset(capsys: pytest.CaptureFixture[str]) -> None:
    model = ["--model", "llama3-8b", "--system", "mi300x"]
    assert main(["eval", *model, "--tp", "2", "--dp", "4", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["tokens_per_s_per_gpu"] > 0 and 0 < payload["mfu"] < 1


def test_the_mlperf_mi355x_row_is_a_held_out_inferred_row() -> None:
    [case] = [c for c in package_cases() if c.id == "MLPERF-L31-8B-MI355X-V51-8"]
    assert case.source.startswith("INFERRED") and case.system == "mi355x"
    assert case.framework == "megatron-core" and not case.in_sample
    assert case.measured == pytest.approx(30.694098572187265 * 8192 / 8, abs=1)
    result = evaluate_case(case, analytical_factory()(case.backend_key), load_system("mi355x"))
    assert result.feasible and result.predicted > 0
