"""Inference studies in the explorer: the study file, the search, the records with serving
columns, latency bounds and infeasible points as results, the report, and the bundled serving
studies (a few of their points evaluated)."""

from __future__ import annotations

import math
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import load_model
from stage_core.serving import Phase, ServingConfig
from stage_explore import load_results
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.requests import LengthDistribution, RequestLoad
from stage_explore.analytical.serving_design import ServingDesign, evaluate_design
from stage_explore.records import TrialStatus
from stage_explore.report import build_report
from stage_explore.search import explore
from stage_explore.search.backends import resolve_backend
from stage_explore.search.worker import Candidate, EvaluationJob, evaluate_chunk
from stage_explore.study import grid_points, load_study, parse_study
from stage_explore.study.loader import bundled_studies
from stage_explore.study.serving_space import decode_instances
from stage_explore.system import load_system

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

STUDY = """\
[study]
name = "serving-small"

[model]
flavor = "llama3-8b"

[workload]
kind = "inference"
prompt_len = 1024
output_len = [[128, 1], [384, 1]]

[system]
preset = "h100-80gb"

[space]
num_gpus = 4
tp = [1, 2]
batch = 64
prefill_instances = [0, 1]
prefill_tp = 2
arrival_rate = [5.0, 1000.0]

[objectives]
tokens_per_s_per_gpu = "max"
time_to_first_token_s = "min"
{constraints}
[sampler]
kind = "grid"
"""


def _run(tmp_path: Path, constraints: str = "") -> tuple[object, Path]:
    spec = parse_study(STUDY.format(constraints=constraints), tmp_path / "study.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    return summary, tmp_path / "out" / spec.name


def test_inference_study_records_serving_metrics_and_reports(tmp_path: Path) -> None:
    _, folder = _run(tmp_path)
    frame = load_results(folder)
    # tp ∈ {1, 2} × co-located/disaggregated × 2 rates; tp 1 with a tp-2 prefill instance
    # leaves 2 GPUs: 2 decode instances
    assert len(frame) == 8
    for column in ("time_to_first_token_s", "time_per_output_token_s", "requests_per_s",
                   "decode_instances", "batch", "prefill_instances", "arrival_rate"):  # fmt: skip
        assert column in frame.columns
    ok = frame[frame["status"] == "ok"]
    overloaded = frame[frame["arrival_rate"] == 1000.0]
    assert (overloaded["status"] == "infeasible").all()
    assert overloaded["reason"].str.contains("reaches the capacity").all()
    assert len(ok) == 4 and (ok["arrival_rate"] == 5.0).all()
    for row in ok.to_dict("records"):
        params = {k: row[k] for k in ("num_gpus", "tp", "pp", "dp", "prefill_instances",
                                      "prefill_tp", "prefill_dp")}  # fmt: skip
        assert row["decode_instances"] == decode_instances(params)
        # the arrival rate is served: throughput = rate · E[output] over the GPUs
        assert row["tokens_per_s_per_gpu"] == pytest.approx(5.0 * 256 / 4)
        assert row["requests_per_s"] == pytest.approx(5.0)
        assert 0 < row["time_per_output_token_s"] < row["time_to_first_token_s"] < 10
        assert row["step_time_s"] == pytest.approx(row["time_per_output_token_s"])
        assert (
            row["kv_cache_bytes"] > 0 and row["peak_memory_bytes"] <= row["memory_capacity_bytes"]
        )
    report = build_report(folder)
    text = report.text()
    assert "TTFT (s)" in text and "TPOT (s)" in text and "prefill_instances" in text
    assert len(report.front) >= 1


def test_latency_bounds_make_violating_trials_infeasible_results(tmp_path: Path) -> None:
    _, folder = _run(tmp_path, "\n[constraints]\nmax_tpot_s = 0.001\n")
    frame = load_results(folder)
    assert (frame["status"] == "infeasible").all()
    evaluated = frame[frame["arrival_rate"] == 5.0]
    assert evaluated["reason"].str.contains("exceeds the constraint max_tpot_s = 0.001").all()
    assert evaluated["time_per_output_token_s"].notna().all()  # recorded with the reason


def test_latency_bounds_belong_to_inference_studies(tmp_path: Path) -> None:
    text = support.study_text() + "\n[constraints]\nmax_ttft_s = 1.0\n"
    with pytest.raises(ConfigError, match=r"\[constraints\] max_ttft_s: a latency bound of"):
        parse_study(text, tmp_path / "training.toml")


def test_kv_cache_that_does_not_fit_is_an_infeasible_result() -> None:
    model, system = load_model("llama3-70b"), load_system("h100-80gb")
    load = RequestLoad(prompt=LengthDistribution.fixed(2048), output=LengthDistribution.fixed(256))
    design = ServingDesign(
        decode=ServingConfig(phase=Phase.DECODE, tp=1), decode_instances=1, max_running=16,
        load=load,
    )  # fmt: skip
    result = evaluate_design(AnalyticalBackend(), model, design, system)
    assert not result.feasible and result.reason.startswith("KV cache does not fit")
    assert result.extra["max_running_sequences"] == 0


def test_saturated_throughput_rises_with_the_running_sequence_cap() -> None:
    model, system = load_model("llama3-8b"), load_system("h100-80gb")
    load = RequestLoad(prompt=LengthDistribution.fixed(512), output=LengthDistribution.fixed(257))
    backend = AnalyticalBackend()
    results = [
        evaluate_design(backend, model, ServingDesign(
            decode=ServingConfig(phase=Phase.DECODE), decode_instances=1, max_running=cap,
            load=load), system)
        for cap in (8, 64)
    ]  # fmt: skip
    small, large = results
    assert small.feasible and large.feasible
    assert large.tokens_per_s_per_gpu > 2 * small.tokens_per_s_per_gpu
    assert large.extra["time_per_output_token_s"] > small.extra["time_per_output_token_s"]
    # saturated: every running slot is busy; Little's law over the decode iterations
    for result, cap in zip(results, (8, 64), strict=True):
        rate, tpot = result.extra["requests_per_s"], result.extra["time_per_output_token_s"]
        assert result.extra["running_sequences"] == pytest.approx(cap, rel=1e-6)
        assert rate * 256 * tpot == pytest.approx(cap, rel=1e-6)
        assert math.isfinite(result.mfu) and 0 < result.mfu < 1


@pytest.mark.parametrize("name", ["llama3_70b_h100_serving", "deepseek_r1_h800_disaggregated"])
def test_bundled_serving_studies_load_and_evaluate(name: str) -> None:
    spec = load_study(bundled_studies()[name])
    moe = name.startswith("deepseek")
    points = list(grid_points(spec.space, spec.workload, spec.constraints, moe=moe))
    assert len(points) >= 20
    job = EvaluationJob(study=spec, factory=resolve_backend("analytical"), options={})
    outcomes = evaluate_chunk(job, [Candidate(key=0, params=points[0])])
    for _, outcome in outcomes:
        assert outcome.status in (TrialStatus.OK, TrialStatus.INFEASIBLE), outcome.reason
        assert outcome.metrics["time_per_output_token_s"] > 0
        assert outcome.metrics["tokens_per_s_per_gpu"] > 0
