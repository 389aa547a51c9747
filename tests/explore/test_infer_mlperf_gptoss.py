"""s29 gptossdef: NVIDIA's MLPerf Training v6.0 GPT-OSS 20B implementation's defaults
(``conf/gpt_oss.yaml``, ``config_common.sh``, ``config_common_mxfp8.sh``) for a row that does not
state them (``infer_mlperf_gptoss.mlperf_gptoss_defaults``), and the v6.0 logs' "NVIDIA Release"
read over a results folder's ``ngcYY.MM`` (``infer_release.container``)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_mlperf_gptoss import (
    GPTOSS_BUCKET_PARAMETERS,
    GPTOSS_HYBRIDEP_SMS,
    mlperf_gptoss_defaults,
)
from stage_explore.validation.infer_release import Defaults, container
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"
V60 = "MLPerf Training v6.0, NVIDIA closed division"


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def _era() -> Defaults:
    """What the container era and the MLPerf loss reading leave before the reader runs."""
    out = Defaults()
    out.options.update(fp8_param_gather=True, native_cross_entropy=True)
    out.parallel["grad_fp32"] = False
    out.notes += [
        "FP8 parameters (framework option fp8_param_gather): the era's",
        "the loss as Megatron-Core's native fused cross-entropy (native_cross_entropy): MLPerf",
    ]
    return out


def test_a_row_stating_nothing_takes_the_implementations_defaults() -> None:
    out = _era()
    mlperf_gptoss_defaults({"source": V60}, "gpt-oss-20b", "fp8", "mxfp8", out)
    assert out.options["fp8_param_gather"] is False
    assert out.options["te_cross_entropy"] is True and "native_cross_entropy" not in out.options
    assert out.options["moe_hybridep"] is True
    assert out.options["moe_hybridep_sms"] == GPTOSS_HYBRIDEP_SMS == 128
    assert out.parallel["grad_bucket_bytes"] == GPTOSS_BUCKET_PARAMETERS * 2 == 1_536_000_000
    # the replaced era notes are gone, one note per reading remains
    assert not any(n.startswith("FP8 parameters (framework option") for n in out.notes)
    assert not any("native fused cross-entropy" in n for n in out.notes)
    assert len(out.notes) == 4


@pytest.mark.parametrize(("stated", "key", "where", "value"), [
    ("FP8_PARAM_GATHER=True", "fp8_param_gather", "options", True),
    ("fp8_param True", "fp8_param_gather", "options", True),  # NeMo's name, a printed log
    ("CE_FUSION_IMPL=native", "native_cross_entropy", "options", True),
    ("MOE_HYBRIDEP_NUM_SMS=64", "moe_hybridep_sms", "options", 64),
    ("moe_token_dispatcher_type alltoall", "moe_hybridep", "options", None),
    ("moe_flex_dispatcher_backend deepep", "moe_hybridep", "options", None),
    ("BUCKET_SIZE=40000000", "grad_bucket_bytes", "parallel", None),  # infer_buckets reads it
])  # fmt: skip
def test_a_stated_value_wins(stated: str, key: str, where: str, value: object) -> None:
    out = _era()
    mlperf_gptoss_defaults({"source": V60, "notes": stated}, "gpt-oss-20b", "fp8", "mxfp8", out)
    assert getattr(out, where).get(key) == value


@pytest.mark.parametrize(("source", "flavor", "precision", "recipe"), [
    ("MLPerf Training v5.1, NVIDIA closed division", "gpt-oss-20b", "fp8", "mxfp8"),
    (V60, "gpt-oss-120b", "fp8", "mxfp8"),
    (V60, "gpt-oss-20b", "bf16", ""),
    (V60, "gpt-oss-20b", "fp8", "tensorwise"),  # not config_common_mxfp8.sh
    ("NVIDIA GPT-OSS 20B training run", "gpt-oss-20b", "fp8", "mxfp8"),  # not MLPerf
])  # fmt: skip
def test_other_rows_are_left_alone(source: str, flavor: str, precision: str, recipe: str) -> None:
    out = _era()
    mlperf_gptoss_defaults({"source": source}, flavor, precision, recipe, out)
    assert out.options == _era().options and out.parallel == _era().parallel


def _key(row_id: str) -> tuple[str, int | None]:
    (case,) = row_cases(_package(row_id), FILE, 1)
    assert case.parallel is not None
    return case.backend_key, case.parallel.grad_bucket_bytes


def test_nvidias_gb300_8_row_takes_the_defaults_not_hpes_quoted_values() -> None:
    # its ``uncertain`` cell quotes HPE's printed fp8_param_gather False: not this row's own
    key, bucket = _key("MLPERF-GPTOSS20B-GB300-V60-8")
    for option in ("fp8_param_gather=false", "te_cross_entropy=true", "moe_hybridep=true",
                   "moe_hybridep_sms=128"):  # fmt: skip
        assert option in key
    assert "native_cross_entropy" not in key
    assert bucket == 768_000_000 * 2


def test_lambdas_b200_row_keeps_its_printed_fp8_parameters() -> None:
    key, _ = _key("MLPERF-GPTOSS20B-B200-V60-LAMBDA-8")
    assert "fp8_param_gather=true" in key


def test_hpes_row_keeps_its_printed_values() -> None:
    key, bucket = _key("MLPERF-GPTOSS20B-B300-V60-HPE-8")
    assert "fp8_param_gather=false" in key and "te_cross_entropy=true" in key
    assert bucket == 768_000_000 * 2  # its printed bucket_size 768000000


@pytest.mark.parametrize(("row_id", "release"), [
    ("MLPERF-GPTOSS20B-GB300-V60-LAMBDA-72", (26, 4)),  # gb300_n18_ngc25.09_nemo, log 26.04
    ("MLPERF-GPTOSS20B-B200-V60-LAMBDA-8", (26, 4)),
    ("MLPERF-L31-8B-B200-V60-LAMBDA-8", (26, 4)),
    ("MLPERF-GPTOSS20B-GB300-V60-8", (26, 4)),  # NeMo Framework Release 26.04 (unchanged)
    ("MLPERF-L31-8B-H200-V51-HPE-64", (25, 9)),  # v5.1: the PyTorch base is not read
])  # fmt: skip
def test_the_v60_logs_release_is_read_over_a_folder_name(
    row_id: str, release: tuple[int, int]
) -> None:
    assert container(_package(row_id)) == release


def test_a_v60_row_stating_its_release_in_a_text_cell() -> None:
    row = {
        "source": "MLPerf Training v6.0, X closed division (PyTorch NVIDIA Release 26.04)",
        "source_table": "result_0.txt (x_n1_ngc25.09_nemo)",
    }
    assert container(row) == (26, 4)
    assert container({**row, "source": "MLPerf Training v5.1 (PyTorch NVIDIA Release 25.08)"}) == (
        25, 9,
    )  # fmt: skip
