"""A TensorRT-LLM serving row packs its prompts into the engine's ``max_num_tokens`` per step
(trtllm-bench build's heuristic, stage_explore/validation/serving_trtllm.py), not the model's
8,192 default: TensorRT-LLM's scheduler stops a step at ``max_num_tokens`` tokens
(microBatchScheduler.cpp). Rows without a ``kv_free_fraction`` cell (vLLM) keep 8,192."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.serving import Phase, ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import (
    DEFAULT_PREFILL_TOKENS_PER_STEP,
    RequestMix,
    evaluate_serve,
)
from stage_explore.system import load_system
from stage_explore.validation.serving import SERVING_RUNS, evaluate_row
from stage_explore.validation.serving_trtllm import engine_max_num_tokens

#: Llama 3.1 70B BF16, TP 8 on A100 80GB, 1000/1000: trtllm-bench build's floor of 2,048 tokens
#: per step, two 1,000-token prompts where 8,192 packs eight.
ROW = "TRTLLM017-70B-A100-TP8-1000-1000"


def _rows() -> dict[str, dict[str, str]]:
    with SERVING_RUNS.open(newline="") as file:
        return {row["id"]: row for row in csv.DictReader(file)}


def _serve(row: dict[str, str], budget: int) -> tuple[float, int]:
    """The row's prediction with ``budget`` tokens per step, at the batch the validator chose;
    and the engine's ``max_num_tokens``."""
    backend = AnalyticalBackend()
    result = evaluate_row(row, 2, backend)
    batch = int(result.setup.rsplit("batch ", 1)[1].split(" ")[0].rstrip(","))
    isl, osl = int(row["isl"]), int(row["osl"])
    model, system = get_flavor(row["flavor"]), load_system(row["system"])
    base = ServingConfig(
        phase=Phase.DECODE, batch=batch, tp=int(row["tp"]), pp=int(row["pp"]), ep=int(row["ep"]),
        precision=row["precision"], kv_precision=row["kv_precision"], context_len=isl + osl // 2,
    )  # fmt: skip
    tokens = engine_max_num_tokens(
        model, replace(base, batch=1), system.accelerator.memory_bytes, isl, osl
    )
    mix = RequestMix(prompt_len=isl, output_len=osl)
    served = evaluate_serve(backend, model, base, system, mix, prefill_tokens_per_step=budget)
    return served.tokens_per_s, tokens


def test_a_trtllm_row_packs_prompts_into_the_engines_tokens_per_step() -> None:
    row = _rows()[ROW]
    predicted = evaluate_row(row, 2, AnalyticalBackend())
    _, tokens = _serve(row, DEFAULT_PREFILL_TOKENS_PER_STEP)
    assert tokens < DEFAULT_PREFILL_TOKENS_PER_STEP // int(row["isl"]) * int(row["isl"])
    assert f", {tokens} tokens per step, batch " in predicted.setup
    with_budget, _ = _serve(row, tokens)
    with_default, _ = _serve(row, DEFAULT_PREFILL_TOKENS_PER_STEP)
    assert predicted.predicted == pytest.approx(with_budget, rel=1e-12)
    # fewer prompts per prefill step: each prompt's GEMMs are smaller, so slower
    assert with_budget < with_default


def test_a_vllm_row_keeps_the_default_budget() -> None:
    rows = [r for r in _rows().values() if not (r.get("kv_free_fraction") or "").strip()]
    assert rows, "the shipped CSV has vLLM rows (no kv_free_fraction cell)"
    # Without an engine cell (the shipped vLLM rows name `vllm-v1` and are replayed since s37
    # vllm, test_serving_vllm.py), a row without kv_free_fraction keeps the steady state.
    row = {**rows[0], "engine": "", "num_prompts": "", "max_num_batched_tokens": ""}
    predicted = evaluate_row(row, 2, AnalyticalBackend())
    assert "tokens per step" not in predicted.setup
    with_default, _ = _serve(row, DEFAULT_PREFILL_TOKENS_PER_STEP)
    assert predicted.predicted == pytest.approx(with_default, rel=1e-12)
