"""The cluster a published-runs row states, read for its inferred setup
(:mod:`stage_explore.validation.infer`): the inter-node bandwidth per GPU, the GPUs per node,
the HBM capacity and type and the power cap, in recognisable forms of the ``gpu`` and
``interconnect`` cells only (:func:`read_cluster`); then the system the row runs on
(:func:`cluster_system`): a ``systems/*.toml`` file of the data folder whose figures the row
states (as the hand-written ``setups.toml`` sources name them), else the inferred preset, with
every stated figure that differs from the preset said in the assumption. Of those, the
inter-node bandwidth per GPU is applied: the preset's scale-out (last) network dim gets the
stated figure (:attr:`ClusterChoice.scale_out`; its NCCL channels follow,
:func:`~stage_explore.validation.setup_systems.derive_system`), its efficiencies and everything else
staying the preset's, as a hand-written system file changes only what its source states. The others
are left as the preset has them (a figure such as a 500 W cap changes kernel rates no public
figure gives).

Recognised forms (text in, figure out):

- inter-node bandwidth: a rate in bits (``400 Gb/s``, ``400Gbps``, ``200 Gbit/s``, ``3.2
  Tbps``), optionally after or before a count (``8x200 Gb/s``, ``8x ConnectX-7 IB NDR 400
  Gb/s``, ``4 Omni-Path 100 Gbps links``, ``200 Gb/s x 8``), with ``per GPU`` / ``/GPU`` or
  ``per node`` / ``/node`` / ``per host`` / ``per instance`` later in the
  same clause (clauses end at a ``,`` or ``;`` outside parentheses); per node is divided by the
  GPUs per node (stated, else the preset's). A rate in bytes (``600 GB/s``) is a scale-up link,
  not read; a rate without per GPU / per node is not read (the preset, stated). Without a rate,
  a count of NICs by InfiniBand generation (``4 Mellanox HDR InfiniBand``, ``8x NDR``) at the
  generation's rate (:data:`IB_GENERATIONS`), per GPU / per node as above, and per node in a
  clause about inter-node links (``inter-node communication is facilitated by 4 Mellanox HDR
  InfiniBand``).
- GPUs per node: ``8x A100-80GB/node``, ``8 H100 per host``, ``48 nodes of 8 A100``,
  ``one 8xB200 node`` (a compute tray of an NVL72 rack is not a node: not read).
- HBM: the capacity the ``gpu`` cell states (``96GB``, ``141 GB``) and its type (``HBM2e``).
- power cap: ``500 W`` in either cell.
- fabric: ``Omni-Path`` / ``OmniPath`` / ``OPA`` in the interconnect cell: only then is a
  system file whose scale-out dim is named for Omni-Path matched, and such a row matches no
  other file (NCCL over Omni-Path's verbs is not InfiniBand's rate: systems/jean-zay-a100.toml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stage_core.errors import ConfigError
from stage_explore.system import System, load_system
from stage_explore.system.loading import load_system_file
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_link_words import link_spellings, no_scale_up_reason

#: Relative tolerance of a stated figure against a system's (rounded published figures).
TOLERANCE = 0.05
_GPU = r"(?:[A-Z]{1,2}\d{2,3}\w*|GPUs?)"
#: A bit rate with its counts: ``8x 400 Gb/s``, ``8 × 400 Gb/s``, ``400 Gb/s x 8``, ``400Gb/s IB
#: x 8``, ``1,600 Gbps``, ``400GbE`` (Ethernet ports are named so; a bare ``400G`` is not read:
#: ``288G`` is a memory);
#: 6 Dec 2026 (s24 spellings): ``×`` before the rate, a thousands comma, a count after the
#: network's name and the ``GbE`` unit were not read (``8 × 200 Gb/s per node`` as 200
#: per node, ``1,600 Gbps`` as 600, ``400GbE`` as no rate).
#: 7 Dec 2026 (s32 readers7): not a number after a hyphen (``Quantum-2 NDR 400Gb/s x8`` read 2 x
#: 8 ports, ``ConnectX-7 NDR 400 Gb/s per GPU`` 7 ports of 400).
_RATE = re.compile(
    r"(?:(?<![\w.,\-])(\d+)(?:\s*[x×]\s*|\s+(?=[A-Za-z]))((?:[A-Za-z][\w\-]*\s+){0,4}?))?"
    r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*(Gb/s|Gbps|Gbit/s|GbE|Tb/s|Tbps|Tbit/s)"
    r"(?:(?:\s+(?!per\b|nodes?\b|GPUs?\b)[A-Za-z][\w\-]*){0,2}\s*[x×]\s*(\d+)(?![\w.]))?"
)
#: InfiniBand generations' data rate per 4x port (a NIC's link), Gb/s, for a NIC count that names
#: only its generation (``4 Mellanox HDR InfiniBand``): EDR 100, HDR 200, NDR 400, XDR 800 (the
#: InfiniBand Trade Association's roadmap, https://www.infinibandta.org/infiniband-roadmap/;
#: NVIDIA's ConnectX-5 / -6 / -7 / -8 adapters at those rates). Added 7 Dec 2026 (s32 zero3).
IB_GENERATIONS = {"EDR": 100.0, "HDR": 200.0, "NDR": 400.0, "XDR": 800.0}
#: A count of NICs by generation without a rate: ``4 Mellanox HDR InfiniBand``, ``8x NDR``,
#: ``8 ConnectX-7 NDR`` (only vendor or adapter words between the count and the generation, so
#: ``32 nodes with HDR`` is no count of NICs; a rate after it is the rate pattern's). A port
#: speed written onto the generation is that port's rate (s32 audit): ``HDR100`` (an HDR port
#: split to 100 Gb/s), ``NDR200``, ``NDR400`` (NVIDIA's link-speed names: ConnectX-7 'HDR,
#: NDR200 and NDR', BlueField 'EDR, HDR100, HDR', https://docs.nvidia.com/networking/display/
#: winof2v2310/supported+network+adapter+cards+and+mft+tools); a
#: count of switches (``40 HDR switches``, ``8 Quantum-2 NDR InfiniBand switches``) is no count
#: of NICs (s32 audit).
_NICS = re.compile(
    r"(?<![\w.,])(\d{1,2})\s*(?:[x×]\s*)?"
    r"(?:(?:Mellanox|NVIDIA|Nvidia|ConnectX-?\d+|CX-?\d+|IB|InfiniBand)\s+){0,2}"
    r"(EDR|HDR|NDR|XDR)(100|200|400|800)?\b(?!\s*[\d/])"
    r"(?!(?:\s+(?:Mellanox|NVIDIA|Nvidia|Quantum(?:-\d)?|IB|InfiniBand|leaf|spine)){0,3}"
    r"\s+switch)"
)
#: A clause about a node's links to other nodes: its NIC count is per node (``inter-node
#: communication is facilitated by 4 Mellanox HDR InfiniBand``).
_INTER_NODE = re.compile(r"\binter-?\s?node\b|\bbetween\s+nodes\b", re.IGNORECASE)
_PER_GPU = re.compile(r"per\s+GPU\b|/\s*GPU\b", re.IGNORECASE)
#: ``per VM`` too (7 Dec 2026, s32 readers7: Azure's and Google's 8-GPU VMs are a node each; was
#: not read)
_PER_NODE = re.compile(
    r"per\s+(?:node|host|server|instance|VM)\b|/\s*(?:node|host|VM)\b", re.IGNORECASE
)
_NODE_FORMS = (
    re.compile(rf"(?<![\w.])(\d+)\s*x?\s*{_GPU}[^,;]*?(?:/\s*node|per\s+(?:node|host|server))\b"),
    re.compile(r"nodes?\s+of\s+(\d+)\b", re.IGNORECASE),
    re.compile(rf"(?<![\w.])(\d+)\s*x\s*{_GPU}\s+node\b"),
)
#: A memory in the gpu cell: ``96GB``, or ``96gb`` as lower-cased part names write it (s30 fuzz:
#: was not read); not ``Gb`` (bits) nor a rate (``400 GB/s``, ``gbps``).
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(?:GB|gb)\b(?!\s*/\s*s|ps)")
_HBM = re.compile(r"HBM\d\w*", re.IGNORECASE)
_POWER = re.compile(r"(?<![\w.])(\d{3,4})\s*[Ww]\b")  # s30 fuzz: ``500 w`` too
#: The scale-out fabric a row or a system file may name: Intel Omni-Path, whose NCCL rate (over
#: the hfi1 verbs) is not InfiniBand's (systems/jean-zay-a100.toml).
OMNI_PATH = "omni-path"
_OMNI_PATH = re.compile(r"omni[\s-]?path|\bOPA\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Figure:
    """A stated figure and the text it was read from."""

    value: float
    text: str


@dataclass(frozen=True, slots=True)
class Cluster:
    """What a row states of its cluster; ``None`` / "" where it states nothing recognisable.
    ``scale_out`` is bytes/s per GPU, before a per-node rate is divided (``per_node``)."""

    scale_out: Figure | None = None
    per_node: bool = False
    gpus_per_node: Figure | None = None
    memory_gb: Figure | None = None
    hbm: str = ""
    power_w: Figure | None = None
    unread: tuple[str, ...] = ()


def _clauses(text: str) -> list[str]:
    """``text`` split at ``,`` and ``;`` outside parentheses, not at a thousands comma
    (``1,600 Gbps``)."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        thousands = char == "," and re.match(r"\d,\d{3}(?!\d)", text[max(i - 1, 0) : i + 5])
        if char in ",;" and depth <= 0 and not thousands:
            out.append(text[start:i])
            start = i + 1
    return [c.strip() for c in [*out, text[start:]] if c.strip()]


def _scale_out(interconnect: str) -> tuple[Figure | None, bool, list[str]]:
    """The first bit rate stated per GPU or per node, ``(figure, per node, unread rates)``."""
    unread: list[str] = []
    for clause in _clauses(interconnect):
        for found in _RATE.finditer(clause):
            counts = [int(c) for c in (found.group(1), found.group(5)) if c]
            rate = float(found.group(3).replace(",", ""))
            rate *= 1000 if found.group(4).startswith("T") else 1
            rate *= counts[0] * counts[1] if len(counts) == 2 else counts[0] if counts else 1
            rest = clause[found.end() :]
            if _PER_GPU.search(rest):
                return Figure(rate * 1e9 / 8, found.group(0).strip() + " per GPU"), False, unread
            if _PER_NODE.search(rest):
                return Figure(rate * 1e9 / 8, found.group(0).strip() + " per node"), True, unread
            unread.append(f"{found.group(0).strip()!r} (neither per GPU nor per node)")
    return (*_nic_count(interconnect, unread), unread)


def _nic_count(interconnect: str, unread: list[str]) -> tuple[Figure | None, bool]:
    """The first count of NICs by InfiniBand generation (:data:`IB_GENERATIONS`) stated per GPU,
    per node, or in a clause about inter-node links (per node), as ``(figure, per node)``; one
    stated otherwise joins ``unread``."""
    for clause in _clauses(interconnect):
        for found in _NICS.finditer(clause):
            port = float(found.group(3) or IB_GENERATIONS[found.group(2)])  # HDR100: 100
            rate = int(found.group(1)) * port * 1e9 / 8
            text, rest = found.group(0).strip(), clause[found.end() :]
            if _PER_GPU.search(rest):
                return Figure(rate, f"{text} per GPU"), False
            if _PER_NODE.search(rest) or _INTER_NODE.search(clause):
                return Figure(rate, f"{text} per node"), True
            unread.append(f"{text!r} (neither per GPU nor per node)")
    return None, False


def read_cluster(gpu: str, interconnect: str) -> Cluster:
    """The cluster figures of a row's ``gpu`` and ``interconnect`` cells (module docstring;
    the interconnect's other spellings first read as :func:`link_spellings` reads them)."""
    interconnect = link_spellings(interconnect)
    scale_out, per_node, unread = _scale_out(interconnect)
    node = None
    for clause in _clauses(interconnect):
        found = next((m for form in _NODE_FORMS if (m := form.search(clause))), None)
        if found:
            node = Figure(int(found.group(1)), found.group(0).strip())
            break
    memory = _MEMORY.search(gpu)
    hbm = _HBM.search(gpu)
    power = _POWER.search(f"{gpu} {interconnect}")
    return Cluster(
        scale_out=scale_out, per_node=per_node, gpus_per_node=node,
        memory_gb=Figure(float(memory.group(1)), memory.group(0)) if memory else None,
        hbm=hbm.group(0) if hbm else "",
        power_w=Figure(float(power.group(1)), power.group(0)) if power else None,
        unread=tuple(unread),
    )  # fmt: skip


def _close(a: float, b: float) -> bool:
    return abs(a / b - 1) < TOLERANCE


def _figures(system: System) -> dict[str, float | None]:
    """A system's comparable figures: memory (bytes), GPUs per node (the scale-up dim), the
    scale-out bandwidth per GPU (the last dim when there are two or more) and power."""
    return {
        "memory": system.accelerator.memory_bytes,
        "gpus_per_node": system.network[0].size,
        "scale_out": system.network[-1].bandwidth_bytes_per_s if len(system.network) > 1 else None,
        "power_w": system.power_w,
    }


def _stated(cluster: Cluster, preset: System) -> dict[str, Figure]:
    """The stated figures in the units of :func:`_figures` (a per-node rate divided by the
    stated GPUs per node, else the preset's)."""
    out: dict[str, Figure] = {}
    if cluster.memory_gb is not None:
        out["memory"] = cluster.memory_gb
    if cluster.gpus_per_node is not None:
        out["gpus_per_node"] = cluster.gpus_per_node
    if cluster.scale_out is not None:
        per_node = cluster.gpus_per_node.value if cluster.gpus_per_node else preset.network[0].size
        value = cluster.scale_out.value / (per_node if cluster.per_node else 1)
        out["scale_out"] = Figure(value, cluster.scale_out.text)
    if cluster.power_w is not None:
        out["power_w"] = cluster.power_w
    return out


def _agrees(field: str, stated: Figure, value: float | None) -> bool:
    if value is None:
        return False
    if field == "memory":  # GB read as 10^9 or 2^30 bytes
        return any(_close(stated.value * unit, value) for unit in (1e9, 2**30))
    return _close(stated.value, value)


def _matches(stated: dict[str, Figure], own: System, preset: System) -> bool:
    """Whether a system file is the stated cluster: every stated figure is the file's, and every
    figure in which the file differs from the preset is stated."""
    mine, base = _figures(own), _figures(preset)
    if not all(_agrees(f, figure, mine[f]) for f, figure in stated.items()):
        return False
    differs = [f for f in mine if mine[f] != base[f]]
    return all(f in stated for f in differs)


@dataclass(frozen=True, slots=True)
class ClusterChoice:
    """The system a row runs on (a preset name or a folder file's relative path), the
    assumption that reports it, and the stated inter-node bandwidth per GPU (bytes/s) to set on
    the preset's scale-out dim (``None``: the system as it is)."""

    value: str
    assumption: str
    scale_out: float | None = None


def _describe(field: str, figure: Figure) -> str:
    if field == "scale_out":
        return f"inter-node {figure.value * 8 / 1e9:g} Gb/s per GPU ({figure.text!r})"
    return {"memory": "HBM", "gpus_per_node": "GPUs per node", "power_w": "power cap"}[field] + (
        f" {figure.text!r}"
    )


def _family(preset: System) -> str:
    """The GPU name of a preset's accelerator (``H100`` of ``H100-SXM5-80GB``, ``MI300X`` of
    ``MI300X-OAM-192GB``)."""
    found = re.match(r"MI\d{3}[A-Z]?|G?[A-Z]\d{2,3}", preset.accelerator.name)
    return found.group(0) if found else preset.accelerator.name


def stated_fabric(interconnect: str) -> str:
    """``omni-path`` when the interconnect cell names Intel Omni-Path (``Omni-Path``,
    ``OmniPath``, ``OPA``), else "" (6 Dec 2026, s28 legacy)."""
    return OMNI_PATH if _OMNI_PATH.search(interconnect) else ""


def system_fabric(system: System) -> str:
    """``omni-path`` when a system's scale-out (last) dim is named for Omni-Path, else ""."""
    if len(system.network) < 2:
        return ""
    return OMNI_PATH if OMNI_PATH in system.network[-1].name.lower() else ""


def folder_systems(folder: Path | None) -> list[tuple[str, System]]:
    """``(relative path, system)`` of a data folder's ``systems/*.toml``, by name; a file that
    does not load is left out (validate names it when a source uses it)."""
    if folder is None:
        return []
    out = []
    for path in sorted((folder / "systems").glob("*.toml")):
        try:
            out.append((f"systems/{path.name}", load_system_file(path)))
        except ConfigError:
            continue
    return out


def cluster_system(
    gpu: str, interconnect: str, preset_name: str, folder: Path | None
) -> ClusterChoice:
    """The system of a row: the folder's one system file of the preset's GPU whose figures the
    row states (its path relative to the folder), else ``preset_name`` with a stated
    inter-node bandwidth per GPU that differs from the preset's set on its scale-out dim; the
    assumption says which figures were read, matched, applied, or differ and are not applied."""
    refused = no_scale_up_reason(interconnect, preset_name)  # s32 readers7
    if refused:
        raise Uninferable(refused)
    cluster = read_cluster(gpu, interconnect)
    preset = load_system(preset_name)
    stated = _stated(cluster, preset)
    said = "; ".join(_describe(f, figure) for f, figure in stated.items())
    if cluster.per_node and "scale_out" in stated:
        nodes = "stated" if cluster.gpus_per_node else f"the preset's {preset.network[0].size}"
        said += f" (a per-node rate over {nodes} GPUs per node)"
    unread = "".join(f"; not read: {u}" for u in cluster.unread)
    if not stated:
        return ClusterChoice(preset_name, f"the cluster: no figure read from gpu / interconnect, "
                                     f"the {preset_name} preset's{unread}")  # fmt: skip
    family = _family(preset)
    fabric = stated_fabric(interconnect)
    if fabric:
        said += f"; fabric {fabric}"
    found = [
        (path, own) for path, own in folder_systems(folder)
        if own.accelerator.name.startswith(family) and _matches(stated, own, preset)
        and system_fabric(own) == fabric  # an Omni-Path file only for a row naming Omni-Path
    ]  # fmt: skip
    hbm = f"; HBM type {cluster.hbm!r} stated" if cluster.hbm else ""
    if len(found) == 1:
        return ClusterChoice(found[0][0], (
            f"the cluster: the data folder's {found[0][0]} ({found[0][1].description}), whose "
            f"figures the row states ({said}{hbm}); its other figures are the file's own"
            f"{unread}"
        ))  # fmt: skip
    base = _figures(preset)
    differ = [_describe(f, s) for f, s in stated.items() if not _agrees(f, s, base[f])]
    why = (f"{len(found)} system files of the data folder match ({', '.join(p for p, _ in found)})"
           if found else "no system file of the data folder states this cluster")  # fmt: skip
    if not differ:
        return ClusterChoice(preset_name, f"the cluster: the {preset_name} preset, which has the "
                                     f"stated figures ({said}{hbm}){unread}")  # fmt: skip
    scale_out = stated.get("scale_out")
    applied = (
        scale_out is not None and len(preset.network) > 1
        and not _agrees("scale_out", scale_out, base["scale_out"])
    )  # fmt: skip
    rest = [_describe(f, s) for f, s in stated.items()
            if not _agrees(f, s, base[f]) and not (applied and f == "scale_out")]  # fmt: skip
    if applied and scale_out is not None:
        dim = preset.network[-1]
        kept = (f"; the row also states {', '.join(rest)}, which would need kernel or network "
                f"rates no public source here gives: not applied" if rest else "")  # fmt: skip
        return ClusterChoice(preset_name, (
            f"the cluster: the {preset_name} preset with its scale-out dim "
            f"{dim.name or len(preset.network) - 1!r} at the stated "
            f"{_describe('scale_out', scale_out)} instead of "
            f"{dim.bandwidth_bytes_per_s * 8 / 1e9:g} Gb/s ({why}), its NCCL channels 2 per NIC at "
            f"the preset's per-NIC rate (no NIC stated); its efficiencies, latency and every "
            f"other figure are the preset's{kept}{hbm}{unread}"
        ), scale_out.value)  # fmt: skip
    return ClusterChoice(preset_name, (
        f"the cluster: the {preset_name} preset although the row states "
        f"{', '.join(differ)}: {why}, and a figure the preset's kernel and network rates would "
        f"need for it has no public source here; not applied{hbm}{unread}"
    ))  # fmt: skip
