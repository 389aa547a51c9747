"""Serving a Mamba-2 hybrid: every Mamba layer keeps, per sequence, an SSM state
``[heads, head_dim, state]`` and conv states ``[channels, W − 1]`` whose size does not grow with
the context (only the attention layers' KV cache does); the decode step's scan costs what the
SSD algorithm costs for one token; serving traces pass ``stage check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.lower.emit import write_chakra
from stage_core.ops_ssm import ssd_flops, state_bytes_per_sequence
from stage_core.serving import Phase, ServingConfig, lower_step, serving_memory
from stage_core.serving.program import cache_bytes
from stage_core.serving.trace import serving_program_set
from tests.core.test_mamba_layer import MAMBA, hybrid


def config(phase: str, context: int, tp: int = 1, batch: int = 4) -> ServingConfig:
    return ServingConfig(
        phase=Phase(phase), batch=batch, context_len=context, prompt_len=context, tp=tp, pp=1, dp=1
    )


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_states_are_constant_in_the_context(phase: str, tp: int) -> None:
    model = hybrid()
    per_sequence = state_bytes_per_sequence(model, 2)
    heads, p, n, groups, w = 8, 16, 8, 4, 4
    assert per_sequence == 2 * (heads * p * n + (heads * p + 2 * groups * n) * (w - 1))
    attention = []
    for context in (32, 96):
        serving = config(phase, context, tp)
        program = lower_step(model, serving, serving.steps()[0])
        assert cache_bytes(program.blocks[MAMBA]) == 4 * per_sequence // tp
        attention.append(cache_bytes(program.blocks["layer_attn_none"]))
        (memory,) = serving_memory(program)
        assert memory.kv_cache_bytes == 4 * per_sequence // tp + attention[-1]
    assert attention[1] > attention[0]  # the KV cache grows, the Mamba states do not


def test_decode_scan_is_one_tokens_ssd() -> None:
    serving = config("decode", 64, tp=2)
    program = lower_step(hybrid(), serving, serving.steps()[0])
    (scan,) = [i for i in program.blocks[MAMBA].fwd if i.kind == "ssdscan"]
    assert scan.flops == sum(ssd_flops(4, 1, 4, 2, 16, 8, 8).values())
    updates = [i for i in program.blocks[MAMBA].fwd if i.kind == "stateupdate"]
    assert sum(i.bytes_read for i in updates) == sum(i.bytes_written for i in updates)
    assert sum(i.bytes_read for i in updates) == 4 * state_bytes_per_sequence(hybrid(), 2) // 2


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_serving_traces_pass_the_checker(phase: str, tmp_path: Path) -> None:
    serving = ServingConfig(
        phase=Phase(phase), batch=4, context_len=32, prompt_len=64, tp=2, pp=2, dp=2
    )
    write_chakra(serving_program_set(hybrid(), serving), tmp_path)
    report = check_trace_set(read_trace_set(tmp_path), for_astra_sim=True)
    assert report.sound, report.violations
