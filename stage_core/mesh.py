"""Symbols and device meshes.

Model dims (batch, sequence, hidden, …) and mesh axes (dp, tp, cp, pp, ep, …) are sympy
symbols. A :class:`Mesh` is an ordered set of named axes with sizes that are integers or
symbolic expressions; the order is the order in which axes map to rank ids (the *last* axis
varies fastest, so ``Mesh.of(pp=4, dp=8, tp=8)`` puts tp innermost).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

import sympy

from stage_core.errors import ShardingError

Size: TypeAlias = "int | sympy.Expr"


class Axis(StrEnum):
    """The mesh axes STAGE knows by name; users may name others."""

    DP = "dp"
    TP = "tp"
    CP = "cp"
    PP = "pp"
    EP = "ep"


def symbol(name: str) -> sympy.Symbol:
    """The positive-integer sympy symbol for a dim or an axis called ``name``."""
    return sympy.Symbol(name, integer=True, positive=True)


def as_int(value: Size, what: str) -> int:
    """``value`` as an exact ``int``; a :class:`ShardingError` if it is symbolic or fractional."""
    if isinstance(value, int):
        return value
    simplified = sympy.nsimplify(value)
    if simplified.is_Integer:
        return int(simplified)
    raise ShardingError(f"{what} must be an exact integer after binding, but got {value}")


@dataclass(frozen=True, slots=True)
class MeshAxis:
    """One named axis of a mesh and its size (an int, or a symbol when unbound)."""

    name: str
    size: Size

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ShardingError(f"mesh axis name must be an identifier, but got {self.name!r}")
        if isinstance(self.size, int) and self.size < 1:
            raise ShardingError(f"mesh axis {self.name!r} must have size >= 1, but got {self.size}")


@dataclass(frozen=True, slots=True)
class Mesh:
    """An ordered set of named axes; rank ids are row-major over the axes (last fastest)."""

    axes: tuple[MeshAxis, ...]

    def __post_init__(self) -> None:
        names = [axis.name for axis in self.axes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ShardingError(f"mesh axes must be unique, but {duplicates} appear more than once")

    @classmethod
    def of(cls, **sizes: Size) -> Mesh:
        """``Mesh.of(dp=4, tp=8)``: axes in keyword order."""
        return cls(tuple(MeshAxis(name, size) for name, size in sizes.items()))

    @classmethod
    def symbolic(cls, names: Iterable[str]) -> Mesh:
        """A mesh whose axis sizes are the symbols of the same names."""
        return cls(tuple(MeshAxis(name, symbol(name)) for name in names))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(axis.name for axis in self.axes)

    def __contains__(self, name: object) -> bool:
        return any(axis.name == name for axis in self.axes)

    def size(self, name: str) -> Size:
        """The size of axis ``name``."""
        for axis in self.axes:
            if axis.name == name:
                return axis.size
        raise ShardingError(f"axis {name!r} is not in the mesh {self}")

    def product(self, names: Iterable[str]) -> Size:
        """The product of the sizes of ``names`` (1 for none)."""
        result: Size = 1
        for name in names:
            result = result * self.size(name)
        return result

    def bind(self, values: Mapping[str, int]) -> Mesh:
        """Replace symbolic axis sizes by the integers in ``values``."""
        axes = []
        for axis in self.axes:
            size = axis.size
            if not isinstance(size, int):
                size = size.subs({symbol(k): v for k, v in values.items()})
                size = (
                    as_int(size, f"size of mesh axis {axis.name!r}")
                    if not size.free_symbols
                    else size
                )
            axes.append(MeshAxis(axis.name, size))
        return Mesh(tuple(axes))

    @property
    def world_size(self) -> Size:
        return self.product(self.names)

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` on every axis (integer sizes only)."""
        sizes = [as_int(axis.size, f"size of axis {axis.name!r}") for axis in self.axes]
        if not 0 <= rank < math.prod(sizes):
            raise ShardingError(f"rank {rank} is outside the mesh {self}")
        coords: dict[str, int] = {}
        for axis, size in zip(reversed(self.axes), reversed(sizes), strict=True):
            coords[axis.name] = rank % size
            rank //= size
        return {axis.name: coords[axis.name] for axis in self.axes}

    def rank_of(self, coords: Mapping[str, int]) -> int:
        """The rank id at ``coords`` (missing axes are 0)."""
        rank = 0
        for axis in self.axes:
            size = as_int(axis.size, f"size of axis {axis.name!r}")
            rank = rank * size + coords.get(axis.name, 0)
        return rank

    def group(self, rank: int, axes: Iterable[str]) -> tuple[int, ...]:
        """The sorted ranks that share every coordinate of ``rank`` except those on ``axes``."""
        axes = tuple(axes)
        coords = self.coordinates(rank)
        members = [coords]
        for name in axes:
            size = as_int(self.size(name), f"size of axis {name!r}")
            members = [{**c, name: i} for c in members for i in range(size)]
        return tuple(sorted(self.rank_of(c) for c in members))

    def __str__(self) -> str:
        return "{" + ", ".join(f"{axis.name}={axis.size}" for axis in self.axes) + "}"
