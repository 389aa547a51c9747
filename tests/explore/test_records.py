"""Records: the flat versioned schema, atomic numbered parts, reading back with pandas."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.evaluation import Evaluation
from stage_explore.records import (
    BREAKDOWN_COMPONENTS,
    RECORDS_VERSION,
    VERSION_KEY,
    Outcome,
    RecordWriter,
    TrialStatus,
    flatten_evaluation,
    make_row,
    read_records,
    records_schema,
)
from stage_explore.study.spec import HardwareParam, Knob, SearchSpace

PARAMS = {
    "num_gpus": 16,
    "tp": 2,
    "pp": 2,
    "cp": 1,
    "ep": 1,
    "sp": True,
    "zero": 1,
    "recompute": "full",
    "schedule": "1f1b",
    "vpp": 1,
    "micro_batch": 2,
}
SPACE = SearchSpace(
    knobs=tuple(Knob(name=name, values=(value,)) for name, value in PARAMS.items()),
    hardware=(
        HardwareParam(
            path="network.0.bandwidth_gbps",
            column="hw_network_0_bandwidth_gbps",
            values=(400.0, 800.0),
        ),
        HardwareParam(
            path="network.0.topology", column="hw_network_0_topology", values=("ring", "switch")
        ),
    ),
)
EVALUATION = Evaluation(
    step_time_s=2.0,
    mfu=0.4,
    hfu=0.5,
    tokens_per_s_per_gpu=1000.0,
    peak_memory_bytes=70 << 30,
    feasible=True,
    breakdown={"compute": 1.5, "exposed_all_reduce": 0.25, "custom_a": 0.125, "custom_b": 0.125},
    memory_capacity_bytes=80 << 30,
    num_gpus=16,
    model_flops_per_step=6 * 405 * 10**9 * 16 * 10**6,  # > 2**63: stored as float64
    hardware_flops_per_step=10**12,
    cost_per_million_tokens=1.5,
    extra={"note": "x"},
)


def row(trial: int, outcome: Outcome) -> dict[str, object]:
    params = {**PARAMS, "hw_network_0_bandwidth_gbps": 400.0, "hw_network_0_topology": "ring"}
    return make_row(
        trial=trial,
        study="s",
        params=params,
        dp=4,
        outcome=outcome,
        finished_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def test_flatten_spreads_the_breakdown_over_fixed_columns() -> None:
    flat = flatten_evaluation(EVALUATION)
    assert flat["breakdown_compute"] == 1.5 and flat["breakdown_exposed_all_reduce"] == 0.25
    assert flat["breakdown_other"] == 0.25  # custom_a + custom_b
    assert flat["breakdown_idle"] is None
    assert json.loads(flat["breakdown_json"]) == dict(EVALUATION.breakdown)
    assert json.loads(flat["extra_json"]) == {"note": "x"}
    assert flat["model_flops_per_step"] == float(EVALUATION.model_flops_per_step)
    assert flat["peak_memory_bytes"] == 70 << 30 and flat["feasible"] is True


def test_schema_is_flat_versioned_and_has_one_column_per_parameter() -> None:
    schema = records_schema("s", SPACE)
    names = schema.names
    assert names[:5] == ["trial", "study", "status", "reason", "backend"]
    for name in (
        "num_gpus",
        "dp",
        *PARAMS,
        "step_time_s",
        "peak_memory_bytes",
        "mfu",
        "eval_s",
        "finished_at",
        "worker",
    ):
        assert name in names
    assert {f"breakdown_{name}" for name in BREAKDOWN_COMPONENTS} <= set(names)
    assert schema.field("hw_network_0_bandwidth_gbps").type == pa.float64()
    assert schema.field("hw_network_0_topology").type == pa.string()
    assert schema.field("peak_memory_bytes").type == pa.int64()
    assert schema.metadata[VERSION_KEY] == str(RECORDS_VERSION).encode()
    assert all(not pa.types.is_nested(field.type) for field in schema)


def test_parts_are_numbered_atomic_and_read_back(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    writer = RecordWriter(folder, records_schema("s", SPACE))
    assert writer.flush() is None
    ok = Outcome(
        status=TrialStatus.OK,
        metrics=flatten_evaluation(EVALUATION),
        backend="b",
        eval_s=0.5,
        worker="host:1",
    )
    writer.append(row(0, ok))
    writer.append(row(1, Outcome(status=TrialStatus.FAILED, reason="ValueError: boom")))
    assert writer.flush() == folder / "part-00000.parquet"
    writer.append(row(2, Outcome(status=TrialStatus.INFEASIBLE, reason="tp·pp·cp=6 …")))
    assert writer.flush() == folder / "part-00001.parquet"
    (folder / ".part-00002.parquet.tmp").write_bytes(b"half a part")  # a crash mid-write
    assert sorted(p.name for p in folder.iterdir()) == [
        ".part-00002.parquet.tmp",
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    frame = load_results(folder)
    assert frame["trial"].tolist() == [0, 1, 2]
    assert frame["status"].tolist() == ["ok", "failed", "infeasible"]
    assert frame.loc[0, "peak_memory_bytes"] == 70 << 30
    assert pd.isna(frame.loc[1, "step_time_s"]) and frame.loc[1, "reason"] == "ValueError: boom"
    assert frame["feasible"].tolist() == [True, False, False]
    assert pd.read_parquet(folder).shape == frame.shape  # plain readers skip the temp file
    RecordWriter(folder, records_schema("s", SPACE))  # reopening removes crash leftovers
    assert not (folder / ".part-00002.parquet.tmp").exists()
    table = read_records(folder)
    assert table is not None and table.num_rows == 3


def test_load_results_concatenates_studies_of_an_output_folder(tmp_path: Path) -> None:
    for study in ("a", "b"):
        writer = RecordWriter(tmp_path / study, records_schema(study, SPACE))
        outcome = Outcome(status=TrialStatus.FAILED, reason="x")
        writer.append({**row(0, outcome), "study": study})
        writer.flush()
    frame = load_results(tmp_path)
    assert frame["study"].tolist() == ["a", "b"]


def test_missing_records_and_future_versions_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no trial records"):
        load_results(tmp_path)
    folder = tmp_path / "s"
    folder.mkdir()
    table = pa.table({"trial": [0]}).replace_schema_metadata({VERSION_KEY: b"99"})
    pq.write_table(table, folder / "part-00000.parquet")
    with pytest.raises(ConfigError, match="records version 99 is not supported"):
        load_results(folder)
