"""The ASTRA-sim conformance matrix: small design points that cover every feature STAGE emits.

Holds :data:`CASES` (name → :class:`Case`), :func:`system_for` (the case's network) and
:func:`write_case` (a case's complete ASTRA-sim run directory). Used by
``tests/explore/test_astrasim_conformance.py`` (every case through the real binary, per-rank
cycles against :mod:`stage_explore.analytical.tracesim`) and by
``benchmarks/bench_astra_vs_analytical.py`` (the analytical-vs-ASTRA-sim table).

Every case is small (≤ 64 ranks, 2-4 layers, short sequences) so that the whole matrix runs
through the binary in well under a minute on 2 cores. Networks are built from a preset's
accelerator (a100-80gb; h100-80gb for fp8) with the topology of the case: 1-D ring, switch or
fully connected, and 2-D (switch or fully connected inside a node, ring or switch across).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.astrasim import AstraInputs, AstraSettings, AstraSimBackend
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim, System, Topology

#: name → (topology per dim, size per dim); bandwidths and latencies are the a100-80gb preset's
#: NVLink (dim 0) and InfiniBand (dim 1) figures.
NETWORKS: dict[str, tuple[tuple[Topology, int], ...]] = {
    "switch-1d": ((Topology.SWITCH, 64),),
    "ring-1d": ((Topology.RING, 64),),
    "fc-1d": ((Topology.FULLY_CONNECTED, 64),),
    "switch-switch-2d": ((Topology.SWITCH, 4), (Topology.SWITCH, 16)),
    "switch-ring-2d": ((Topology.SWITCH, 4), (Topology.RING, 16)),
    "fc-ring-2d": ((Topology.FULLY_CONNECTED, 2), (Topology.RING, 32)),
}


@dataclass(frozen=True, slots=True)
class Case:
    """One point of the matrix: a model flavor with overrides, a parallel config, a network."""

    flavor: str
    overrides: dict[str, Any]
    parallel: dict[str, Any]
    network: str = "switch-switch-2d"
    scheduling: str = "LIFO"
    what: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    preset: str = "a100-80gb"

    def model(self) -> ModelSpec:
        return get_flavor(self.flavor).with_overrides(**self.overrides)

    def parallel_config(self) -> ParallelConfig:
        return ParallelConfig(**self.parallel)


_GPT = {"layers": 2, "seq_len": 256}
_LLAMA = {"layers": 2, "seq_len": 256}
_MOE = {"layers": 2, "seq_len": 128}

CASES: dict[str, Case] = {
    "dp": Case("gpt3-125m", _GPT, {"dp": 4, "global_batch": 8}, what="data parallel"),
    "tp": Case("gpt3-125m", _GPT, {"tp": 4, "global_batch": 2}, what="tensor parallel"),
    "tp-sp": Case("gpt3-125m", _GPT, {"tp": 4, "dp": 2, "sp": True, "global_batch": 4},
                  what="TP + sequence parallel"),
    "cp-allgather": Case("llama3-8b", _LLAMA, {"cp": 2, "tp": 2, "global_batch": 2},
                         what="context parallel, all-gather K/V"),
    "cp-ring": Case("llama3-8b", _LLAMA,
                    {"cp": 2, "tp": 2, "cp_style": "ring", "global_batch": 2},
                    what="context parallel, ring attention"),
    "pp-gpipe": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                     {"pp": 2, "dp": 2, "schedule": "gpipe", "global_batch": 8},
                     what="pipeline, GPipe"),
    "pp-1f1b": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                    {"pp": 4, "schedule": "1f1b", "global_batch": 8}, what="pipeline, 1F1B"),
    "pp-interleaved": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                           {"pp": 2, "schedule": "interleaved", "vpp": 2, "global_batch": 4},
                           what="pipeline, interleaved (vpp 2)"),
    "ep-moe": Case("mixtral-8x7b", _MOE, {"dp": 4, "ep": 2, "tp": 2, "global_batch": 4},
                   what="expert parallel, MoE"),
    "ep-etp1-moe": Case("mixtral-8x7b", _MOE,
                        {"dp": 4, "ep": 8, "tp": 2, "etp": 1, "sp": True, "global_batch": 4},
                        what="expert parallel folded over tp (etp 1), one all-to-all over ep×tp"),
    "ep-etp2-moe": Case("mixtral-8x7b", _MOE,
                        {"dp": 2, "ep": 4, "tp": 4, "etp": 2, "sp": True, "global_batch": 2},
                        what="expert tp 2 inside tp 4: tp split in tpo×tp, all-to-all over "
                             "ep×tpo, expert all-gather over etp"),
    "ep-inside-tp-moe": Case("mixtral-8x7b", _MOE,
                             {"dp": 2, "ep": 2, "tp": 8, "etp": 2, "sp": True,
                              "global_batch": 2},
                             what="expert group inside tp (tp 8, etp 2, ep 2): tp split in "
                                  "tpr×tpo×tp, experts replicated over tpr"),
    "zero1": Case("gpt3-125m", _GPT, {"dp": 4, "zero": 1, "global_batch": 4}, what="ZeRO-1"),
    "zero2": Case("gpt3-125m", _GPT, {"dp": 4, "zero": 2, "global_batch": 4}, what="ZeRO-2"),
    "zero3": Case("gpt3-125m", _GPT, {"dp": 4, "zero": 3, "global_batch": 4}, what="ZeRO-3"),
    "recompute-full": Case("gpt3-125m", _GPT,
                           {"tp": 2, "dp": 2, "recompute": "full", "global_batch": 4},
                           what="full recompute"),
    "recompute-selective": Case("gpt3-125m", _GPT,
                                {"tp": 2, "dp": 2, "sp": True, "recompute": "selective",
                                 "global_batch": 4}, what="selective recompute"),
    "tied-embeddings-pp": Case("gpt3-125m", {"layers": 2, "seq_len": 256},
                               {"pp": 2, "dp": 2, "global_batch": 4},
                               what="tied embeddings across pipeline ends"),
    "fp8": Case("llama3-8b", _LLAMA, {"tp": 2, "dp": 2, "precision": "fp8", "global_batch": 2},
                what="fp8 (H100)", preset="h100-80gb"),
    "large-2d": Case("gpt3-125m", {"layers": 4, "seq_len": 256},
                     {"tp": 4, "dp": 4, "pp": 4, "sp": True, "schedule": "1f1b",
                      "global_batch": 16}, network="switch-ring-2d",
                     what="64 ranks, TP+SP, PP 1F1B, DP on 2-D"),
    "ring-1d": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "global_batch": 8},
                    network="ring-1d", what="1-D ring"),
    "switch-1d": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "global_batch": 8},
                      network="switch-1d", what="1-D switch"),
    "fc-1d": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "global_batch": 8},
                  network="fc-1d", what="1-D fully connected"),
    "switch-ring-2d": Case("gpt3-125m", _GPT, {"tp": 4, "dp": 4, "global_batch": 8},
                           network="switch-ring-2d", what="2-D switch x ring"),
    "fc-ring-2d": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "pp": 2, "global_batch": 8},
                       network="fc-ring-2d", what="2-D fully connected x ring"),
    "fifo": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "global_batch": 8},
                 scheduling="FIFO", what="FIFO scheduling"),
    "lifo": Case("gpt3-125m", _GPT, {"tp": 2, "dp": 4, "global_batch": 8},
                 scheduling="LIFO", what="LIFO scheduling"),
}  # fmt: skip


def system_for(case: Case) -> System:
    """The case's preset accelerator on the case's network (its dim 0 and dim 1 links)."""
    base = load_system(case.preset)
    nvlink, infiniband = base.network[0], base.network[1]
    dims = []
    for index, (topology, size) in enumerate(NETWORKS[case.network]):
        template = nvlink if index == 0 else infiniband
        # the per-group-size table is the preset's 8-GPU node's: not this dim's sizes
        dims.append(replace(template, name=f"{template.name}-{topology.value}", size=size,
                            topology=topology, bus_efficiency_by_ranks=()))  # fmt: skip
    network: tuple[NetworkDim, ...] = tuple(dims)
    return replace(base, name=f"{case.preset}-{case.network}", network=network)


def backend_for(case: Case, **options: Any) -> AstraSimBackend:
    """An ASTRA-sim backend with the case's settings (scheduling policy and others)."""
    return AstraSimBackend(scheduling_policy=case.scheduling, **case.settings, **options)


def write_case(case: Case, directory: Path) -> AstraInputs:
    """Every input file of the case's ASTRA-sim run, in ``directory``."""
    return backend_for(case).write_inputs(
        case.model(), case.parallel_config(), system_for(case), directory
    )


def settings_for(case: Case) -> AstraSettings:
    return backend_for(case).settings
