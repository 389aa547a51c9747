"""The NeMo 1.x launcher's example scripts behind NeMo's performance summary (5 Dec 2026, s18
infer9): a Llama row of the summary on a 24.05-24.12 container on H100 reduces gradients in bf16
(every stored Llama script of the launcher's Llama 3 era passes
``+training.model.optim.grad_sync_dtype=bf16``), as the hand-written NEMO2407 Llama rows do;
other families, earlier containers, other GPUs and other sources keep fp32."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import data_dir
from tests.explore.package_cases import package_cases
from tests.explore.published_rows import inferred_case as _case

SUMMARY = "NVIDIA NeMo performance summary (NeMo 24.07 container), docs/source/performance/"
TABLE = "Pretraining: pre-training performance at FP8 precision, Container NeMo 24.07"


def _said(case_assumptions: tuple[str, ...]) -> list[str]:
    return [a for a in case_assumptions if "grad_sync_dtype=bf16" in a]


@pytest.mark.parametrize(
    ("model", "precision"),
    [("Llama 2 7B", "fp8"), ("Llama 2 70B", "bf16"), ("Llama 3 8B", "fp8"),
     ("Llama 3.1 405B", "bf16")],
)  # fmt: skip
def test_a_summary_llama_row_reduces_gradients_in_bf16(model: str, precision: str) -> None:
    case = _case(source=SUMMARY, source_table=TABLE, model=model, precision=precision)
    assert case.parallel is not None and not case.parallel.grad_fp32
    (note,) = _said(case.assumptions)
    assert "llama2_7b_fp8.sh 7d6e2df9" in note and "container 24.07" in note


@pytest.mark.parametrize(
    "cells",
    [
        # the Nemotron scripts pass no grad_sync_dtype (the 22B's yaml sets none)
        {
            "model": "Nemotron-3 22B",
            "hidden": "6144",
            "layers": "40",
            "ffn": "24576",
            "heads": "48",
            "kv_heads": "48",
        },
        {"source": SUMMARY.replace("24.07", "24.03")},  # before the Llama 3 era scripts
        {"gpu": "A100-SXM4-80GB"},  # the h100 scripts read
        {"source": "NVIDIA DGX Cloud Benchmarking performance recipes (NeMo 24.07)"},
        {"source": "NVIDIA NeMo Long Sequence Performance, NeMo 24.07 container"},
        {"source": "a cluster of ours, NeMo 24.07 container"},
    ],
)
def test_other_rows_keep_the_fp32_reduction(cells: dict[str, str]) -> None:
    base = {"source": SUMMARY, "source_table": TABLE, "model": "Llama 2 13B"}
    case = _case(**{**base, **cells})
    assert not _said(case.assumptions)
    if "DGX Cloud" not in cells.get("source", ""):
        assert case.parallel is not None and case.parallel.grad_fp32


@pytest.mark.parametrize(
    ("model", "container", "bf16"),
    [("Llama 3 8B", "24.05", True), ("Llama 2 7B", "24.05", False), ("Llama 2 7B", "24.07", True),
     ("Llama 3.1 70B", "24.12", True), ("Llama 3 8B", "25.01", True)],
)  # fmt: skip
def test_the_containers_of_the_scripts(model: str, container: str, bf16: bool) -> None:
    """Llama 3 scripts passed bf16 from their first versions, the Llama 2 ones from the
    renamed launcher (24.07); from 25.01 NeMo 2.0's performance scripts reduce in bf16 too
    (MEGATRON_CORE_ERAS), the launcher rule is not the one that says so."""
    case = _case(source=SUMMARY.replace("24.07", container), model=model)
    assert case.parallel is not None and case.parallel.grad_fp32 is not bf16
    assert bool(_said(case.assumptions)) is (bf16 and container != "25.01")


def test_the_package_summary_llama_rows_infer_the_hand_written_gradient_precision() -> None:
    """Every NEMO2407 Llama row: the inferred gradient precision is the hand-written one (the
    Llama 2 70B and Llama 3 rows read from the same scripts since s12; the Llama 2 7B / 13B rows
    since this session), and the rule is what sets it."""
    rows = {r["id"]: r for r in read_csv(data_dir() / "published_runs_held_out.csv")}
    hands = [c for c in package_cases() if c.source == "NEMO2407-H100" and "LLAMA" in c.id]
    assert len(hands) == 5
    for hand in hands:
        (mine, *_) = row_cases(rows[hand.id], hand.file, hand.line, data_dir())
        assert mine.parallel is not None and hand.parallel is not None
        assert mine.parallel.grad_fp32 is hand.parallel.grad_fp32 is False, hand.id
        assert _said(mine.assumptions), hand.id


@pytest.mark.parametrize(
    ("cells", "bf16"),
    [({}, True), ({"source": "a cluster of ours, NeMo 24.05 container"}, True),
     ({"hidden": "6144", "layers": "40", "ffn": "24576", "heads": "48"}, False),
     ({"source": "NVIDIA NeMo Framework performance summary, NeMo 25.02 container"}, True)],
)  # fmt: skip
def test_the_nemotron_340b_launcher_yaml_reduces_in_bf16(cells: dict[str, str], bf16: bool) -> None:
    """``nemotron_340b.yaml`` sets grad_sync_dtype bf16 itself, for any NeMo 1.x row of the 340B
    (hidden 18432); the 22B's width keeps fp32; from 25.01 the NeMo 2.0 era rule says bf16, not
    the launcher yaml."""
    base = {"source": SUMMARY, "model": "Nemotron-4 340B", "tp": "8", "pp": "8", "vpp": "12",
            "num_gpus": "128", "global_batch_seqs": "32"}  # fmt: skip
    case = _case(**{**base, **cells})
    assert case.parallel is not None and case.parallel.grad_fp32 is not bf16
    said = [a for a in case.assumptions if "nemotron_340b.yaml sets optim grad_sync_dtype" in a]
    assert bool(said) is (bf16 and "25.02" not in cells.get("source", ""))
