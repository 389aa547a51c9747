"""Ops: inferred output layouts, sharding errors, and per-rank costs (exact after binding)."""

from __future__ import annotations

import pytest
import sympy

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import symbol
from stage_core.ops import (
    Attention,
    BaseOp,
    Cost,
    CrossEntropy,
    Custom,
    Einsum,
    Elementwise,
    Embedding,
    Reduction,
    Sizes,
    Tensor,
    local_extent,
)

L = Layout.parse
AXES: Sizes = {"dp": 2, "tp": 4, "cp": 2}


def cost(
    op: BaseOp, ins: list[Layout], tensors: dict[str, Tensor], sizes: Sizes, axes: Sizes = AXES
) -> Cost:
    """The op's per-rank cost at its natural output layouts."""
    outs = op.infer(ins, tensors)
    return op.cost(ins, outs, tensors, sizes, axes)


# -- einsum ----------------------------------------------------------------------------------

MATMUL_TENSORS = {
    "a": Tensor("a", ("M", "K")),
    "b": Tensor("b", ("K", "N"), role="weight"),
    "c": Tensor("c", ("M", "N")),
}
MATMUL = Einsum("mm", ("a", "b"), ("c",), "mk,kn->mn")
MKN = {"M": 8, "K": 16, "N": 32}


@pytest.mark.parametrize(
    ("a", "b", "out", "flops"),
    [
        ("a[M, K]", "b[K, N]", "c[M, N]", 2 * 8 * 16 * 32),
        ("a[M/dp, K]", "b[K, N]", "c[M/dp, N]", 2 * 4 * 16 * 32),
        ("a[M, K]", "b[K, N/tp]", "c[M, N/tp]", 2 * 8 * 16 * 8),
        ("a[M, K/tp]", "b[K/tp, N]", "c[M, N @ 1/tp]", 2 * 8 * 4 * 32),
        ("a[M/dp, K/tp]", "b[K/tp, N]", "c[M/dp, N @ 1/tp]", 2 * 4 * 4 * 32),
        ("a[M, K/(dp*tp)]", "b[K/(dp*tp), N]", "c[M, N @ 1/(dp*tp)]", 2 * 8 * 2 * 32),
    ],
)
def test_matmul_layouts_and_flops_are_2mkn_of_local_sizes(
    a: str, b: str, out: str, flops: int
) -> None:
    ins = [L(a), L(b)]
    (c,) = MATMUL.infer(ins, MATMUL_TENSORS)
    assert str(c) == out
    result = MATMUL.cost(ins, [c], MATMUL_TENSORS, MKN, AXES)
    assert result.flops == flops and isinstance(result.flops, int)


def test_matmul_bytes_read_and_written() -> None:
    ins = [L("a[M/dp, K]"), L("b[K, N/tp]")]
    result = cost(MATMUL, ins, MATMUL_TENSORS, MKN)
    assert result.bytes_read == (4 * 16 + 16 * 8) * 2
    assert result.bytes_written == 4 * 8 * 2


def test_matmul_flops_symbolic() -> None:
    M, K, N, dp = (symbol(n) for n in ("M", "K", "N", "dp"))
    sizes = {"M": M, "K": K, "N": N}
    result = cost(MATMUL, [L("a[M/dp, K]"), L("b[K, N]")], MATMUL_TENSORS, sizes, {"dp": dp})
    assert sympy.simplify(result.flops - 2 * M * K * N / dp) == 0


def test_batched_einsum_counts_every_label() -> None:
    tensors = {
        "q": Tensor("q", ("B", "S", "H")),
        "w": Tensor("w", ("H", "F"), role="weight"),
        "y": Tensor("y", ("B", "S", "F")),
    }
    op = Einsum("proj", ("q", "w"), ("y",), "bsh,hf->bsf")
    result = cost(op, [L("q[B/dp, S, H]"), L("w[H, F/tp]")], tensors,
                  {"B": 4, "S": 16, "H": 8, "F": 32})
    assert result.flops == 2 * 2 * 16 * 8 * 8


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        ("a[M, K/tp]", "b[K, N]", "inconsistent input shardings for dim K (tp vs whole)"),
        ("a[M, K/dp]", "b[K/tp, N]", "inconsistent input shardings for dim K (dp vs tp)"),
        ("a[M, K/(dp*tp)]", "b[K/(tp*dp), N]", "inconsistent input shardings"),
        ("a[M/tp, K]", "b[K, N/tp]", "the output would use axis 'tp' twice"),
        ("a[M, K @ 1/tp]", "b[K, N/tp]", "a product of partial sums is not linear"),
        ("a[M, K @ 1/tp]", "b[K, N @ 1/tp]", "a product of partial sums is not linear"),
        ("a[M/dp, K/tp]", "b[K/tp, N/dp]", "the output would use axis 'dp' twice"),
    ],
)
def test_einsum_inconsistent_shardings_are_refused(a: str, b: str, reason: str) -> None:
    with pytest.raises(ShardingError) as caught:
        MATMUL.infer([L(a), L(b)], MATMUL_TENSORS)
    assert reason in str(caught.value) and "mm:" in str(caught.value)


def test_einsum_with_one_partial_input_stays_partial() -> None:
    (c,) = MATMUL.infer([L("a[M/dp, K @ 1/tp]"), L("b[K, N]")], MATMUL_TENSORS)
    assert str(c) == "c[M/dp, N @ 1/tp]"


def test_einsum_saves_its_inputs() -> None:
    assert MATMUL.saved == ("a", "b")


def test_local_extent_refuses_indivisible_sizes() -> None:
    assert local_extent("M", ("dp", "tp"), {"M": 16}, AXES) == 2
    with pytest.raises(ShardingError, match="dim M over dp\\*tp: 12 is not divisible by 8"):
        local_extent("M", ("dp", "tp"), {"M": 12}, AXES)


# -- element-wise and reductions ---------------------------------------------------------------

ACT = {name: Tensor(name, ("B", "S", "H")) for name in ("x", "y", "z")}
BSH = {"B": 4, "S": 16, "H": 8}


def test_elementwise_flops_per_local_element() -> None:
    gelu = Elementwise("gelu", ("x",), ("y",), ops_per_element=8)
    result = cost(gelu, [L("x[B/dp, S, H/tp]")], ACT, BSH)
    assert result.flops == 8 * 2 * 16 * 2
    assert (result.bytes_read, result.bytes_written) == (2 * 16 * 2 * 2,) * 2


def test_linear_elementwise_accepts_partial_sums() -> None:
    add = Elementwise("add", ("x", "y"), ("z",), linear=True)
    (out,) = add.infer([L("x[B, S, H @ 1/tp]"), L("y[B, S, H @ 1/tp]")], ACT)
    assert str(out) == "z[B, S, H @ 1/tp]"


@pytest.mark.parametrize(
    ("op", "layouts", "reason"),
    [
        (Elementwise("gelu", ("x",), ("y",)), ["x[B, S, H @ 1/tp]"], "cannot take the partial sum"),
        (
            Elementwise("add", ("x", "y"), ("z",), linear=True),
            ["x[B/dp, S, H]", "y[B, S, H]"],
            "inputs have different layouts",
        ),
        (
            Elementwise("add", ("x", "y"), ("z",), linear=True),
            ["x[B, S, H @ 1/tp]", "y[B, S, H]"],
            "inputs have different layouts",
        ),
        (Reduction("norm", ("x",), ("y",), ("H",)), ["x[B, S, H/tp]"], "reduces over H"),
        (Reduction("norm", ("x",), ("y",), ("H",)), ["x[B, S, H @ 1/tp]"], "partial sum"),
    ],
)
def test_elementwise_and_reduction_refusals(op: BaseOp, layouts: list[str], reason: str) -> None:
    with pytest.raises(ShardingError, match=reason):
        op.infer([L(t) for t in layouts], ACT)


def test_elementwise_broadcast_operand_must_match_the_dims_it_meets() -> None:
    tensors = {**ACT, "bias": Tensor("bias", ("H",), role="weight")}
    add = Elementwise("bias_add", ("x", "bias"), ("y",), linear=True)
    (out,) = add.infer([L("x[B/dp, S, H/tp]"), L("bias[H/tp]")], tensors)
    assert str(out) == "y[B/dp, S, H/tp]"
    with pytest.raises(ShardingError, match="does not match"):
        add.infer([L("x[B/dp, S, H/tp]"), L("bias[H]")], tensors)
    with pytest.raises(ShardingError, match="broadcast operand .* is a partial sum"):
        add.infer([L("x[B, S, H]"), L("bias[H @ 1/tp]")], tensors)


def test_reduction_over_a_repeated_dim_name_reduces_the_last() -> None:
    tensors = {n: Tensor(n, ("B", "S", "S")) for n in ("scores", "probs")}
    softmax = Reduction("softmax", ("scores",), ("probs",), ("S",))
    (out,) = softmax.infer([L("scores[B, S/cp, S]")], tensors)
    assert str(out) == "probs[B, S/cp, S]"
    with pytest.raises(ShardingError, match="reduces over S, which is partitioned over cp"):
        softmax.infer([L("scores[B, S, S/cp]")], tensors)


def test_reduction_keeps_layout_and_counts_input_elements() -> None:
    norm = Reduction("norm", ("x",), ("y",), ("H",), ops_per_element=5)
    (out,) = norm.infer([L("x[B/dp, S/tp, H]")], ACT)
    assert str(out) == "y[B/dp, S/tp, H]"
    assert cost(norm, [L("x[B/dp, S/tp, H]")], ACT, BSH).flops == 5 * 2 * 4 * 8


# -- attention ---------------------------------------------------------------------------------

ATT = {
    "q": Tensor("q", ("B", "S", "N", "D")),
    "k": Tensor("k", ("B", "S", "K", "D")),
    "v": Tensor("v", ("B", "S", "K", "D")),
    "o": Tensor("o", ("B", "S", "N", "D")),
}
ATT_SIZES = {"B": 2, "S": 8, "N": 4, "K": 2, "D": 4}


def attention(causal: bool) -> Attention:
    return Attention("attn", ("q", "k", "v"), ("o",), causal)


def qkv(q: str, kv: str) -> list[Layout]:
    return [L(f"q[{q}]"), L(f"k[{kv}]"), L(f"v[{kv}]")]


def test_attention_flops_are_4_b_sq_skv_n_d() -> None:
    result = cost(attention(False), qkv("B, S, N, D", "B, S, K, D"), ATT, ATT_SIZES)
    assert result.flops == 4 * 2 * 8 * 8 * 4 * 4


def test_attention_flops_are_quadratic_in_the_sequence() -> None:
    short = cost(attention(False), qkv("B, S, N, D", "B, S, K, D"), ATT, ATT_SIZES).flops
    long = cost(attention(False), qkv("B, S, N, D", "B, S, K, D"), ATT,
                {**ATT_SIZES, "S": 16}).flops
    assert long == 4 * short
    B, S, N, D = (symbol(n) for n in "BSND")
    symbolic = cost(attention(False), qkv("B, S, N, D", "B, S, K, D"), ATT,
                    {"B": B, "S": S, "N": N, "K": symbol("K"), "D": D}).flops
    assert sympy.simplify(symbolic - 4 * B * S**2 * N * D) == 0


def test_causal_attention_halves_the_flops() -> None:
    full = cost(attention(False), qkv("B, S, N, D", "B, S, K, D"), ATT, ATT_SIZES).flops
    causal = cost(attention(True), qkv("B, S, N, D", "B, S, K, D"), ATT, ATT_SIZES).flops
    assert causal * 2 == full


def test_context_parallel_attention_partitions_queries_only() -> None:
    ins = qkv("B, S/cp, N/tp, D", "B, S, K/tp, D")
    (out,) = attention(True).infer(ins, ATT)
    assert str(out) == "o[B, S/cp, N/tp, D]"
    sizes = {**ATT_SIZES, "N": 8, "K": 4}
    whole = cost(attention(True), qkv("B, S, N, D", "B, S, K, D"), ATT, sizes).flops
    sharded = attention(True).cost(ins, [out], ATT, sizes, AXES).flops
    assert sharded * AXES["cp"] * AXES["tp"] == whole


@pytest.mark.parametrize(
    ("q", "kv", "reason"),
    [
        ("B, S, N, D", "B, S/cp, K, D", "must hold the whole sequence"),
        ("B, S, N/tp, D", "B, S, K, D", "differ in batch, heads or head dim"),
        ("B/dp, S, N, D", "B, S, K, D", "differ in batch, heads or head dim"),
        ("B, S, N, D @ 1/tp", "B, S, K, D", "is a partial sum"),
    ],
)
def test_attention_refusals(q: str, kv: str, reason: str) -> None:
    with pytest.raises(ShardingError, match=reason):
        attention(False).infer(qkv(q, kv), ATT)


def test_attention_k_and_v_must_share_a_layout() -> None:
    ins = [L("q[B, S, N/tp, D]"), L("k[B, S, K/tp, D]"), L("v[B, S, K, D]")]
    with pytest.raises(ShardingError, match="must share a layout"):
        attention(False).infer(ins, ATT)


# -- embedding, cross-entropy, custom ------------------------------------------------------------

EMB = {
    "ids": Tensor("ids", ("B", "S"), 4, "input"),
    "table": Tensor("table", ("V", "H"), role="weight"),
    "x": Tensor("x", ("B", "S", "H")),
}


def test_embedding_is_a_gather_with_zero_flops() -> None:
    op = Embedding("embed", ("ids", "table"), ("x",))
    result = cost(op, [L("ids[B/dp, S]"), L("table[V, H]")], EMB, {**BSH, "V": 64})
    assert result.flops == 0
    assert result.bytes_written == 2 * 16 * 8 * 2
    assert result.bytes_read == 2 * 16 * 4 + 2 * 16 * 8 * 2


def test_vocab_parallel_embedding_is_a_partial_sum() -> None:
    op = Embedding("embed", ("ids", "table"), ("x",))
    (out,) = op.infer([L("ids[B/dp, S]"), L("table[V/tp, H]")], EMB)
    assert str(out) == "x[B/dp, S, H @ 1/tp]"


def test_embedding_hidden_dim_must_be_whole() -> None:
    with pytest.raises(ShardingError, match="hidden dim must be whole"):
        Embedding("embed", ("ids", "table"), ("x",)).infer(
            [L("ids[B, S]"), L("table[V, H/tp]")], EMB
        )


CE = {
    "logits": Tensor("logits", ("B", "S", "V")),
    "targets": Tensor("targets", ("B", "S"), 4, "input"),
    "loss": Tensor("loss", ("B", "S"), 4),
}


def test_cross_entropy_five_flops_per_logit_and_vocab_parallel_axes() -> None:
    op = CrossEntropy("xent", ("logits", "targets"), ("loss",))
    ins = [L("logits[B/dp, S, V/tp]"), L("targets[B/dp, S]")]
    (out,) = op.infer(ins, CE)
    assert str(out) == "loss[B/dp, S]"
    assert op.vocab_axes(ins) == ("tp",)
    assert op.cost(ins, [out], CE, {"B": 4, "S": 16, "V": 64}, AXES).flops == 5 * 2 * 16 * 16
    assert op.saved == ("logits",)


def test_cross_entropy_refuses_partial_logits() -> None:
    op = CrossEntropy("xent", ("logits", "targets"), ("loss",))
    with pytest.raises(ShardingError, match="are a partial sum"):
        op.infer([L("logits[B, S, V @ 1/tp]"), L("targets[B, S]")], CE)


def test_custom_op_costs_are_explicit_and_divided_per_rank() -> None:
    op = Custom("router", ("x",), ("y",), flops="2*B*S*H", bytes_read="B*S*H*2",
                bytes_written="B*S*4", divide_by=("tp",))
    ins = [L("x[B, S, H]")]
    result = cost(op, ins, ACT, BSH)
    assert result == Cost(2 * 4 * 16 * 8 // 4, 4 * 16 * 8 * 2 // 4, 4 * 16 * 4 // 4)
    assert isinstance(result.flops, int)
    (out,) = op.infer([L("x[B/dp, S, H @ 1/tp]")], ACT)
    assert str(out) == "y[B/dp, S, H @ 1/tp]"  # copies the first input's layout


def test_custom_op_refuses_indivisible_per_rank_cost() -> None:
    op = Custom("odd", ("x",), ("y",), flops="B*S*H+1", divide_by=("tp",))
    with pytest.raises(ShardingError, match="not divisible"):
        cost(op, [L("x[B, S, H]")], ACT, BSH)


def test_cost_adds() -> None:
    assert Cost(1, 2, 3) + Cost(10, 20, 30) == Cost(11, 22, 33)
