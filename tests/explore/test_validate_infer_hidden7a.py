"""What the TorchAO rows of s19 hidden7a showed the dating of a torchtitan row misread: the date a
row was added to its CSV (``added 6 Dec 2026``) dated the run, and a PyTorch nightly or
pre-release (``2.9.0.dev20250815``, ``2.7.0a0+gitb98af95``) was read as the release it precedes."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_release import dated, torch_dated
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"
BF16_H100 = "TORCHAO-F8-H100-LLAMA3-8B-BF16"


def _row(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == row_id]
    return row


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


@pytest.mark.parametrize(
    ("text", "when"),
    [("added 6 Dec 2026 (s19 hidden7a) before any prediction", None),
     ("Added 5 Dec 2026; measured June 2025", (2025, 6)),
     ("added on 2026-12-06; run of 2025-03", (2025, 3)),
     ("benchmarks of June 2025, added 6 Dec 2026", (2025, 6))],
)  # fmt: skip
def test_the_date_a_row_was_added_does_not_date_its_run(
    text: str, when: tuple[int, int] | None
) -> None:
    assert dated({"notes": text}) == when


@pytest.mark.parametrize(
    ("text", "when"),
    [("pytorch 2.9.0.dev20250815+cu128", (2025, 8)),
     ("pytorch version: `2.9.0.dev20250811+rocm6.4`", (2025, 8)),
     ("pytorch 2.7.0a0+gitb98af95, torchtitan 0.0.2", None),
     ("torch 2.8.0a0+5228986c39 then PyTorch 2.7.1", (2025, 4)),
     ("PyTorch 2.9.0+cu128", (2025, 10))],
)  # fmt: skip
def test_a_nightly_dates_from_its_build_and_an_alpha_from_nothing(
    text: str, when: tuple[int, int] | None
) -> None:
    assert torch_dated({"source_table": text}) == when


def test_a_torchtitan_row_on_a_pytorch_alpha_keeps_the_profile_of_its_era() -> None:
    """TorchAO's H100 table (PyTorch 2.7.0a0, torchtitan 0.0.2) took torchtitan's 2025
    defaults from the CSV's 'added 6 Dec 2026'; with neither read it is undated."""
    case = _case(_row(BF16_H100))
    assert not case.reason, case.reason
    assert dict(case.framework_options) == {"fused_elementwise": True}
    assert not any("2026-12" in a for a in case.assumptions)
    nightly = _case(_row("TORCHAO-MX-B200-LLAMA3-8B-BF16"))
    assert dict(nightly.framework_options) == {
        "fused_elementwise": True, "loss_fp32_buffers": 0, "optimizer_foreach": False,
    }  # fmt: skip
    assert any("PyTorch release the text names dates from 2025-08" in a
               for a in nightly.assumptions)  # fmt: skip


def test_the_torchao_rows_are_evaluated_with_their_rowwise_recipe() -> None:
    """The 12 TorchAO rows, all set up as torchtitan on their GPU's preset; the 4 float8
    'rowwise' ones (refused until s23 rowwise) with fp8_recipe rowwise, 'rowwise_with_gw_hp' with
    its weight-gradient GEMM in bf16 (fp8_gemms fprop,dgrad)."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("TORCHAO-")]
    assert len(rows) == 12
    for row in rows:
        case = _case(row)
        assert not case.reason, (row["id"], case.reason)
        assert case.parallel is not None
        if "ROWWISE" in row["id"]:
            gemms = ("fprop", "dgrad") if "GWHP" in row["id"] else ("fprop", "dgrad", "wgrad")
            assert (str(case.parallel.fp8_recipe), case.parallel.fp8_gemms) == ("rowwise", gemms)
        assert case.framework == "torchtitan"
        assert case.parallel is not None and case.model is not None
        assert case.system == {"H100": "h100-80gb", "MI300X": "mi300x"}.get(row["gpu"], "b200")
        assert (case.parallel.dp, case.parallel.micro_batch, case.model.seq_len) == (8, 1, 8192)


def test_the_torchtitan_405b_rows_read_their_layout_and_async_tp() -> None:
    """The three 405B rows of an earlier torchtitan performance.md: FSDP2 over 16 ranks with
    TP 8 (sequence parallel, torchtitan's TP plan), full AC; only the Async TP row is compiled."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("TTITAN405-")]
    assert len(rows) == 3
    for row in rows:
        case = _case(row)
        assert not case.reason and case.parallel is not None and case.model is not None
        p = case.parallel
        got = (p.tp, p.dp, p.zero, p.sp, p.micro_batch, case.model.seq_len)
        assert got == (8, 16, 3, True, 2, 8192)
        options = dict(case.framework_options)
        assert options.get("tp_comm_overlap", False) == row["id"].endswith("ASYNCTP")
        assert options.get("fused_elementwise", False) == row["id"].endswith("ASYNCTP")
