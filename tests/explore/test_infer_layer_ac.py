"""torchtitan's 'selective layer' activation checkpointing read into the model's terms
(:mod:`stage_explore.validation.infer_layer_ac`, s29 selayer)."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.compact import partial_recompute_pattern
from stage_explore.validation.infer_layer_ac import (
    TORCHTITAN_LAYER_AC_DEFAULT,
    layer_ac_fields,
    layer_ac_interval,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("activation checkpointing 'selective layer'", (TORCHTITAN_LAYER_AC_DEFAULT, False)),
        ("selective layer AC, every 3rd layer", (3, True)),
        ("selective-layer checkpointing of every other block", (2, True)),
        ("--activation_checkpoint.selective_ac_option 4", (4, True)),
        ("selective_ac_option = '1'", (1, True)),
        ("selective op AC", None),
        ("full AC, every 2nd layer offloaded", None),  # no 'selective layer' named
    ],
)
def test_the_interval_is_the_stated_one_else_torchtitans_default(
    text: str, expected: tuple[int, bool] | None
) -> None:
    assert layer_ac_interval(text) == expected


def test_a_stated_interval_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="interval 'selective_ac_option 0': expected") as info:
        layer_ac_interval("torchtitan run, FSDP2 on 64 GPUs,\nselective_ac_option 0, long notes")
    assert "\n" not in str(info.value) and "FSDP2" not in str(info.value)


def test_only_torchtitan_selective_cells_are_read() -> None:
    text = "activation checkpointing 'selective layer'"
    fields, note = layer_ac_fields("torchtitan", "selective", text) or ({}, "")
    assert fields == {"recompute": "full", "recompute_method": "every", "recompute_num_layers": 2}
    assert "an assumption" in note
    assert layer_ac_fields("fms-fsdp", "selective", text) is None
    assert layer_ac_fields("torchtitan", "full", text) is None
    assert layer_ac_fields("torchtitan", "selective", "selective op") is None


def test_every_nth_block_counted_from_one_is_recomputed() -> None:
    """parallelize_llama's checkpoint_wrapper: the counter is incremented before
    ``count % n == 0``, so with n = 2 the 2nd, 4th, ... blocks are wrapped (0-based 1, 3, ...)."""
    pattern = partial_recompute_pattern(("t",) * 6, (6,), 2, "every", 1)
    recomputed = [i for i, kind in enumerate(pattern) if kind == "t"]
    assert recomputed == [1, 3, 5]
