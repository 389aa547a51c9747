"""The redistribution table (formulas.md §1 and the STAGE paper's Tables III and XI)."""

from __future__ import annotations

from collections import Counter

import pytest
import sympy

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Mesh, symbol
from stage_core.ops import Einsum, Tensor
from stage_core.redistribute import StepKind, collectives, redistribute

AR, AG, RS, A2A, SL = (
    StepKind.ALL_REDUCE,
    StepKind.ALL_GATHER,
    StepKind.REDUCE_SCATTER,
    StepKind.ALL_TO_ALL,
    StepKind.SLICE,
)
SYMBOLIC = Mesh.symbolic(["dp", "tp"])
#: Concrete sizes for byte counts: 8·16·32 elements of 2 bytes; dp=2, tp=4.
BOUND_MESH = Mesh.of(dp=2, tp=4)
BOUND_DIMS = {"B": 8, "S": 16, "H": 32}
B, S, H = (symbol(n) for n in "BSH")
dp, tp = symbol("dp"), symbol("tp")


def plan(
    src: str, dst: str, mesh: Mesh = SYMBOLIC, merge: bool = True
) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, axes) of every step, in execution order."""
    steps = redistribute(Layout.parse(src), Layout.parse(dst), mesh, merge=merge)
    return [(step.kind, step.axes) for step in steps]


def bound(text: str, **sizes: int) -> Layout:
    return Layout.parse(text).bind_sizes(sizes or BOUND_DIMS)


# -- formulas.md §1: from the producer layout [B/dp, S, H @ 1/tp] --------------------------------

PRODUCER = "x[B/dp, S, H @ 1/tp]"

#: (consumer, STAGE's steps in execution order, bytes per step on dp=2, tp=4, B=8, S=16, H=32)
SECTION_1 = [
    ("[B/dp, S, H/tp]", [(RS, ("tp",))], [4 * 16 * 32 * 2]),
    ("[B, S/dp, H @ 1/tp]", [(A2A, ("dp",))], [4 * 16 * 32 * 2]),
    ("[B, S, H @ 1/tp]", [(AG, ("dp",))], [4 * 16 * 32 * 2]),
    ("[B/dp, S, H]", [(AR, ("tp",))], [4 * 16 * 32 * 2]),
    # The paper lists reduce-scatter over tp + all-to-all over dp; see the test below.
    ("[B/tp, S, H/dp]", [(A2A, ("dp",)), (RS, ("tp",))], [4 * 16 * 32 * 2, 8 * 16 * 16 * 2]),
    ("[B, S, H]", [(AR, ("tp",)), (AG, ("dp",))], [4 * 16 * 32 * 2, 4 * 16 * 32 * 2]),
]


@pytest.mark.parametrize(("consumer", "expected", "_bytes"), SECTION_1)
def test_section_1_table_kinds_and_axes(
    consumer: str, expected: list[tuple[StepKind, tuple[str, ...]]], _bytes: list[int]
) -> None:
    assert plan(PRODUCER, consumer) == expected


@pytest.mark.parametrize(("consumer", "expected", "step_bytes"), SECTION_1)
def test_section_1_table_bytes(
    consumer: str, expected: list[tuple[StepKind, tuple[str, ...]]], step_bytes: list[int]
) -> None:
    steps = redistribute(bound(PRODUCER), bound(consumer), BOUND_MESH, dtype_bytes=2)
    assert [(s.kind, s.axes) for s in steps] == expected
    assert [s.bytes_per_rank for s in steps] == step_bytes
    assert all(isinstance(s.bytes_per_rank, int) or s.bytes_per_rank.is_Integer for s in steps)


def test_section_1_row_5_order_differs_from_the_paper_on_purpose() -> None:
    """[B/dp, S, H @ 1/tp] → [B/tp, S, H/dp]: the paper says RS(tp) + A2A(dp).

    Reduce-scattering over tp first would leave B as B/(dp*tp) with dp *outer*; dp could then
    not move to H without a strided (cyclic) distribution. STAGE moves dp first (all-to-all
    B→H), then reduce-scatters over tp onto the now whole B. Same collectives, other order.
    """
    steps = redistribute(Layout.parse(PRODUCER), Layout.parse("[B/tp, S, H/dp]"), SYMBOLIC)
    assert Counter((s.kind, s.axes) for s in steps) == Counter([(RS, ("tp",)), (A2A, ("dp",))])
    first, second = steps
    assert (first.kind, first.src_dim, first.dst_dim) == (A2A, "B", "H")
    assert str(first.after) == "x[B, S, H/dp @ 1/tp]"
    assert (second.kind, second.dst_dim) == (RS, "B")
    assert str(second.after) == "x[B/tp, S, H/dp]"


def test_section_1_bytes_symbolic() -> None:
    """AR, RS and A2A move the whole local buffer; AG the per-rank shard."""
    steps = redistribute(Layout.parse(PRODUCER), Layout.parse("[B, S, H]"), SYMBOLIC)
    whole = 2 * B * S * H / dp
    assert [sympy.simplify(s.bytes_per_rank - whole) for s in steps] == [0, 0]


# -- bytes per kind ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst", "kind", "expected_bytes", "why"),
    [
        ("x[B/dp, S, H @ 1/tp]", "[B/dp, S, H]", AR, 4 * 16 * 32 * 2, "whole buffer"),
        ("x[B/dp, S, H @ 1/tp]", "[B/dp, S/tp, H]", RS, 4 * 16 * 32 * 2, "whole input"),
        ("x[B/dp, S, H/tp]", "[B/dp, S, H]", AG, 4 * 16 * 8 * 2, "per-rank input shard"),
        ("x[B/dp, S, H/tp]", "[B/dp, S/tp, H]", A2A, 4 * 16 * 8 * 2, "whole send buffer"),
        ("x[B, S, H]", "[B/dp, S, H]", SL, 0, "local, no communication"),
    ],
)
def test_bytes_per_kind_follow_comm_size(
    src: str, dst: str, kind: StepKind, expected_bytes: int, why: str
) -> None:
    (step,) = redistribute(bound(src), bound(dst), BOUND_MESH, dtype_bytes=2)
    assert step.kind == kind
    assert step.bytes_per_rank == expected_bytes, why


def test_bytes_scale_with_dtype() -> None:
    src, dst = bound("x[B/dp, S, H/tp]"), bound("[B/dp, S, H]")
    (step,) = redistribute(src, dst, BOUND_MESH, dtype_bytes=4)
    assert step.bytes_per_rank == 4 * 16 * 8 * 4


# -- Table III: a linear layer y = x·w, x[B, H], w[H, 4H] --------------------------------------

TENSORS = {
    "x": Tensor("x", ("B", "H")),
    "w": Tensor("w", ("H", "4H"), role="weight"),
    "y": Tensor("y", ("B", "4H")),
}
LINEAR = Einsum("linear", ("x", "w"), ("y",), "bh,hf->bf")


@pytest.mark.parametrize(
    ("strategy", "x", "w", "y"),
    [
        ("DP", "x[B/dp, H]", "w[H, 4H]", "y[B/dp, 4H]"),
        ("TP row-parallel", "x[B, H/tp]", "w[H/tp, 4H]", "y[B, 4H @ 1/tp]"),
        ("TP column-parallel", "x[B, H]", "w[H, 4H/tp]", "y[B, 4H/tp]"),
    ],
)
def test_table_3_linear_layer_layouts(strategy: str, x: str, w: str, y: str) -> None:
    (out,) = LINEAR.infer([Layout.parse(x), Layout.parse(w)], TENSORS)
    assert str(out) == y, strategy


def test_table_3_fsdp_gathers_the_weight_before_use() -> None:
    mesh = Mesh.symbolic(["fsdp"])
    x, w = Layout.parse("x[B/fsdp, H]"), Layout.parse("w[H/fsdp, 4H]")
    with pytest.raises(ShardingError, match="inconsistent input shardings for dim H"):
        LINEAR.infer([x, w], TENSORS)
    steps = redistribute(w, Layout.parse("w[H, 4H]"), mesh)
    assert [(s.kind, s.axes, s.src_dim) for s in steps] == [(AG, ("fsdp",), "H")]
    (out,) = LINEAR.infer([x, steps[-1].after], TENSORS)
    assert str(out) == "y[B/fsdp, 4H]"


def test_table_11_fully_sharded_tp() -> None:
    """All-gather x over tp, einsum with W[D1/tp, D2] → Y[B/dp, D2 @ 1/tp], reduce-scatter.

    Read here with x stored batch-sharded over tp, [B/(dp*tp), D1], which is also what the
    reduce-scatter of Y gives back, so layers chain. The consumed [B/dp, D1/tp] is a local slice
    of the gathered x.
    """
    tensors = {
        "x": Tensor("x", ("B", "D1")),
        "W": Tensor("W", ("D1", "D2"), role="weight"),
        "Y": Tensor("Y", ("B", "D2")),
    }
    stored = Layout.parse("x[B/(dp*tp), D1]")
    gathered = Layout.parse("x[B/dp, D1]")
    consumed = Layout.parse("x[B/dp, D1/tp]")
    assert plan(str(stored), str(gathered)) == [(AG, ("tp",))]
    assert plan(str(gathered), str(consumed)) == [(SL, ("tp",))]
    op = Einsum("fc", ("x", "W"), ("Y",), "bi,io->bo")
    (y,) = op.infer([consumed, Layout.parse("W[D1/tp, D2]")], tensors)
    assert str(y) == "Y[B/dp, D2 @ 1/tp]"
    steps = redistribute(y, Layout.parse("[B/(dp*tp), D2]"), SYMBOLIC)
    assert [(s.kind, s.axes, s.dst_dim) for s in steps] == [(RS, ("tp",), "B")]
    # Going to the consumed layout in one change is a single all-to-all instead.
    assert plan(str(stored), str(consumed)) == [(A2A, ("tp",))]


# -- slices, composition, merging ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst", "expected"),
    [
        ("x[B, S, H]", "[B/dp, S, H]", [(SL, ("dp",))]),
        ("x[B, S, H]", "[B/dp, S/tp, H]", [(SL, ("dp",)), (SL, ("tp",))]),
        ("x[B, S, H]", "[B/(dp*tp), S, H]", [(SL, ("dp", "tp"))]),
        ("x[B/dp, S, H]", "[B/(dp*tp), S, H]", [(SL, ("tp",))]),
        ("x[B, S, H @ 1/tp]", "[B/dp, S, H @ 1/tp]", [(SL, ("dp",))]),
    ],
)
def test_replicated_to_partitioned_is_a_slice_only(
    src: str, dst: str, expected: list[object]
) -> None:
    assert plan(src, dst) == expected
    steps = redistribute(Layout.parse(src), Layout.parse(dst), SYMBOLIC)
    assert collectives(steps) == []
    assert all(s.bytes_per_rank == 0 for s in steps)


def test_equal_layouts_need_nothing() -> None:
    assert plan("x[B/dp, S, H @ 1/tp]", "[B/dp, S, H @ 1/tp]") == []
    assert plan("x[B @ 1/(dp*tp)]", "[B @ 1/(tp*dp)]") == []  # partial order is irrelevant


@pytest.mark.parametrize(
    ("src", "dst", "merged", "unmerged"),
    [
        (
            "x[B/(dp*tp), S]", "[B, S]",
            [(AG, ("dp", "tp"))], [(AG, ("tp",)), (AG, ("dp",))],
        ),
        (
            "x[B, S @ 1/(tp*dp)]", "[B, S]",
            [(AR, ("dp", "tp"))], [(AR, ("tp",)), (AR, ("dp",))],
        ),
        (
            "x[B, S @ 1/(dp*tp)]", "[B, S/(dp*tp)]",
            [(RS, ("dp", "tp"))], [(RS, ("dp",)), (RS, ("tp",))],
        ),
        (
            "x[B, S @ 1/tp]", "[B/dp, S]",  # slice first (cheapest), then all-reduce: no merge
            [(SL, ("dp",)), (AR, ("tp",))], [(SL, ("dp",)), (AR, ("tp",))],
        ),
        (
            "x[B/dp, S/tp]", "[B, S]",  # gathers on different dims stay apart
            [(AG, ("dp",)), (AG, ("tp",))], [(AG, ("dp",)), (AG, ("tp",))],
        ),
    ],
)
def test_merging_multi_axis_steps(
    src: str, dst: str, merged: list[object], unmerged: list[object]
) -> None:
    assert plan(src, dst) == merged
    assert plan(src, dst, merge=False) == unmerged


def test_merged_step_keeps_the_first_input_and_the_last_output() -> None:
    mesh = Mesh.of(dp=2, tp=4)
    src, dst = bound("x[B/(dp*tp), S, H]"), bound("[B, S, H]")
    (step,) = redistribute(src, dst, mesh)
    assert step.bytes_per_rank == 1 * 16 * 32 * 2  # the per-rank shard before gathering
    assert (str(step.before), str(step.after)) == ("x[B/(dp*tp), S, H]", "x[B, S, H]")
    single = redistribute(src, dst, mesh, merge=False)
    assert [s.bytes_per_rank for s in single] == [1 * 16 * 32 * 2, 4 * 16 * 32 * 2]


def test_composition_reduces_before_it_gathers() -> None:
    """Cheapest first: the reduce-scatter shrinks the buffer the all-gather then moves."""
    steps = redistribute(bound("x[B/dp, S, H @ 1/tp]"), bound("[B, S/tp, H]"), BOUND_MESH)
    assert [(s.kind, s.axes) for s in steps] == [(RS, ("tp",)), (AG, ("dp",))]
    assert [s.bytes_per_rank for s in steps] == [4 * 16 * 32 * 2, 4 * 4 * 32 * 2]


def test_reordering_nested_axes_gathers_then_slices() -> None:
    assert plan("x[B/(dp*tp), S]", "[B/(tp*dp), S]") == [(AG, ("dp", "tp")), (SL, ("tp", "dp"))]


def test_swapping_axes_between_dims() -> None:
    assert plan("x[B/dp, S/tp]", "[B/tp, S/dp]") == [
        (AG, ("dp",)), (A2A, ("tp",)), (SL, ("dp",)),
    ]


def test_step_describe_and_to_dict() -> None:
    (step,) = redistribute(bound("x[B/dp, S, H/tp]"), bound("[B/dp, S, H]"), BOUND_MESH)
    assert step.describe() == "all_gather over tp on H: 1024 bytes"
    assert step.to_dict() == {
        "kind": "all_gather", "axes": ["tp"], "src_dim": "H", "dst_dim": None,
        "bytes_per_rank": 1024, "before": "x[B/dp, S, H/tp]", "after": "x[B/dp, S, H]",
    }


def test_destination_name_defaults_to_the_source_name() -> None:
    (step,) = redistribute(Layout.parse("x[B/dp]"), Layout.parse("[B]"), SYMBOLIC)
    assert step.after.name == "x"


# -- refused changes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst", "reason"),
    [
        ("x[B, S]", "[B, S @ 1/tp]", "a partial sum over 'tp' cannot be created"),
        ("x[B/tp, S]", "[B, S @ 1/tp]", "a partial sum over 'tp' cannot be created"),
        ("x[B, S @ 1/dp]", "[B, S @ 1/(dp*tp)]", "a partial sum over 'tp' cannot be created"),
        ("x[B, S]", "[B, H]", "dim S and dim H differ in global size"),
        ("x[B, 4H]", "[B, 2H]", "dim 4H and dim 2H differ in global size"),
        ("x[B, S]", "[B, S, H]", "they have 2 and 3 dims"),
        ("x[B, S]", "[B/ep, S]", "axis 'ep' is not in the mesh"),
        ("x[B @ 1/ep]", "[B]", "axis 'ep' is not in the mesh"),
    ],
)
def test_impossible_changes_are_refused(src: str, dst: str, reason: str) -> None:
    with pytest.raises(ShardingError) as caught:
        redistribute(Layout.parse(src), Layout.parse(dst), SYMBOLIC)
    assert reason in str(caught.value)
    assert f"cannot turn {Layout.parse(src)}" in str(caught.value) or "invalid layout" in str(
        caught.value
    )


def test_same_dim_name_bound_to_different_sizes_is_refused() -> None:
    with pytest.raises(ShardingError, match="differ in global size"):
        redistribute(bound("x[B, S]", B=8, S=4), bound("[B, S]", B=4, S=4), BOUND_MESH)


def test_equivalent_dim_spellings_are_accepted() -> None:
    assert plan("x[B, 4H/tp]", "[B, 4*H]") == [(AG, ("tp",))]
