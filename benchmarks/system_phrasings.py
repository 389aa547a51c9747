"""How published rows state the system, interconnect, framework and layout, read by the
inferred setup (7 Dec 2026, s32 readers7). Each phrasing of :data:`PHRASINGS` is one cell (or
a few) of a synthetic row in the package schema, in the style of a source that writes it so (a
paper's hardware section, a cloud provider's machine name, a launcher's argument, a vendor
page), put into a base row (:data:`BASE`: Megatron-LM, Llama 2 70B on 512 H100, TP 8 PP 4 DP 16;
:data:`MOE_BASE` for the expert-parallel cells) and read through
:func:`~stage_explore.validation.infer.row_cases` as a row of a CSV beside the package data.

A phrasing expects either the reading of a canonical spelling (the cells a row would hold
written as the readers' documented forms: the same model, layout, system with its overrides and
framework with its options; ``{}`` is the base row itself) or a one-line refusal (its reason
must name ``refused``'s text). Each is ``same`` (read as expected), ``misread`` (read, but to
something else) or ``refused`` (not read where a reading was expected; or read where a refusal
was). Writes the table to ``benchmarks/results/system_phrasings.md`` (``--out`` elsewhere);
``tests/explore/test_infer_readers7.py`` pins the readers' fixes this table found.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case, data_dir

RESULTS = Path(__file__).resolve().parent / "results" / "system_phrasings.md"
#: This table's outcomes at main 58bec87, before the s32 readers7 reader fixes (7 Dec 2026).
BEFORE_S32 = {"same": 81, "misread": 23, "refused": 21}

#: The base row (every phrasing replaces some of its cells).
BASE = {
    "id": "P", "source": "Megatron-LM benchmark", "model": "Llama 2 70B",
    "gpu": "H100 SXM5 80GB", "num_gpus": "512", "tp": "8", "pp": "4", "dp": "16",
    "seq_len": "4096", "global_batch_seqs": "1536", "micro_batch": "1", "precision": "bf16",
    "interconnect": "8x 400 Gb/s InfiniBand per node", "tokens_per_s_per_gpu": "400",
}  # fmt: skip
#: The base of the expert-parallel phrasings: Mixtral 8x7B, TP 2, DP 256, EP 8.
MOE_BASE = {**BASE, "model": "Mixtral 8x7B", "tp": "2", "pp": "1", "dp": "256", "ep": "8"}


@dataclass(frozen=True, slots=True)
class Phrasing:
    """One way a row states something: the source style it imitates, its cells, and what it
    should read as (``canonical`` cells, or a refusal whose reason contains ``refused``)."""

    style: str
    cells: dict[str, str]
    canonical: dict[str, str] | None = None
    refused: str = ""
    moe: bool = False


def _p(style: str, cells: dict[str, str], canonical: dict[str, str] | None = None) -> Phrasing:
    return Phrasing(style, cells, canonical if canonical is not None else {})


def _r(style: str, cells: dict[str, str], refused: str, moe: bool = False) -> Phrasing:
    return Phrasing(style, cells, None, refused, moe)


def _m(style: str, cells: dict[str, str], canonical: dict[str, str]) -> Phrasing:
    return Phrasing(style, cells, canonical, "", True)


_PCIE = "no preset has a PCIe-only node"
_NO_PRESET = "matches no system preset"
_OFFLOAD = "DeepSpeed offload is not modelled"  # which states unsaid (s34 offload)
_NVME = "offload to NVMe is not modelled"
_NO_PROFILE = "is no framework profile of the model"
PHRASINGS: tuple[Phrasing, ...] = (
    # --- the system (gpu cell)
    _p("paper hardware section", {"gpu": "8x H100 SXM5 80GB per node"}),
    _p("paper", {"gpu": "H800"}, {"gpu": "H800 80GB"}),
    _p("nvidia-smi name", {"gpu": "NVIDIA H800 80GB HBM3"}, {"gpu": "H800"}),
    _p("paper (Chinese clusters)", {"gpu": "A800 80GB"}, {"gpu": "A800"}),
    _p("nvidia-smi name", {"gpu": "A800-SXM4-80GB"}, {"gpu": "A800"}),
    _r("paper", {"gpu": "H20"}, "H20"),
    _p("vendor page", {"gpu": "GH200"}, {"gpu": "H200"}),
    _r("cloud GPU list", {"gpu": "L40S"}, _NO_PRESET),
    _r("cloud GPU list", {"gpu": "A10G"}, _NO_PRESET),
    _r("AWS instance", {"gpu": "g5.48xlarge (8x A10G)"}, _NO_PRESET),
    _r("paper (Frontier)", {"gpu": "AMD Instinct MI250X (Frontier)"}, _NO_PRESET),
    _r("paper (El Capitan)", {"gpu": "AMD MI300A APU"}, _NO_PRESET),
    _r("Habana", {"gpu": "Gaudi 2"}, "'Gaudi 2'"),
    _r("Intel", {"gpu": "Intel Gaudi 3"}, "'Intel Gaudi 3'"),
    _r("Habana model number", {"gpu": "HL-225 (Gaudi2) HPU"}, "Gaudi2"),
    _p("NVIDIA reference system", {"gpu": "DGX H100 SuperPOD"}),
    _p("NVIDIA reference system", {"gpu": "NVIDIA DGX H100 (8x H100 80GB)"}),
    _p("OEM board", {"gpu": "HGX H100 8-GPU"}),
    _p("AWS instance", {"gpu": "p5.48xlarge"}),
    _p("AWS instance", {"gpu": "p4de.24xlarge"}, {"gpu": "A100 80GB"}),
    _p("AWS instance family", {"gpu": "p4de"}, {"gpu": "A100 80GB"}),
    _p("AWS instance", {"gpu": "p4d.24xlarge"}, {"gpu": "A100 40GB"}),
    _p("Azure VM", {"gpu": "ND H100 v5"}),
    _p("Azure VM size", {"gpu": "Standard_ND96isr_H100_v5"}),
    _p("Azure VM", {"gpu": "ND A100 v4"}, {"gpu": "A100 80GB"}),
    _p("Azure VM", {"gpu": "ND MI300X v5"}, {"gpu": "MI300X"}),
    _p("GCP machine", {"gpu": "A3 Mega"}),
    _p("GCP machine type", {"gpu": "a3-highgpu-8g"}),
    _p("GCP machine type", {"gpu": "A2 Ultra (a2-ultragpu-8g)"}, {"gpu": "A100 80GB"}),
    _p("NVIDIA rack", {"gpu": "GB200 NVL72 rack", "interconnect": ""},
       {"gpu": "GB200 NVL72", "interconnect": ""}),
    _p("NVIDIA system", {"gpu": "DGX GB200", "interconnect": ""},
       {"gpu": "GB200 NVL72", "interconnect": ""}),
    _p("GCP machine", {"gpu": "A3 Ultra"}, {"gpu": "H200"}),
    _p("AWS instance", {"gpu": "p5en.48xlarge"}, {"gpu": "H200"}),
    _p("AWS instance", {"gpu": "p6-b200.48xlarge"}, {"gpu": "B200"}),
    _p("Azure VM", {"gpu": "ND GB200 v6", "interconnect": ""},
       {"gpu": "GB200 NVL72", "interconnect": ""}),
    _r("PCIe card", {"gpu": "H100 NVL"}, "PCIe card"),
    _r("AWS instance (no cited GPU here)", {"gpu": "p5e.48xlarge"}, _NO_PRESET),
    # --- the interconnect
    _p("paper", {"interconnect": "8x 400 Gb/s NDR InfiniBand per node"}),
    _p("paper (no per node)", {"interconnect": "8x 400 Gb/s NDR InfiniBand"}),
    _p("paper", {"interconnect": "RoCE v2 400G per GPU"},
       {"interconnect": "400 Gb/s RoCE per GPU"}),
    _p("paper (no per GPU: the preset)", {"interconnect": "RoCE v2 400G"}, {"interconnect": ""}),
    _p("AWS spec (no per instance)", {"interconnect": "EFA v2 3200 Gbps"}, {"interconnect": ""}),
    _p("AWS spec", {"interconnect": "EFA v2 3200 Gbps per instance"},
       {"interconnect": "400 Gb/s per GPU"}),
    _p("paper", {"interconnect": "4 x HDR 200G per node"},
       {"interconnect": "4x 200 Gb/s per node"}),
    _p("paper", {"interconnect": "2x 200G HDR per node"},
       {"interconnect": "2x 200 Gb/s per node"}),
    _p("GCP A3 Mega", {"interconnect": "1600 Gbps GPUDirect-TCPXO per VM"},
       {"interconnect": "1600 Gb/s per node"}),
    _p("Azure ND H100 v5", {"interconnect": "3.2 Tbps InfiniBand per VM"},
       {"interconnect": "3200 Gb/s per node"}),
    _p("paper (scale-up only)", {"interconnect": "NVLink 4 / NVSwitch"}, {"interconnect": ""}),
    _r("paper", {"interconnect": "PCIe only"}, _PCIE),
    _r("paper", {"interconnect": "PCIe Gen4, no NVLink"}, _PCIE),
    _p("paper", {"interconnect": "100 Gb/s Ethernet per node"},
       {"interconnect": "100 Gb/s per node"}),
    _p("paper (asterisk)", {"interconnect": "8*400Gbps RoCE per node"}),
    _p("OEM spec", {"interconnect": "400 Gbps x 8 (ConnectX-7) per server"}),
    _p("NCCL remark", {"interconnect": "8x 400 Gb/s per node, no NVLink SHARP"}),
    _p("NVIDIA switch name", {"interconnect": "NVIDIA Quantum-2 NDR 400Gb/s x8 per node"}),
    _p("adapter name", {"interconnect": "ConnectX-7 NDR 200 Gb/s per GPU"},
       {"interconnect": "200 Gb/s per GPU"}),
    _p("paper (bytes)", {"interconnect": "25 GB/s per GPU inter-node"},
       {"interconnect": "200 Gb/s per GPU"}),
    # --- the framework
    _p("BigScience / Microsoft", {"source": "Megatron-DeepSpeed"}, {"source": "DeepSpeed"}),
    _r("paper", {"source": "DeepSpeed ZeRO stage 3 with offload", "pp": "1", "dp": "64"},
       _OFFLOAD),
    _r("paper", {"source": "DeepSpeed ZeRO-Infinity", "pp": "1", "dp": "64"}, _NVME),
    _r("paper", {"source": "DeepSpeed", "dp_sharding": "ZeRO stage 3 with CPU offload"},
       _OFFLOAD),
    _p("PyTorch docs", {"source": "PyTorch FSDP FULL_SHARD"},
       {"source": "PyTorch FSDP", "dp_sharding": "FULL_SHARD"}),
    _p("PyTorch docs", {"source": "PyTorch FSDP HYBRID_SHARD"},
       {"source": "PyTorch FSDP", "dp_sharding": "HYBRID_SHARD"}),
    _p("PyTorch docs", {"source": "PyTorch FSDP SHARD_GRAD_OP"},
       {"source": "PyTorch FSDP", "dp_sharding": "SHARD_GRAD_OP"}),
    _p("PyTorch FSDP2", {"source": "FSDP2 fully_shard"},
       {"source": "PyTorch FSDP2", "dp_sharding": "fully_shard"}),
    _p("PyTorch docs", {"source": "PyTorch", "dp_sharding": "HSDP"},
       {"source": "PyTorch FSDP", "dp_sharding": "HYBRID_SHARD"}),
    _p("torchtitan notes", {"source": "torchtitan", "notes": "HSDP", "pp": "1", "dp": "64"},
       {"source": "torchtitan", "dp_sharding": "HSDP", "pp": "1", "dp": "64"}),
    _p("NVIDIA", {"source": "NeMo 2.0"}, {"source": "NeMo"}),
    _p("Megatron-LM release branch", {"source": "Megatron-LM core_r0.9"},
       {"source": "Megatron-LM"}),
    _p("PyTorch", {"source": "torchtitan"}, {"source": "torchtitan", "dp_sharding": "FSDP"}),
    _r("Hugging Face", {"source": "Nanotron"}, _NO_PROFILE),
    _r("HPC-AI Tech", {"source": "Colossal-AI Gemini"}, _NO_PROFILE),
    _r("Stanford CRFM", {"source": "Levanter/JAX"}, _NO_PROFILE),
    _r("Google", {"source": "MaxText on A3"}, _NO_PROFILE),
    _p("PyTorch", {"source": "PyTorch DDP", "tp": "1", "pp": "1", "dp": "512"},
       {"source": "PyTorch FSDP", "dp_sharding": "DDP", "tp": "1", "pp": "1", "dp": "512"}),
    _p("PyTorch API", {"source": "torch.nn.parallel.DistributedDataParallel", "tp": "1",
                       "pp": "1", "dp": "512"},
       {"source": "PyTorch FSDP", "dp_sharding": "NO_SHARD", "tp": "1", "pp": "1", "dp": "512"}),
    _p("NVIDIA (2022)", {"source": "NeMo Megatron"}, {"source": "NeMo"}),
    _r("Meta", {"source": "fairseq"}, _NO_PROFILE),
    _r("EleutherAI", {"source": "GPT-NeoX"}, _NO_PROFILE),
    # --- the layout
    _p("paper", {"tp": "TP=8", "pp": "PP=4", "dp": "DP=16"}),
    _p("Megatron argument", {"tp": "tensor model parallel size 8"}),
    _p("Megatron flag", {"tp": "--tensor-model-parallel-size 8"}),
    _p("paper", {"tp": "8-way tensor parallel"}),
    _p("paper", {"pp": "4-way pipeline"}),
    _p("Megatron argument", {"pp": "pipeline_model_parallel_size=4"}),
    _r("paper (interleaving without its count)",
       {"pp": "2-way pipeline with 1F1B interleaving", "dp": "32"}, "is not an integer"),
    _r("another axis in tp", {"tp": "pipeline parallel 4"}, "is not an integer"),
    _p("paper", {"vpp": "virtual pipeline 5"}, {"vpp": "5"}),
    _p("paper", {"vpp": "VP=5"}, {"vpp": "5"}),
    _r("NeMo yaml (layers, not chunks)", {"vpp": "num_layers_per_virtual_pipeline_stage 2"},
       "is not an integer"),
    _p("paper", {"sp": "sequence parallel on"}, {"sp": "yes"}),
    _p("paper", {"cp": "context parallel 2", "dp": "8"}, {"cp": "2", "dp": "8"}),
    _p("paper", {"cp": "CP=2", "dp": "8"}, {"cp": "2", "dp": "8"}),
    _m("paper", {"ep": "expert parallel 8"}, {"ep": "8"}),
    _m("paper", {"ep": "EP=8"}, {"ep": "8"}),
    _p("paper", {"global_batch_seqs": "1536 sequences of 4096"}),
    _p("paper", {"global_batch_seqs": "1536 x 4096 tokens"}),
    _r("paper (another length)", {"global_batch_seqs": "1536 sequences of 2048"},
       "is not an integer"),
    _p("paper", {"global_batch_seqs": "global batch 1536"}),
    _p("paper", {"micro_batch": "micro batch 1"}),
    _p("launcher", {"micro_batch": "mbs=1"}),
    _p("paper", {"micro_batch": "1 (gradient accumulation 96)"}),
    _r("paper (inconsistent)", {"micro_batch": "1 (gradient accumulation 16)"},
       "states gradient accumulation 16"),
    _p("paper", {"recompute": "full activation checkpointing"}, {"recompute": "full"}),
    _p("paper", {"recompute": "selective recompute"}, {"recompute": "selective"}),
    _p("paper", {"recompute": "AC: full"}, {"recompute": "full"}),
    _p("paper (remark)", {"dp": "DP=16 (ZeRO-1)"}, {"dp_sharding": "ZeRO-1"}),
    _p("paper (remark)", {"dp": "16 (distributed optimizer)"},
       {"dp_sharding": "distributed optimizer"}),
    _p("paper (remark)", {"pp": "4 (interleaved, vpp 5)"}, {"vpp": "5"}),
    _r("paper (interleaved, no count)", {"pp": "4 (interleaved)"}, "states no virtual stages"),
    _r("paper (two counts)", {"pp": "4 (interleaved, vpp 5)", "vpp": "2"}, "expected one count"),
    _p("paper (remark)", {"cp": "CP 2 (ring attention)", "dp": "8"}, {"cp": "2", "dp": "8"}),
    _r("paper (Ulysses)", {"cp": "2 (all-to-all / Ulysses)", "dp": "8"}, "all-to-all"),
    _m("paper (remark)", {"ep": "EP 8 (expert parallel)"}, {"ep": "8"}),
    _m("paper", {"ep": "64-way expert parallel"}, {"ep": "64"}),
    _p("paper (one cell)", {"tp": "TP 8 x PP 4 x DP 16"}),
    _p("Transformer Engine", {"precision": "FP8 current scaling"}, {"precision": "FP8-CS"}),
    _p("DeepSeek-V3 style", {"precision": "FP8 blockwise (128x128)"},
       {"precision": "FP8 blockwise"}),
    _p("NeMo precision", {"precision": "fp8-hybrid"}, {"precision": "FP8-DS"}),
    _p("paper", {"recompute": "selective (attention only)"}, {"recompute": "selective"}),
    _p("paper", {"precision": "bf16 mixed precision"}, {"precision": "bf16"}),
    _p("Transformer Engine", {"precision": "FP8 (delayed scaling)"}, {"precision": "FP8-DS"}),
    _p("Transformer Engine", {"precision": "FP8 hybrid (E4M3 fwd / E5M2 bwd)"},
       {"precision": "FP8-DS"}),
    _p("Blackwell recipe", {"precision": "MXFP8", "gpu": "B200"},
       {"precision": "MXFP8", "gpu": "B200 180GB"}),
)  # fmt: skip


def case_of(cells: dict[str, str], moe: bool = False) -> Case:
    """The first case the base row with ``cells`` replaced infers beside the package data."""
    (case, *_) = row_cases({**(MOE_BASE if moe else BASE), **cells}, "extra.csv", 1, data_dir())
    return case


def reading(case: Case) -> dict[str, Any]:
    """What a prediction rests on: the system with its overrides, the framework with its
    options, the model and every parallel field; the reason when refused."""
    out: dict[str, Any] = {
        "system": case.system, "overrides": case.system_overrides, "framework": case.backend_key,
        "model": case.model.name if case.model else None, "refused": bool(case.reason),
    }  # fmt: skip
    if case.parallel is not None:
        out.update(dataclasses.asdict(case.parallel))
    return out


def outcome(phrasing: Phrasing) -> tuple[str, str]:
    """``(same | misread | refused, detail)`` of one phrasing."""
    case = case_of(phrasing.cells, phrasing.moe)
    if phrasing.canonical is None:
        if case.reason and phrasing.refused in case.reason:
            return "same", case.reason
        return ("misread", case.reason or f"read as {case.system}, {case.backend_key}")
    if case.reason:
        return "refused", case.reason
    want = reading(case_of(phrasing.canonical, phrasing.moe))
    got = reading(case)
    moved = {k: (got.get(k), want.get(k)) for k in want if got.get(k) != want.get(k)}
    if moved:
        return "misread", "; ".join(f"{k} {g!r} (expected {w!r})" for k, (g, w) in moved.items())
    return "same", ""


def report(rows: list[tuple[Phrasing, str, str]]) -> str:
    """The markdown table of every phrasing's outcome and the counts."""
    counts = Counter(kind for _, kind, _ in rows)
    lines = [
        "# System, framework and layout phrasings through the inferred readers",
        "",
        f"{len(rows)} phrasings: "
        + ", ".join(f"{counts[k]} {k}" for k in ("same", "misread", "refused")),  # fmt: skip
        "",
        "At main 58bec87, before the s32 readers7 fixes: "
        + ", ".join(f"{n} {k}" for k, n in BEFORE_S32.items()),
        "",
        "| style | cells | expected | outcome | detail |",
        "|---|---|---|---|---|",
    ]
    for phrasing, kind, detail in rows:
        cells = "; ".join(f"`{k}` = `{v}`" for k, v in phrasing.cells.items())
        want = (
            f"refused ({phrasing.refused})"
            if phrasing.canonical is None
            else "; ".join(f"`{k}` = `{v}`" for k, v in phrasing.canonical.items()) or "the base"
        )
        lines.append(f"| {phrasing.style} | {cells} | {want} | {kind} | "
                     f"{detail[:160].replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [(p, *outcome(p)) for p in PHRASINGS]
    text = report(rows)
    args.out.write_text(text, encoding="utf-8")
    print(text.splitlines()[2])
    for phrasing, kind, detail in rows:
        if kind != "same":
            print(f"{kind}: {phrasing.cells} :: {detail[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
