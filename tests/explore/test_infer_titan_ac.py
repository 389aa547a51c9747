"""What AMD's rocm/pytorch-training v25.2 rows of s35 rowsH showed the inference misread
(7 Dec 2026): a torchtitan Llama 3.1 70B row with the ``recompute`` cell empty was read as no
recompute, a run the model itself predicts out of memory (905 GiB on a 192 GiB MI300X), where a
run started from torchtitan's ``llama3_70b.toml`` checkpoints every block (``mode = "full"``).
An empty cell on a torchtitan row now reads the shipped Llama 3 train config's mode
(:mod:`stage_explore.validation.infer_titan_ac`); a stated cell, a text saying no checkpointing
ran, another framework and another flavor keep the generic reading (no recompute)."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_titan_ac import TORCHTITAN_SHIPPED_AC, torchtitan_shipped_ac
from tests.explore.infer_helpers import package_row, synthetic_case

#: The s35 rowsH torchtitan row (recompute cell empty) and FSDP1 row (recompute 'none').
TITAN_70B = "AMDPT-MI300X-L31-70B-BF16-S8K-LBS4"
FSDP_8B = "AMDPT-MI300X-L31-8B-BF16-S8K-MB3"


def test_an_empty_cell_on_a_torchtitan_70b_row_reads_the_shipped_full_mode() -> None:
    """llama3_70b.toml ``[activation_checkpoint] mode = "full"``; it was no recompute."""
    case = synthetic_case(package_row(TITAN_70B), "extra.csv")
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert case.parallel.recompute == "full"
    assert any("llama3_70b.toml mode 'full'" in a for a in case.assumptions)
    assert not any(a.startswith("inferred: no activation recompute") for a in case.assumptions)


def test_an_empty_cell_on_a_torchtitan_8b_row_reads_selective_op() -> None:
    """llama3_8b.toml ``mode = 'selective'``, ``selective_ac_option = 'op'``: torchtitan's
    op-level policy (recompute_modules ['op'])."""
    base = package_row(FSDP_8B)
    cells = {
        "source": "torchtitan Llama 3.1 8B benchmark",
        "recompute": "",
        "notes": "",
        "uncertain": "",
    }
    case = synthetic_case(base, "extra.csv", **cells)
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert case.parallel.recompute == "selective"
    assert tuple(case.parallel.recompute_modules) == ("op",)


@pytest.mark.parametrize(
    "cells",
    [
        {"recompute": "none"},  # a stated cell is kept
        {"notes": "trained with no activation checkpointing"},  # the text says none ran
        {"uncertain": "activation_checkpoint.mode = 'none'"},  # torchtitan's own spelling
    ],
)
def test_a_stated_or_denied_recompute_keeps_none(cells: dict[str, str]) -> None:
    """The shipped mode fills an empty cell only: what the row states or says wins."""
    case = synthetic_case(package_row(TITAN_70B), "extra.csv", **cells)
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert case.parallel.recompute == "none"


def test_another_framework_keeps_the_generic_empty_cell_reading() -> None:
    """An FSDP1 row (the fsdp profile) with the cell empty: no recompute, as before."""
    case = synthetic_case(package_row(FSDP_8B), "extra.csv", recompute="")
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert case.parallel.recompute == "none"


def test_only_the_shipped_llama3_sizes_have_a_mode() -> None:
    """Flavors without a torchtitan train config return None; the table names 8B / 70B / 405B."""
    row = {"recompute": "", "source": "torchtitan"}
    assert torchtitan_shipped_ac(row, "llama2-7b") is None
    assert torchtitan_shipped_ac({**row, "recompute": "selective"}, "llama3-70b") is None
    assert {m for m, _ in TORCHTITAN_SHIPPED_AC.values()} == {"selective", "full"}
    assert torchtitan_shipped_ac(row, "llama3-405b") is not None
