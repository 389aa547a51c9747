"""Serving metrics from the analytical backend and ``stage eval --phase``.

Decode reads every weight and the KV cache for one token per sequence: it must come out
memory-bound, no faster than streaming the weights at the HBM's peak bandwidth, slower with
longer contexts and cheaper per token with larger batches.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.serving import ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import (
    RequestMix,
    evaluate_decode,
    evaluate_prefill,
    evaluate_serve,
)
from stage_explore.cli import main
from stage_explore.system import load_system

BACKEND = AnalyticalBackend()
SYSTEM = load_system("h100-80gb")
MODEL = get_flavor("llama3-8b")


def decode(**fields: object) -> ServingConfig:
    return ServingConfig(phase="decode", **fields)  # type: ignore[arg-type]


def tpot(config: ServingConfig) -> float:
    value = evaluate_decode(BACKEND, MODEL, config, SYSTEM).time_per_output_token_s
    assert value is not None
    return value


@pytest.mark.parametrize("batch", [1, 16, 64])
def test_decode_is_memory_bound_and_no_faster_than_reading_the_weights(batch: int) -> None:
    result = evaluate_decode(BACKEND, MODEL, decode(batch=batch, context_len=2048), SYSTEM)
    assert result.memory_bound_fraction > 0.9
    assert result.time_per_output_token_s is not None
    stream = result.weight_bytes / SYSTEM.accelerator.memory_bandwidth_bytes_per_s
    assert result.time_per_output_token_s > stream


def test_long_prefill_is_compute_bound() -> None:
    result = evaluate_prefill(
        BACKEND, MODEL, ServingConfig(phase="prefill", batch=1, prompt_len=8192), SYSTEM
    )
    assert result.memory_bound_fraction < 0.5
    assert result.time_to_first_token_s is not None and result.time_to_first_token_s > 0


def test_decode_slows_with_context_and_batching_raises_throughput() -> None:
    short, long = tpot(decode(batch=8, context_len=512)), tpot(decode(batch=8, context_len=32768))
    assert long > short
    rates = [
        evaluate_decode(BACKEND, MODEL, decode(batch=b, context_len=1024), SYSTEM)
        for b in (1, 8, 64)
    ]
    per_gpu = [r.tokens_per_s_per_gpu for r in rates]
    assert per_gpu == sorted(per_gpu) and per_gpu[-1] > 10 * per_gpu[0]


def test_pipeline_stages_multiply_tokens_in_flight() -> None:
    config = decode(batch=8, context_len=1024, pp=2)
    result = evaluate_decode(BACKEND, MODEL, config, SYSTEM)
    assert result.time_per_output_token_s is not None
    expected = config.batch * config.pp / result.time_per_output_token_s
    assert result.tokens_per_s == pytest.approx(expected)


def test_colocated_serving_pays_for_prefills() -> None:
    config = decode(batch=32, tp=2)
    mix = RequestMix(prompt_len=2048, output_len=256)
    served = evaluate_serve(BACKEND, MODEL, config, SYSTEM, mix)
    alone = evaluate_decode(BACKEND, MODEL, replace(config, context_len=2048 + 128), SYSTEM)
    assert served.extra["mode"] == "co-located" and 0 < served.extra["prefill_share"] < 1
    assert served.tokens_per_s < alone.tokens_per_s


def test_disaggregated_serving_names_its_bottleneck() -> None:
    config = decode(batch=64, tp=2)
    mix = RequestMix(prompt_len=4096, output_len=128)
    one = evaluate_serve(
        BACKEND, MODEL, config, SYSTEM, mix, prefill=config, prefill_instances=1,
        decode_instances=1,
    )  # fmt: skip
    many = evaluate_serve(
        BACKEND, MODEL, config, SYSTEM, mix, prefill=config, prefill_instances=8,
        decode_instances=1,
    )  # fmt: skip
    assert one.extra["bottleneck"] == "prefill"
    assert many.extra["requests_per_s"] > one.extra["requests_per_s"]
    assert one.num_gpus == 2 * config.gpus and many.num_gpus == 9 * config.gpus
    assert one.extra["kv_transfer_bytes_per_request"] == 4096 * 2 * 32 * 8 * 128 * 2


def test_out_of_memory_is_a_result() -> None:
    big = get_flavor("llama3-70b")
    result = evaluate_decode(BACKEND, big, decode(batch=8, context_len=1024), SYSTEM)
    assert not result.feasible and "out of memory" in result.reason


def test_a_step_of_the_other_phase_or_an_ignored_prompt_is_refused() -> None:
    # s22: evaluate_decode timed a prefill config's decode step, and a decode config's prompt
    # was ignored, without a word; evaluate_prefill of a decode config gave 0 tokens/s
    prefill = ServingConfig(phase="prefill", batch=1, prompt_len=512)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="^evaluate_decode times a decode step: expected a "):
        evaluate_decode(BACKEND, MODEL, prefill, SYSTEM)
    with pytest.raises(ConfigError, match="^evaluate_prefill times a prefill step: expected"):
        evaluate_prefill(BACKEND, MODEL, decode(batch=1, context_len=512), SYSTEM)
    with pytest.raises(ConfigError, match="reads no `prompt_len` or `chunk`, but got prompt_len"):
        evaluate_decode(BACKEND, MODEL, decode(batch=1, prompt_len=512), SYSTEM)
    # a co-located serve given a config that also carries a prompt still times its decode
    mix = RequestMix(prompt_len=2048, output_len=256)
    plain = evaluate_serve(BACKEND, MODEL, decode(batch=32, tp=2), SYSTEM, mix)
    prompted = evaluate_serve(BACKEND, MODEL, decode(batch=32, tp=2, prompt_len=64), SYSTEM, mix)
    assert prompted.tokens_per_s == plain.tokens_per_s


def test_cli_decode_prints_the_interface_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([
        "eval", "--phase", "decode", "--model", "llama3-70b", "--tp", "8", "--batch", "64",
        "--context-len", "4096", "--system", "h100-80gb", "--json",
    ])  # fmt: skip
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("time_per_output_token_s", "tokens_per_s_per_gpu", "peak_memory_bytes",
                "kv_cache_bytes"):  # fmt: skip
        assert payload[key] > 0
    assert payload["kv_cache_bytes"] == 64 * 4097 * 2 * 80 * 8 * 128 * 2 // 8


def test_cli_prefill_prints_time_to_first_token(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([
        "eval", "--phase", "prefill", "--model", "llama3-8b", "--batch", "2", "--prompt-len",
        "1024", "--system", "h100-80gb", "--json",
    ])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["time_to_first_token_s"] > 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--phase", "decode", "--zero", "1"], "--zero is a training option"),
        (["--phase", "serve"], "--phase serve needs --prompt-len and --output-len"),
        (["--phase", "decode", "--backend", "astra-sim"], "analytical backend only"),
        (
            ["--phase", "decode", "--batch", "3", "--dp", "2", "--context-len", "8"],
            "`dp` must divide `batch`",
        ),
    ],
)
def test_cli_serving_errors_are_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "--model", "llama3-8b", "--system", "h100-80gb", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_more_pipeline_stages_than_layers_is_refused_in_one_line() -> None:
    """A 32-layer model on 33 serving stages left a stage without a layer and reported a higher
    throughput than on 32 (found by the s23 review); every stage now holds a layer."""
    model = get_flavor("llama3-8b")
    system = load_system("h100-80gb")
    ok = evaluate_decode(AnalyticalBackend(), model, decode(pp=32), system)
    assert ok.feasible
    with pytest.raises(ConfigError, match=r"`pp` must be at most the model's layers \(32 .*pp=33"):
        evaluate_decode(AnalyticalBackend(), model, decode(pp=33), system)
