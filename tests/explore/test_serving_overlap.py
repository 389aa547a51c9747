"""Two-batch overlap of serving steps, and decode's latent attention timed as a fused
attention kernel."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import load_model
from stage_core.serving import Phase, ServingConfig, lower_step
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import time_block
from stage_explore.analytical.serving import (
    _compute_timer,
    evaluate_decode,
    interleave_two_batches,
)
from stage_explore.cli import main
from stage_explore.system import load_system


def test_two_batches_hide_one_collective_behind_the_other_compute() -> None:
    # compute 1 s → all-to-all 1 s → compute 1 s, for two micro-batches:
    # one after the other 2·3 = 6 s; interleaved, each all-to-all runs under the other's
    # compute: c1A [0,1] c1B [1,2] c2A [2,3] c2B [3,4] → 4 s
    block = (
        Instr("c1", "fwd", "einsum", flops=1),
        Instr("m1", "fwd", "collective", collective=CollectiveKind.ALL_TO_ALL, deps=(0,)),
        Instr("c2", "fwd", "einsum", flops=1, deps=(1,)),
    )
    merged = interleave_two_batches(block)
    assert len(merged) == 6
    assert all(dep < index for index, instr in enumerate(merged) for dep in instr.deps)
    assert [i.name for i in merged] == ["c1", "m1", "c1", "m1", "c2", "c2"]
    timing = time_block(merged, lambda i: 1.0, lambda i: 1.0)
    assert timing.duration_s == pytest.approx(4.0)
    sequential = time_block(block, lambda i: 1.0, lambda i: 1.0).duration_s
    assert sequential == pytest.approx(3.0)


def test_two_batch_overlap_option() -> None:
    with pytest.raises(ConfigError, match="two_batch_overlap"):
        ServingConfig(phase=Phase.DECODE, two_batch_overlap=1)  # type: ignore[arg-type]
    even = ServingConfig(phase=Phase.DECODE, batch=8, dp=2, two_batch_overlap=True)
    odd = ServingConfig(phase=Phase.DECODE, batch=6, dp=2, two_batch_overlap=True)
    assert even.overlaps and not odd.overlaps  # 3 sequences per dp rank do not halve
    assert not replace(even, two_batch_overlap=False).overlaps


def test_two_batch_overlap_hides_the_moe_all_to_all_in_decode() -> None:
    model = load_model("deepseek-v3").with_overrides(layers=5)  # 3 dense + 2 MoE layers
    system = load_system("h800")
    backend = AnalyticalBackend()
    base = ServingConfig(
        phase=Phase.DECODE, batch=32 * 64, dp=32, ep=32, precision="fp8", context_len=4096
    )
    plain = evaluate_decode(backend, model, base, system)
    overlapped = evaluate_decode(backend, model, replace(base, two_batch_overlap=True), system)
    assert overlapped.breakdown["exposed_all_to_all"] < 0.7 * plain.breakdown["exposed_all_to_all"]
    # the same sequences and caches: the same memory
    assert overlapped.peak_memory_bytes == plain.peak_memory_bytes
    # two micro-batches read the weights twice: the compute stream is busier
    assert overlapped.breakdown["compute"] > plain.breakdown["compute"]


def test_latent_attention_runs_as_a_fused_attention_kernel() -> None:
    model = load_model("deepseek-v3").with_overrides(layers=4)
    system = load_system("h800")
    config = ServingConfig(phase=Phase.DECODE, batch=64, context_len=4096, precision="fp8")
    program = lower_step(model, config, config.steps()[0])
    stage = program.stages[0]
    timer = _compute_timer(system, program, stage)
    latent = next(i for block in stage.blocks for i in block.fwd if i.kind == "latentattention")
    seconds = timer(latent)
    achieved = latent.flops / seconds
    peak = system.accelerator.peak("bf16")
    # FlashMLA: 580-660 TFLOP/s of the H800's 989 compute-bound (github.com/deepseek-ai/FlashMLA)
    assert 0.5 * peak < achieved < 0.7 * peak


def test_cli_two_batch_overlap_flag(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "eval", "--phase", "decode", "--model", "mixtral-8x7b", "--dp", "2", "--ep", "2",
        "--batch", "64", "--context-len", "1024", "--system", "h100-80gb", "--json",
    ]  # fmt: skip
    results = []
    for extra in ([], ["--two-batch-overlap"]):
        assert main([*base, *extra]) == 0
        results.append(json.loads(capsys.readouterr().out))
    plain, overlapped = results
    assert not plain["two_batch_overlap"] and overlapped["two_batch_overlap"]
    assert overlapped["breakdown"] != plain["breakdown"]
    assert overlapped["peak_memory_bytes"] == plain["peak_memory_bytes"]
