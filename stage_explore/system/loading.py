"""Reading systems from TOML: strict parsing, presets, and :func:`load_system`.

Holds:

- :func:`load_system` — a preset name (``"h100-80gb"``) or the path of a TOML file;
- :func:`load_system_file` and :func:`system_from_mapping` — the file and the already-parsed
  table (e.g. the ``[system]`` table of a study file);
- :func:`list_presets` — the names of the shipped presets (``presets/*.toml``).

Every key is checked: an unknown key or a value of the wrong type is a one-line
:class:`~stage_core.errors.ConfigError` naming the file, the line where the key appears when it
can be found, the key, and what was expected.

File layout (see the presets for complete, sourced examples)::

    name = "my-cluster"                # optional: defaults to the file name
    description = "..."                # optional
    price_per_gpu_hour = 2.5           # optional, any currency
    power_w = 700                      # optional, per GPU

    [accelerator]
    name = "H100-SXM5-80GB"
    memory_bytes = 85899345920         # an integer
    memory_bandwidth_bytes_per_s = 3.35e12
    [accelerator.peak_flops_per_s]     # dense, per dtype
    bf16 = 989e12
    [accelerator.efficiency]           # optional
    matmul_peak = 0.75
    matmul_half_saturation_flops = 3e9
    memory = 0.85

    [[network]]                        # one table per dim, scale-up domain first
    name = "nvlink"
    size = 8
    topology = "switch"                # ring | switch | fully_connected
    bandwidth_bytes_per_s = 450e9      # per rank, per direction
    latency_s = 1e-6
    [network.algorithms]               # optional: ring | direct | halving_doubling
    all_to_all = "direct"
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_core.text_files import read_text_file
from stage_explore.system.accelerator import Accelerator, EfficiencyModel, KernelModel
from stage_explore.system.model import (
    CollectiveAlgorithm,
    CollectiveAlgorithms,
    NetworkDim,
    System,
    Topology,
)

_T = TypeVar("_T")
_V = TypeVar("_V")
_E = TypeVar("_E", bound=StrEnum)

_TOP_KEYS = ("name", "description", "price_per_gpu_hour", "power_w", "accelerator", "network")
_ACCELERATOR_KEYS = (
    "name",
    "memory_bytes",
    "memory_bandwidth_bytes_per_s",
    "peak_flops_per_s",
    "efficiency",
    "kernels",
)
_KERNEL_KEYS = (
    "sm_count",
    "gemm_tile",
    "gemm_k_overhead",
    "gemm_tile_by_dtype",
    "gemm_efficiency",
    "fp8_fast_accumulation",
    "attention_forward",
    "attention_backward",
    "attention_half_keys",
    "attention_head_dim_half",
    "attention_kernels",
    "attention_noncausal",
    "attention_grids",
    "grouped_gemm_group_s",
    "grouped_kernel_group_s",
    "eager_memory",
    "ssd_memory",
    "memory_kernel_s",
    "persistent_gemm",
)
_EFFICIENCY_KEYS = ("matmul_peak", "matmul_half_saturation_flops", "memory")
_DIM_KEYS = (
    "name",
    "size",
    "topology",
    "bandwidth_bytes_per_s",
    "latency_s",
    "algorithms",
    "bus_efficiency",
    "collective_overhead_s",
    "small_message_overhead_s",
    "bus_efficiency_by_ranks",
    "bus_efficiency_scaling",
    "nccl_channels",
    "nccl_channels_by_ranks",
    "nvls_efficiency",
)
_ALGORITHM_KEYS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


class _Table:
    """One TOML table being read, with its dotted path, for precise error messages."""

    def __init__(self, data: Mapping[str, Any], path: str, where: _Where) -> None:
        self.data = data
        self.path = path
        self.where = where

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, message: str) -> ConfigError:
        return ConfigError(
            f"{self.where.locate(self.path, name)}: key `{self.key(name)}` {message}"
        )

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for name in self.data:
            if name not in allowed:
                raise self.fail(name, f"is unknown; expected one of: {', '.join(allowed)}")

    def has(self, name: str) -> bool:
        return name in self.data

    def text(self, name: str, default: str | None = None) -> str:
        value = self._get(name, default)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, but got {value!r}")
        return value

    def integer(self, name: str) -> int:
        value = self._get(name, None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, but got {value!r}")
        return value

    def flag(self, name: str) -> bool:
        value = self._get(name, None)
        if not isinstance(value, bool):
            raise self.fail(name, f"must be true or false, but got {value!r}")
        return value

    def number(self, name: str) -> float:
        value = self._get(name, None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(name, f"must be a number, but got {value!r}")
        return float(value)

    def table(self, name: str) -> _Table:
        value = self._get(name, None)
        if not isinstance(value, Mapping):
            raise self.fail(name, f"must be a table, but got {value!r}")
        return _Table(value, self.key(name), self.where)

    def _get(self, name: str, default: Any) -> Any:
        if name in self.data:
            return self.data[name]
        if default is not None:
            return default
        raise ConfigError(f"{self.where.locate(self.path, None)}: missing key `{self.key(name)}`")


class _Where:
    """Finds the line of a key in the TOML text, when the text is known."""

    def __init__(self, source: str, text: str | None) -> None:
        self.source = source
        self.lines = text.splitlines() if text is not None else []

    def locate(self, table_path: str, key: str | None) -> str:
        start = self._table_start(table_path)
        if key is None or not self.lines:
            return self.source if start is None else f"{self.source}:{start + 1}"
        pattern = re.compile(rf"^\s*(\"?{re.escape(key)}\"?\s*=|\[+[^\]]*\b{re.escape(key)}\]+)")
        for index in range(start or 0, len(self.lines)):
            if pattern.match(self.lines[index]):
                return f"{self.source}:{index + 1}"
        return self.source

    def _table_start(self, table_path: str) -> int | None:
        """The line index after which the keys of ``table_path`` appear (arrays of tables too)."""
        if not table_path or not self.lines:
            return None
        match = re.fullmatch(r"network\[(\d+)\](.*)", table_path)
        if match is None:
            header = f"[{table_path}]"
            return next((i for i, line in enumerate(self.lines) if line.strip() == header), None)
        wanted = int(match.group(1))
        seen = -1
        for index, line in enumerate(self.lines):
            if line.strip().startswith("[[network]]"):
                seen += 1
                if seen == wanted:
                    return index
        return None


def _efficiency(table: _Table) -> EfficiencyModel:
    table.check_keys(_EFFICIENCY_KEYS)
    values = {name: table.number(name) for name in _EFFICIENCY_KEYS if table.has(name)}
    return _build(table, EfficiencyModel, values)


def _accelerator(table: _Table) -> Accelerator:
    table.check_keys(_ACCELERATOR_KEYS)
    peaks_table = table.table("peak_flops_per_s")
    values: dict[str, Any] = {
        "name": table.text("name"),
        "peak_flops_per_s": {dtype: peaks_table.number(dtype) for dtype in peaks_table.data},
        "memory_bytes": table.integer("memory_bytes"),
        "memory_bandwidth_bytes_per_s": table.number("memory_bandwidth_bytes_per_s"),
    }
    if table.has("efficiency"):
        values["efficiency"] = _efficiency(table.table("efficiency"))
    if table.has("kernels"):
        values["kernels"] = _kernels(table.table("kernels"))
    return _build(table, Accelerator, values)


#: The ``[accelerator.kernels]`` numbers a preset may leave out (the :class:`KernelModel`
#: field's default then holds).
_OPTIONAL_KERNEL_NUMBERS = (
    "fp8_fast_accumulation",
    "grouped_gemm_group_s",
    "grouped_kernel_group_s",
    "eager_memory",
    "ssd_memory",
    "memory_kernel_s",
)


def _kernels(table: _Table) -> KernelModel:
    table.check_keys(_KERNEL_KEYS)
    tile = table._get("gemm_tile", None)
    if not isinstance(tile, list):
        raise table.fail("gemm_tile", f"must be a list of two integers, but got {tile!r}")
    gemm = table.table("gemm_efficiency")
    values: dict[str, Any] = {
        "sm_count": table.integer("sm_count"),
        "gemm_tile": tuple(tile),
        "gemm_k_overhead": table.integer("gemm_k_overhead"),
        "gemm_efficiency": {dtype: gemm.number(dtype) for dtype in gemm.data},
        **{
            name: table.number(name)
            for name in (
                "attention_forward",
                "attention_backward",
                "attention_half_keys",
                "attention_head_dim_half",
            )
        },
    }
    if table.has("gemm_tile_by_dtype"):
        tiles = table.table("gemm_tile_by_dtype")
        values["gemm_tile_by_dtype"] = {dtype: tiles._get(dtype, None) for dtype in tiles.data}
    values.update(
        (name, table.number(name)) for name in _OPTIONAL_KERNEL_NUMBERS if table.has(name)
    )
    if table.has("persistent_gemm"):
        values["persistent_gemm"] = table.flag("persistent_gemm")
    if table.has("attention_kernels"):
        named = table.table("attention_kernels")
        kernels = {}
        for kernel, pair in named.data.items():
            if not isinstance(pair, list) or len(pair) not in (2, 3):
                raise named.fail(
                    kernel,
                    f"must be [forward, backward] or [forward, backward, half_keys], "
                    f"but got {pair!r}",
                )
            kernels[kernel] = tuple(pair)
        values["attention_kernels"] = kernels
    if table.has("attention_noncausal"):
        ratios = table.table("attention_noncausal")
        values["attention_noncausal"] = {kernel: ratios.number(kernel) for kernel in ratios.data}
    if table.has("attention_grids"):
        grids = table.table("attention_grids")
        values["attention_grids"] = {kernel: grids.text(kernel) for kernel in grids.data}
    return _build(table, KernelModel, values)


def _build(table: _Table, factory: Callable[..., _T], values: dict[str, Any]) -> _T:
    """``factory(**values)``, with the table's location added to a validation error."""
    try:
        return factory(**values)
    except ConfigError as error:
        raise ConfigError(f"{table.where.locate(table.path, None)}: {error}") from None


def _algorithms(table: _Table) -> CollectiveAlgorithms:
    table.check_keys(_ALGORITHM_KEYS)
    chosen = {
        name: _member(table, name, CollectiveAlgorithm)
        for name in _ALGORITHM_KEYS
        if table.has(name)
    }
    return CollectiveAlgorithms(**chosen)


def _member(table: _Table, name: str, kind: type[_E]) -> _E:
    """The member of the enum ``kind`` whose value the table's text ``name`` is; any other
    text fails naming the key and every value."""
    value = table.text(name)
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(member.value for member in kind)
        raise table.fail(name, f"must be one of {known}, but got {value!r}") from None


def _network_dim(table: _Table) -> NetworkDim:
    table.check_keys(_DIM_KEYS)
    topology = _member(table, "topology", Topology)
    values: dict[str, Any] = {
        "name": table.text("name", ""),
        "size": table.integer("size"),
        "topology": topology,
        "bandwidth_bytes_per_s": table.number("bandwidth_bytes_per_s"),
        "latency_s": table.number("latency_s"),
    }
    if table.has("algorithms"):
        values["algorithms"] = _algorithms(table.table("algorithms"))
    for key in (
        "bus_efficiency",
        "collective_overhead_s",
        "small_message_overhead_s",
        "nvls_efficiency",
    ):
        if data_has_value(table, key):
            values[key] = table.number(key)
    if table.has("bus_efficiency_by_ranks"):
        values["bus_efficiency_by_ranks"] = _by_ranks(table.table("bus_efficiency_by_ranks"))
    if table.has("bus_efficiency_scaling"):
        values["bus_efficiency_scaling"] = _by_ranks(table.table("bus_efficiency_scaling"))
    if data_has_value(table, "nccl_channels"):
        values["nccl_channels"] = table.integer("nccl_channels")
    if table.has("nccl_channels_by_ranks"):
        values["nccl_channels_by_ranks"] = _channels_by_ranks(table.table("nccl_channels_by_ranks"))
    return _build(table, NetworkDim, values)


def _rank_keyed(table: _Table, read: Callable[[str], _V]) -> tuple[tuple[int, _V], ...]:
    """``{"2" = a, "8" = b}`` → ``((2, read("2")), (8, read("8")))``: rank counts as keys."""
    pairs = []
    for key in table.data:
        if not key.isdigit():
            raise table.fail(key, f"must be a rank count (an integer), but got {key!r}")
        pairs.append((int(key), read(key)))
    return tuple(sorted(pairs))


def _channels_by_ranks(table: _Table) -> tuple[tuple[int, int], ...]:
    """``{"2" = 32, "4" = 24}`` → ``((2, 32), (4, 24))``: rank counts as keys, integers."""
    return _rank_keyed(table, table.integer)


def _by_ranks(table: _Table) -> tuple[tuple[int, float], ...]:
    """``{"2" = 0.64, "8" = 0.75}`` → ``((2, 0.64), (8, 0.75))``: rank counts as keys."""
    return _rank_keyed(table, table.number)


def data_has_value(table: _Table, key: str) -> bool:
    """``key`` is present and not None (a to_dict() round trip writes no None)."""
    return table.data.get(key) is not None


def system_from_mapping(
    data: Mapping[str, Any], *, source: str = "<system>", text: str | None = None, name: str = ""
) -> System:
    """A :class:`System` from a parsed TOML table (``text``, if given, locates keys by line)."""
    where = _Where(source, text)
    top = _Table(data, "", where)
    top.check_keys(_TOP_KEYS)
    network = data.get("network")
    if not isinstance(network, list) or not network:
        raise top.fail("network", "must be a non-empty array of tables ([[network]])")
    dims = []
    for index, entry in enumerate(network):
        if not isinstance(entry, Mapping):
            raise top.fail("network", f"entry {index} must be a table, but got {entry!r}")
        dims.append(_network_dim(_Table(entry, f"network[{index}]", where)))
    values: dict[str, Any] = {
        "name": top.text("name", name or "system"),
        "description": top.text("description", "") if top.has("description") else "",
        "accelerator": _accelerator(top.table("accelerator")),
        "network": tuple(dims),
    }
    for key in ("price_per_gpu_hour", "power_w"):
        if data.get(key) is not None:  # None: absent (a to_dict() round trip)
            values[key] = top.number(key)
    return _build(top, System, values)


def load_system_file(path: str | os.PathLike[str]) -> System:
    """Read the system TOML file at ``path``."""
    file = Path(path)
    text = read_text_file(file, "system file", "a TOML file")
    return _parse(text, str(file), file.stem)


@functools.lru_cache(maxsize=128)
def _parse(text: str, source: str, name: str) -> System:
    """The system ``text`` describes (``source`` and ``name`` as :func:`system_from_mapping`
    takes them).

    Memoised on the whole key, the file's text included: ``validate`` loads the same dozen
    presets and data-folder system files ~3,750 times (every case, every inferred setup), and
    parsing is ~2.4 ms a file, reading it ~0.05 ms. Callers still read the file every time, so
    an edited file (any byte) is a new key and parsed afresh; no path or mtime is trusted, and
    an error is never memoised (it is raised again, the same line, on every call). The
    :class:`System` returned is frozen and shared, as :func:`~stage_explore.search.design`'s
    loader memo already shares it between a study's candidates."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: invalid TOML: {error}") from None
    return system_from_mapping(data, source=source, text=text, name=name)


def list_presets() -> tuple[str, ...]:
    """The names of the shipped system presets."""
    folder = resources.files("stage_explore.system").joinpath("presets")
    names = [
        entry.name[: -len(".toml")] for entry in folder.iterdir() if entry.name.endswith(".toml")
    ]
    return tuple(sorted(names))


def load_system(name_or_path: str | os.PathLike[str]) -> System:
    """A preset by name (see :func:`list_presets`) or a system TOML file by path."""
    expect(name_or_path, (str, os.PathLike), "system", "a preset name, e.g. 'h100-80gb', or a path")
    candidate = os.fspath(name_or_path)
    if candidate.endswith(".toml") or os.sep in candidate or Path(candidate).is_file():
        return load_system_file(candidate)
    presets = list_presets()
    if candidate not in presets:
        raise ConfigError(
            f"unknown system {candidate!r}: expected a preset ({', '.join(presets)}) "
            "or the path of a .toml file"
        )
    resource = resources.files("stage_explore.system").joinpath("presets", f"{candidate}.toml")
    return _parse(resource.read_text(encoding="utf-8"), f"preset {candidate}", candidate)
