"""``stage eval --backend astra-sim --compare``: the gap explained, with the real binary.

Skipped, with the reason, where ASTRA-sim is not installed. The explanation must add up (the
two parts make the step on both sides) and its roofline re-timing of the slowest rank's compute
nodes must equal the GPU time the binary reports, to the nanosecond.
"""

from __future__ import annotations

import json

import pytest

from stage_core.errors import ConfigError
from stage_explore.astrasim import find_binary
from stage_explore.astrasim.compare import is_waiting
from stage_explore.cli import main


def _why_not() -> str:
    try:
        find_binary()
    except ConfigError as error:
        return f"the real ASTRA-sim binary is not available here ({error})"
    return ""


WHY = _why_not()
POINTS = {
    "dp": ("--model", "gpt3-1.3b", "--layers", "2", "--tp", "1", "--dp", "4",
           "--micro-batch", "1", "--global-batch", "4"),
    "tp-sp-pp-dp": ("--model", "gpt3-125m", "--layers", "4", "--tp", "2", "--pp", "2",
                    "--dp", "2", "--sp", "--global-batch", "8"),
}  # fmt: skip


@pytest.mark.skipif(bool(WHY), reason=WHY)
@pytest.mark.parametrize("name", sorted(POINTS))
def test_compare_json_explains_the_gap(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", *POINTS[name], "--system", "a100-80gb", "--backend", "astra-sim"]
    assert main([*argv, "--compare", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    astra, analytical = result["step_time_s"], result["analytical"]["step_time_s"]
    assert result["backend"] == "astra-sim" and astra > 0 and analytical > 0
    gap = result["comparison"]
    assert gap["roofline_check"] is True
    assert gap["compute_at_peak_s"] == pytest.approx(result["breakdown"]["compute"], abs=1e-9)
    for side, step in (("astra_sim_s", astra), ("analytical_s", analytical)):
        parts = gap["compute"][side] + gap["exposed_communication_and_waiting"][side]
        assert parts == pytest.approx(step, rel=1e-9)
    assert gap["step"]["gap_s"] == pytest.approx(astra - analytical)
    # at the roofline peak every kernel is at least as fast as at calibrated efficiency
    assert gap["compute_at_peak_s"] < gap["compute_at_calibrated_efficiency_s"]
    assert "roofline peak" in gap["compute"]["why"]


@pytest.mark.skipif(bool(WHY), reason=WHY)
def test_compare_text_shows_the_gap_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", *POINTS["dp"], "--system", "a100-80gb", "--backend", "astra-sim"]
    assert main([*argv, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "gap (ASTRA-sim − analytical" in out
    assert "which equals ASTRA-sim's GPU time" in out


@pytest.mark.parametrize(
    ("component", "waiting"),
    [("compute", False), ("optimizer", False), ("exposed_communication", True),
     ("exposed_gradient_sync", True), ("pipeline_bubble", True), ("other", False)],
)  # fmt: skip
def test_breakdown_components_split_into_kernels_and_waiting(component: str, waiting: bool) -> None:
    assert is_waiting(component) is waiting
