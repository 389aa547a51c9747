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

Not for MLPerf (its own ``run.sub`` and ``SEGMENT`` per config), nor NVIDIA's DGX Cloud
Benchmarking recipes (their launchers pass no segment: docs/analytical.md), nor a row whose
cluster a ``systems/*.toml`` file describes.
"""

from __future__ import annotations

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
