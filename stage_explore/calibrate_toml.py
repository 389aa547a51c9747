"""The fitted system of ``stage calibrate`` as a TOML file (split from
:mod:`~stage_explore.calibrate`, s33 simplify).

Holds :func:`system_toml` (the fitted system as TOML that
:func:`~stage_explore.system.load_system` reads, with a comment per fitted network dim) and
:func:`calibrated_name` (the fitted system's name, ``<name>-calibrated``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stage_explore.calibrate import Fit, network_default
from stage_explore.system.model import System


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _table(name: str, table: Mapping[str, Any], array: bool = False) -> list[str]:
    """A TOML table (scalars first, then its sub-tables) from a ``to_dict`` mapping."""
    lines = [f"[[{name}]]" if array else f"[{name}]"] if name else []
    subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
    for key, value in table.items():
        if value is not None and key not in subtables and not _is_table_list(value):
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in subtables.items():
        lines += ["", *_table(f"{name}.{key}" if name else key, value)]
    for key, value in table.items():
        if _is_table_list(value):
            for item in value:
                lines += ["", *_table(key, item, array=True)]
    return lines


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


#: What a calibrated system's name ends in (``h100-80gb`` fitted is ``h100-80gb-calibrated``).
CALIBRATED_SUFFIX = "-calibrated"


def calibrated_name(name: str) -> str:
    """The name of ``name`` once calibrated: ``<name>-calibrated`` (once: a calibrated system
    fitted again keeps its name), so ``stage eval`` on the fitted file does not print the
    preset's name as if its constants were the preset's."""
    return name if name.endswith(CALIBRATED_SUFFIX) else f"{name}{CALIBRATED_SUFFIX}"


def system_toml(base: System, fitted: Fit, header: Sequence[str], system_name: str = "") -> str:
    """The fitted system as TOML (``load_system`` reads it), named ``name`` when given,
    ``header`` lines as comments (then one line per fitted network dim: its link and achieved
    fraction)."""
    lines = [f"# {line}" for line in header]
    for i, dim in enumerate(base.network):
        name = f"network.{dim.name or i}"
        if name in fitted.values:
            how = (
                "its bus_efficiency"
                if hasattr(dim, "bus_efficiency")
                else f"bandwidth_bytes_per_s = link x fitted / {network_default(base, i)}"
            )
            lines.append(
                f"# {name}: {fitted.values[name]:.4f} of the link's "
                f"{dim.bandwidth_bytes_per_s:g} B/s, written as {how}"
            )
    table = fitted.system.to_dict()
    if system_name:
        table["name"] = system_name
    return "\n".join([*lines, "", *_table("", table)]) + "\n"
