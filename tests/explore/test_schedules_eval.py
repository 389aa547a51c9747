"""ZB-H1 and DualPipe end to end: the analytical backend, ``stage memory`` agreement, the CLI's
``--schedule zb|zb-h1|dualpipe`` and its one-line errors, and study spaces."""

from __future__ import annotations

import json

import pytest

from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.system import load_system

MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)
FIELDS = dict(tp=2, pp=4, dp=2, global_batch=32, sp=True, recompute="selective")


def _evaluate(schedule: str, model: object = MODEL, **overrides: object):  # type: ignore[no-untyped-def]
    fields = {**FIELDS, "schedule": schedule, **overrides}
    parallel = ParallelConfig(**fields)  # type: ignore[arg-type]
    return AnalyticalBackend().evaluate(model, parallel, load_system("a100-80gb")), parallel  # type: ignore[arg-type]


def test_zb_shrinks_the_bubble_and_dualpipe_holds_two_stages() -> None:
    one, _ = _evaluate("1f1b")
    zb, _ = _evaluate("zb")
    dual, _ = _evaluate("dualpipe")
    for result in (one, zb, dual):
        assert result.feasible
        assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)
    # (the head makes the last stage the slowest: ZB-H1 removes W from the fill and drain,
    # not the imbalance; W's share, and so the gain, shrinks as the GEMMs get faster: ~15 % at
    # the a100-80gb preset's sustained GEMM rate). Since s36 wtime a W task lasts its own
    # instructions' timing, as the zero-bubble reference runs it (the sp input all-gathers
    # in W, async_op=False, and B's collectives no longer behind W's GEMMs): B + W exceeds the
    # unsplit backward, and the breakdown (whose compute and exposed lines are the unsplit
    # passes') books that excess, every micro-batch's on the busiest rank, in the bubble line.
    # The schedule's gain is the bubble less that excess.
    backend = AnalyticalBackend()
    parallel = ParallelConfig(**{**FIELDS, "schedule": "zb"})  # type: ignore[arg-type]
    assert backend.evaluate(MODEL, parallel, load_system("a100-80gb")).step_time_s == zb.step_time_s
    (plan,) = backend._plans.items.values()
    excess = max(
        b + w - whole
        for cls in plan.step.classes
        for whole, b, w in zip(cls.backward_s, cls.input_grad_s, cls.weight_grad_s, strict=True)
    )
    micro_batches = make_workload(MODEL, parallel).micro_batches
    assert excess > 0.0
    split_bubble = zb.breakdown["pipeline_bubble"] - micro_batches * excess
    assert split_bubble < 0.95 * one.breakdown["pipeline_bubble"]
    assert zb.step_time_s < one.step_time_s
    assert dual.breakdown["pipeline_bubble"] < one.breakdown["pipeline_bubble"]
    # same work: every schedule counts the step's model FLOPs once
    assert zb.model_flops_per_step == one.model_flops_per_step == dual.model_flops_per_step


def test_the_split_is_timed_from_the_graph() -> None:
    backend = AnalyticalBackend()
    parallel = ParallelConfig(**{**FIELDS, "schedule": "zb"})  # type: ignore[arg-type]
    backend.evaluate(MODEL, parallel, load_system("a100-80gb"))
    (plan,) = backend._plans.items.values()
    for cls in plan.step.classes:
        # W is the weight-gradient GEMMs: a real share of the backward, less than half of it
        # (attention's backward and the recomputation are all input-gradient work)
        for whole, b in zip(cls.backward_s, cls.input_grad_s, strict=True):
            assert 0.5 * whole < b < 0.9 * whole
        assert all(p > 0 for p in cls.pending_bytes)


@pytest.mark.parametrize("schedule", ["1f1b", "zb", "dualpipe"])
def test_the_backend_memory_is_stage_memory(schedule: str) -> None:
    result, parallel = _evaluate(schedule)
    report = memory_report(lower(MODEL, parallel), with_ranks=False)
    # the backend adds only the loss-scaling / optimizer extras; activations and states agree
    stage_peak = max(m.peak_bytes for m in report)
    assert result.peak_memory_bytes >= stage_peak
    assert result.peak_memory_bytes - stage_peak < 0.05 * stage_peak


def test_dualpipe_keeps_two_copies_of_the_parameters() -> None:
    _, one = _evaluate("1f1b")
    _, dual = _evaluate("dualpipe")
    a = memory_report(lower(MODEL, one), with_ranks=False)
    b = memory_report(lower(MODEL, dual), with_ranks=False)
    assert sum(m.weights_bytes for m in b) == 2 * sum(m.weights_bytes for m in a)
    for rank in range(4):
        assert b[rank].weights_bytes == a[rank].weights_bytes + a[3 - rank].weights_bytes


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


POINT = ("--model", "megatron-gpt-1.7b", "--layers", "8", "--tp", "2", "--pp", "4", "--dp", "2",
         "--global-batch", "32", "--sp", "--system", "a100-80gb")  # fmt: skip


@pytest.mark.parametrize("schedule", ["zb", "zb-h1", "dualpipe"])
def test_cli_eval_memory_and_trace_accept_the_schedules(
    schedule: str, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    code, out, _ = _cli(capsys, "eval", *POINT, "--schedule", schedule, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["parallel"]["schedule"] == ("zb" if schedule == "zb-h1" else schedule)
    code, out, _ = _cli(capsys, "memory", *POINT[:-2], "--schedule", schedule, "--json")
    assert code == 0 and json.loads(out)


def test_cli_refuses_bad_dualpipe_shapes_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    point = [a if a != "32" else "8" for a in POINT]  # 2 micro-batches on pp 4
    code, _, err = _cli(capsys, "eval", *point, "--schedule", "dualpipe")
    assert code == 2
    assert "schedule='dualpipe' needs an even `pp`" in err and len(err.strip().splitlines()) == 1


def test_dualpipe_pays_the_all_reduce_between_the_copies() -> None:
    backend = AnalyticalBackend()
    parallel = ParallelConfig(**{**FIELDS, "schedule": "dualpipe"})  # type: ignore[arg-type]
    result = backend.evaluate(MODEL, parallel, load_system("a100-80gb"))
    (plan,) = backend._plans.items.values()
    assert all(cls.after_backward_s > 0 for cls in plan.step.classes)
    assert result.breakdown["exposed_gradient_sync"] >= min(
        cls.after_backward_s for cls in plan.step.classes
    )
