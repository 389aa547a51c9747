"""The rows of s36 rowsK read as their papers ran them (7 Dec 2026).

Vocabulary Parallelism's Megatron-LM baseline (arXiv 2411.05288, Appendix F Table 5): pure
pipeline parallelism with the transformer layers split equally and the input and output layers
on the first and last stages, micro-batch 1, 128 micro-batches, and the input and output
embeddings untied ("in all our experiments, we adapted the more difficult setting, untying the
input and output embedding weights", Section 6.1). The first (blind) reading took the GPT
flavor's tied embedding; the untied reading (``infer_defaults._UNTIED``) came after it. Zero
Bubble's Appendix H 1F1B rows (arXiv 2401.10241) read as its Table 4 rows do."""

from __future__ import annotations

import pytest

from stage_core.parallel.split import split_layers
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer_defaults import _UNTIED, recipe_defaults
from stage_explore.validation.setups import Case, data_dir
from tests.explore.infer_helpers import NO_SETUP, package_case, package_row, synthetic_case


def _rows(prefix: str) -> list[dict[str, str]]:
    """The package's no-setup rows whose id starts with ``prefix``."""
    return [r for r in read_csv(data_dir() / NO_SETUP) if r["id"].startswith(prefix)]


def _evaluable(row: dict[str, str]) -> Case:
    """The row's case, which must be set up (model and layout, no reason)."""
    case = package_case(row)
    assert not case.reason and case.model is not None and case.parallel is not None, row["id"]
    return case


def test_the_vocabulary_parallelism_baseline_rows_run_as_the_paper_states() -> None:
    """24 rows: pp = GPUs, no TP / DP, L / p layers on every stage (the embedding on the first,
    the output layer on the last), 128 micro-batches of 1, the CSV's vocabulary, untied."""
    rows = _rows("VOCABPAR-A100-")
    assert len(rows) == 24
    for row in rows:
        case = _evaluable(row)
        model, parallel = case.model, case.parallel
        assert model is not None and parallel is not None
        pp = int(row["num_gpus"])
        assert (parallel.tp, parallel.pp, parallel.dp, parallel.vpp) == (1, pp, 1, 1), row["id"]
        assert (parallel.micro_batch, parallel.global_batch) == (1, 128), row["id"]
        assert split_layers(model.layers, pp, 1) == (model.layers // pp,) * pp, row["id"]
        assert (model.vocab, model.seq_len) == (int(row["vocab"]), int(row["seq_len"]))
        assert not model.tied_embeddings, row["id"]
        assert any("tied_embeddings false" in a for a in case.assumptions), row["id"]
        assert case.framework == "megatron-lm-2021", row["id"]


def test_the_zero_bubble_appendix_rows_read_as_its_table_4_rows() -> None:
    """Nine 1F1B rows at m <= p: the Table 4 rows' framework, tie and split (one layer fewer on
    the first and the last stage), the global batch m x b the table states."""
    rows = _rows("ZBH-A100-")
    assert len(rows) == 9
    for row in rows:
        case = _evaluable(row)
        model, parallel = case.model, case.parallel
        assert model is not None and parallel is not None
        size, smallest_m = row["id"].split("-")[2], {8: 24, 16: 48}[parallel.pp]
        twin = _evaluable(package_row(f"ZB-A100-{size}-1F1B-PP{parallel.pp}-MB{smallest_m}"))
        assert twin.model is not None and twin.parallel is not None
        assert case.framework == twin.framework == "megatron-lm-2021"
        assert model.tied_embeddings and model == twin.model, row["id"]
        assert parallel.micro_batch == twin.parallel.micro_batch
        m = int(row["id"].rsplit("-M", 1)[1])
        assert parallel.global_batch == m * parallel.micro_batch and m <= parallel.pp
        middle = (model.layers + 2) // parallel.pp
        expected = (middle - 1, *(middle,) * (parallel.pp - 2), middle - 1)
        assert split_layers(model.layers, parallel.pp, 1) == expected, row["id"]


@pytest.mark.parametrize(
    "text",
    [
        "untying the input and output embedding weights",
        "input and output embeddings untied ('in all our experiments ...')",
        "untied input-output embeddings, RoPE, no bias",
        "params_b counts untied input and output embeddings",
        "GQA 8 KV heads, untied embeddings",
        "embedding weights untied",
    ],
)
def test_a_text_stating_untied_embeddings_is_read(text: str) -> None:
    assert _UNTIED.search(text)


@pytest.mark.parametrize(
    "text",
    [
        # Zero Bubble's rows: a parameter-count check, not the run's setting
        "32000 with tied embeddings is the one that reproduces all four stated sizes (untied "
        "gives 1.55 / 6.30 / 14.80 / 28.48B)",
        # FlagPerf's rows: flags the launch did NOT pass
        "pass no --position-embedding-type, --untie-embeddings-and-output-weights, "
        "--disable-bias-linear",
        "InternLM-7B, untied head, bias on the attention projections",
    ],
)
def test_a_size_check_or_a_flag_not_passed_is_not_read_as_untied(text: str) -> None:
    assert not _UNTIED.search(text)


def test_the_untied_reading_needs_a_tied_flavor_and_the_text() -> None:
    """On a tied GPT flavor the stated words untie it; the same row without them, or a flavor
    already untied, takes no such field."""
    row = {"id": "X", "model": "GPT", "notes": "untying the input and output embedding weights"}
    said = recipe_defaults(row, "megatron-lm-2021", "bf16", "gpt3-175b", {}, {})
    assert said.model.get("tied_embeddings") is False
    assert any("tied_embeddings false" in n for n in said.notes)
    silent = recipe_defaults({**row, "notes": ""}, "megatron-lm-2021", "bf16", "gpt3-175b", {}, {})
    assert "tied_embeddings" not in silent.model
    untied = recipe_defaults(row, "megatron-core", "bf16", "llama3-8b", {}, {})
    assert "tied_embeddings" not in untied.model


def test_a_synthetic_vocabulary_row_without_the_words_keeps_the_flavors_tie() -> None:
    """The blind reading of s36 rowsK: with the sentence removed the GPT flavor's tie returns."""
    base = package_row("VOCABPAR-A100-4B-V256K-S2048-PP8-BASELINE")
    cells = {c: _UNTIED.sub("(removed)", base[c]) for c in ("notes", "uncertain")}
    case = synthetic_case(base, "extra.csv", **cells)
    assert case.model is not None and case.model.tied_embeddings, case.reason
