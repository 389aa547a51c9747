"""Layout notation: parsing and printing, local shapes, and invalid layouts."""

from __future__ import annotations

import pytest
import sympy

from stage_core.errors import ShardingError, StageError
from stage_core.layout import Layout
from stage_core.mesh import Mesh, symbol

B, S, H, V = (symbol(n) for n in "BSHV")
dp, cp, tp = (symbol(n) for n in ("dp", "cp", "tp"))


# -- parse / print round trip ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dims", "shards", "partial", "name"),
    [
        ("x[B/dp, S, H @ 1/tp]", ("B", "S", "H"), (("dp",), (), ()), ("tp",), "x"),
        ("[B, S, H]", ("B", "S", "H"), ((), (), ()), (), ""),
        ("x[B/dp, S/(cp*tp), H]", ("B", "S", "H"), (("dp",), ("cp", "tp"), ()), (), "x"),
        ("w[H, F @ 1/(dp*tp)]", ("H", "F"), ((), ()), ("dp", "tp"), "w"),
        ("y[4H/tp, B]", ("4H", "B"), (("tp",), ()), (), "y"),
        ("z[B/(dp*cp*tp), S]", ("B", "S"), (("dp", "cp", "tp"), ()), (), "z"),
        ("a[B/dp, 4H @ 1/tp]", ("B", "4H"), (("dp",), ()), ("tp",), "a"),
        ("[S/2, H/tp]", ("S/2", "H"), ((), ("tp",)), (), ""),
        ("h[B, S/cp, 4*H/tp]", ("B", "S", "4*H"), ((), ("cp",), ("tp",)), (), "h"),
        ("x[]", (), (), (), "x"),
        ("loss[@ 1/tp]", (), (), ("tp",), "loss"),
        ("my_tensor_2[B/pp_x, S]", ("B", "S"), (("pp_x",), ()), (), "my_tensor_2"),
    ],
)
def test_parse_reads_dims_shards_partial_and_name_and_prints_back(
    text: str,
    dims: tuple[str, ...],
    shards: tuple[tuple[str, ...], ...],
    partial: tuple[str, ...],
    name: str,
) -> None:
    layout = Layout.parse(text)
    assert (layout.dims, layout.shards, layout.partial, layout.name) == (
        dims, shards, partial, name
    )
    assert str(layout) == text
    assert Layout.parse(str(layout)) == layout


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("x[B @ 1/tp, S]", "x[B, S @ 1/tp]"),  # the mark belongs to the tensor: printed last
        ("x[B @ 1/dp, S @ 1/tp]", "x[B, S @ 1/(dp*tp)]"),
        ("x[ B / dp ,S/( cp * tp ) ,H@1/ep ]", "x[B/dp, S/(cp*tp), H @ 1/ep]"),
        ("  x [B/(dp), S]  ", "x[B/dp, S]"),
        ("[B/(dp*tp) @ 1/cp]", "[B/(dp*tp) @ 1/cp]"),
    ],
)
def test_spacing_and_mark_position_do_not_matter(text: str, canonical: str) -> None:
    layout = Layout.parse(text)
    assert str(layout) == canonical
    assert Layout.parse(canonical) == layout


def test_nesting_order_is_part_of_the_layout() -> None:
    assert Layout.parse("x[B/(dp*tp)]") != Layout.parse("x[B/(tp*dp)]")
    assert Layout.parse("x[B/(tp*dp)]").shards == (("tp", "dp"),)


def test_partial_order_is_kept_as_written() -> None:
    assert Layout.parse("x[B @ 1/(tp*dp)]").partial == ("tp", "dp")


def test_replicated_constructor_and_queries() -> None:
    layout = Layout.replicated(("B", "S"), "x")
    assert str(layout) == "x[B, S]" and layout.axes_used == ()
    sharded = Layout.parse("x[B/dp, S/(cp*tp) @ 1/ep]")
    assert sharded.axes_used == ("dp", "cp", "tp", "ep")
    assert (sharded.dim_of("dp"), sharded.dim_of("tp"), sharded.dim_of("ep")) == (0, 1, None)


def test_parse_validates_against_a_mesh() -> None:
    mesh = Mesh.of(dp=2, cp=2, tp=4)
    assert Layout.parse("x[B/dp, S/(cp*tp)]", mesh).shards == (("dp",), ("cp", "tp"))


# -- local shapes ------------------------------------------------------------------------------


def test_local_shape_symbolic() -> None:
    layout = Layout.parse("x[B/dp, S/(cp*tp), 4H @ 1/pp]")
    mesh = Mesh.symbolic(["pp", "dp", "cp", "tp"])
    assert layout.local_shape(mesh) == (B / dp, S / (cp * tp), 4 * H)
    assert sympy.simplify(layout.local_elements(mesh) - 4 * B * S * H / (dp * cp * tp)) == 0
    assert layout.global_elements() == 4 * B * S * H


def test_local_shape_bound_is_exact_integers() -> None:
    layout = Layout.parse("x[B/dp, S/(cp*tp), 4H]").bind_sizes({"B": 8, "S": 32, "H": 16})
    mesh = Mesh.of(dp=2, cp=2, tp=4)
    assert layout.local_shape(mesh) == (4, 4, 64)
    assert all(sympy.sympify(e).is_Integer for e in layout.local_shape(mesh))
    assert layout.local_elements(mesh) == 4 * 4 * 64


def test_local_shape_with_bound_mesh_and_symbolic_dims() -> None:
    layout = Layout.parse("x[B/dp, S/(cp*tp), H]")
    mesh = Mesh.symbolic(["dp", "cp", "tp"]).bind({"dp": 2, "cp": 2, "tp": 4})
    assert layout.local_shape(mesh) == (B / 2, S / 8, H)


def test_partial_sum_does_not_change_the_local_shape() -> None:
    mesh = Mesh.symbolic(["dp", "tp"])
    whole = Layout.parse("x[B/dp, H]")
    assert Layout.parse("x[B/dp, H @ 1/tp]").local_shape(mesh) == whole.local_shape(mesh)


def test_with_shards_keeps_dims_sizes_and_name() -> None:
    layout = Layout.parse("x[B/dp, 4H]").bind_sizes({"B": 8, "H": 2})
    moved = layout.with_shards([(), ("dp",)], ["tp"])
    assert (moved.name, moved.dims, moved.sizes) == ("x", ("B", "4H"), (8, 8))
    assert str(moved) == "x[B, 4H/dp @ 1/tp]"


# -- invalid layouts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x[B/tp, S/tp]", "axis 'tp' partitions more than once"),
        ("x[B/(tp*tp), S]", "axis 'tp' partitions more than once"),
        ("x[B @ 1/(tp*tp)]", "a partial-sum axis is repeated"),
        ("x[B @ 1/tp, S @ 1/tp]", "a partial-sum axis is repeated"),
        # The issue's own example: tp partitions S *and* is a partial sum, which is invalid.
        (
            "x[B/dp, S/(cp*tp), H @ 1/tp]",
            "axis 'tp' both partitions a dim and is a partial sum",
        ),
        ("x[B/dp, S, H/tp @ 1/tp]", "axis 'tp' both partitions a dim and is a partial sum"),
    ],
)
def test_invalid_placement_names_the_layout_and_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ShardingError) as caught:
        Layout.parse(text)
    message = str(caught.value)
    assert reason in message
    assert "invalid layout x[" in message


def test_the_issue_example_is_rejected_with_its_layout_text() -> None:
    with pytest.raises(ShardingError, match=r"x\[B/dp, S/\(cp\*tp\), H @ 1/tp\]"):
        Layout.parse("x[B/dp, S/(cp*tp), H @ 1/tp]")


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ShardingError, match="partitions more than once"):
        Layout(("B", "S"), (("dp",), ("dp",)))
    with pytest.raises(ShardingError, match="2 dims but 1 shard entries"):
        Layout(("B", "S"), (("dp",),))


@pytest.mark.parametrize(
    ("text", "axis"),
    [("x[B/ep, S]", "ep"), ("x[B, S/(dp*cp)]", "cp"), ("x[B, S @ 1/pp]", "pp")],
)
def test_unknown_axis_is_rejected_against_a_mesh(text: str, axis: str) -> None:
    mesh = Mesh.of(dp=2, tp=4)
    with pytest.raises(ShardingError, match=rf"axis '{axis}' is not in the mesh \{{dp=2, tp=4\}}"):
        Layout.parse(text, mesh)
    with pytest.raises(ShardingError, match="invalid layout"):
        Layout.parse(text).validate(mesh)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x(B, S)", "expected NAME[dim, dim, ...]"),
        ("x[B/dp, S", "expected NAME[dim, dim, ...]"),
        ("x[B, , S]", "an empty dim"),
        ("x[B,]", "an empty dim"),
        ("x[/dp, S]", "a dim has no name"),
        ("x[@ 1/tp, S]", "a dim has no name"),
        ("x[B/]", "cannot read the axes"),
        ("x[B/(dp*)]", "cannot read the axes"),
        ("x[B/dp-tp]", "cannot read the axes"),
        ("x[B/(dp tp)]", "cannot read the axes"),
        ("x[B @ tp]", "expected '@ 1/axis'"),
        ("x[B @ 2/tp]", "expected '@ 1/axis'"),
        ("x[B @ 1/]", "cannot read the axes"),
        ("x[B+]", "cannot read the dim"),
        ("1x[B]", "expected NAME[dim, dim, ...]"),
    ],
)
def test_malformed_text_is_a_sharding_error(text: str, reason: str) -> None:
    with pytest.raises(ShardingError) as caught:
        Layout.parse(text)
    assert reason in str(caught.value)
    assert isinstance(caught.value, StageError) and isinstance(caught.value, ValueError)


def test_dim_sizes_are_symbolic_expressions() -> None:
    assert Layout.parse("[4H, S/2, V]").sizes == (4 * H, S / 2, V)
