"""CPU offload a row names, read into the analytical backend's offload options (7 Dec 2026, s34
offload; :mod:`stage_explore.analytical.offload`), or refused with the part not modelled.

Read (``dp_sharding``, ``source``, ``source_table``; ``notes`` quote switches that were off,
``Activation CPUOffload False``, and are not read):

- on an FSDP1 profile (``fsdp``, ``fms-fsdp``, ``llm-foundry-2023``), any CPU offload is FSDP1's
  only one, ``CPUOffload(offload_params=True)``: ``offload_params`` and ``offload_optimizer``;
- on ``deepspeed``, ``ZeRO-Offload`` / optimizer offload (``offload_optimizer``): the optimizer on
  the CPU; with parameter offload named too (``offload_param``), ZeRO-3's shards as well.

Refused, each with its reason: activation offload (its copies of saved activations have no
cited timing here), NVMe offload / ZeRO-Infinity, DeepSpeed offload that does not say which
states, parameter offload without the optimizer's, offload under any other profile (FSDP2's
``CPUOffloadPolicy``, Megatron-Core's optimizer / activation offload: their code was not read),
a ZeRO stage the offload does not run with, and a GPU without a cited host-device bandwidth.
"""

from __future__ import annotations

import re

from stage_core.errors import ConfigError
from stage_explore.analytical.offload import host_device_bytes_per_s
from stage_explore.system import load_system
from stage_explore.validation.infer_errors import Uninferable

#: The columns read (``notes`` quote switches that were off).
COLUMNS = ("dp_sharding", "source", "source_table")
#: The profiles whose CPU offload is FSDP1's ``CPUOffload(offload_params=True)``.
FSDP1_PROFILES = ("fsdp", "fms-fsdp", "llm-foundry-2023")
#: Not after ``no`` / ``without`` / ``w/o``; not before ``False`` / ``off`` / ``disabled`` / 0.
_NOT_BEFORE = r"(?<!\bno\s)(?<!\bwithout\s)(?<!w/o\s)"
_NOT_OFF = r"(?!\s*[:=]?\s*(?:false|off|disabled|0)\b)"


def _named(pattern: str) -> re.Pattern[str]:
    return re.compile(_NOT_BEFORE + "(" + pattern + ")" + _NOT_OFF, re.IGNORECASE)


#: Any offload a ``dp_sharding`` cell names (``offload``, ``ZeRO-Offload``, ``CPUOffload``).
CELL_OFFLOAD = _named(r"zero[-_\s]*(?:offload|infinity)|\w*offload\w*")
#: Offload as a run's description (``source``, ``source_table``) names it, narrower than a
#: cell's (s32 readers7's rule): ZeRO-Offload / ZeRO-Infinity, ``CPU offload``, ``with
#: offload``, ``offloaded to CPU``.
SOURCE_OFFLOAD = _named(
    r"zero[-_\s]*(?:offload|infinity)|\b(?:cpu|nvme|optimi[sz]er|param(?:eter)?s?)[-_\s]+"
    r"offload\w*|\bwith\s+(?!no\b|without\b)(?:\w+\s+)?offload\w*|\boffload(?:ing|ed)?\s+"
    r"(?:to|on)\s+(?:the\s+)?(?:cpu|host|nvme)|\boffload_(?:param|optimizer)\b"
)
#: Offload of saved activations (PyTorch ``save_on_cpu``, the FSDP 1T blog's 'Activations CPU
#: Offloading', Megatron-Core's activation offload).
ACTIVATION_OFFLOAD = _named(
    r"\bactivations?[-_\s]+(?:cpu[-_\s]*)?offload\w*|\boffload\w*\s+(?:of\s+)?(?:the\s+)?"
    r"activations?\b|\bsave_on_cpu\b"
)
#: Offload to NVMe (ZeRO-Infinity).
NVME_OFFLOAD = _named(r"\bnvme\b|zero[-_\s]*infinity")
#: Parameter offload (DeepSpeed ``offload_param``, 'parameter(s) CPU offload(ing)').
PARAM_OFFLOAD = _named(r"\boffload_param\b|\bparam(?:eter)?s?[-_\s]+(?:cpu[-_\s]*)?offload\w*")
#: Optimizer offload (DeepSpeed ``offload_optimizer``, ZeRO-Offload, 'optimizer offloaded').
OPTIMIZER_OFFLOAD = _named(
    r"\boffload_optimizer\b|zero[-_\s]*offload|\boptimi[sz]er(?:[-_\s]+states?)?[-_\s]+"
    r"(?:cpu[-_\s]*)?offload\w*"
)
#: A bare ``ZeRO-Offload`` runs ZeRO-2 (Ren et al. 2021, arXiv 2101.06840: ZeRO-Offload
#: partitions gradients and optimizer states as ZeRO-2 does).
ZERO_OFFLOAD_STAGE = 2


def _found(pattern: re.Pattern[str], row: dict[str, str]) -> tuple[str, str] | None:
    """``(column, text)`` of the first column of :data:`COLUMNS` where ``pattern`` matches:
    the whole ``dp_sharding`` cell, else the words matched (a ``source`` is long)."""
    for column in COLUMNS:
        cell = row.get(column, "")
        match = pattern.search(cell)
        if match:
            return column, cell.strip() if column == "dp_sharding" else match.group(1)
    return None


def named_offload(row: dict[str, str], framework: str) -> tuple[dict[str, bool], str]:
    """The offload options ``row`` states for ``framework`` and the note saying so
    (``({}, "")`` when it names none); :class:`Uninferable` for what is not modelled (module
    docstring). The ZeRO stage and the GPU are checked by :func:`check_offload_setup`."""
    found = _found(CELL_OFFLOAD, {"dp_sharding": row.get("dp_sharding", "")}) or _found(
        SOURCE_OFFLOAD, {k: v for k, v in row.items() if k != "dp_sharding"}
    )
    if found is None:
        return {}, ""
    said = f"the {found[0]} column names {found[1]!r}"
    activation = _found(ACTIVATION_OFFLOAD, row)
    if activation is not None:
        raise Uninferable(
            f"the {activation[0]} column names {activation[1]!r}: activation offload to host "
            "memory is not modelled (no cited timing of its saved-activation copies; optimizer "
            "and parameter offload are, stage_explore/analytical/offload.py)"
        )
    nvme = _found(NVME_OFFLOAD, row)
    if nvme is not None:
        raise Uninferable(
            f"the {nvme[0]} column names {nvme[1]!r}: offload to NVMe is not modelled "
            "(expected CPU offload of the optimizer or the parameters)"
        )
    params, optimizer = _found(PARAM_OFFLOAD, row), _found(OPTIMIZER_OFFLOAD, row)
    if framework in FSDP1_PROFILES:
        return {"offload_optimizer": True, "offload_params": True}, (
            f"FSDP1 CPUOffload(offload_params=True): the shards, their gradients and the "
            f"optimizer step on the CPU (offload_params, offload_optimizer; {said})"
        )
    if framework != "deepspeed":
        raise Uninferable(
            f"{said}: CPU offload under the {framework} profile is not modelled (expected "
            "DeepSpeed ZeRO-Offload / offload_param or FSDP1 CPUOffload)"
        )
    if optimizer is None:
        what = "parameter offload without optimizer offload" if params else "offload"
        raise Uninferable(
            f"{said}: DeepSpeed {what} is not modelled (expected optimizer offload, "
            "ZeRO-Offload, with or without parameter offload)"
        )
    options = {"offload_optimizer": True, **({"offload_params": True} if params else {})}
    return options, (
        "DeepSpeed CPU offload: the optimizer on the CPU (DeepSpeedCPUAdam, offload_optimizer)"
        + (", ZeRO-3's parameter shards in host memory (offload_params)" if params else "")
        + f" ({said})"
    )


def check_offload_setup(options: dict[str, bool], zero: int, system: str) -> None:
    """:class:`Uninferable` when the offload ``options`` do not run at ``zero`` or the preset
    ``system``'s GPU has no cited host-device bandwidth (the backend's errors, as reasons)."""
    if not options:
        return
    if options.get("offload_params") and zero < 3:
        raise Uninferable(f"parameter offload needs ZeRO-3 / FSDP full sharding, not zero {zero}")
    if zero < 1:
        raise Uninferable("optimizer offload needs ZeRO >= 1 (DeepSpeed ZeRO-Offload), not zero 0")
    try:
        host_device_bytes_per_s(load_system(system))
    except ConfigError as error:
        raise Uninferable(str(error)) from None


def strip_offload(cell: str) -> tuple[str, bool]:
    """A ``dp_sharding`` cell without its offload words, for the ZeRO stage it states, and
    whether it was a bare ``ZeRO-Offload`` (ZeRO-2, :data:`ZERO_OFFLOAD_STAGE`)."""
    bare = bool(re.fullmatch(r"\s*(?:deepspeed\s+)?zero[-_\s]*offload\s*", cell, re.IGNORECASE))
    text = re.sub(
        r"(?:\s*(?:\+|with|and|,)\s*)?(?:zero[-_\s]*offload|\w*offload\w*)(?:\s+(?:to\s+)?cpu)?",
        " ",
        cell,
        flags=re.IGNORECASE,
    )
    text = re.sub(r"\b(?:cpu|parameters?|params?|optimizer|activations?)\s+(?=\s|$)", " ", text)
    return re.sub(r"\s+", " ", text).strip(), bare
