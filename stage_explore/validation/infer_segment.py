"""The NVLink domain a NeMo 2.0 / Megatron-Bridge performance-script run on NVL72 racks had.

NVIDIA's performance scripts launch a GB200 / GB300 job of more than one rack with a Slurm
``--segment``: the largest divisor of the node count up to 18 (a rack's 18 compute trays of
4 GPUs), so that every segment of trays shares one NVLink domain and no segment straddles two
racks. ``slurm_executor`` in NVIDIA/NeMo ``scripts/performance/executors.py`` (03ee6d51, the
NeMo 2.0 scripts of the 25.xx containers), Megatron-Bridge ``scripts/performance/executors.py``
(41a64f37) and ``scripts/performance/utils/executors.py`` (023219ed)::

    if num_gpus_per_node == 4 and nodes > 18:
        for segment_candidate in range(18, 0, -1):
            if nodes % segment_candidate == 0: segment = segment_candidate; break

So 256 GPUs (64 nodes) run in segments of 16 trays, 64 GPUs per NVLink domain, where the
``gb200-nvl72`` / ``gb300-nvl72`` presets' contiguous placement puts 72 in each and lets
groups straddle two racks (docs/analytical.md, "What the 'pipeline_bubble' was"). A job of up
to 18 nodes has one segment, the whole job in one domain, as the presets already place it.

NVIDIA's MLPerf Training submissions set their own: each GB200 / GB300 config exports
``SEGMENT`` (:func:`mlperf_domain`), which the row's text states. NVIDIA's DGX Cloud
Benchmarking recipes pass no segment (docs/analytical.md); a row whose cluster a
``systems/*.toml`` file describes keeps its file.
"""

from __future__ import annotations

import re

from stage_explore.system import load_system
from stage_explore.validation.csv_cells import int_cell
from stage_explore.validation.infer_release import container, row_text

#: Presets whose nodes are 4-GPU compute trays in 72-GPU NVLink racks (DGX GB200 / GB300:
#: 18 trays of 2 superchips, each of 2 GPUs; the performance scripts launch them with
#: ``-ng 4``, ``num_gpus_per_node`` 4).
NVL72_TRAY_GPUS: dict[str, int] = {"gb200-nvl72": 4, "gb300-nvl72": 4}
#: Compute trays per rack, the executors' largest segment.
MAX_SEGMENT_NODES = 18
#: Texts naming a launcher that sets its own placement (MLPerf) or none (DGX Cloud recipes).
OTHER_LAUNCHERS = ("mlperf", "dgx cloud", "dgxc")
#: An MLPerf config's segment as a row states it: ``SEGMENT=16``, ``SEGMENT = 16``, or with the
#: config's formula before the value, ``SEGMENT = TP x PP x CP / 4 = 16``.
MLPERF_SEGMENT = re.compile(r"\bSEGMENT\s*=\s*(?:[A-Za-z][^=;,]*?=\s*)?(\d+)")
#: Where an MLPerf row states its config's exports (the cluster cell, the notes, or the cells a
#: data engineer records as unsettled).
SEGMENT_COLUMNS = ("source", "source_table", "interconnect", "notes", "uncertain")


def segment_gpus(num_gpus: int, tray_gpus: int) -> int | None:
    """GPUs per NVLink domain of the executors' segment for a job of ``num_gpus`` on trays of
    ``tray_gpus``; None when the job fits one rack (no segment: one domain) or its GPUs do not
    fill whole trays."""
    if num_gpus % tray_gpus:
        return None
    nodes = num_gpus // tray_gpus
    if nodes <= MAX_SEGMENT_NODES:
        return None
    for segment in range(MAX_SEGMENT_NODES, 0, -1):
        if nodes % segment == 0:
            return segment * tray_gpus
    return None  # unreachable: 1 divides every node count


def perf_script_domain(row: dict[str, str], framework: str, system: str) -> tuple[int, str] | None:
    """``(GPUs per NVLink domain, assumption)`` for a Megatron-Core row of NeMo 2.0's or
    Megatron-Bridge's performance scripts (a container from 25.01 named, not MLPerf or DGX
    Cloud) on the preset ``system``, an NVL72 rack preset, when the executors' segment is
    smaller than the preset's NVLink domain; None otherwise."""
    tray = NVL72_TRAY_GPUS.get(system)
    release = container(row)
    if framework != "megatron-core" or tray is None or release is None or release < (25, 1):
        return None
    text = row_text(row).lower()
    if any(name in text for name in OTHER_LAUNCHERS):
        return None
    gpus = int_cell(row.get("num_gpus") or "")  # as the row's layout reads it (``1,024``)
    if gpus is None:
        return None
    size = segment_gpus(gpus, tray)
    domain = load_system(system).network[0].size
    if size is None or size >= domain:
        return None
    return size, (
        f"NVLink domains of {size} GPUs ({size // tray} trays of {tray}), not the preset's "
        f"{domain}: the performance scripts of container {release[0]}.{release[1]:02d} launch "
        f"{gpus // tray} nodes in Slurm segments of the largest divisor of the node count up "
        "to 18 (NeMo / Megatron-Bridge scripts/performance executors.py slurm_executor), so no "
        "group straddles two racks"
    )


def mlperf_domain(row: dict[str, str], system: str) -> tuple[int, str] | None:
    """``(GPUs per NVLink domain, assumption)`` for an MLPerf Training row on the NVL72 preset
    ``system`` whose text states its config's ``SEGMENT=N`` (trays per Slurm segment), when
    the job is larger than one segment and the segment's GPUs are fewer than the preset's
    domain; None otherwise.

    NVIDIA's GB200 / GB300 MLPerf configs export ``SEGMENT`` as a tuned placement knob: the
    v6.0 DeepSeek-V3 config (``config_GB300_64x4x240xtp1pp4ep32cp1_mxfp8_full_cg.sh``,
    training_results_v6.0 eabf23a0) keeps ``SEGMENT=$(( (TENSOR_MODEL_PARALLEL *
    EXPERT_PARALLEL) / 4 ))`` commented out beside "SEGMENT 16 right now gives better
    performance", the v5.1 Llama 3.1 405B configs size it ``TP x PP x CP / 4`` — a value that
    changes the step is one the launcher applied. The same DeepSeek-V3 configs run HybridEP with
    ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32`` and ``USE_MNNVL=1`` at EP 32: HybridEP then
    treats the whole group as one NVLink domain over fabric memory handles
    (deepseek-ai/DeepEP ``deep_ep/hybrid_ep_buffer.py`` 098da2a6: ``num_of_nodes = group_size //
    num_of_ranks_per_nvlink_domain``, ``enable_fabric``), which runs only if no expert group
    straddles two racks. A segment of at most 18 trays lies in one rack (``sbatch
    --segment`` under the topology/block plugin, whose blocks are the racks: slurm.schedmd.com
    sbatch.html), and two of 16 cannot share one, so each segment is its own NVLink domain; the
    ``run.sub`` ranks the job's nodes in sorted host order, so consecutive ranks fill a segment.
    """
    tray = NVL72_TRAY_GPUS.get(system)
    text = row_text(row, SEGMENT_COLUMNS)
    if tray is None or "mlperf" not in text.lower():
        return None
    match = MLPERF_SEGMENT.search(text)
    gpus = int_cell(row.get("num_gpus") or "")
    if match is None or gpus is None:
        return None
    nodes = int(match.group(1))
    size = nodes * tray
    domain = load_system(system).network[0].size
    if not 0 < nodes <= MAX_SEGMENT_NODES or gpus <= size or size >= domain:
        return None
    return size, (
        f"NVLink domains of {size} GPUs ({nodes} trays of {tray}), not the preset's {domain}: "
        f"the MLPerf config exports SEGMENT={nodes}, Slurm segments of {nodes} nodes each "
        "inside one rack (the DeepSeek-V3 v6.0 config: 'SEGMENT 16 right now gives better "
        "performance'; its HybridEP runs each EP group as one NVLink domain)"
    )


def launch_domain(row: dict[str, str], framework: str, system: str) -> tuple[int, str] | None:
    """The NVLink domain the row's launcher gave it: the performance scripts' segment
    (:func:`perf_script_domain`), else an MLPerf config's (:func:`mlperf_domain`); None when
    neither applies."""
    return perf_script_domain(row, framework, system) or mlperf_domain(row, system)
