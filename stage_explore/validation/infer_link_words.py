"""Interconnect spellings published rows use that the rate reader of
:mod:`stage_explore.validation.infer_cluster` did not read, rewritten into the forms it reads
(:func:`link_spellings`), and an ``interconnect`` cell that says the GPUs have no NVLink /
Infinity Fabric between them (:func:`no_scale_up_reason`), which no preset describes (7 Dec 2026,
s32 readers7: ``benchmarks/system_phrasings.py``).

Read now:

- a bare ``200G`` / ``400G`` / ``100Gb`` (s34 rowsF) next to the name of the network it is a
  port of (InfiniBand's ``HDR`` / ``NDR`` / ``XDR`` / ``EDR``, ``IB``, ``RoCE``, ``Ethernet``,
  ``EFA``, ``ConnectX``) as that many Gb/s: ``4 x HDR 200G per node``, ``RoCE v2 400G per
  GPU``, ``4 * 100Gb RoCE`` (InfiniBand and Ethernet ports are sold by their bit rate: NVIDIA's
  ConnectX-7 "400G" adapters are 400 Gb/s NDR / 400GbE, the ConnectX-6 "200G" ones 200 Gb/s
  HDR). Elsewhere a bare ``G`` is still not a rate (``288G`` is a memory; ``eight 200G NICs``
  names no network and stays unread, as before);
- ``8*400Gbps`` (an asterisk as the multiplication sign) as ``8x400Gbps`` (it was read as one
  400 Gb/s port per node);
- a rate in bytes in a clause that says it is between nodes (``25 GB/s per GPU inter-node``) as
  bits (x 8): a byte rate is otherwise a scale-up link and is not read;

the ``per VM`` of a cloud row (Azure's ND H100 v5, Google's A3 machines) is read as per node in
:data:`stage_explore.validation.infer_cluster._PER_NODE`.
"""

from __future__ import annotations

import re

#: A network a port rate belongs to (InfiniBand generations and names, Ethernet RDMA, AWS EFA,
#: NVIDIA's ConnectX adapters).
_NETWORK = r"(?:[EHNX]DR|IB|InfiniBand|RoCE|Ethernet|EFA|ConnectX[\w-]*|CX-?\d)"
#: The port rates Ethernet and InfiniBand links are sold at (Gb/s: 10 / 25 / 40 / 50 / 100 GbE
#: and EDR, 56 FDR, 200 HDR, 400 NDR, 800 XDR, 1600 GbE); a bare ``80G`` / ``288G`` is a memory.
_PORT = r"(?:10|25|40|50|56|100|200|400|800|1600)"
#: A lower-case ``b`` after the ``G`` (bits, case-sensitive: ``GB`` is bytes): InternLM's hardware
#: table reads "Inter-machine bandwidth | 4 * 100Gb RoCE" (InternLM/InternLM 20fe5ac2
#: doc/en/train_performance.md; 7 Dec 2026, s34 rowsF: was not read, the preset's network kept).
_BITS = r"(?-i:b)?"
#: A bare ``400G`` or ``100Gb`` (not ``400GB``, ``400 Gb/s``, ``400GbE``, ``400Gbps``) right
#: after its network (up to two words between: ``RoCE v2 400G``, ``ConnectX-7 NDR 400G``) or
#: right before it (``200G HDR``, one word between; a count before it, ``4x100Gb RoCE``, s34
#: rowsF); a ``G`` further from a network name is not read (``A100 SXM 80G GPUs … by a RoCE
#: network`` is a memory: s32 readers7's first version read it as 80 Gb/s).
_BARE_G = re.compile(
    rf"\b({_NETWORK}\s(?:[\w.-]+\s){{0,2}}?)({_PORT})\s?G{_BITS}(?![\w/])"
    rf"|(?:(?<![\w.])|(?<=\d[x×]))({_PORT})\s?G{_BITS}(?=\s(?:[\w.-]+\s)?{_NETWORK}\b)",
    re.IGNORECASE,
)
#: ``8*400`` before a bit rate: the count and the rate.
_STAR = re.compile(r"(?<![\w.])(\d+)\s*\*\s*(?=\d+(?:\.\d+)?\s*(?:Gb|Tb|G\b))")
#: A clause that says its rate is between nodes, and a rate in bytes there (``25 GB/s per GPU
#: inter-node``): a byte rate elsewhere is a scale-up link and stays unread.
_INTER_NODE = re.compile(r"inter-?node|between\s+(?:the\s+)?nodes|across\s+nodes|scale-out", re.I)
_BYTES = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:GB/s|GBps)\b")
#: An interconnect cell that says the GPUs share no scale-up fabric.
_NO_SCALE_UP = re.compile(
    r"\bPCIe\b(?:\s+Gen\s*\d)?\s+only\b|\bonly\s+PCIe\b"
    # not "no NVLink SHARP" (NCCL's NVLS switch reductions off) nor NVLink-C2C (CPU to GPU)
    r"|\b(?:no|without)\s+NVLink\b(?![\s-]*(?:SHARP|C2C|NVLS|switch|bridge))"
    r"|\bNVLink\s*[:=]\s*(?:no|none)\b",
    re.IGNORECASE,
)


def _gbits(found: re.Match[str]) -> str:
    """A bare port rate (:data:`_BARE_G`) written in Gb/s."""
    if found.group(3):
        return f"{found.group(3)} Gb/s"
    return f"{found.group(1)}{found.group(2)} Gb/s"


def link_spellings(interconnect: str) -> str:
    """``interconnect`` with the spellings of the module docstring rewritten into the forms
    :func:`~stage_explore.validation.infer_cluster.read_cluster` reads."""
    text = _BARE_G.sub(_gbits, _STAR.sub(lambda m: f"{m.group(1)}x", interconnect))
    return re.sub(r"[^,;]+", _inter_node_bytes, text)


def _inter_node_bytes(clause: re.Match[str]) -> str:
    """A clause naming the inter-node network with its byte rates written in Gb/s."""
    text = clause.group(0)
    if not _INTER_NODE.search(text):
        return text
    return _BYTES.sub(lambda m: f"{float(m.group(1)) * 8:g} Gb/s", text)


def no_scale_up_reason(interconnect: str, preset: str) -> str:
    """The one-line reason a row whose ``interconnect`` says its GPUs talk over PCIe only (or
    have no NVLink) is not evaluated on ``preset``, whose GPUs share an NVLink / NVSwitch or
    Infinity Fabric domain (every preset has one: the system format has no PCIe tier); "" for
    any other cell."""
    found = _NO_SCALE_UP.search(interconnect)
    if found is None or (preset.startswith("mi") and "nvlink" in found.group(0).lower()):
        return ""  # an AMD node has no NVLink: its Infinity Fabric is the preset's
    return (
        f"interconnect says {found.group(0)!r}: GPUs without NVLink between them are not the "
        f"{preset} preset, whose GPUs share an NVLink / Infinity Fabric domain (no preset has a "
        "PCIe-only node; expected the node's scale-up fabric or nothing)"
    )
