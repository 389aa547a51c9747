"""Sparse rows and metric cells as a paper's table gives them (s27 spellings2): each case below
was read as something else, or refused without saying why, before. The reader runs on a copy of
a package row (a fixture, not the package data); the canonical row's case is computed, not
written out."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case, data_dir
from tests.explore.case_reading import case_reading as _read

DATA = data_dir()
#: The template's text without the columns that name its framework.
NEUTRAL = {"source": "A further table", "source_table": "", "url": "", "notes": "", "uncertain": ""}
#: NeMo 24.07's Llama 3 70B (TP 4, PP 4, CP 2 on 64 H100, seq 8192, GBS 128); Megatron-Bridge's
#: Qwen3 235B MoE (EP 8).
DENSE, MOE = "NEMO2407-H100-LLAMA3-70B", "MBM-B200-25.11-QWEN3_235B_A22B-64"
#: A model's dims all empty: only its name says what it is.
NO_DIMS = {c: "" for c in ("params_b", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab")}


def _case(template: str, **cells: str) -> Case:
    (row,) = [r for r in read_csv(DATA / "published_runs_held_out.csv") if r["id"] == template]
    case, *_ = row_cases({**row, **NEUTRAL, "id": "SPARSE-1", **cells}, "rows.csv", 1, DATA)
    return case


def _refused(case: Case, *said: str) -> None:
    assert case.reason and "\n" not in case.reason
    assert all(s in case.reason for s in said), case.reason


def test_a_gpt_of_no_flavor_size_takes_four_times_hidden_as_its_ffn() -> None:
    """GPT 40B with hidden 8192 and ffn empty took GPT-3 175B's 49152 (6 × hidden)."""
    dims = {**NO_DIMS, "model": "GPT 40B", "layers": "48", "hidden": "8192", "heads": "64"}
    case = _case(DENSE, **dims)
    assert case.model is not None and case.model.ffn == 4 * 8192
    assert _read(case) == _read(_case(DENSE, **{**dims, "ffn": "32768"}))


def test_a_gated_family_of_no_flavor_size_needs_its_ffn_and_kv_heads() -> None:
    """Llama 2 34B's 48 / 8192 / 64 was timed with Llama 2 7B's FFN (11008) and as many key /
    value heads as heads (the model has 22016 and 8)."""
    dims = {**NO_DIMS, "model": "Llama 2 34B", "layers": "48", "hidden": "8192", "heads": "64"}
    _refused(_case(DENSE, **dims), "'Llama 2 34B'", "ffn")
    _refused(_case(DENSE, **{**dims, "ffn": "22016"}), "kv_heads", "multi-head")
    case = _case(DENSE, **{**dims, "ffn": "22016", "kv_heads": "8"})
    assert case.model is not None and (case.model.ffn, case.model.kv_heads) == (22016, 8)


def test_a_family_whose_flavors_agree_keeps_the_base_kv_heads() -> None:
    """Every Llama 3 size has 8 key / value heads: Llama 3.2 3B's row without kv_heads reads (a
    guard: the refusal above is only for a family whose flavors differ)."""
    dims = {**NO_DIMS, "model": "Llama 3.2 3B", "layers": "28", "hidden": "3072", "heads": "24",
            "ffn": "8192"}  # fmt: skip
    case = _case(DENSE, **dims)
    assert case.model is not None and case.model.kv_heads == 8


@pytest.mark.parametrize(
    ("notes", "flops"),
    [
        ("TFLOP/s counted without recompute FLOPs", "megatron-model"),
        ("the TFLOP/s exclude recompute FLOPs", "megatron-model"),
        ("TFLOP/s as HFU (activation recomputation included)", "megatron-recompute"),
    ],
)
def test_the_notes_flop_convention_is_read_with_its_negation(notes: str, flops: str) -> None:
    """'without recompute FLOPs' was read as counted with recompute (it contains the words)."""
    metric = {"tokens_per_s_per_gpu": "", "tflops_per_gpu": "400"}
    case = _case(DENSE, **metric, notes=notes)
    assert (case.metric, case.flops) == ("tflops_per_gpu", flops)


@pytest.mark.parametrize(
    "cells",
    [
        {"global_batch_seqs": "1,048,576 tokens"},
        {"global_batch_seqs": "", "notes": "global batch size of 1,048,576 tokens"},
    ],
)
def test_a_global_batch_in_tokens_is_read_as_sequences(cells: dict[str, str]) -> None:
    """1,048,576 tokens of 8192 is the template's 128 sequences (refused before)."""
    case = _case(DENSE, **cells)
    assert _read(case) == _read(_case(DENSE))
    assert any("tokens ÷ seq_len 8192" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cells", "said"),
    [
        ({"global_batch_seqs": "1M tokens"}, "rounded to millions"),
        ({"global_batch_seqs": "", "notes": "global batch 4M tokens"}, "rounded to millions"),
        ({"global_batch_seqs": "1,000,000 tokens"}, "not a whole number of sequences"),
        ({"global_batch_seqs": "1,048,576 tokens", "seq_len": ""}, "seq_len is not stated"),
    ],
)
def test_a_global_batch_in_tokens_that_does_not_say_its_sequences_is_refused(
    cells: dict[str, str], said: str
) -> None:
    _refused(_case(DENSE, **cells), said)


def test_an_moe_row_with_ep_empty_says_it_runs_expert_parallel_size_1() -> None:
    """Expert parallel size 1 was taken silently for a 128-expert model."""
    case = _case(MOE, ep="")
    assert case.parallel is not None and case.parallel.ep == 1
    assert any("expert parallel size 1 (ep column empty" in a for a in case.assumptions)
    assert not any("ep column empty" in a for a in _case(MOE).assumptions)
    assert not any("ep column empty" in a for a in _case(DENSE, ep="").assumptions)


def test_a_row_without_dp_and_num_gpus_says_both_are_empty() -> None:
    """It said 'num_gpus None is not a multiple of tp·pp·cp'."""
    _refused(_case(DENSE, dp="", num_gpus=""), "dp and num_gpus are both empty")


def test_an_hfu_alone_says_why_it_is_not_compared() -> None:
    empty = {m: "" for m in ("tokens_per_s_per_gpu", "tflops_per_gpu", "iter_time_s", "mfu_pct")}
    _refused(_case(DENSE, **empty, hfu_pct="50"), "hfu_pct alone is not compared")


@pytest.mark.parametrize("text", ["DeepSpeed ZeRO-3", "Megatron-DeepSpeed, ZeRO stage 2"])
def test_deepspeed_zero_2_or_3_with_pipeline_stages_is_refused(text: str) -> None:
    """DeepSpeed's PipelineEngine asserts ZeRO-2 / ZeRO-3 are incompatible with pipelining; the
    row (pp 4) was set up as both."""
    _refused(_case(DENSE, source=text, dp_sharding=""), "pp 4", "PipelineEngine")
    case = _case(DENSE, source=text, dp_sharding="", pp="1", vpp="", dp="8")
    assert case.parallel is not None and case.parallel.zero in (2, 3)


@pytest.mark.parametrize("name", ["Megatron-Turing NLG 530B", "MT NLG 530B"])
def test_megatron_turing_nlg_by_its_full_name_is_mt_nlg(name: str) -> None:
    """Only 'MT-NLG' was read; the paper's own name was refused."""
    canonical = _case(DENSE, **NO_DIMS, model="MT-NLG 530B")
    assert _read(_case(DENSE, **NO_DIMS, model=name)) == {
        **_read(canonical),
        "model": {**_read(canonical)["model"], "name": name},
    }
