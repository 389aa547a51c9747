"""The system preset a published-runs CSV row's ``gpu`` cell names, read as part of the inferred
setup (:mod:`stage_explore.validation.infer`, :mod:`stage_explore.validation.infer_fields`):
regex rules per part, memory variants chosen by a stated memory, the GH200 read as the H200, and
the form factors and parts no preset describes (PCIe and NVL cards, NVLink domains other than
NVL72, the H20, architecture names alone), refused with a one-line reason rather than read as a
preset whose figures the part does not have. Loads only the preset whose memory a cell states.
"""

from __future__ import annotations

import re

from stage_explore.system import load_system
from stage_explore.validation.infer_cloud import cloud_part
from stage_explore.validation.infer_fields import Inferred, Uninferable

#: ``gpu`` cell → system preset, first match wins (GB before B: "GB200 (B200 in NVL72)"). A part
#: number followed by a further digit is another part or a typo, not this one (7 Dec 2026, s29
#: review: ``H1000`` was read as the H100, ``B2000`` as the B200, and NVIDIA's RTX A1000
#: workstation card as the A100, each evaluated as that preset with no warning).
SYSTEM_RULES: tuple[tuple[str, str], ...] = (
    (r"GB300(?!\d)", "gb300-nvl72"),
    (r"GB200(?!\d)", "gb200-nvl72"),
    (r"B300(?!\d)", "b300"),
    (r"B200(?!\d)", "b200"),
    (r"H800(?!\d)", "h800"),
    # GH-200 too: the GH200 superchip, read as the H200
    (r"H200(?!\d)|GH[\s_-]?200(?!\d)", "h200"),
    (r"H100(?!\d)", "h100-80gb"),
    (r"A100(?!\d)", "a100-80gb"),
    # 5 Dec 2026 (s17 systems): the A800, the A100 with 400 GB/s NVLink (system/presets/a800.toml).
    (r"A800(?!\d)", "a800"),
    # AMD Instinct (5 Dec 2026, s14 amd): the CDNA 3 / CDNA 4 OAM platforms' presets, each its
    # own part (the MI350X, the MI355X's 1 kW sibling at lower clocks, has no preset: refused).
    (r"MI355X", "mi355x"),
    (r"MI325X", "mi325x"),
    (r"MI300X", "mi300x"),
)
#: A file name in a ``gpu`` cell (``config_A100x1x8.py``, ``llama3_h100.yaml``): not a statement
#: of the hardware, and not read (7 Dec 2026, s33 rowsE). Benchmark suites name their per-system
#: config files after a reference chip and keep the name on other machines: BAAI FlagPerf's
#: NVIDIA Llama 3 8B case runs its A800 baseline ("NVIDIA DGX A800(80G)",
#: "NVIDIA_A800-SXM4-80GB") from ``config/config_A100x1x8.py`` (FlagOpen/FlagPerf 5744755a
#: ``training/nvidia/llama3_8B-megatron``); the cell "A800 80GB (... in config_A100x1x8.py)" was
#: read as the a100-80gb preset (the A100 rule is tried before the A800's), whose 600 GB/s NVLink
#: the A800's 400 GB/s is not.
FILE_NAME = re.compile(
    r"[\w./-]*\w\.(?:py|sh|ya?ml|json|toml|txt|md|cfg|conf|ini|csv|log)\b", re.IGNORECASE
)
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*Gi?B", re.IGNORECASE)  # GiB too (s33 hbmcap)
#: A memory written with a bare ``G`` right after the part's name and form factor (``A100-40G``,
#: ``A800-SXM4-80G``, as Chinese papers write it; 5 Dec 2026, s17 systems: was read as no memory,
#: the 80 GB preset); a ``G`` elsewhere (``200G HDR``) is a network rate and not read.
_MEMORY_G = re.compile(
    r"\b(?:G?[ABH]|MI)\d{2,3}[A-Z]?(?:[\s_-]*(?:SXM\d?|PCIe|HBM\w*))*[\s_-]*(\d+)G\b", re.IGNORECASE
)
#: Presets of the same GPU with another memory, chosen by the memory a ``gpu`` cell states
#: (``A100-SXM4-40GB``: the a100-40gb preset, the 40 GB part's datasheet figures).
MEMORY_VARIANTS: dict[str, tuple[str, ...]] = {"a100-80gb": ("a100-40gb",)}
#: How far a stated memory may lie from its preset's and still be a memory variant of that part
#: (applied as its capacity): the widest spread of one die's shipped memories, the A100's 40 vs
#: 80 GB (NVIDIA A100 datasheet) and the GH100's 80 GB H100 vs 141 GB H200 (1.76x; NVIDIA H100
#: and H200 datasheets). Beyond it a figure is a node's or a typo's, not a GPU's (7 Dec 2026, s33
#: hbmcap).
CAPACITY_SPAN = 2.0
#: The GH200 Grace Hopper superchip, read as the h200 preset (``H200`` is in its name).
GH200 = re.compile(r"GH[\s_-]?200", re.IGNORECASE)
GH200_NOTE = (
    "a GH200 read as the H200 (NVIDIA GH200 Grace Hopper Superchip datasheet: its GPU is the "
    "Hopper die of the H100 / H200, 989 TFLOP/s dense BF16, with 96 GB HBM3 at 4 TB/s or 144 GB "
    "HBM3e at 4.9 TB/s; the h200 preset has 141 GB at 4.8 TB/s): the preset's 8-GPU NVSwitch "
    "node, where GH200 systems link 1 to 4 superchips per node (or 256 over the NVLink Switch "
    "System), and the Grace CPU's NVLink-C2C memory is not modelled"
)


#: Form factors whose compute, memory or GPU-to-GPU links differ from the preset their GPU's
#: name maps to, refused (5 Dec 2026, s17 systems): every preset is an SXM / OAM part on an
#: NVSwitch (or Infinity Fabric) node, or an NVL72 rack, and the system format has no NVLink
#: bridge pair or PCIe tier between GPUs, so no faithful preset of these is possible. (pattern,
#: what the part is), first match wins; the figures are the vendor's datasheets': NVIDIA H100
#: (H100 PCIe: 1,513 sparse = 756 dense BF16 TFLOP/s, 80 GB HBM2e at 2.0 TB/s, 300-350 W; H100
#: NVL: 1,671 sparse = 835 dense, 94 GB HBM3 at 3.9 TB/s, 350-400 W; both NVLink bridge pairs at
#: 600 GB/s), H200 (H200 NVL: 835 dense, 141 GB at 4.8 TB/s, up to 600 W, 2- or 4-way NVLink
#: bridge at 900 GB/s), A100 (A100 PCIe: 312 dense at 250 W (40 GB, 1,555 GB/s) or 300 W (80 GB,
#: 1,935 GB/s), NVLink bridge pairs at 600 GB/s), A800 (A800 PCIe: NVLink bridge at 400 GB/s),
#: GB200 NVL4 / NVL2 / NVL36 (a 4- / 2- / 36-GPU NVLink domain, not the 72-GPU one). A cell that
#: names SXM is not read as a PCIe card (``H100 SXM5, PCIe Gen5 host``).
FORM_FACTORS: tuple[tuple[str, str], ...] = (
    (r"H100.*\bNVL\b(?!\d)|H100NVL",
     "an H100 NVL, a PCIe card (835 dense BF16 TFLOP/s at 350-400 W, 94 GB HBM3 at 3.9 TB/s, "
     "NVLink bridge pairs at 600 GB/s)"),
    (r"H200.*\bNVL\b(?!\d)|H200NVL",
     "an H200 NVL, a PCIe card (835 dense BF16 TFLOP/s at up to 600 W, NVLink bridges of 2 or 4 "
     "GPUs at 900 GB/s)"),
    (r"^(?!.*SXM).*H100.*PCI[\s_-]?E",
     "an H100 PCIe (756 dense BF16 TFLOP/s at 300-350 W, 80 GB HBM2e at 2.0 TB/s, NVLink "
     "bridge pairs at 600 GB/s)"),
    (r"^(?!.*SXM).*A100.*PCI[\s_-]?E",
     "an A100 PCIe (250-300 W, 1,555 GB/s (40 GB) or 1,935 GB/s (80 GB), NVLink bridge pairs "
     "at 600 GB/s)"),
    (r"^(?!.*SXM).*PCI[\s_-]?E", "a PCIe card (NVLink bridges or PCIe between GPUs)"),
    # NVL4 / NVL2 / NVL36; not NVL72 nor NVL36x2 (two 36-GPU racks joined in one 72-GPU domain)
    (r"GB[23]00.*NVL[\s_-]?(?!72\b)\d+\b(?!\s*[x×]\s*2)",
     "a GB200 / GB300 system of another NVLink domain than the NVL72 rack's 72 GPUs"),
)
#: ``gpu`` cells naming something no preset is, with the reason (5 Dec 2026, s17 systems).
NO_PRESET: tuple[tuple[str, str], ...] = (
    (r"\bH20\b", "an H20 (GH100 at 148 dense BF16 TFLOP/s, 96 GB HBM3 at 4.0 TB/s, 400 W, as "
     "vendors' spec pages give it): no preset (NVIDIA publishes no H20 datasheet, and no "
     "sustained GEMM rate of it was found)"),
    # an architecture alone, optionally "GPUs" and a parenthesis ("NVIDIA Ampere GPUs (the part
    # is not stated)", MegaScale's "more than 10,000 NVIDIA Ampere GPUs"; 6 Dec 2026, s27 hidden20)
    (r"^\W*(?:NVIDIA\s+)?(?:Ampere|Hopper|Blackwell(?:\s+Ultra)?)(?:\s+GPUs?)?\W*(?:\([^)]*\))?\W*$",
     "an architecture, not a part (A100 / A800, H100 / H800 / H200, B200 / B300 / GB200 / GB300 "
     "differ in peaks, memory and links)"),
)


def infer_system(gpu: str) -> Inferred:
    """The preset of a ``gpu`` cell (a stated memory picks a :data:`MEMORY_VARIANTS` preset:
    A100 40GB); a stated memory no preset of that GPU has is the preset's part with that memory
    capacity (:func:`memory_override` gives it; :func:`stated_capacity`). A GH200 is read as the
    H200, stated (:data:`GH200_NOTE`). A cloud machine named instead of the GPU
    (``p5.48xlarge``, ``A3 Mega``) is read as the GPU it carries
    (:mod:`~stage_explore.validation.infer_cloud`). A form factor of :data:`FORM_FACTORS` (PCIe,
    NVL cards) and a part of :data:`NO_PRESET` are :class:`Uninferable`, naming what the part
    is."""
    return _read_system(gpu)[0]


def memory_override(gpu: str) -> tuple[tuple[str, float], ...]:
    """The ``("memory_bytes", bytes)`` system override of a ``gpu`` cell whose stated memory
    no preset of its part has (:func:`stated_capacity`), else ``()``; :class:`Uninferable`
    where :func:`infer_system` is."""
    capacity = _read_system(gpu)[1]
    return () if capacity is None else (("memory_bytes", float(capacity)),)


def _read_system(gpu: str) -> tuple[Inferred, int | None]:
    """:func:`infer_system`'s reading of ``gpu`` and the memory capacity in bytes it applies
    to the preset (None: the preset's own)."""
    named = FILE_NAME.sub(" ", gpu)  # a config file's name is not the hardware (s33 rowsE)
    preset = next((p for pattern, p in SYSTEM_RULES if re.search(pattern, named, re.I)), "")
    machine = None if preset else cloud_part(gpu)
    if machine is not None:
        # 6 Dec 2026 (s25 hidden12): a cloud machine named instead of the GPU was refused
        inner, applied = _read_system(machine.part)
        return Inferred(
            inner.value,
            f"{inner.assumption.replace(repr(machine.part), repr(gpu), 1)}: the machine "
            f"{machine.name!r} carries the {machine.part} ({machine.where}); its own scale-out "
            "network is not read from the name",
        ), applied
    for pattern, part in FORM_FACTORS:
        if preset and re.search(pattern, named, re.I):
            raise Uninferable(
                f"gpu {gpu!r} is {part}: no preset (the {preset} preset is "
                f"{load_system(preset).description}; the system format has no NVLink-bridge or "
                "PCIe tier between GPUs)"
            )
    if not preset:
        part = next((p for pattern, p in NO_PRESET if re.search(pattern, named, re.I)), "")
        if part:
            raise Uninferable(f"gpu {gpu!r} is {part}")
        names = ", ".join(pattern.split("|")[0].split("(")[0] for pattern, _ in SYSTEM_RULES)
        raise Uninferable(f"gpu {gpu!r} matches no system preset (expected one of {names})")
    text = f"system preset {preset} (the gpu column says {gpu!r})"
    if GH200.search(gpu):
        text += f"; {GH200_NOTE}"
    stated = _MEMORY.search(named) or _MEMORY_G.search(named)
    if stated is None and MEMORY_VARIANTS.get(preset):
        # 6 Dec 2026 (s24 spellings): a bare "A100" took the 80 GB preset without saying so
        others = ", ".join(MEMORY_VARIANTS[preset])
        capacity = load_system(preset).accelerator.memory_bytes
        text += (
            f"; no memory stated: the {preset} preset's {capacity / 2**30:.0f} GiB part, a "
            f"default (the other memory's part is the {others} preset; state it in the gpu "
            "cell, e.g. 'A100 40GB')"
        )
    if stated is None:
        return Inferred(preset, text), None
    gigabytes = float(stated.group(1))
    said = stated.group(0) if stated.re is _MEMORY else f"{stated.group(1)}G"
    for name in (preset, *MEMORY_VARIANTS.get(preset, ())):
        capacity = load_system(name).accelerator.memory_bytes
        if any(abs(gigabytes * unit / capacity - 1) < 0.05 for unit in (1e9, 2**30)):
            return Inferred(name, text.replace(f"preset {preset} ", f"preset {name} ", 1)), None
    capacity = load_system(preset).accelerator.memory_bytes
    applied = stated_capacity(gpu, gigabytes, capacity, said, preset)
    return Inferred(
        preset,
        f"{text}; the stated {said} is not the {preset} preset's {capacity / 2**30:.2f} GiB and "
        f"no preset of that memory exists: the preset with its memory capacity set to "
        f"{applied / 2**30:g} GiB (capacity only: its HBM bandwidth, clocks and peaks are the "
        "preset's, not the stated part's)",
    ), applied


def stated_capacity(gpu: str, gigabytes: float, capacity: int, said: str, preset: str) -> int:
    """The memory capacity, in bytes, a ``gpu`` cell's stated ``gigabytes`` (``said``) gives a
    part whose ``preset`` has ``capacity`` bytes and no variant of that memory: ``gigabytes``
    GiB, read as binary whether the cell writes GB or GiB, because HBM capacity is built of
    binary stacks (16 GiB HBM3 stacks: the H100 SXM5's five are the h100-80gb preset's 80 GiB,
    six the 96 GB part's 96 GiB; the mi300x preset's 8 x 24 GiB) and the capacity a framework
    reports sits just below that figure (torchtitan PR #1690 logs 94.99 GiB on its "96GiB"
    H100s, as an 80 GB H100's CUDA total is 79.1-79.6 GiB of the preset's 80). A figure outside
    half to twice the preset's is not a memory variant of that part (:data:`CAPACITY_SPAN`) and
    is :class:`Uninferable`."""
    applied = round(gigabytes * 2**30)
    low, high = (capacity / CAPACITY_SPAN, capacity * CAPACITY_SPAN)
    if not low <= applied <= high:
        raise Uninferable(
            f"gpu {gpu!r}: a stated memory of {said} is not one GPU's memory of the {preset} "
            f"preset's part (expected {low / 2**30:.0f} to {high / 2**30:.0f} GiB per GPU, half "
            "to twice the preset's)"
        )
    return applied

