"""Megatron-LM's model-architecture defaults a launch row's text says its script left in place
(s34 flagperf): BAAI FlagPerf's Llama 3 scripts pass no --position-embedding-type,
--untie-embeddings-and-output-weights, --disable-bias-linear, --hidden-dropout or
--attention-dropout, so Megatron-LM's GPT defaults ran (learned absolute positions, tied
embeddings, biased linears, dropout 0.1), not the Llama flavor's rotary / untied / biasless /
dropout-free blocks; and a text's "dropout 0.1" is not "dropout 0"."""

from __future__ import annotations

import pytest

from stage_core.models.spec import Position
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_defaults import _NO_DROPOUT
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"
STATED = (
    "Megatron-LM's defaults ran: learned absolute position embeddings, tied input and output "
    "embeddings, biases in the linear layers, hidden and attention dropout 0.1"
)


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


def _row(row_id: str, **cells: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == row_id]
    return {**row, **cells}


def _fields(case: Case) -> tuple[Position, bool, bool, bool]:
    assert case.model is not None, case.reason
    model = case.model
    return model.position, model.tied_embeddings, model.bias, model.dropout


def test_flagperf_rows_run_megatron_lms_model_defaults() -> None:
    """Every FlagPerf row (13, 8B and 70B) states the defaults in its ``uncertain`` cell and is
    read with them, each with its note."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("FLAGPERF-")]
    assert len(rows) == 13
    for row in rows:
        case = _case(row)
        assert _fields(case) == (Position.LEARNED, True, True, True), row["id"]
        notes = " ".join(case.assumptions)
        for said in ("position learned", "tied_embeddings", "(bias)", "(dropout)"):
            assert said in notes, (row["id"], said)


def test_without_the_statement_the_flavor_stands() -> None:
    """The launch alone is not read as leaving the model flags: a row naming Llama usually
    passed them. The FlagPerf row with its ``uncertain`` cell emptied keeps Llama 3 8B's."""
    case = _case(_row("FLAGPERF-L3-8B-A800-PP2DP2TP2-8", uncertain=""))
    assert _fields(case) == (Position.ROTARY, False, False, False)


def test_only_a_megatron_lm_launch_reads_them() -> None:
    """The same words on a row not read as Megatron-LM's own launcher (a NeMo row) change
    nothing: they name Megatron-LM's argument defaults."""
    nemo = _row("NEMO2504-GB200-LLAMA3-8B")
    before = _fields(_case(nemo))
    after = _fields(_case({**nemo, "uncertain": f"{nemo['uncertain']} {STATED}"}))
    assert after == before


@pytest.mark.parametrize(
    ("said", "fields"),
    [
        ("learned absolute position embeddings", (Position.LEARNED, False, False, False)),
        ("tied input and output embeddings", (Position.ROTARY, True, False, False)),
        ("untied embeddings", (Position.ROTARY, False, False, False)),
        ("biases in the linear layers", (Position.ROTARY, False, True, False)),
        ("hidden dropout 0.1", (Position.ROTARY, False, False, True)),
        ("dropout 0.0", (Position.ROTARY, False, False, False)),
    ],
)
def test_each_default_is_read_alone(said: str, fields: tuple[Position, bool, bool, bool]) -> None:
    """Each field is set only by its own words; "untied" is not "tied", "dropout 0.0" is off."""
    assert _fields(_case(_row("FLAGPERF-L3-8B-A800-PP2DP2TP2-8", uncertain=said))) == fields


@pytest.mark.parametrize(
    ("text", "off"),
    [
        ("dropout 0", True),
        ("dropout=0.0", True),
        ("attention dropout 0.00 in the yaml", True),
        ("no dropout", True),
        ("dropout 0.1", False),
        ("hidden dropout 0.05", False),
        ("dropout 0.", True),
        ("dropout 0.0.", True),
    ],
)
def test_a_nonzero_dropout_is_not_dropout_off(text: str, off: bool) -> None:
    """The no-dropout reading matched "dropout 0" before ".1" (``\\b`` between "0" and ".")."""
    assert bool(_NO_DROPOUT.search(text)) is off
