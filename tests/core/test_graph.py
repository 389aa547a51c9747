"""Single-device blocks: the builder, validation errors, and a stable text dump (golden)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.graph import Block
from stage_core.ops import Custom, Einsum, Elementwise

GOLDEN = Path(__file__).parent / "golden"


def tiny_block() -> Block:
    """A small block with one op of every kind: embedding, norm, projections, attention,
    element-wise with a broadcast bias, a custom op, the output layer and cross-entropy."""
    b = Block("tiny")
    ids = b.input("ids", ("B", "S"), dtype_bytes=4)
    targets = b.input("targets", ("B", "S"), dtype_bytes=4)
    table = b.weight("table", ("V", "H"))
    x = b.embedding(ids, table, out="x")
    scale = b.weight("norm.scale", ("H",))
    n = b.reduction((x, scale), "n", ("H",), ops_per_element=5, saves=(x,))
    wq = b.weight("wq", ("H", "N", "D"))
    wkv = b.weight("wkv", ("H", "K", "D"))
    q = b.einsum("bsh,hnd->bsnd", n, wq, out="q")
    k = b.einsum("bsh,hkd->bskd", n, wkv, out="k")
    v = b.einsum("bsh,hkd->bskd", n, wkv, out="v", name="v_proj")
    o = b.attention(q, k, v, out="o", causal=True)
    wo = b.weight("wo", ("N", "D", "H"))
    a = b.einsum("bsnd,ndh->bsh", o, wo, out="a")
    bias = b.weight("bias", ("H",))
    r = b.elementwise(a, bias, out="r", linear=True)
    c = b.custom(
        Custom("mix", (r,), ("c",), flops="3*B*S*H", bytes_read="2*B*S*H", bytes_written="2*B*S*H"),
        ("B", "S", "H"),
    )
    logits = b.einsum("bsh,vh->bsv", c, table, out="logits")
    loss = b.cross_entropy(logits, targets, out="loss")
    b.output(loss)
    return b.validate()


def mlp_block() -> Block:
    """The two-layer MLP x·W1 → GeLU → ·W2 (also used by the sharding tests)."""
    b = Block("mlp")
    x = b.input("x", ("B", "S", "H"))
    w1 = b.weight("w1", ("H", "F"))
    w2 = b.weight("w2", ("F", "H"))
    h = b.einsum("bsh,hf->bsf", x, w1, out="h")
    g = b.elementwise(h, out="g", ops_per_element=8, saves=("h",))
    y = b.einsum("bsf,fh->bsh", g, w2, out="y")
    b.output(y)
    return b.validate()


def golden_block_dumps() -> str:
    return tiny_block().dump() + "\n\n" + mlp_block().dump() + "\n"


# -- builder -----------------------------------------------------------------------------------


def test_builder_derives_output_dims_and_roles() -> None:
    b = tiny_block()
    assert b.tensors["q"].dims == ("B", "S", "N", "D")
    assert b.tensors["logits"].dims == ("B", "S", "V")
    assert b.tensors["loss"].dims == ("B", "S") and b.tensors["loss"].dtype_bytes == 4
    assert b.tensors["x"].dims == ("B", "S", "H")
    assert (b.tensors["ids"].role, b.tensors["wq"].role, b.tensors["q"].role) == (
        "input", "weight", "activation"
    )
    assert b.inputs == ["ids", "targets"] and b.outputs == ["loss"]
    assert [op.kind for op in b.ops] == [
        "embedding", "reduction", "einsum", "einsum", "einsum", "attention", "einsum",
        "elementwise", "custom", "einsum", "crossentropy",
    ]
    assert b.producer()["v"].name == "v_proj"


def test_einsum_op_names_default_to_the_output() -> None:
    b = mlp_block()
    assert [op.name for op in b.ops] == ["h", "g", "y"]
    assert isinstance(b.ops[0], Einsum) and b.ops[0].subscripts == "bsh,hf->bsf"


# -- validation errors -------------------------------------------------------------------------


def test_tensor_defined_twice() -> None:
    b = Block("b")
    b.input("x", ("B",))
    with pytest.raises(ConfigError, match="block 'b': tensor 'x' is defined twice"):
        b.weight("x", ("B",))


def test_op_reading_an_unknown_tensor() -> None:
    b = Block("b")
    b.input("x", ("B",))
    b.tensor("y", ("B",))
    b.ops.append(Elementwise("y", ("x", "ghost"), ("y",)))
    with pytest.raises(ConfigError, match="op 'y' reads unknown 'ghost'"):
        b.validate()


def test_op_reading_a_tensor_before_it_is_produced() -> None:
    b = mlp_block()
    b.ops.reverse()
    with pytest.raises(ConfigError, match="op 'y' reads 'g' before it is produced"):
        b.validate()


def test_output_never_produced() -> None:
    b = Block("b")
    b.input("x", ("B",))
    b.tensor("y", ("B",))
    b.output("y")
    with pytest.raises(ConfigError, match="output 'y' is never produced"):
        b.validate()


def test_op_name_used_twice() -> None:
    b = Block("b")
    x = b.input("x", ("B",))
    b.elementwise(x, out="y", name="act")
    b.elementwise(x, out="z", name="act")
    with pytest.raises(ConfigError, match="op name 'act' is used twice"):
        b.validate()


def test_einsum_label_count_must_match_the_dims() -> None:
    b = Block("b")
    x, w = b.input("x", ("B", "H")), b.weight("w", ("H", "F"))
    with pytest.raises(ConfigError, match="gives 3 labels for 'x', which has dims"):
        b.einsum("bsh,hf->bf", x, w, out="y")


def test_einsum_label_must_name_one_dim() -> None:
    b = Block("b")
    x, w = b.input("x", ("B", "H")), b.weight("w", ("H", "F"))
    with pytest.raises(ConfigError, match="label 'a' is dim B in one input and H in 'w'"):
        b.einsum("ab,ac->bc", x, w, out="y")


def test_elementwise_dims_must_match() -> None:
    b = Block("b")
    x, y = b.input("x", ("B", "S", "H")), b.input("y", ("B", "H", "S"))
    with pytest.raises(ConfigError, match="element-wise 'z' mixes dims"):
        b.elementwise(x, y, out="z")
    other = b.weight("w", ("F",))  # not a subset of x's dims: no broadcasting
    with pytest.raises(ConfigError, match="mixes dims"):
        b.elementwise(x, other, out="z")


def test_elementwise_broadcasts_an_operand_over_a_subset_of_dims() -> None:
    b = Block("b")
    x, bias = b.input("x", ("B", "S", "H")), b.weight("bias", ("H",))
    assert b.tensors[b.elementwise(x, bias, out="z", linear=True)].dims == ("B", "S", "H")


def test_attention_shapes_are_checked() -> None:
    b = Block("b")
    q = b.input("q", ("B", "S", "N", "D"))
    k = b.input("k", ("B", "S", "K", "D"))
    v = b.input("v", ("B", "S", "N", "D"))  # values must have the keys' heads
    with pytest.raises(ConfigError, match="attention needs q\\[B,S,N,D\\]"):
        b.attention(q, k, v, out="o", causal=False)
    # A value dim of its own is allowed (latent attention): the output takes it.
    u = b.input("u", ("B", "S", "K", "U"))
    out = b.attention(q, k, u, out="o2", causal=False)
    assert b.tensors[out].dims == ("B", "S", "N", "U")


# -- golden dump -------------------------------------------------------------------------------


def test_dump_is_stable_and_matches_the_golden_file() -> None:
    text = golden_block_dumps()
    assert text == golden_block_dumps()
    expected = (GOLDEN / "blocks.txt").read_text()
    assert text == expected, "regenerate with `make golden` if the change is intended"


def test_dump_lists_every_tensor_and_op_once() -> None:
    lines = mlp_block().dump().splitlines()
    assert lines[0] == "block mlp"
    assert "  input      x[B, S, H] 2B" in lines
    assert "  einsum       y: g, w2 -> y" in lines
    assert lines[-1] == "  outputs y"
    assert len(lines) == 1 + 6 + 3 + 1
