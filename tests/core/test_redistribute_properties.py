"""Property tests: executing a redistribution plan on simulated ranks gives the destination.

An executable model of layouts in numpy. A global integer array and a :class:`Layout` on a small
integer :class:`Mesh` give every rank its local block: a partitioned dim holds the block whose
index nests the rank's coordinates on the dim's axes, outermost first; a partial sum over axes P
is split into random integer addends, one per coordinate of P, that sum back to the global array.
Each step kind is then executed on the simulated ranks, and after every step every rank must hold
exactly what the step's ``after`` layout says it holds — so the final state is the materialized
destination. Each step's byte count must equal the rank's input buffer × dtype bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import pytest
import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Mesh
from stage_core.redistribute import RedistributionStep, StepKind, redistribute

AXIS_NAMES = ("dp", "cp", "tp")
Addends = dict[tuple[int, ...], np.ndarray]
State = dict[int, np.ndarray]


# -- the executable model ------------------------------------------------------------------------


def total(arrays: Iterable[np.ndarray]) -> np.ndarray:
    """The element-wise sum of one or more arrays."""
    return np.asarray(np.stack(list(arrays)).sum(axis=0))


def nested_index(coords: Mapping[str, int], axes: Sequence[str], mesh: Mesh) -> int:
    """The block index of a rank over ``axes``, outermost first."""
    index = 0
    for axis in axes:
        index = index * int(mesh.size(axis)) + coords[axis]
    return index


def group_members(mesh: Mesh, rank: int, axes: Sequence[str]) -> list[int]:
    """The ranks sharing every coordinate of ``rank`` but those on ``axes``, in block order."""
    members = mesh.group(rank, axes)
    return sorted(members, key=lambda m: nested_index(mesh.coordinates(m), axes, mesh))


def make_addends(
    global_array: np.ndarray, partial: Sequence[str], mesh: Mesh, rng: np.random.Generator
) -> Addends:
    """Random integer addends, one per coordinate of the partial axes, summing to the array."""
    coordinates = list(itertools.product(*(range(int(mesh.size(a))) for a in partial)))
    addends: Addends = {}
    remainder = global_array.copy()
    for coordinate in coordinates[:-1]:
        addends[coordinate] = rng.integers(-50, 50, size=global_array.shape)
        remainder = remainder - addends[coordinate]
    addends[coordinates[-1]] = remainder
    return addends


def materialize(
    layout: Layout, mesh: Mesh, addends: Addends, source_partial: Sequence[str]
) -> State:
    """Every rank's local block of ``layout``; partial axes of ``layout`` ⊆ ``source_partial``."""
    assert set(layout.partial) <= set(source_partial)
    state: State = {}
    for rank in range(int(mesh.world_size)):
        coords = mesh.coordinates(rank)
        local = total(
            array
            for coordinate, array in addends.items()
            if all(coordinate[source_partial.index(a)] == coords[a] for a in layout.partial)
        )
        for dim, axes in enumerate(layout.shards):
            count = math.prod(int(mesh.size(a)) for a in axes)
            local = np.split(local, count, axis=dim)[nested_index(coords, axes, mesh)]
        state[rank] = local
    return state


def execute(step: RedistributionStep, state: State, mesh: Mesh) -> State:
    """Run one step on every simulated rank."""
    dims = step.before.dims
    count = math.prod(int(mesh.size(a)) for a in step.axes)
    new: State = {}
    for rank in state:
        coords = mesh.coordinates(rank)
        members = group_members(mesh, rank, step.axes)
        mine = nested_index(coords, step.axes, mesh)
        if step.kind == StepKind.ALL_REDUCE:
            new[rank] = total(state[m] for m in members)
        elif step.kind == StepKind.REDUCE_SCATTER:
            summed = total(state[m] for m in members)
            new[rank] = np.split(summed, count, axis=dims.index(step.dst_dim))[mine]
        elif step.kind == StepKind.ALL_GATHER:
            new[rank] = np.concatenate(
                [state[m] for m in members], axis=dims.index(step.src_dim)
            )
        elif step.kind == StepKind.ALL_TO_ALL:
            src, dst = dims.index(step.src_dim), dims.index(step.dst_dim)
            received = [np.split(state[m], count, axis=dst)[mine] for m in members]
            new[rank] = np.concatenate(received, axis=src)
        else:
            assert step.kind == StepKind.SLICE
            new[rank] = np.split(state[rank], count, axis=dims.index(step.dst_dim))[mine]
    return new


def check_plan(
    src: Layout, dst: Layout, mesh: Mesh, rng: np.random.Generator, dtype_bytes: int, merge: bool
) -> list[RedistributionStep]:
    """Plan src → dst, execute it, and assert every intermediate and the final state."""
    shape = tuple(int(size) for size in src.sizes)
    global_array = rng.integers(-100, 100, size=shape)
    addends = make_addends(global_array, src.partial, mesh, rng)
    steps = redistribute(src, dst, mesh, dtype_bytes=dtype_bytes, merge=merge)
    state = materialize(src, mesh, addends, src.partial)
    current = src
    for step in steps:
        assert (step.before.shards, set(step.before.partial)) == (
            current.shards, set(current.partial)
        ), "steps do not chain"
        if step.kind == StepKind.SLICE:
            assert step.bytes_per_rank == 0
        for rank, local in state.items():
            if step.kind != StepKind.SLICE:
                assert step.bytes_per_rank == local.size * dtype_bytes, (step, rank)
        state = execute(step, state, mesh)
        expected = materialize(step.after, mesh, addends, src.partial)
        for rank in state:
            assert np.array_equal(state[rank], expected[rank]), (step.describe(), rank)
        current = step.after
    assert current.shards == dst.shards and set(current.partial) == set(dst.partial)
    final = materialize(dst, mesh, addends, src.partial)
    for rank in state:
        assert np.array_equal(state[rank], final[rank])
        assert np.array_equal(
            total(final[m] for m in group_members(mesh, rank, dst.partial)),
            materialize(dst.with_shards(dst.shards), mesh, addends, src.partial)[rank],
        )
    return steps


# -- strategies ----------------------------------------------------------------------------------


@st.composite
def placements(
    draw: st.DrawFn, axes: Sequence[str], ndims: int, allow_partial: bool
) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """Random shards (nesting order random) and partial axes over ``axes``."""
    choices = list(range(ndims)) + ["replicated"] + (["partial"] if allow_partial else [])
    where = {axis: draw(st.sampled_from(choices)) for axis in axes}
    order = draw(st.permutations(list(axes)))
    shards = tuple(tuple(a for a in order if where[a] == dim) for dim in range(ndims))
    partial = tuple(a for a in order if where[a] == "partial")
    return shards, partial


@st.composite
def cases(draw: st.DrawFn) -> tuple[Layout, Layout, Mesh, int, int]:
    count = draw(st.integers(1, 3))
    names = draw(st.permutations(list(AXIS_NAMES)))[:count]
    mesh = Mesh.of(**{name: draw(st.sampled_from([2, 3, 1])) for name in names})
    ndims = draw(st.integers(1, 3))
    src_shards, src_partial = draw(placements(names, ndims, allow_partial=True))
    dst_shards, dst_partial = draw(placements(names, ndims, allow_partial=True))
    if draw(st.booleans()):  # most cases keep dst partial ⊆ src partial, so they are valid
        dst_partial = tuple(a for a in dst_partial if a in src_partial)
    sizes = []
    for dim in range(ndims):
        needed = set(src_shards[dim]) | set(dst_shards[dim])
        factor = draw(st.sampled_from([1, 2]))
        sizes.append(sympy.Integer(factor * math.prod(int(mesh.size(a)) for a in needed)))
    assume(src_shards != dst_shards or set(src_partial) != set(dst_partial))
    dims = tuple(f"D{i}" for i in range(ndims))
    src = Layout(dims, src_shards, src_partial, "x", tuple(sizes))
    dst = Layout(dims, dst_shards, dst_partial, "x", tuple(sizes))
    return src, dst, mesh, draw(st.sampled_from([1, 2, 4])), draw(st.integers(0, 2**32 - 1))


# -- properties ----------------------------------------------------------------------------------


@settings(derandomize=True, max_examples=1000, deadline=None)
@given(cases(), st.booleans())
def test_executing_the_plan_gives_the_destination_on_every_rank(
    case: tuple[Layout, Layout, Mesh, int, int], merge: bool
) -> None:
    src, dst, mesh, dtype_bytes, seed = case
    creates_partial = not set(dst.partial) <= set(src.partial)
    try:
        check_plan(src, dst, mesh, np.random.default_rng(seed), dtype_bytes, merge)
    except ShardingError as error:
        assert creates_partial, f"valid change refused: {src} -> {dst} on {mesh}: {error}"
        return
    assert not creates_partial, f"{src} -> {dst} creates a partial sum but was planned"


@settings(derandomize=True, max_examples=200, deadline=None)
@given(cases())
def test_merging_keeps_kinds_and_never_adds_steps(
    case: tuple[Layout, Layout, Mesh, int, int],
) -> None:
    src, dst, mesh, dtype_bytes, _ = case
    if not set(dst.partial) <= set(src.partial):
        return
    single = redistribute(src, dst, mesh, dtype_bytes=dtype_bytes, merge=False)
    merged = redistribute(src, dst, mesh, dtype_bytes=dtype_bytes, merge=True)
    # unmerged steps name one axis, but an all-to-all moving a run of axes at once
    assert all(len(step.axes) == 1 or step.kind == StepKind.ALL_TO_ALL for step in single)
    assert len(merged) <= len(single)
    assert sorted(a for s in merged for a in s.axes) == sorted(a for s in single for a in s.axes)
    runs = [kind for kind, _ in itertools.groupby(s.kind for s in single)]
    assert [kind for kind, _ in itertools.groupby(s.kind for s in merged)] == runs


# -- the model itself must be able to fail ---------------------------------------------------------


def _bound(text: str, **sizes: int) -> Layout:
    return Layout.parse(text).bind_sizes(sizes)


def test_model_rejects_a_gather_in_the_wrong_block_order() -> None:
    """Reversing a merged all-gather's axes puts blocks in the wrong order: the model sees it."""
    mesh = Mesh.of(dp=2, tp=3)
    src, dst = _bound("x[B/(dp*tp), S]", B=12, S=2), _bound("x[B, S]", B=12, S=2)
    (step,) = redistribute(src, dst, mesh)
    assert step.axes == ("dp", "tp")
    rng = np.random.default_rng(0)
    addends = make_addends(rng.integers(0, 100, size=(12, 2)), (), mesh, rng)
    state = materialize(src, mesh, addends, ())
    good = execute(step, state, mesh)
    wrong = execute(
        RedistributionStep(
            step.kind, ("tp", "dp"), step.src_dim, step.dst_dim, step.bytes_per_rank,
            step.before, step.after,
        ),
        state, mesh,
    )
    expected = materialize(dst, mesh, addends, ())
    assert all(np.array_equal(good[r], expected[r]) for r in good)
    assert not all(np.array_equal(wrong[r], expected[r]) for r in wrong)


def test_model_partial_addends_differ_per_rank_and_sum_back() -> None:
    mesh = Mesh.of(dp=2, tp=2)
    layout = _bound("x[B/dp, H @ 1/tp]", B=4, H=4)
    rng = np.random.default_rng(1)
    global_array = rng.integers(0, 100, size=(4, 4))
    addends = make_addends(global_array, ("tp",), mesh, rng)
    state = materialize(layout, mesh, addends, ("tp",))
    assert not np.array_equal(state[0], state[1])  # ranks (dp=0, tp=0) and (dp=0, tp=1)
    assert np.array_equal(state[0] + state[1], global_array[:2])
    assert np.array_equal(state[2] + state[3], global_array[2:])


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("x[B/dp, S, H @ 1/tp]", "[B/tp, S, H/dp]"),
        ("x[B/(dp*cp*tp), S, H]", "[B, S/(tp*cp), H/dp]"),
        ("x[B/dp, S/(cp*tp), H]", "[B, S, H/(tp*cp*dp)]"),
        ("x[B, S, H @ 1/(dp*cp*tp)]", "[B/cp, S/(tp*dp), H]"),
    ],
)
def test_hand_picked_multi_axis_changes_execute(src: str, dst: str) -> None:
    mesh = Mesh.of(dp=2, cp=3, tp=2)
    sizes = {"B": 12, "S": 12, "H": 12}
    check_plan(
        _bound(src, **sizes), _bound(dst, **sizes), mesh, np.random.default_rng(7), 2, True
    )


# -- multi-axis all-to-all (expert parallelism folded over several axes) --------------------------


@st.composite
def moved_runs(draw: st.DrawFn) -> tuple[Layout, Layout, Mesh, tuple[str, ...], int]:
    """A run of a dim's innermost axes that the destination wants next on another dim."""
    names = draw(st.permutations(list(AXIS_NAMES)))
    mesh = Mesh.of(**{name: draw(st.sampled_from([2, 3])) for name in names})
    count = draw(st.integers(2, 3))
    run = tuple(names[:count])
    rest = names[count:]
    outer_src = tuple(a for a in rest if draw(st.booleans()))
    held = tuple(a for a in rest if a not in outer_src)
    sizes = (
        sympy.Integer(math.prod(int(mesh.size(a)) for a in (*outer_src, *run))),
        sympy.Integer(2 * math.prod(int(mesh.size(a)) for a in (*held, *run))),
    )
    src = Layout(("D0", "D1"), ((*outer_src, *run), held), (), "x", sizes)
    dst = Layout(("D0", "D1"), (outer_src, (*held, *run)), (), "x", sizes)
    return src, dst, mesh, run, draw(st.integers(0, 2**32 - 1))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(moved_runs(), st.booleans())
def test_a_run_of_axes_moves_in_one_all_to_all(
    case: tuple[Layout, Layout, Mesh, tuple[str, ...], int], reverse: bool
) -> None:
    src, dst, mesh, run, seed = case
    if reverse:
        src, dst = dst, src
    steps = check_plan(src, dst, mesh, np.random.default_rng(seed), 2, merge=False)
    (step,) = steps
    assert (step.kind, step.axes) == (StepKind.ALL_TO_ALL, run)
    assert step.bytes_per_rank == 2 * int(src.local_elements(mesh))


@pytest.mark.parametrize(("ep", "tp"), [(2, 2), (2, 3), (3, 2)])
def test_model_rejects_a_multi_axis_all_to_all_in_the_wrong_block_order(ep: int, tp: int) -> None:
    """Expert slots moving from C to E over (ep, tp): listing the axes as (tp, ep) sends every
    block to the wrong rank, and the executable model sees it."""
    mesh = Mesh.of(dp=2, ep=ep, tp=tp)
    sizes = {"E": 2 * ep * tp, "C": 2 * 2 * ep * tp, "H": 2}
    src = _bound("x[E, C/(dp*ep*tp), H]", **sizes)
    dst = _bound("x[E/(ep*tp), C/dp, H]", **sizes)
    (step,) = redistribute(src, dst, mesh)
    assert (step.kind, step.axes) == (StepKind.ALL_TO_ALL, ("ep", "tp"))
    rng = np.random.default_rng(3)
    addends = make_addends(rng.integers(0, 100, size=tuple(sizes.values())), (), mesh, rng)
    state = materialize(src, mesh, addends, ())
    expected = materialize(dst, mesh, addends, ())
    good = execute(step, state, mesh)
    wrong = execute(replace(step, axes=("tp", "ep")), state, mesh)
    assert all(np.array_equal(good[r], expected[r]) for r in good)
    assert not all(np.array_equal(wrong[r], expected[r]) for r in wrong)
