"""``stage redistribute SRC DST``: print the collectives that turn one layout into another."""

from __future__ import annotations

import argparse
import json

from sympy import sympify

from stage_core.errors import ConfigError
from stage_core.layout import Layout
from stage_core.mesh import Mesh, MeshAxis, Size, symbol
from stage_core.redistribute import redistribute

#: Canonical outer-to-inner order of the well-known axes (TP innermost).
_CANONICAL = ("pp", "dp", "ep", "cp", "tp")


def _parse_bindings(text: str, what: str) -> dict[str, int]:
    """``NAME=INT,…`` as a mapping; a malformed item or a name given twice is a one-line error
    (s36 review9: ``--mesh dp=4,dp=8`` kept the last size without a word, and the empty
    item of ``dp=4,,tp=8`` was skipped)."""
    values: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        name, equals, value = item.partition("=")
        if not item:
            raise ConfigError(
                f"--{what} expects NAME=INT[,NAME=INT...], but got an empty item in {text!r}"
            )
        if not equals or not name.strip().isidentifier() or not value.strip().isdigit():
            raise ConfigError(f"--{what} expects NAME=INT[,NAME=INT...], but got {item!r}")
        if name.strip() in values:
            raise ConfigError(
                f"--{what} expects each name once, but got {name.strip()!r} twice "
                f"({name.strip()}={values[name.strip()]} and {item})"
            )
        values[name.strip()] = int(value)
    return values


def _mesh_for(src: Layout, dst: Layout, sizes: dict[str, int]) -> Mesh:
    used = list(dict.fromkeys(src.axes_used + dst.axes_used))
    names = [a for a in _CANONICAL if a in used or a in sizes]
    names += [a for a in list(sizes) + used if a not in names]
    names = list(dict.fromkeys(names))
    axes: list[MeshAxis] = []
    for name in names:
        size: Size = sizes.get(name, symbol(name))
        axes.append(MeshAxis(name, size))
    return Mesh(tuple(axes))


def _bind_dims(src: Layout, dst: Layout, text: str) -> tuple[Layout, Layout]:
    """Both layouts with ``--dims`` bound; a name neither layout's sizes use is an error (a
    typo would otherwise leave that dim symbolic without a word)."""
    dims = _parse_bindings(text, "dims")
    known = sorted({str(s) for size in src.sizes + dst.sizes for s in sympify(size).free_symbols})
    unknown = [name for name in dims if name not in known]
    if unknown:
        raise ConfigError(
            f"--dims names {unknown[0]!r}, which is not a dim size of SRC or DST: expected "
            f"some of {', '.join(known) or '(none: the sizes are numbers)'}"
        )
    return src.bind_sizes(dims), dst.bind_sizes(dims)


def _check_divisible(layout: Layout, mesh: Mesh, which: str) -> None:
    """Each dim whose size and partitioning axes are numbers must split evenly over them (a
    shard of 1.5 rows is not a layout): a one-line error naming the dim and the axes."""
    for dim, size, axes in zip(layout.dims, layout.sizes, layout.shards, strict=True):
        parts = sympify(mesh.product(axes))
        if axes and sympify(size).is_Integer and parts.is_Integer and int(size) % int(parts):
            raise ConfigError(
                f"{which} {layout}: dim {dim} of size {size} does not split evenly over "
                f"{'*'.join(axes)} = {parts}; expected a multiple of {parts}"
            )


def run(args: argparse.Namespace) -> int:
    if args.dtype_bytes < 1:
        raise ConfigError(f"--dtype-bytes must be a positive integer, but got {args.dtype_bytes}")
    src = Layout.parse(args.src)
    dst_text = args.dst if "[" in args.dst else f"[{args.dst}]"
    dst = Layout.parse(dst_text)
    if args.dims:
        src, dst = _bind_dims(src, dst, args.dims)
    mesh = _mesh_for(src, dst, _parse_bindings(args.mesh, "mesh") if args.mesh else {})
    _check_divisible(src, mesh, "SRC")
    _check_divisible(dst, mesh, "DST")
    steps = redistribute(src, dst, mesh, dtype_bytes=args.dtype_bytes, merge=not args.no_merge)
    if args.json:
        print(json.dumps([step.to_dict() for step in steps], indent=2))
        return 0
    print(
        f"{src}  ->  {Layout(dst.dims, dst.shards, dst.partial, dst.name or src.name)}  on {mesh}"
    )
    if not steps:
        print("  (no communication: the layouts are equal)")
    for index, step in enumerate(steps, 1):
        print(f"  {index}. {step.describe()}")
        print(f"     {step.before} -> {step.after}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "redistribute",
        help="print the collectives that turn layout SRC into layout DST",
        description=(
            "Print, in execution order, the collectives that turn layout SRC into DST. "
            "Layouts use the notation x[B/dp, S/(cp*tp), H @ 1/tp]; DST may omit the name."
        ),
    )
    parser.add_argument("src", metavar="SRC", help="source layout, e.g. 'x[B/dp, S, H @ 1/tp]'")
    parser.add_argument("dst", metavar="DST", help="destination layout, e.g. '[B/dp, S, H/tp]'")
    parser.add_argument("--mesh", default="", help="axis sizes, e.g. dp=4,tp=8 (default symbolic)")
    parser.add_argument("--dims", default="", help="dim sizes, e.g. B=8,S=2048,H=4096")
    parser.add_argument("--dtype-bytes", type=int, default=2, help="bytes per element (default 2)")
    parser.add_argument("--no-merge", action="store_true", help="one step per mesh axis")
    parser.add_argument("--json", action="store_true", help="print a JSON list of steps")
    parser.set_defaults(func=run)
