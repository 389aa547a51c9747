"""Serving steps as traces: every rank's Chakra file of a prefill or a decode step is sound
(dependencies, groups, collective order, matched sends and receives), forward only, and with
``pp`` stages carries ``pp`` micro-batches across each stage boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.lower.emit import write_chakra
from stage_core.models import get_flavor
from stage_core.serving import ServingConfig
from stage_core.serving.trace import serving_program_set
from stage_core.trace import NodeKind

MODEL = get_flavor("llama3-8b").with_overrides(layers=4)
MOE = get_flavor("mixtral-8x7b").with_overrides(layers=2)

DECODE = ServingConfig(phase="decode", batch=4, context_len=100, tp=2, pp=2, dp=2)
CASES = {
    "decode-tp2-pp2-dp2": (MODEL, DECODE),
    "prefill-tp2-pp2": (MODEL, ServingConfig(phase="prefill", batch=2, prompt_len=256, tp=2, pp=2)),
    "chunked-prefill-tp4": (
        MODEL, ServingConfig(phase="prefill", batch=1, prompt_len=300, chunk=128, tp=4)
    ),
    "decode-moe-ep2-dp2": (MOE, ServingConfig(phase="decode", batch=4, context_len=64, dp=2, ep=2)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_serving_traces_are_sound_and_forward_only(case: str, tmp_path: Path) -> None:
    model, config = CASES[case]
    programs = serving_program_set(model, config)
    written = write_chakra(programs, tmp_path)
    assert written.world_size == config.gpus
    traces = read_trace_set(tmp_path)
    report = check_trace_set(traces, for_astra_sim=True)
    assert not report.violations, report.violations
    names = [node.name for nodes in traces.ranks.values() for node in nodes]
    assert names and all(n.startswith("F") for n in names)  # forward tasks only, no update
    nodes = [node for rank_nodes in traces.ranks.values() for node in rank_nodes]
    sends = sum(1 for node in nodes if node.kind == NodeKind.SEND)
    ranks_per_stage = config.gpus // config.pp
    assert sends == (config.pp - 1) * config.pp * ranks_per_stage  # pp micro-batches in flight
