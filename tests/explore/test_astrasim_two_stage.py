"""A two-stage study end to end with the real ASTRA-sim (skipped, with the reason, without it).

The quickstart study (``stage_explore/studies/quickstart.toml``: GPT-3 1.3B on 8-64 A100s, the
full grid of TP, PP, SP, ZeRO, recompute and micro-batch) is screened with the analytical
backend and its Pareto front re-evaluated with ASTRA-sim. To keep the ASTRA-sim runs short the
model has 2 of its 24 layers and the step 32 sequences; the search space, objectives and
system are the quickstart's. Every front point must be re-evaluated (status ok), its ASTRA-sim
step time must equal the backend evaluated alone, and the report must show both numbers.
"""

from __future__ import annotations

import importlib
import math
from importlib import resources
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results, pareto_front
from stage_explore.astrasim import find_binary
from stage_explore.report import build_report
from stage_explore.search import explore
from stage_explore.study import parse_study

support = importlib.import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


def _why_not() -> str:
    try:
        find_binary()
    except ConfigError as error:
        return f"the real ASTRA-sim binary is not available here ({error})"
    return ""


WHY = _why_not()


def quickstart_two_stage(tmp_path: Path) -> str:
    """The quickstart study, two-stage, with a 2-layer model and 32 sequences per step."""
    text = resources.files("stage_explore").joinpath("studies/quickstart.toml").read_text()
    (tmp_path / "model.toml").write_text('base = "gpt3-1.3b"\nlayers = 2\n')
    text = text.replace('flavor = "gpt3-1.3b"', 'file = "model.toml"')
    text = text.replace("global_batch = 512", "global_batch = 32")
    text = text.replace('[backend]\nname = "analytical"',
                        '[backend]\nname = "astra-sim"\nscreen = "analytical"')  # fmt: skip
    assert 'file = "model.toml"' in text and 'screen = "analytical"' in text
    return text


@pytest.mark.skipif(bool(WHY), reason=WHY)
def test_quickstart_two_stage_study_with_the_real_binary(tmp_path: Path) -> None:
    spec = parse_study(quickstart_two_stage(tmp_path), tmp_path / "study.toml")
    explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(tmp_path / "out" / "quickstart")
    screened = frame[frame.status == "ok"]
    front = pareto_front(screened, {"step_time_s": "min", "cost_per_million_tokens": "min"})
    refined = frame[frame.refined_status.notna()]
    assert len(front) > 0 and sorted(refined.trial) == sorted(front.trial)
    assert (refined.backend == "analytical").all()
    assert (refined.refined_backend == "astra-sim").all()
    assert (refined.refined_status == "ok").all(), refined.refined_reason.tolist()
    for value in refined.refined_step_time_s:
        assert math.isfinite(value) and value > 0
    report = build_report(tmp_path / "out" / "quickstart")
    text = report.text()
    configurations = "configuration" if len(front) == 1 else "configurations"
    assert f"two-stage: {len(front)} front {configurations} re-evaluated with astra-sim" in text
    assert "step time (s) [2nd]" in text
    assert "refined_step_time_s" in report.columns()
