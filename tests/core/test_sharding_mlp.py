"""A two-layer MLP written once and sharded as DP, TP and TP+SP: the derived collectives are
exactly Megatron's (Shoeybi et al. 2019; Korthikanti et al. 2022), forward and backward."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy

from stage_core.autodiff import ShardedBackward, derive_backward
from stage_core.errors import ShardingError
from stage_core.mesh import Mesh, symbol
from stage_core.ops import Einsum
from stage_core.sharding import (
    CommStep,
    OpStep,
    ShardedForward,
    ShardingPlan,
    Step,
    dump_steps,
    shard_forward,
)
from tests.core.test_graph import mlp_block

GOLDEN = Path(__file__).parent / "golden"
MESH = Mesh.symbolic(["dp", "tp"])
SIZES = {"B": 4, "S": 16, "H": 8, "F": 32}
AXIS_SIZES = {"dp": 2, "tp": 2}

#: The one single-device block every plan below shards.
MLP = mlp_block()

PLANS: dict[str, tuple[dict[str, str], dict[tuple[str, str], str]]] = {
    "dp": ({"x": "[B/dp, S, H]"}, {}),
    "tp": (
        {"x": "[B/dp, S, H]", "w1": "[H, F/tp]", "w2": "[F/tp, H]", "y": "[B/dp, S, H]"},
        {},
    ),
    # Sequence parallel: x and y live sequence-sharded between blocks; the column-parallel
    # matmul consumes x whole along S.
    "tpsp": (
        {"x": "[B/dp, S/tp, H]", "w1": "[H, F/tp]", "w2": "[F/tp, H]", "y": "[B/dp, S/tp, H]"},
        {("h", "x"): "[B/dp, S, H]"},
    ),
}


def shard(name: str) -> tuple[ShardedForward, ShardedBackward]:
    stored, consumed = PLANS[name]
    forward = shard_forward(MLP, ShardingPlan.from_strings(MLP, stored, consumed), MESH)
    return forward, derive_backward(forward)


def comms(steps: tuple[Step, ...]) -> list[tuple[str, str, tuple[str, ...], str, str]]:
    """(phase, kind, axes, tensor, why) of every collective, in order; ``why`` is the reason's
    kind: consume, store, dout (output gradient), regather (saved input), grad (input grad)."""
    return [
        (s.phase, str(s.step.kind), s.step.axes, s.tensor, s.reason.partition(":")[0])
        for s in steps
        if isinstance(s, CommStep)
    ]


def golden_mlp_dump(name: str) -> str:
    forward, backward = shard(name)
    lines = [f"# mlp sharded as {name} on {MESH}", dump_steps(forward.steps + backward.steps)]
    for weight, layout in backward.weight_grads.items():
        lines.append(f"weight-grad {weight}: {layout}")
    for saved in backward.saved:
        lines.append(f"saved {saved.name}: {saved.layout} x{saved.bytes_per_element}B")
    return "\n".join(lines) + "\n"


# -- collectives -------------------------------------------------------------------------------


def test_dp_has_no_per_micro_batch_collective() -> None:
    forward, backward = shard("dp")
    assert comms(forward.steps) == [] and comms(backward.steps) == []


@pytest.mark.parametrize("name", ["dp", "tp", "tpsp"])
def test_weight_gradients_are_partial_sums_over_dp(name: str) -> None:
    """The step-level synchronisation (once per step, by lowering) reduces over these axes."""
    _, backward = shard(name)
    assert set(backward.weight_grads) == {"w1", "w2"}
    for weight, layout in backward.weight_grads.items():
        assert layout.partial == ("dp",), weight
    expected = {"dp": ("[H, F]", "[F, H]")}.get(name, ("[H, F/tp]", "[F/tp, H]"))
    assert str(backward.weight_grads["w1"]) == f"d.w1{expected[0][:-1]} @ 1/dp]"
    assert str(backward.weight_grads["w2"]) == f"d.w2{expected[1][:-1]} @ 1/dp]"


def test_tp_is_one_all_reduce_forward_and_one_backward() -> None:
    """Megatron's g (all-reduce after the row-parallel W2) and f (all-reduce of dX)."""
    forward, backward = shard("tp")
    assert comms(forward.steps) == [("fwd", "all_reduce", ("tp",), "y", "store")]
    assert comms(backward.steps) == [("bwd", "all_reduce", ("tp",), "d.x", "grad")]


def test_tp_sp_all_gather_and_reduce_scatter_forward_and_their_conjugates_backward() -> None:
    forward, backward = shard("tpsp")
    assert comms(forward.steps) == [
        ("fwd", "all_gather", ("tp",), "x", "consume"),
        ("fwd", "reduce_scatter", ("tp",), "y", "store"),
    ]
    backward_comms = comms(backward.steps)
    assert backward_comms == [
        ("bwd", "all_gather", ("tp",), "d.y", "dout"),  # conjugate of the reduce-scatter
        # Megatron re-gathers the saved sequence-sharded input for the W1 weight gradient
        # (it keeps only x/tp for memory) instead of saving the gathered x.
        ("bwd", "all_gather", ("tp",), "x", "regather"),
        ("bwd", "reduce_scatter", ("tp",), "d.x", "grad"),  # conjugate of the all-gather
    ]


def test_tp_sp_saves_the_sequence_sharded_input_and_regathers_it_before_dw1() -> None:
    _, backward = shard("tpsp")
    saved = {s.name: str(s.layout) for s in backward.saved}
    assert saved["x"] == "x[B/dp, S/tp, H]"
    names = [
        s.op.name if isinstance(s, OpStep) else f"{s.step.kind}:{s.tensor}" for s in backward.steps
    ]
    assert names.index("all_gather:x") < names.index("h.dw1")


def test_collective_bytes_match_megatron_volumes() -> None:
    """TP all-reduce of b·s·h; SP all-gather of the b·s·h/t shard, reduce-scatter of b·s·h."""
    bsh_bytes = SIZES["B"] // AXIS_SIZES["dp"] * SIZES["S"] * SIZES["H"] * 2
    values = {symbol(name): value for name, value in {**SIZES, **AXIS_SIZES}.items()}

    def bytes_of(name: str) -> list[tuple[str, int]]:
        forward, backward = shard(name)
        return [
            (str(s.step.kind), int(sympy.sympify(s.step.bytes_per_rank).subs(values)))
            for s in forward.steps + backward.steps
            if isinstance(s, CommStep)
        ]

    assert bytes_of("tp") == [("all_reduce", bsh_bytes)] * 2
    assert bytes_of("tpsp") == [
        ("all_gather", bsh_bytes // 2), ("reduce_scatter", bsh_bytes),
        ("all_gather", bsh_bytes // 2), ("all_gather", bsh_bytes // 2),
        ("reduce_scatter", bsh_bytes),
    ]


# -- FLOPs -------------------------------------------------------------------------------------


def _matmul_flops(steps: tuple[Step, ...], tensors: object, phase: str) -> int:
    total = 0
    for step in steps:
        if isinstance(step, OpStep) and step.phase == phase and isinstance(step.op, Einsum):
            cost = step.op.cost(step.in_layouts, step.out_layouts, tensors, SIZES, AXIS_SIZES)
            assert isinstance(cost.flops, int)
            total += cost.flops
    return total


@pytest.mark.parametrize(
    ("name", "divisor"), [("dp", 2), ("tp", 4), ("tpsp", 4)]
)
def test_backward_matmul_flops_are_exactly_twice_the_forward(name: str, divisor: int) -> None:
    forward, backward = shard(name)
    fwd = _matmul_flops(forward.steps, MLP.tensors, "fwd")
    bwd = _matmul_flops(backward.steps, backward.tensors, "bwd")
    single_device = 2 * (2 * SIZES["B"] * SIZES["S"] * SIZES["H"] * SIZES["F"])
    assert fwd * divisor == single_device
    assert bwd == 2 * fwd


def test_backward_has_two_gradient_matmuls_per_forward_matmul() -> None:
    _, backward = shard("tp")
    grads = [
        s.op.name for s in backward.steps if isinstance(s, OpStep) and isinstance(s.op, Einsum)
    ]
    assert sorted(grads) == ["h.dw1", "h.dx", "y.dg", "y.dw2"]


# -- refusals ----------------------------------------------------------------------------------


def test_a_block_output_left_as_a_partial_sum_is_refused() -> None:
    plan = ShardingPlan.from_strings(MLP, {"w1": "[H, F/tp]", "w2": "[F/tp, H]"})
    with pytest.raises(ShardingError, match="output 'y' leaves the block as a partial sum"):
        shard_forward(MLP, plan, MESH)


def test_plan_dims_must_match_the_tensor() -> None:
    with pytest.raises(ShardingError, match="has dims \\('B', 'H'\\), but the tensor has"):
        ShardingPlan.from_strings(MLP, {"x": "[B/dp, H]"})
    with pytest.raises(ShardingError, match="unknown tensor 'z'"):
        ShardingPlan.from_strings(MLP, {"z": "[B]"})


def test_inconsistent_plan_is_a_sharding_error_naming_the_block() -> None:
    plan = ShardingPlan.from_strings(MLP, {"w1": "[H/tp, F]"})
    with pytest.raises(ShardingError, match="block 'mlp': h: inconsistent input shardings"):
        shard_forward(MLP, plan, MESH)


# -- golden dumps ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLANS))
def test_golden_dump(name: str) -> None:
    expected = (GOLDEN / f"mlp_{name}.txt").read_text()
    assert golden_mlp_dump(name) == expected, "regenerate with `make golden` if intended"


def test_the_block_is_unchanged_by_sharding() -> None:
    before = MLP.dump()
    for name in PLANS:
        shard(name)
    assert MLP.dump() == before
