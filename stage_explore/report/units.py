"""How a report shows a column: its label with the unit, and the factor to that unit.

Contents:
    :class:`Display`        a label for axes, a short header for tables, and a scale factor.
    :func:`display`         the :class:`Display` of a column (bytes become GiB, fractions stay).
    :func:`tick_label`      a readable tick label for a value on an axis with a given step.
    :func:`in_display_units` the columns of a frame scaled to their display units.

Records keep SI base units (seconds, bytes, FLOPs); a report shows memory in GiB (2^30 bytes,
as ``nvidia-smi`` and the framework allocators report it), times in seconds and costs in the
currency of the system's ``price_per_gpu_hour``, which is USD for every shipped preset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

GIB = float(1 << 30)


@dataclass(frozen=True, slots=True, kw_only=True)
class Display:
    """A column as a report shows it: ``value * scale`` under ``label`` (axes) or ``header``."""

    label: str
    header: str
    scale: float = 1.0


_DISPLAYS: dict[str, Display] = {
    "step_time_s": Display(label="step time (s)", header="step time (s)"),
    "peak_memory_bytes": Display(
        label="peak memory per GPU (GiB)", header="peak memory (GiB)", scale=1 / GIB
    ),
    "peak_memory_gib": Display(label="peak memory per GPU (GiB)", header="peak memory (GiB)"),
    "memory_capacity_bytes": Display(
        label="memory capacity per GPU (GiB)", header="capacity (GiB)", scale=1 / GIB
    ),
    "cost_per_step": Display(label="cost per step (USD)", header="USD per step"),
    "cost_per_million_tokens": Display(
        label="cost per million tokens (USD)", header="USD per M tokens"
    ),
    "mfu": Display(label="MFU (% of peak FLOP/s)", header="MFU (%)", scale=100.0),
    "hfu": Display(label="HFU (% of peak FLOP/s)", header="HFU (%)", scale=100.0),
    "tokens_per_s_per_gpu": Display(
        label="throughput (tokens/s per GPU)", header="tokens/s per GPU"
    ),
    "eval_s": Display(label="evaluation time (s)", header="eval (s)"),
    "time_to_first_token_s": Display(label="time to first token (s)", header="TTFT (s)"),
    "time_per_output_token_s": Display(label="time per output token (s)", header="TPOT (s)"),
    "tokens_per_s": Display(label="output tokens/s", header="tokens/s"),
    "requests_per_s": Display(label="requests/s", header="requests/s"),
}


#: Unit suffixes of column names (searched hardware parameters ``hw_…`` among them), longest
#: first: the name without the suffix, the unit shown, the factor to it.
_SUFFIXES: tuple[tuple[str, str, float], ...] = (
    ("_bytes_per_s", "GB/s", 1e-9),
    ("_flops_per_s", "TFLOP/s", 1e-12),
    ("_bytes", "GiB", 1 / GIB),
    ("_gbps", "Gb/s", 1.0),
    ("_s", "s", 1.0),
)


def display(column: str) -> Display:
    """The label, table header and scale of ``column`` (the name itself when it has no unit)."""
    known = _DISPLAYS.get(column)
    if known is not None:
        return known
    if column.startswith("refined_"):  # a two-stage study's second backend
        base = display(column.removeprefix("refined_"))
        return Display(label=f"{base.label}, re-evaluated", header=f"{base.header} [2nd]",
                       scale=base.scale)  # fmt: skip
    if column.startswith("breakdown_"):
        name = column.removeprefix("breakdown_").replace("_", " ")
        return Display(label=f"{name} (s)", header=f"{name} (s)")
    for suffix, unit, scale in _SUFFIXES:
        if column.endswith(suffix):
            name = column.removesuffix(suffix)
            return Display(label=f"{name} ({unit})", header=f"{name} ({unit})", scale=scale)
    return Display(label=column, header=column)


def tick_label(value: float, step: float) -> str:
    """``value`` with as many decimals as the tick ``step`` needs, thousands grouped."""
    if value == 0:
        return "0"
    if abs(value) >= 1e7 or abs(value) < 1e-4:
        return f"{value:.3g}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:,.{min(decimals, 6)}f}"


def in_display_units(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame[columns]`` with every column that has a unit scaled to it (MFU in %, …)."""
    shown = frame[list(columns)].copy()
    for name in columns:
        scale = display(name).scale
        if scale != 1.0:
            shown[name] = shown[name].astype("float64") * scale
    return shown
