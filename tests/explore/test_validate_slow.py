"""``make validate``: the whole published data set through ``stage validate`` and the
leave-one-source-out fit (``slow``; the targets themselves are checked by
``stage validate --loso --check``, the second half of ``make validate``)."""

from __future__ import annotations

import json
import math

import pytest

from stage_explore.calibrate import apply, objective
from stage_explore.cli.validate import _finite
from stage_explore.system import load_system
from stage_explore.validation.loso import leave_one_source_out
from stage_explore.validation.render import to_markdown, to_text
from stage_explore.validation.report import ValidationReport
from stage_explore.validation.run import RowResult
from stage_explore.validation.setups import load_cases
from stage_explore.validation.suite import run_validation

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return run_validation()


def test_every_row_is_evaluated_or_says_why(report: ValidationReport) -> None:
    assert len(report.results) == len(load_cases())
    for result in report.results:
        if result.evaluated:
            assert math.isfinite(result.error) and result.case.measured > 0
        else:
            assert result.note, f"{result.case.id} dropped without a reason"
    not_evaluated = {r.case.id for r in report.results if not r.evaluated}
    # today: Llama 3 405B's Table 4 rows (predicted out of memory with every interleaved group size
    # Megatron accepts: docs/validation.md). Megatron-Bridge's NVFP4 rows
    # on GB200 left it in s18 nvfp4rate (gemm_efficiency.nvfp4 from pytorch/ao#2427's B200 run).
    # TorchAO's float8 'rowwise' rows (s19 hidden7a) left it in s23 rowwise (fp8_recipe rowwise).
    # torchtitan's 'selective layer' rows left it in s29 selayer (every 2nd block, torchtitan's
    # default); fms-fsdp's 13B rows of IBM's two FSDP blogs (IBMFSDP-*, IBMFSDPC-*) in s34
    # fmssel (one block in every 2, from the March blog's HFU / MFU: infer_fms_ac.py).
    # Primus's MaxText (JAX) convergence rows on MI325X (s26 hidden18): no profile of the model.
    # MegaScale's Megatron-LM baseline rows (s27 hidden20): 'NVIDIA Ampere GPUs', no part stated.
    # (AMSP's DeepSpeed ZeRO++ baselines, s31 rowsA, left it in s34 zeropp: hpZ modelled,
    # analytical/hpz.py; qwZ / qgZ still refused by infer_shard.stated_hpz.)
    # The PyTorch / AWS FSDP post's GPT 1T rows (s32 rowsD): parameter and activation CPU
    # offload, not modelled (infer_fields refuses an offload named in dp_sharding).
    # (ms-swift's Qwen1.5-MoE-A2.7B row, s32 rowsC, left it in s33 readers8: infer_moe_families.)
    # A row leaving this set is progress (update it); a row joining it is a regression.
    assert not_evaluated <= {
        "LLAMA3-405B-8192",
        "LLAMA3-405B-16384",
        "PRIMUS-CONV-MI325X-MAXTEXT-LLAMA32-1B",
        "PRIMUS-CONV-MI325X-MAXTEXT-LLAMA2-7B",
        *(f"MEGASCALE-MLM-175B-{n}" for n in (256, 512, 768, 1024, 3072, 6144, 8192, 12288)),
        *(f"FSDPAWS-A100-40G-GPT1T-{n}" for n in (128, 512)),
    }, sorted(not_evaluated)


def test_every_source_reports_in_sample_and_held_out(report: ValidationReport) -> None:
    data = json.loads(json.dumps(_finite(report.to_dict()), allow_nan=False))
    for name, source in data["sources"].items():
        rows = source["rows"]
        in_sample = [abs(r["error"]) for r in rows if r["in_sample"] and r["error"] is not None]
        held = [abs(r["error"]) for r in rows if not r["in_sample"] and r["error"] is not None]
        assert source["in_sample_mae"] == (
            pytest.approx(sum(in_sample) / len(in_sample)) if in_sample else None
        ), name
        assert source["held_out_mae"] == (pytest.approx(sum(held) / len(held)) if held else None), (
            name
        )


def test_vtrain_groups_are_ranked(report: ValidationReport) -> None:
    ranking = report.source_summary("VTRAIN")["ranking"]
    assert len(ranking) == 4
    for group in ranking:
        assert -1 <= group["spearman"] <= 1 and group["best_gap"] >= 0


def test_text_and_markdown_cover_every_source(report: ValidationReport) -> None:
    text, markdown = to_text(report), to_markdown(report)
    for source in report.sources:
        assert f"## {source}:" in markdown and source in text


def test_leave_one_source_out_fits_on_the_other_sources(report: ValidationReport) -> None:
    rows = [r for r in report.results if r.case.source in ("KOR22-T5", "NAR21-T1")]
    figure = leave_one_source_out(rows, max_evaluations=12)
    assert set(figure) == {"KOR22-T5", "NAR21-T1"}
    for source, other in (("KOR22-T5", "NAR21-T1"), ("NAR21-T1", "KOR22-T5")):
        fold = figure[source]
        assert fold["trained_on"] == [other] and math.isfinite(fold["mae"])
        train = [r.case for r in rows if r.case.source == other]
        system = load_system("a100-80gb")
        # The simplex holds the starting point: a fit never ends worse than the preset on the
        # objective it minimises (mean squared log ratio), and reports its MAE.
        _, before = objective(train, system)
        mae, after = objective(train, apply(system, fold["fitted"]))
        assert _log2(after) <= _log2(before) + 1e-12
        assert fold["train_mae"] == pytest.approx(mae)
        assert all(
            0.2 <= v <= 1.0
            for k, v in fold["fitted"].items()
            if k != "matmul_half_saturation_flops"
        )


def _log2(rows: list[RowResult]) -> float:
    logs = [math.log(r.predicted / r.case.measured) ** 2 for r in rows if r.evaluated]
    return sum(logs) / len(logs)


def test_a_source_on_its_own_system_file_is_fitted_on_its_accelerators_preset(
    report: ValidationReport,
) -> None:
    # vTrain runs on systems/vtrain-a100.toml (its cluster's links), KOR22-T5 on the a100-80gb
    # preset: the same accelerator, so each is fitted on the other and measured on its own
    # system with the fitted accelerator efficiencies only.
    vtrain = [r for r in report.results if r.case.source == "VTRAIN" and r.evaluated][:4]
    kor = [r for r in report.results if r.case.source == "KOR22-T5" and r.evaluated]
    figure = leave_one_source_out([*kor, *vtrain], max_evaluations=6)
    fold = figure["VTRAIN"]
    assert fold["trained_on"] == ["KOR22-T5"] and fold["trained_on_system"] == "a100-80gb"
    own = load_system(vtrain[0].case.system_source)
    mae, _ = objective([r.case for r in vtrain], apply(own, fold["fitted"]))
    assert fold["mae"] == pytest.approx(mae) and math.isfinite(mae)
    assert figure["KOR22-T5"]["trained_on_system"] == vtrain[0].case.system
