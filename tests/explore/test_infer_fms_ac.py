"""fms-fsdp's 'selective' activation checkpointing read from a row that states its amount
(s34 fmssel, :mod:`stage_explore.validation.infer_fms_ac`): the fraction p (``spread``) or the
earlier interval k (``every``), and the IBM FSDP blog's 13B rows set up with it."""

from __future__ import annotations

from fractions import Fraction

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.compact import partial_recompute_pattern
from stage_core.models.layers import kept_block_name
from stage_explore.validation.infer_fms_ac import (
    checkpointed_blocks,
    fms_ac_fields,
    stated_amount,
)
from tests.explore.package_cases import package_cases


def _ac_handler(p: Fraction, layers: int) -> list[bool]:
    """fms-fsdp's fraction rule, block by block (fms_fsdp/policies/ac_handler.py 4eb97d80): a
    block checkpointed when its count from 1 times p reaches cut_off, 1/2 then up by 1."""
    picked, cut_off = [], Fraction(1, 2)
    for count in range(1, layers + 1):
        picked.append(count * p >= cut_off)
        cut_off += picked[-1]
    return picked


#: fms-fsdp's own test fractions (tests/test_selective_ac.py), and two whose p·L is not whole.
PAIRS = ((0, 1), (1, 100), (1, 5), (1, 3), (1, 2), (3, 5), (2, 3), (1, 1), (5, 3), (-1, 1))
FRACTIONS = [Fraction(n, d) for n, d in (*PAIRS, (7, 40), (13, 37))]


@pytest.mark.parametrize("layers", [1, 15, 32, 40, 80])
@pytest.mark.parametrize("p", FRACTIONS)
def test_the_count_is_the_number_the_rule_picks(p: Fraction, layers: int) -> None:
    assert checkpointed_blocks(p, layers) == sum(_ac_handler(p, layers))


@pytest.mark.parametrize("p", [Fraction(1, 5), Fraction(1, 3), Fraction(1, 2), Fraction(3, 5)])
def test_spread_places_the_blocks_where_fms_fsdp_does(p: Fraction) -> None:
    """fms-fsdp's tests/test_selective_ac.py checks these fractions on 15 blocks; the model's
    'spread' of the same count over them checkpoints the same blocks."""
    layers = 15
    fields, _ = fms_ac_fields("fms-fsdp", f"selective (p = {p})", layers) or ({}, "")
    assert fields["recompute_method"] == "spread"
    pattern = partial_recompute_pattern(
        ("dense",) * layers, (layers,), fields["recompute_num_layers"], "spread"
    )
    assert [kind == "dense" for kind in pattern] == _ac_handler(p, layers)
    assert kept_block_name("dense") in pattern


@pytest.mark.parametrize(
    ("cell", "amount"),
    [
        ("selective (selective_checkpointing 0.5)", ("p", Fraction(1, 2))),
        ("selective, selective_checkpointing=1/3", ("p", Fraction(1, 3))),
        ("selective (p = .25)", ("p", Fraction(1, 4))),
        ("selective (every_xth_item 2)", ("k", Fraction(2))),
        ("selective: every 3rd block", ("k", Fraction(3))),
        ("selective, every other layer", ("k", Fraction(2))),
        ("selective", None),
        ("selective (Activation checkpoint: Selective)", None),
    ],
)
def test_the_amount_a_cell_states(cell: str, amount: tuple[str, Fraction] | None) -> None:
    assert stated_amount(cell) == amount


@pytest.mark.parametrize(
    "cell",
    [
        "selective (p = 1/2, every_xth_item 3)",
        "selective (p = 1/2; selective_checkpointing 0.25)",
        "selective (every_xth_item 0)",
        "selective (p = 1/0)",
    ],
)
def test_a_contradictory_or_impossible_amount_is_a_one_line_error(cell: str) -> None:
    with pytest.raises(ConfigError, match="selective|every_xth_item"):
        stated_amount(cell)


def test_the_fields_for_each_amount() -> None:
    spread = fms_ac_fields("fms-fsdp", "selective (selective_checkpointing 0.5)", 40)
    every = fms_ac_fields("fms-fsdp", "selective (every_xth_item 2)", 40)
    assert spread is not None and every is not None
    assert spread[0] == {
        "recompute": "full",
        "recompute_method": "spread",
        "recompute_num_layers": 20,
    }
    assert every[0] == {"recompute": "full", "recompute_method": "every", "recompute_num_layers": 2}
    assert "20 of the 40 blocks" in spread[1] and "20 of the 40 blocks" in every[1]
    # the edges: every block is full recompute, none is no recompute
    whole = fms_ac_fields("fms-fsdp", "selective (p = 1)", 40)
    assert whole is not None and whole[0] == {"recompute": "full"}
    full = fms_ac_fields("fms-fsdp", "selective (every_xth_item 1)", 40)
    none = fms_ac_fields("fms-fsdp", "selective (p = 0.01)", 40)
    assert full is not None and full[0] == {"recompute": "full"}
    assert none is not None and none[0] == {"recompute": "none"}
    # 'selective' after a label, as spelled tables write it, is the same reading
    labelled = fms_ac_fields("fms-fsdp", "activation checkpointing: selective (p = 1/2)", 40)
    assert labelled is not None and labelled[0] == spread[0]
    # other frameworks, other granularities, nothing stated: not this reading
    assert fms_ac_fields("torchtitan", "selective (p = 0.5)", 40) is None
    assert fms_ac_fields("fms-fsdp", "full (p = 0.5)", 40) is None
    assert fms_ac_fields("fms-fsdp", "selective", 40) is None


def test_the_blog_13b_rows_run_half_of_their_blocks_checkpointed() -> None:
    """IBMFSDP-{H100,A100}-LLAMA2-13B (setups.toml, the CSV's every_xth_item 2): evaluated
    with 20 of the 40 blocks recomputed, HSDP over 8-GPU nodes as the 7B rows."""
    cases = {c.id: c for c in package_cases() if c.id.startswith("IBMFSDP-")}
    for row_id in ("IBMFSDP-H100-LLAMA2-13B", "IBMFSDP-A100-LLAMA2-13B"):
        case = cases[row_id]
        assert case.parallel is not None, (row_id, case.reason)
        parallel = case.parallel
        assert parallel.recompute.value == "full"
        assert (parallel.recompute_method, parallel.recompute_num_layers) == ("every", 2)
        assert parallel.dp_shard == 8
        pattern = partial_recompute_pattern(("dense",) * 40, (40,), 2, "every")
        assert sum(kind == "dense" for kind in pattern) == 20
