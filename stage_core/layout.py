"""Sharding layouts and their notation.

A :class:`Layout` gives, for each tensor dim, the mesh axes that partition it (outermost first)
and the set of axes over which the tensor is a partial sum; every other axis replicates it.
Notation (STAGE paper): ``x[B/dp, S/(cp*tp), H @ 1/tp]`` — B partitioned over dp, S over cp
then tp (cp outer: the rank at (c, t) holds block ``c·tp + t``), and a partial sum over tp.
The partial-sum mark belongs to the whole tensor; it may be written on any dim and is printed
on the last one. The local shape is derived, never written by hand.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy
from sympy.parsing.sympy_parser import (
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from stage_core.errors import ShardingError
from stage_core.mesh import Mesh, Size, symbol

_TRANSFORMS = (*standard_transformations, implicit_multiplication_application)
_AXES_RE = re.compile(r"^\(?\s*([A-Za-z_]\w*(?:\s*\*\s*[A-Za-z_]\w*)*)\s*\)?$")
_NAME_RE = re.compile(r"^\s*([A-Za-z_]\w*)?\s*\[(.*)\]\s*$", re.DOTALL)


@functools.lru_cache(maxsize=1024)
def dim_size(text: str) -> sympy.Expr:
    """The symbolic size of a dim written as ``text`` (``B``, ``4H``, ``4*H``, ``S/2``);
    memoised: a pure function of the text, parsed for every layout a derivation builds."""
    names = set(re.findall(r"[A-Za-z_]\w*", text))
    local = {name: symbol(name) for name in names}
    try:
        expr = parse_expr(text, local_dict=local, transformations=_TRANSFORMS)
    except Exception as error:  # sympy raises many kinds for bad text
        raise ShardingError(f"cannot read the dim {text!r}: {error}") from None
    if not isinstance(expr, sympy.Expr):
        raise ShardingError(f"the dim {text!r} is not an expression")
    return expr


@functools.lru_cache(maxsize=4096)
def simplified(expr: sympy.Expr) -> sympy.Expr:
    """``sympy.simplify(expr)``, memoised: a pure function of the (immutable) expression, and
    a symbolic derivation simplifies the same few sizes hundreds of times."""
    result: sympy.Expr = sympy.simplify(expr)
    return result


@dataclass(frozen=True, slots=True)
class Layout:
    """A tensor's dims, the axes partitioning each dim, and its partial-sum axes."""

    dims: tuple[str, ...]
    shards: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()
    name: str = ""
    sizes: tuple[sympy.Expr, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if len(self.shards) != len(self.dims):
            raise ShardingError(
                f"layout {self.name or 'tensor'} has {len(self.dims)} dims but "
                f"{len(self.shards)} shard entries"
            )
        if not self.sizes:
            object.__setattr__(self, "sizes", tuple(dim_size(d) for d in self.dims))
        used: list[str] = [axis for axes in self.shards for axis in axes]
        twice = sorted({axis for axis in used if used.count(axis) > 1})
        if twice:
            raise ShardingError(
                f"invalid layout {self}: axis {twice[0]!r} partitions more than once"
            )
        if len(set(self.partial)) != len(self.partial):
            raise ShardingError(f"invalid layout {self}: a partial-sum axis is repeated")
        both = sorted(set(used) & set(self.partial))
        if both:
            raise ShardingError(
                f"invalid layout {self}: axis {both[0]!r} both partitions a dim "
                "and is a partial sum"
            )

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, mesh: Mesh | None = None) -> Layout:
        """Parse ``x[B/dp, S/(cp*tp), H @ 1/tp]`` (the name is optional)."""
        match = _NAME_RE.match(text)
        if not match:
            raise ShardingError(f"cannot read the layout {text!r}: expected NAME[dim, dim, ...]")
        name, body = match.group(1) or "", match.group(2).strip()
        dims: list[str] = []
        shards: list[tuple[str, ...]] = []
        partial: list[str] = []
        entries = [e.strip() for e in body.split(",")] if body else []
        for entry in entries:
            if not entry:
                raise ShardingError(f"cannot read the layout {text!r}: an empty dim")
            dim_text, _, partial_text = entry.partition("@")
            if partial_text:
                ratio = partial_text.strip()
                if not ratio.startswith("1/"):
                    raise ShardingError(
                        f"cannot read the partial sum {partial_text.strip()!r} in {text!r}: "
                        "expected '@ 1/axis' or '@ 1/(a*b)'"
                    )
                partial.extend(_parse_axes(ratio[2:], text))
            dim_part, slash, axes_text = dim_text.strip().partition("/")
            axes: tuple[str, ...] = ()
            if slash:
                # "S/2" is a dim size, "S/tp" a partition: a number after the slash is a size.
                if re.fullmatch(r"\s*\d+\s*", axes_text):
                    dim_part = f"{dim_part}/{axes_text.strip()}"
                else:
                    axes = _parse_axes(axes_text, text)
            if not dim_part.strip():
                if partial_text and not slash and len(entries) == 1:
                    continue  # "loss[@ 1/tp]": a scalar partial sum, as __str__ prints it
                raise ShardingError(f"cannot read the layout {text!r}: a dim has no name")
            dims.append(dim_part.strip())
            shards.append(axes)
        layout = cls(tuple(dims), tuple(shards), tuple(partial), name)
        if mesh is not None:
            layout.validate(mesh)
        return layout

    @classmethod
    def replicated(cls, dims: Sequence[str], name: str = "") -> Layout:
        """A layout with every dim whole on every rank."""
        return cls(tuple(dims), tuple(() for _ in dims), (), name)

    def validate(self, mesh: Mesh) -> Layout:
        """Check every axis is in ``mesh``; return ``self``."""
        for axis in self.axes_used:
            if axis not in mesh:
                raise ShardingError(
                    f"invalid layout {self}: axis {axis!r} is not in the mesh {mesh}"
                )
        return self

    # -- queries ------------------------------------------------------------------------------

    @property
    def axes_used(self) -> tuple[str, ...]:
        return tuple(a for axes in self.shards for a in axes) + self.partial

    def dim_of(self, axis: str) -> int | None:
        """The index of the dim that ``axis`` partitions, or ``None``."""
        for index, axes in enumerate(self.shards):
            if axis in axes:
                return index
        return None

    def local_shape(self, mesh: Mesh) -> tuple[Size, ...]:
        """The shape one rank holds."""
        return tuple(
            size / mesh.product(axes) if axes else size
            for size, axes in zip(self.sizes, self.shards, strict=True)
        )

    def local_elements(self, mesh: Mesh) -> Size:
        result: Size = 1
        for extent in self.local_shape(mesh):
            result = result * extent
        return simplified(result) if isinstance(result, sympy.Expr) else result

    def global_elements(self) -> sympy.Expr:
        return sympy.Mul(*self.sizes)

    def bind_sizes(self, values: Mapping[str, int]) -> Layout:
        """The same layout with dim sizes evaluated at ``values`` (names to ints)."""
        subs = {symbol(k): v for k, v in values.items()}
        sizes = tuple(sympy.sympify(s).subs(subs) for s in self.sizes)
        return Layout(self.dims, self.shards, self.partial, self.name, sizes)

    def with_shards(self, shards: Sequence[Sequence[str]], partial: Sequence[str] = ()) -> Layout:
        """Same dims and name, other placement."""
        return Layout(
            self.dims, tuple(tuple(s) for s in shards), tuple(partial), self.name, self.sizes
        )

    # -- printing -----------------------------------------------------------------------------

    def __str__(self) -> str:
        entries = []
        for index, (dim, axes) in enumerate(zip(self.dims, self.shards, strict=True)):
            entry = dim + (f"/{_format_axes(axes)}" if axes else "")
            if self.partial and index == len(self.dims) - 1:
                entry += f" @ 1/{_format_axes(self.partial)}"
            entries.append(entry)
        if self.partial and not self.dims:
            entries.append(f"@ 1/{_format_axes(self.partial)}")
        return f"{self.name}[{', '.join(entries)}]"


def _parse_axes(text: str, whole: str) -> tuple[str, ...]:
    match = _AXES_RE.match(text.strip())
    if not match:
        raise ShardingError(
            f"cannot read the axes {text.strip()!r} in {whole!r}: expected 'axis' or '(a*b)'"
        )
    return tuple(part.strip() for part in match.group(1).split("*"))


def _format_axes(axes: Sequence[str]) -> str:
    return axes[0] if len(axes) == 1 else "(" + "*".join(axes) + ")"
