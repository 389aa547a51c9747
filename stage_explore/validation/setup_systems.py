"""The system a published run ran on: a preset or system file with the figures its row states
differently (split from :mod:`~stage_explore.validation.setups`, s33 simplify).

Holds :data:`SYSTEM_OVERRIDES` (the figures a case may override), :func:`derived_name` (the
:attr:`~stage_explore.validation.setups.Case.system` name of a system with overrides),
:func:`derive_system` (a loaded system with them applied) and :func:`case_system` (a case's
system, loaded and derived).
"""

from __future__ import annotations

from dataclasses import replace

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim, System
from stage_explore.validation.setups import Case

#: The system figures a case may override: field → what it sets.
SYSTEM_OVERRIDES = {
    "scale_out_bandwidth_bytes_per_s": "the scale-out (last) network dim's bandwidth per GPU "
    "(and its NCCL channels, 2 per NIC at the dim's per-NIC rate)",
    "scale_up_size": "the scale-up (first) network dim's GPUs: an NVLink domain the job's "
    "placement leaves smaller than the preset's (a Slurm segment of fewer trays than a rack)",
    "memory_bytes": "the accelerator's memory capacity per GPU, in bytes: a stated memory no "
    "preset of the part has (its HBM bandwidth, clocks and peaks stay the system's; s33 hbmcap)",
}


def derived_name(base: str, overrides: tuple[tuple[str, float], ...]) -> str:
    """The :attr:`~stage_explore.validation.setups.Case.system` of ``base`` with
    ``overrides``: ``h100-80gb+scale_out=6.25GB/s``, ``gb200-nvl72+scale_up=64``,
    ``h100-80gb+memory=96GiB``."""
    return "+".join([base, *(_part(k, v) for k, v in overrides)])


def _part(field_name: str, value: float) -> str:
    """One override's part of :func:`derived_name`."""
    if field_name == "scale_up_size":
        return f"scale_up={int(value)}"
    if field_name == "memory_bytes":
        return f"memory={value / 2**30:g}GiB"
    return f"scale_out={value / 1e9:g}GB/s"


def _channels(dim: NetworkDim, bandwidth: float) -> int | None:
    """The NCCL channels of ``dim`` at ``bandwidth`` per GPU: its NICs at the dim's per-NIC
    rate (the NIC count the stated rate gives; the source states no NIC), 2 channels per NIC
    ("DGX with 8 NICs ... it would use 16 SMs", NVIDIA/nccl#689; one per NIC and direction,
    NVIDIA/nccl#1041), as ``systems/ibm-a100-400g.toml`` reads its 400 Gb/s per node: the
    preset's count times the bandwidth ratio, at least one NIC (2) and at most the preset's
    (a faster link is read as faster NICs, not more)."""
    if dim.nccl_channels is None:
        return None
    scaled = round(dim.nccl_channels * bandwidth / dim.bandwidth_bytes_per_s)
    return max(2, min(dim.nccl_channels, scaled))


def _resized(dim: NetworkDim, size: int) -> NetworkDim:
    """``dim`` with ``size`` GPUs: its per-group-size entries (``bus_efficiency_by_ranks``,
    ``nccl_channels_by_ranks``) for groups larger than the new size dropped, as no group of the
    smaller domain has them."""
    return replace(
        dim,
        size=size,
        bus_efficiency_by_ranks=tuple(p for p in dim.bus_efficiency_by_ranks if p[0] <= size),
        nccl_channels_by_ranks=tuple(p for p in dim.nccl_channels_by_ranks if p[0] <= size),
    )


def derive_system(system: System, overrides: tuple[tuple[str, float], ...]) -> System:
    """``system`` with ``overrides`` (:data:`SYSTEM_OVERRIDES`) applied, renamed as
    :func:`derived_name` names it; without overrides, ``system`` itself. A scale-out bandwidth
    also sets the dim's NCCL channels (:func:`_channels`); a memory capacity sets only the
    accelerator's ``memory_bytes`` (s33 hbmcap)."""
    if not overrides:
        return system
    network, accelerator = list(system.network), system.accelerator
    for field_name, value in overrides:
        if field_name not in SYSTEM_OVERRIDES:
            known = list(SYSTEM_OVERRIDES)
            raise ConfigError(f"unknown system override {field_name!r}; known: {known}")
        if field_name == "memory_bytes":
            if not value > 0:
                raise ConfigError(f"memory_bytes {value:g}: expected a positive capacity in bytes")
            accelerator = replace(accelerator, memory_bytes=int(value))
            continue
        if len(network) < 2:
            raise ConfigError(f"system {system.name!r} has no scale-out dim to set {field_name}")
        if field_name == "scale_up_size":
            if not 1 <= int(value) <= network[0].size:
                raise ConfigError(
                    f"scale_up_size {value:g}: expected 1 to {system.name!r}'s "
                    f"{network[0].size} GPUs per {network[0].name} domain"
                )
            network[0] = _resized(network[0], int(value))
            continue
        dim = network[-1]
        network[-1] = replace(dim, bandwidth_bytes_per_s=value, nccl_channels=_channels(dim, value))
    return replace(
        system, name=derived_name(system.name, overrides), network=tuple(network),
        accelerator=accelerator,
    )  # fmt: skip


def case_system(case: Case) -> System:
    """The system ``case`` runs on: its
    :attr:`~stage_explore.validation.setups.Case.system_source` loaded, with its overrides."""
    return derive_system(load_system(case.system_source), case.system_overrides)
