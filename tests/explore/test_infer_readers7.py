"""The inferred reader on how rows state their system, interconnect, framework and layout
(7 Dec 2026, s32 readers7; the table is ``benchmarks/system_phrasings.py``).

Synthetic rows (tests, not validation rows) pin each fix: cloud machine names that carry a GPU
(p4de, A3 High, A2 Ultra), a bare ``200G`` next to its network, ``8*400Gbps``, ``per VM``; the
PCIe-only refusal; an FSDP sharding strategy or offload named in ``source``; layout and batch
cells that name their own axis in words; a gradient accumulation that contradicts the batch.
And the package rows these rules could have touched, read as before (a memory ``80G`` beside a
RoCE network, ``eight 200G NICs``, ``Activation CPUOffload False`` in notes)."""

from __future__ import annotations

from functools import partial

import pytest

from stage_explore.validation.infer_cluster import read_cluster
from stage_explore.validation.infer_link_words import link_spellings, no_scale_up_reason
from stage_explore.validation.infer_named_shard import named_fsdp_strategy
from stage_explore.validation.infer_offload import named_offload
from tests.explore.infer_helpers import (
    package_case,
    package_row,
    synthetic_case,
    synthetic_parallel,
    synthetic_refusal,
)

#: Megatron-LM, Llama 2 70B on 512 H100 (64 nodes of 8), TP 8 PP 4 DP 16; each test replaces cells.
BASE = {
    "id": "READERS7-TEST", "source": "Megatron-LM benchmark", "model": "Llama 2 70B",
    "gpu": "H100 SXM5 80GB", "num_gpus": "512", "tp": "8", "pp": "4", "dp": "16",
    "seq_len": "4096", "global_batch_seqs": "1536", "micro_batch": "1", "precision": "bf16",
    "interconnect": "8x 400 Gb/s InfiniBand per node", "tokens_per_s_per_gpu": "400",
}  # fmt: skip
#: The same job as one FSDP / DeepSpeed run would lay it out: all 512 GPUs data parallel.
FLAT = {**BASE, "tp": "1", "pp": "1", "dp": "512"}

_case = partial(synthetic_case, BASE, "readers7.csv")
_parallel = partial(synthetic_parallel, BASE, "readers7.csv")
_refused = partial(synthetic_refusal, BASE, "readers7.csv")
_flat = partial(synthetic_parallel, FLAT, "readers7.csv")
_flat_refused = partial(synthetic_refusal, FLAT, "readers7.csv")


@pytest.mark.parametrize(
    ("gpu", "preset"),
    [("p4de.24xlarge", "a100-80gb"), ("p4de", "a100-80gb"), ("a3-highgpu-8g", "h100-80gb"),
     ("A3 High", "h100-80gb"), ("A2 Ultra (a2-ultragpu-8g)", "a100-80gb"),
     ("p4d.24xlarge", "a100-40gb")],
)  # fmt: skip
def test_cloud_machines_carry_their_gpu(gpu: str, preset: str) -> None:
    """p4de (8 A100 80GB), Google's A3 High (H100) and A2 Ultra (A100 80GB) machines were
    refused as matching no preset; p4d stays the 40 GB part."""
    case = _case(gpu=gpu, interconnect="")
    assert not case.reason, case.reason
    assert case.system == preset


@pytest.mark.parametrize(
    ("cell", "gbits", "per_node"),
    [("4 x HDR 200G per node", 800, True), ("2x 200G HDR per node", 400, True),
     ("RoCE v2 400G per GPU", 400, False), ("8*400Gbps RoCE per node", 3200, True),
     ("1600 Gbps GPUDirect-TCPXO per VM", 1600, True), ("3.2 Tbps InfiniBand per VM", 3200, True),
     ("8x ConnectX-7 NDR 400G per node", 3200, True)],
)  # fmt: skip
def test_port_rates_read(cell: str, gbits: float, per_node: bool) -> None:
    """A bare ``G`` next to its network is Gb/s, ``*`` a multiplication, ``per VM`` per node."""
    cluster = read_cluster("H100", cell)
    assert cluster.scale_out is not None
    assert cluster.scale_out.value == pytest.approx(gbits * 1e9 / 8)
    assert cluster.per_node is per_node


def test_stated_port_rate_overrides_the_preset() -> None:
    """``2x 200G HDR per node`` on 8 H100 is 50 Gb/s per GPU, not the preset's 400."""
    case = _case(interconnect="2x 200G HDR per node")
    assert dict(case.system_overrides)["scale_out_bandwidth_bytes_per_s"] == pytest.approx(50e9 / 8)


@pytest.mark.parametrize(
    "cell",
    ["'up to 32 NVIDIA A100 SXM 80G GPUs distributed across 4 nodes interconnected by a RoCE "
     "RDMA network' (8 per node)", "eight 200G NICs per server, each to a different ToR",
     "AMD Instinct MI355X 288G HBM3E", "2x 200G per node", "8x H100 80G IB"],
)  # fmt: skip
def test_a_g_away_from_its_network_is_not_a_rate(cell: str) -> None:
    """A memory (``80G``, ``288G``) or a port with no network named stays unread."""
    assert link_spellings(cell) == cell


def test_package_row_with_80g_beside_roce_reads_as_before() -> None:
    """The zero-bubble rows' ``A100 SXM 80G … RoCE`` interconnect: the preset, no override (a
    first version of the rule read the memory as 80 Gb/s)."""
    case = package_case(package_row("ZB-A100-14.6B-1F1B-PP16-MB48"))
    assert case.system == "a100-80gb" and not case.system_overrides


@pytest.mark.parametrize("cell", ["PCIe only", "PCIe Gen4, no NVLink", "without NVLink"])
def test_pcie_only_refused(cell: str) -> None:
    """No preset has a PCIe-only node: refused in one line naming the cell's words."""
    reason = _refused(interconnect=cell)
    assert "no preset has a PCIe-only node" in reason and "h100-80gb" in reason


@pytest.mark.parametrize(
    ("cell", "preset"),
    [("8x 400 Gb/s per node, no NVLink SHARP", "h100-80gb"), ("PCIe Gen5 host", "h100-80gb"),
     ("no NVLink; Infinity Fabric", "mi300x"), ("NVLink-C2C to Grace, no NVLink-C2C", "h200")],
)  # fmt: skip
def test_nvlink_remarks_not_refused(cell: str, preset: str) -> None:
    """NVLink SHARP off, a PCIe host link, an AMD node's absent NVLink are no PCIe-only node."""
    assert no_scale_up_reason(cell, preset) == ""


@pytest.mark.parametrize(
    ("source", "zero", "shard"),
    [("PyTorch FSDP HYBRID_SHARD", 3, 8), ("PyTorch FSDP SHARD_GRAD_OP", 2, None),
     ("PyTorch FSDP (HSDP)", 3, 8), ("PyTorch FSDP FULL_SHARD", 3, None),
     ("PyTorch FSDP NO_SHARD", 0, None)],
)  # fmt: skip
def test_fsdp_strategy_named_in_source(source: str, zero: int, shard: int | None) -> None:
    """A ShardingStrategy in ``source`` with ``dp_sharding`` empty is read as that cell would
    be (HYBRID_SHARD ran as FULL_SHARD over all 512 GPUs, SHARD_GRAD_OP as ZeRO-3)."""
    parallel = _flat(source=source)
    assert (parallel.zero, parallel.dp_shard) == (zero, shard)


def test_fsdp_strategy_in_notes_and_its_limits() -> None:
    """``HSDP`` in a torchtitan row's notes is read; two strategies named, or a stated
    ``dp_sharding`` cell, leave the reading as before."""
    assert _flat(source="torchtitan", notes="HSDP").dp_shard == 8
    row = {**FLAT, "source": "PyTorch FSDP", "notes": "FULL_SHARD vs HYBRID_SHARD"}
    assert named_fsdp_strategy(row, "fsdp") is None
    assert named_fsdp_strategy({**row, "notes": "", "dp_sharding": "FULL_SHARD"}, "fsdp") is None
    assert named_fsdp_strategy({**row, "notes": "HYBRID_SHARD"}, "megatron-core") is None


@pytest.mark.parametrize(
    ("source", "said"),
    [("DeepSpeed ZeRO stage 3 with offload", "DeepSpeed offload is not modelled"),
     ("DeepSpeed ZeRO-Infinity", "offload to NVMe is not modelled")],
)  # fmt: skip
def test_offload_in_source_that_is_not_modelled_refused(source: str, said: str) -> None:
    """Offload named in ``source`` was modelled as the states in GPU memory; since s34 the
    offload that is not modelled is refused by what it is (which states unsaid, NVMe)."""
    assert said in _flat_refused(source=source)


@pytest.mark.parametrize(
    ("source", "sharding", "options"),
    [("DeepSpeed ZeRO-Offload", "ZeRO-2", {"offload_optimizer": True}),
     ("DeepSpeed, optimizer offloaded to CPU", "ZeRO-3", {"offload_optimizer": True}),
     ("PyTorch FSDP with CPU offload", "", {"offload_optimizer": True, "offload_params": True})],
)  # fmt: skip
def test_offload_in_source_sets_the_offload_options(
    source: str, sharding: str, options: dict[str, bool]
) -> None:
    """Optimizer offload under DeepSpeed and FSDP1's CPUOffload are modelled (s34 offload):
    the row is evaluated with the backend's offload options."""
    case = synthetic_case(FLAT, "readers7.csv", source=source, dp_sharding=sharding)
    assert not case.reason, case.reason
    assert {k: v for k, v in case.framework_options if k.startswith("offload")} == options


@pytest.mark.parametrize(
    "row",
    [{"source": "DeepSpeed ZeRO-3, no offload"}, {"source": "FSDP, CPU offload: False"},
     {"source": "DeepSpeed ZeRO-3 with no offload"},
     {"source": "llm-foundry", "notes": "Activation CPUOffload False"}],
)  # fmt: skip
def test_offload_that_was_off_not_refused(row: dict[str, str]) -> None:
    """Offload named as off (or only in notes, which quote switches that were off)."""
    assert named_offload(row, "deepspeed") == ({}, "")


def test_package_row_with_cpuoffload_false_in_notes_reads() -> None:
    """The llm-foundry rows' notes say ``Activation CPUOffload False``: still evaluated."""
    assert not package_case(package_row("MPT-A100-80G-7B-S2048-N8")).reason


@pytest.mark.parametrize(
    ("cells", "field", "value"),
    [({"tp": "tensor model parallel size 8"}, "tp", 8),
     ({"tp": "--tensor-model-parallel-size 8"}, "tp", 8),
     ({"tp": "8-way tensor parallel"}, "tp", 8), ({"pp": "4-way pipeline"}, "pp", 4),
     ({"pp": "pipeline_model_parallel_size=4"}, "pp", 4),
     ({"vpp": "virtual pipeline 5"}, "vpp", 5),
     ({"cp": "context parallel 2", "dp": "8"}, "cp", 2),
     ({"dp": "data parallel size 16"}, "dp", 16),
     ({"micro_batch": "micro batch 2"}, "micro_batch", 2),
     ({"micro_batch": "mbs=2"}, "micro_batch", 2),
     ({"global_batch_seqs": "global batch 1024"}, "global_batch", 1024),
     ({"global_batch_seqs": "gbs=1024"}, "global_batch", 1024),
     ({"global_batch_seqs": "1024 sequences of 4096"}, "global_batch", 1024),
     ({"global_batch_seqs": "1,024 x 4096 tokens"}, "global_batch", 1024)],
)  # fmt: skip
def test_axis_in_words(cells: dict[str, str], field: str, value: int) -> None:
    """A layout or batch cell naming its own axis in words reads as the number."""
    assert getattr(_parallel(**cells), field) == value


def test_expert_parallel_in_words() -> None:
    """``expert parallel 8`` in ``ep`` on an MoE row."""
    moe = {**BASE, "model": "Mixtral 8x7B", "tp": "2", "pp": "1", "dp": "256"}
    assert synthetic_parallel(moe, "readers7.csv", ep="expert parallel 8").ep == 8


@pytest.mark.parametrize(
    "cells",
    [{"tp": "pipeline parallel 4"}, {"vpp": "num_layers_per_virtual_pipeline_stage 2"},
     {"pp": "2-way pipeline with 1F1B interleaving", "dp": "32"},
     {"global_batch_seqs": "1536 sequences of 2048"}],
)  # fmt: skip
def test_other_words_still_refused(cells: dict[str, str]) -> None:
    """Another axis's words, a count of layers, interleaving without its count, a sequence
    length other than the row's: refused in one line as not an integer."""
    assert "is not an integer" in _refused(**cells)


def test_stated_accumulation_checked() -> None:
    """1536 / (1 x 16) = 96 steps: a remark of 96 reads, one of 16 is refused."""
    assert _parallel(micro_batch="1 (gradient accumulation 96)").micro_batch == 1
    reason = _refused(micro_batch="1 (gradient accumulation 16)")
    assert "gradient accumulation 16" in reason and "= 96" in reason
    assert "GA 16" in _refused(global_batch_seqs="1536 (GA 16)")


@pytest.mark.parametrize(
    ("cell", "gbits", "per_node"),
    [("NVIDIA Quantum-2 NDR 400Gb/s x8 per node", 3200, True),
     ("ConnectX-7 NDR 200 Gb/s per GPU", 200, False),
     ("4x ConnectX-7 IB NDR 400 Gb/s per node", 1600, True),
     ("25 GB/s per GPU inter-node", 200, False), ("inter-node: 50 GB/s per GPU", 400, False)],
)  # fmt: skip
def test_hyphenated_names_and_inter_node_bytes(cell: str, gbits: float, per_node: bool) -> None:
    """A number after a hyphen (``Quantum-2``, ``ConnectX-7``) is no port count (``ConnectX-7
    NDR 200 Gb/s per GPU`` read 1,400 Gb/s per GPU); a byte rate said to be inter-node is
    eight times as many bits."""
    cluster = read_cluster("H100", cell)
    assert cluster.scale_out is not None
    assert cluster.scale_out.value == pytest.approx(gbits * 1e9 / 8)
    assert cluster.per_node is per_node


def test_scale_up_byte_rates_stay_unread() -> None:
    """A byte rate not said to be inter-node is a scale-up link (``600 GB/s``), unread."""
    cell = "8 A100 40GB each on NVSwitch (600 GB/s); EFA inter-node, 400 Gb/s per instance"
    assert link_spellings(cell) == cell
    assert link_spellings("InfiniBand 8x50 GB/s per node") == "InfiniBand 8x50 GB/s per node"


@pytest.mark.parametrize(
    "source", ["PyTorch DDP", "PyTorch DistributedDataParallel",
               "torch.nn.parallel.DistributedDataParallel"],
)  # fmt: skip
def test_pytorch_ddp(source: str) -> None:
    """PyTorch's own DDP ran as Megatron-Core with its distributed optimizer (ZeRO-1); now the
    fsdp profile without a wrapper, nothing sharded."""
    case = synthetic_case(FLAT, "readers7.csv", source=source)
    assert case.framework == "fsdp" and case.parallel is not None and case.parallel.zero == 0


def test_megatron_ddp_is_not_pytorch_ddp() -> None:
    """Megatron-Core's DDP class named in a Megatron-LM row's notes stays Megatron's."""
    case = _case(source="Megatron-LM", notes="Megatron DDP gradient buckets")
    assert case.framework == "megatron-core"


@pytest.mark.parametrize(
    ("cells", "field", "value"),
    [({"dp": "DP=16 (ZeRO-1)"}, "zero", 1), ({"dp": "16 (distributed optimizer)"}, "zero", 1),
     ({"dp": "16 (ZeRO-1)", "dp_sharding": "none"}, "zero", 0),
     ({"pp": "4 (interleaved, vpp 5)"}, "vpp", 5), ({"pp": "4 (5 virtual stages)"}, "vpp", 5),
     ({"pp": "4 (interleaved, vpp 5)", "vpp": "5"}, "vpp", 5),
     ({"cp": "CP 2 (ring attention)", "dp": "8"}, "cp", 2), ({"pp": "4 (1F1B)"}, "vpp", 1)],
)  # fmt: skip
def test_layout_remarks_read(cells: dict[str, str], field: str, value: int) -> None:
    """A dp cell's sharding remark fills an empty ``dp_sharding``; a pp cell's interleaving
    with its count fills ``vpp`` (both were dropped with the remark); an axis form keeps its
    remark."""
    assert getattr(_parallel(**cells), field) == value


@pytest.mark.parametrize(
    ("cells", "words"),
    [({"pp": "4 (interleaved)"}, "states no virtual stages"),
     ({"pp": "4 (interleaved, vpp 5)", "vpp": "2"}, "expected one count"),
     ({"cp": "2 (all-to-all / Ulysses)", "dp": "8"}, "all-to-all context parallelism")],
)  # fmt: skip
def test_layout_remarks_refused(cells: dict[str, str], words: str) -> None:
    """Interleaving without its count or with another one, all-to-all (Ulysses) context
    parallelism: refused in one line (each ran as the plain cell before)."""
    assert words in _refused(**cells)
