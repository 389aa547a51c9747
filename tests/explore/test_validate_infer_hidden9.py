"""Rows of s24 hidden9 (MLPerf Training v5.1 / v6.0 Llama 3.1 8B runs of NVIDIA's NeMo
implementation by NVIDIA, Supermicro and Dell, added to published_runs_no_setup.csv): a row
that names its release as the ``framework`` field of an MLPerf system description spells it
(mlcommons/training_results_v5.1 4da2d1cd ``NVIDIA/systems/tyche_ngpu72_ngc25.09_nemo.json``
"NVIDIA NeMo Framework Release 25.09", ``Supermicro/systems/AS-8126GS-NB3RT.json`` "PyTorch
NVIDIA Release 25.04; NeMo Framework NVIDIA Release 25.09") is dated by that release, as
``ngc25.09_nemo`` dates it."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_release import container
from stage_explore.validation.setups import data_dir
from tests.explore.published_rows import inferred_case as _case

SMC = (
    "MLPerf Training v5.1, Supermicro closed division (AS-8126GS-NB3RT, 1 node of 8 "
    "B300-SXM-270GB; the NVIDIA NeMo Llama 3.1 8B implementation, NeMo Framework NVIDIA "
    "Release 25.09)"
)


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("NVIDIA NeMo Framework Release 25.09", (25, 9)),
        ("PyTorch NVIDIA Release 25.04; NeMo Framework NVIDIA Release 25.09", (25, 9)),
        ("nemo framework release 25.01", (25, 1)),
        ("PyTorch NVIDIA Release 25.04", None),  # the PyTorch container, not NeMo's
        ("NeMo Framework NVIDIA Release 25.091", None),
    ],
)
def test_an_mlperf_system_framework_field_dates_the_row(
    text: str, release: tuple[int, int] | None
) -> None:
    assert container({"source": text}) == release


def test_a_partner_row_spelling_the_release_so_reads_the_25_09_implementation() -> None:
    cells = {"model": "Llama 3.1 8B", "gpu": "B300-SXM-270GB", "precision": "FP8",
             "global_batch_seqs": "16", "micro_batch": "2"}  # fmt: skip
    mine = _case(source=SMC, **cells)
    twin = _case(source="MLPerf Training v5.1 (ngc25.09_nemo)", **cells)
    assert mine.parallel is not None and twin.parallel is not None
    assert mine.parallel.fp8_recipe == twin.parallel.fp8_recipe == "tensorwise"
    assert dict(mine.framework_options) == dict(twin.framework_options)
    assert any("container 25.09" in note for note in mine.assumptions), mine.assumptions


def test_the_package_hidden9_rows_are_read_as_25_09_or_later_runs() -> None:
    path = data_dir() / "published_runs_no_setup.csv"
    rows = [r for r in read_csv(path) if "s24 hidden9" in r["notes"]]
    assert len(rows) == 8
    for row in rows:
        release = container(row)
        assert release is not None and release >= (25, 9), row["id"]
        (case, *_) = row_cases(row, "published_runs_no_setup.csv", 1)
        assert case.parallel is not None and case.parallel.fp8_recipe == "tensorwise", row["id"]
