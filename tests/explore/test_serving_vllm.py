"""vLLM V1's offline wave, replayed (stage_explore/validation/serving_vllm.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.validation.serving import SERVING_RUNS, validate_serving
from stage_explore.validation.serving_vllm import (
    StepTime,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    simulate_wave,
)


def _constant(seconds: float = 1.0) -> StepTime:
    """Every step takes ``seconds``."""
    return lambda decode, context, prefill, length: seconds


def test_a_wave_that_fits_runs_prefill_then_osl_minus_one_decodes() -> None:
    """8 requests of 16 + 32 tokens, room for all at full length: one prefill step (the first
    token), 31 decode steps, nothing preempted."""
    wave = simulate_wave(8, 16, 32, max_num_seqs=8, budget=1024, blocks=8 * 3,
                         step_time=_constant())  # fmt: skip
    assert (wave.steps, wave.preempted, wave.recomputed_tokens) == (32, 0, 0)
    assert wave.seconds == 32.0


def test_the_step_budget_chunks_the_prompts() -> None:
    """A budget of 32 tokens: step 1 prefills 2 prompts of 16; step 2 decodes them first
    (running requests first), then prefills the third prompt and 14 tokens of the fourth;
    step 3 finishes the fourth's 2 tokens, which then decodes 7 more."""
    wave = simulate_wave(4, 16, 8, max_num_seqs=4, budget=32, blocks=64, step_time=_constant())
    assert wave.steps == 3 + 7 and wave.preempted == 0
    long = simulate_wave(1, 100, 2, max_num_seqs=1, budget=32, blocks=64, step_time=_constant())
    assert long.steps == 4 + 1  # 32 + 32 + 32 + 4 prompt tokens, then one decode


def test_a_cache_too_small_for_the_wave_preempts_the_newest_and_recomputes() -> None:
    """Room for 4 of 8 requests at full length (3 blocks of 16 each): the newest are
    preempted while the wave grows, their prompt and generated tokens recomputed later, and the
    run takes longer than with room for all."""
    calls: list[tuple[int, int]] = []

    def timed(decode: int, context: float, prefill: int, length: float) -> float:
        calls.append((decode, prefill))
        return 1.0

    tight = simulate_wave(8, 16, 32, max_num_seqs=8, budget=1024, blocks=12, step_time=timed)
    roomy = simulate_wave(8, 16, 32, max_num_seqs=8, budget=1024, blocks=24,
                          step_time=_constant())  # fmt: skip
    assert tight.preempted >= 4 and tight.recomputed_tokens > 4 * 16
    assert tight.seconds > roomy.seconds
    assert max(decode for decode, _ in calls[-5:]) <= 4  # the survivors / resumed, at most 4
    assert sum(prefill for _, prefill in calls) >= 8 * 16 + tight.recomputed_tokens


def test_max_num_seqs_caps_the_running_requests() -> None:
    seen: list[int] = []

    def timed(decode: int, context: float, prefill: int, length: float) -> float:
        seen.append(decode + (prefill // 16))
        return 1.0

    wave = simulate_wave(8, 16, 4, max_num_seqs=3, budget=1024, blocks=100, step_time=timed)
    assert max(seen) <= 3 and wave.preempted == 0


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="needs 4 KV blocks, more than the cache's 3"):
        simulate_wave(1, 40, 20, max_num_seqs=1, budget=64, blocks=3, step_time=_constant())
    with pytest.raises(ConfigError, match="`max_num_seqs` must be a positive int, but got 0"):
        simulate_wave(1, 4, 4, max_num_seqs=0, budget=64, blocks=3, step_time=_constant())


def test_the_llm_class_defaults_follow_the_gpu() -> None:
    """``vllm/engine/arg_utils.py``: 16,384 tokens / 1,024 sequences on a GPU of at least 70 GiB
    that is not an A100, else 8,192 / 256."""
    assert default_max_num_batched_tokens(load_system("mi300x")) == 16384
    assert default_max_num_batched_tokens(load_system("h100-80gb")) == 16384
    assert default_max_num_batched_tokens(load_system("a100-80gb")) == 8192
    assert default_max_num_seqs(load_system("a100-80gb")) == 256


def _amd_row(tmp_path: Path, **cells: str) -> Path:
    with SERVING_RUNS.open(newline="") as file:
        reader = csv.DictReader(file)
        fields = list(reader.fieldnames or [])
        row = next(r for r in reader if r["engine"] == "vllm-v1")
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerow({**row, **cells})
    return path


def test_engine_cells_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 2: `engine` must be one of"):
        validate_serving(_amd_row(tmp_path, engine="sglang"))
    with pytest.raises(ConfigError, match="line 2: `num_prompts` is read only for engine"):
        validate_serving(_amd_row(tmp_path, engine="trtllm"))
    with pytest.raises(ConfigError, match="line 2: `num_prompts` must be an int, got ''"):
        validate_serving(_amd_row(tmp_path, num_prompts=""))
    with pytest.raises(ConfigError, match="line 2: `kv_free_fraction` is TensorRT-LLM's rule"):
        validate_serving(_amd_row(tmp_path, kv_free_fraction="0.9"))


def test_the_step_timer_is_the_analytical_step_on_its_grid() -> None:
    """At a multiple of ``cap / DECODE_POINTS`` running requests the decode time is the
    analytical decode step itself, at any context between ``isl + 1`` and ``isl + osl`` linear
    in the context; between two grid batches it lies between their times."""
    from dataclasses import replace

    from stage_core.models import get_flavor
    from stage_core.serving import Phase, ServingConfig
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.analytical.serving import evaluate_decode
    from stage_explore.validation.serving_vllm import DECODE_POINTS, step_timer

    backend, system, model = AnalyticalBackend(), load_system("mi300x"), get_flavor("llama3-8b")
    base = ServingConfig(phase=Phase.DECODE, batch=1, precision="fp8", kv_precision="fp8")
    cap, isl, osl = 64 * DECODE_POINTS, 128, 1024
    timer = step_timer(backend, model, base, system, isl=isl, osl=osl, max_num_seqs=cap,
                       budget=8192)  # fmt: skip

    def exact(batch: int, context: int) -> float:
        config = replace(base, batch=batch, context_len=context - 1)
        seconds = evaluate_decode(backend, model, config, system).time_per_output_token_s
        assert seconds is not None
        return seconds

    assert timer(128, isl + 1, 0, 0.0) == pytest.approx(exact(128, isl + 1), rel=1e-12)
    assert timer(128, isl + osl, 0, 0.0) == pytest.approx(exact(128, isl + osl), rel=1e-12)
    low, high = timer(128, 600, 0, 0.0), timer(192, 600, 0, 0.0)
    assert min(low, high) <= timer(150, 600, 0, 0.0) <= max(low, high)
    assert timer(0, 0.0, 1000, 200.0) > 0 and timer(128, 600, 1000, 200.0) > low
