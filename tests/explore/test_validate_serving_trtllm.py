"""TensorRT-LLM's KV-cache rule for the serving rows (stage_explore/validation/serving_trtllm.py):
a fraction of the memory free after the weights and the engine's activation memory, every sequence
holding its blocks to completion (``isl + osl``); rows without the cell keep vLLM's rule."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.serving import Phase, ServingConfig, ServingStep
from stage_core.serving.program import kv_cache_bytes_per_token, lower_step, serving_memory
from stage_explore.system import load_system
from stage_explore.validation.serving import SERVING_RUNS, validate_serving
from stage_explore.validation.serving_trtllm import (
    engine_max_num_tokens,
    kv_free_fraction,
    trtllm_batch,
)

#: The memory-starved v0.17 row: Llama 3.1 70B FP8 on one H100 80GB (docs/validation.md).
STARVED = "TRTLLM017-70B-H100-TP1-1000-1000"


def _row(tmp_path: Path, row_id: str, **cells: str) -> Path:
    """The shipped CSV's row ``row_id`` alone, with ``cells`` overriding its cells."""
    with SERVING_RUNS.open(newline="") as file:
        reader = csv.DictReader(file)
        fields = list(reader.fieldnames or [])
        (row,) = [r for r in reader if r["id"] == row_id]
    path = tmp_path / f"runs-{len(list(tmp_path.iterdir()))}.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerow({**row, **cells})
    return path


def _batch(path: Path) -> int:
    (row,) = validate_serving(path)
    return int(row.setup.rsplit("batch ", 1)[1].split(" ")[0])


def test_the_cell_is_a_fraction_below_one_or_empty() -> None:
    assert kv_free_fraction("", 2) is None and kv_free_fraction(None, 2) is None
    assert kv_free_fraction(" 0.95 ", 2) == 0.95
    for bad in ("1.0", "0", "-0.5", "most", "nan"):
        with pytest.raises(ConfigError, match=f"line 7: `kv_free_fraction` must be a number in "
                           rf"\(0, 1\) .*got '{bad}'"):  # fmt: skip
            kv_free_fraction(bad, 7)


def test_a_bad_cell_in_the_csv_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 2: `kv_free_fraction` .* got '1.5'"):
        validate_serving(_row(tmp_path, STARVED, kv_free_fraction="1.5"))


def test_every_trtllm_row_states_its_fraction() -> None:
    """The 46 TensorRT-LLM rows ran trtllm-bench (both pages: 0.95 in most cases, 0.90 after an
    OOM); every other row (vLLM) leaves the cell empty and keeps vLLM's rule."""
    with SERVING_RUNS.open(newline="") as file:
        rows = list(csv.DictReader(file))
    trtllm = [r for r in rows if "trtllm-bench" in r["source"]]
    assert len(trtllm) == 46 and {r["kv_free_fraction"] for r in trtllm} == {"0.95"}
    assert {r["kv_free_fraction"] for r in rows if r not in trtllm} <= {""}


def test_the_batch_fills_the_fraction_of_the_free_memory_to_completion(tmp_path: Path) -> None:
    """The served batch is the largest whose ``isl + osl`` tokens of KV fit ``fraction x (memory
    - weights - activation)``, checked with the closed-form bytes per token."""
    model, system = get_flavor("llama3-70b"), load_system("h100-80gb")
    memory = system.accelerator.memory_bytes
    base = ServingConfig(phase=Phase.DECODE, tp=1, precision="fp8", kv_precision="fp8",
                         context_len=1500)  # fmt: skip
    tokens = engine_max_num_tokens(model, base, memory, 1000, 1000)
    prefill = ServingConfig(phase=Phase.PREFILL, prompt_len=tokens, precision="fp8",
                            kv_precision="fp8")  # fmt: skip
    (held,) = serving_memory(lower_step(model, prefill, ServingStep(tokens, tokens)))
    free = memory - held.weight_bytes - held.activation_bytes
    per_sequence = kv_cache_bytes_per_token(model, 1) * 2000
    for fraction in (0.90, 0.95):
        batch = _batch(_row(tmp_path, STARVED, kv_free_fraction=str(fraction)))
        assert batch * per_sequence <= fraction * free < (batch + 1) * per_sequence
        full = replace(base, context_len=2000)
        assert trtllm_batch(model, full, memory, fraction, tokens) == batch


def test_the_rule_replaces_vllms_only_where_the_cell_is_set(tmp_path: Path) -> None:
    """On the starved row vLLM's 0.9 of the total leaves the KV a few GB (batch 18); TensorRT-LLM
    gives it 0.95 of what the loaded engine leaves. An empty cell keeps vLLM's rule."""
    vllm = _batch(_row(tmp_path, STARVED, kv_free_fraction=""))
    low, high = (_batch(_row(tmp_path, STARVED, kv_free_fraction=f)) for f in ("0.90", "0.95"))
    assert vllm < low < high
    model, system = get_flavor("llama3-70b"), load_system("h100-80gb")
    base = ServingConfig(phase=Phase.DECODE, tp=1, precision="fp8", kv_precision="fp8",
                         context_len=1500)  # fmt: skip
    (memory,) = serving_memory(lower_step(model, replace(base, batch=vllm), base.steps()[0]))
    assert memory.total_bytes <= 0.9 * system.accelerator.memory_bytes


def test_the_engine_tokens_follow_trtllm_bench_build() -> None:
    """tuning.py's finetune_setting: a starved engine gets the 2,048 floor; an 8B engine with
    thousands of sequences reaches the 4,096-sequence cap and 8,192 tokens (4,096 x 2)."""
    memory = load_system("h100-80gb").accelerator.memory_bytes
    fp8 = dict(precision="fp8", kv_precision="fp8")
    starved = ServingConfig(phase=Phase.DECODE, tp=1, context_len=1500, **fp8)
    assert engine_max_num_tokens(get_flavor("llama3-70b"), starved, memory, 1000, 1000) == 2048
    small = ServingConfig(phase=Phase.DECODE, tp=1, context_len=64, **fp8)
    assert engine_max_num_tokens(get_flavor("llama3-8b"), small, memory, 128, 128) == 8192
    # a prompt-heavy dataset: tokens = sequences x (1 + isl / osl), rounded up to 1,024 from
    # 8,192: one GPU fits 0.95 x (memory - weights) / (64 KiB x 2,176) sequences of 2,048 + 128
    (held,) = serving_memory(lower_step(get_flavor("llama3-8b"), small, small.steps()[0]))
    sequences = 0.95 * (memory - held.weight_bytes) / (2 * 32 * 8 * 128 * 2176)
    expected = 1024 * -(-sequences * (1 + 2048 / 128) // 1024)
    assert engine_max_num_tokens(get_flavor("llama3-8b"), small, memory, 2048, 128) == expected
    # on eight GPUs the 4,096-sequence cap binds, then the 32,768-token one
    eight = replace(small, tp=8)
    assert engine_max_num_tokens(get_flavor("llama3-8b"), eight, memory, 2048, 128) == 32768
