"""Serving traces through the real ASTRA-sim binary (skipped, with the reason, without one).

Every rank of a prefill and of a decode step must print its ``finished`` line; ASTRA-sim's own
roofline must find the decode step memory-bound (no compute-bound kernel time) and the long
prefill mostly compute-bound, as the analytical model says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.models import get_flavor
from stage_core.serving import ServingConfig
from stage_core.serving.trace import serving_program_set
from stage_explore.astrasim import run_astra_sim
from stage_explore.astrasim.inputs import write_inputs
from stage_explore.system import load_system
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()
pytestmark = pytest.mark.skipif(BINARY is None, reason=WHY)
MODEL = get_flavor("llama3-8b").with_overrides(layers=4)
SYSTEM = load_system("h100-80gb")


def run(config: ServingConfig, directory: Path) -> dict[str, float]:
    assert BINARY is not None
    inputs = write_inputs(serving_program_set(MODEL, config), SYSTEM, directory, dtype="bf16")
    report = run_astra_sim(BINARY, inputs, timeout_s=300).report
    assert sorted(report.ranks) == list(range(config.gpus))
    assert all(rank.finished_cycles > 0 for rank in report.ranks.values())
    return report.ranks[0].statistics


def test_decode_runs_and_is_memory_bound(tmp_path: Path) -> None:
    config = ServingConfig(phase="decode", batch=8, context_len=1000, tp=2, pp=2, dp=2)
    statistics = run(config, tmp_path)
    assert statistics["compute_bound_percentage"] == 0.0


def test_long_prefill_runs_and_is_mostly_compute_bound(tmp_path: Path) -> None:
    config = ServingConfig(phase="prefill", batch=1, prompt_len=2048, chunk=1024, tp=4)
    statistics = run(config, tmp_path)
    assert statistics["compute_bound_percentage"] > 50.0
