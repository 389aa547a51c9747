"""The breakdown's ``parameter_gather`` is the gathers' own time (s26 review): taken as the step
less everything before it, it was float noise where nothing is gathered — the README's GPT-3
175B example printed ``"parameter_gather": 1.44e-15`` in ``stage eval --json`` and a 0.0000 s
row in the table."""

from __future__ import annotations

import math

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system


def test_a_step_without_parameter_gathers_has_no_parameter_gather_row() -> None:
    parallel = ParallelConfig(
        dp=16, tp=8, pp=8, sp=True, recompute="selective", schedule="interleaved", vpp=2,
        global_batch=1536,
    )  # fmt: skip
    evaluation = AnalyticalBackend().evaluate(
        get_flavor("gpt3-175b"), parallel, load_system("a100-80gb")
    )
    assert "parameter_gather" not in dict(evaluation.breakdown)


@pytest.mark.parametrize("framework", ["megatron-lm-2021", "megatron-core", "deepspeed", "fsdp"])
@pytest.mark.parametrize("zero", [1, 2])
def test_the_breakdown_still_sums_to_the_step(framework: str, zero: int) -> None:
    evaluation = AnalyticalBackend(framework=framework).evaluate(
        get_flavor("llama3-8b"), ParallelConfig(dp=8, zero=zero, global_batch=16),
        load_system("h100-80gb"),
    )  # fmt: skip
    breakdown = dict(evaluation.breakdown)
    assert breakdown["parameter_gather"] > 1e-6  # the distributed optimizer's gathers
    assert math.isclose(sum(breakdown.values()), evaluation.step_time_s, rel_tol=1e-12)
