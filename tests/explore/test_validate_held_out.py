"""The held-out published runs of ``published_runs_held_out.csv`` (TorchTitan's tables, the
dense Llama rows of the Megatron-Bridge performance summary, NeMo AutoModel's FSDP2 MoE
rows and its dense Llama 3 70B row, the PyTorch/IBM FSDP blog's Table 1, NeMo 24.07's
DGX-H100 FP8 table, the DGX Cloud Benchmarking Llama 3.1, Nemotron-4 and GPT3 175B recipes, NeMo
25.02's DGX-B200 FP8 table and its one stored DGX-H100 row, the Megatron-Bridge 25.09 rows,
torchtitan's Trainy H200 baseline, NeMo's Long Input Sequences table): the CSV parses with
``published_runs_more.csv``'s schema, every row is a case of the sources that read it
(TorchTitan's and Trainy's: TPS/GPU and memory), every case is evaluated or says why, the
system file states what the source states and nothing else, the ``torchtitan`` profile has
TorchTitan's defaults, and memory targets are reported per source, in-sample apart.

The rows' setups per source (each recipe's layout and settings) are checked in
``test_validate_held_out_recipes.py`` and ``test_validate_held_out_dgxc.py``; the sources and
their prefixes are in ``held_out.py``."""

from __future__ import annotations

import csv
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from stage_explore.system.model import System
from stage_explore.validation.report import MEMORY_TARGET, ValidationReport
from stage_explore.validation.run import RowResult, evaluate_cases
from stage_explore.validation.setups import Case, load_cases, load_setups
from tests.explore.held_out import (
    DATA,
    HELD_OUT,
    MEMORY,
    NOT_EVALUATED,
    ON_FILES,
    OTHERS,
    SOURCES,
    TWO_METRICS,
    csv_rows,
    held_out_cases,
)
from tests.explore.package_cases import package_cases


def _readme_rows(name: str) -> int:
    """The row count the data README's files table states for ``name``."""
    for line in (DATA / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == f"`{name}`":
            return int(cells[1])
    raise AssertionError(f"the data README's files table has no row for {name}")


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return held_out_cases()


@pytest.fixture(scope="module")
def results(cases: list[Case]) -> list[RowResult]:
    return evaluate_cases(cases)


def test_the_csv_has_the_wider_schema_and_every_row_names_its_source() -> None:
    with (DATA / "published_runs_more.csv").open(newline="", encoding="utf-8") as handle:
        schema = next(csv.reader(handle))
    with (DATA / HELD_OUT).open(newline="", encoding="utf-8") as handle:
        assert next(csv.reader(handle)) == schema
    rows = csv_rows(HELD_OUT)
    assert len(rows) == _readme_rows(HELD_OUT) and len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["url"].startswith("https://") and row["source_table"], row["id"]
        assert row["uncertain"], f"{row['id']}: nothing recorded as inferred"
        assert float(row["tokens_per_s_per_gpu"]) > 0, row["id"]
        if row["id"].startswith("TTITAN-"):
            assert float(row["peak_mem_gib"]) > 0, row["id"]
        gpus = int(row["num_gpus"])
        parallel = int(row["tp"]) * int(row["pp"]) * int(row["dp"]) * int(row["cp"])
        assert parallel == gpus, f"{row['id']}: tp·pp·dp·cp = {parallel}, GPUs {gpus}"
        assert int(row["global_batch_seqs"]) % (int(row["dp"]) * int(row["micro_batch"] or 1)) == 0


def test_every_row_is_read_held_out_with_its_assumptions(cases: list[Case]) -> None:
    all_ids = [r["id"] for r in csv_rows(HELD_OUT)]
    assert {c.id for c in cases} == set(all_ids)
    for source, (prefix, system, framework) in {**OTHERS, **MEMORY}.items():
        mine = [c for c in cases if c.source == source]
        assert [c.id for c in mine] == [i for i in all_ids if i.startswith(prefix)] and mine
        for case in mine:
            assert case.system == system and not case.system_file and not case.in_sample
            assert case.framework == framework and case.assumptions, case.id
    for source, (prefix, name, framework) in ON_FILES.items():
        mine = [c for c in cases if c.source == source]
        assert [c.id for c in mine] == [i for i in all_ids if i.startswith(prefix)] and mine
        for case in mine:
            assert case.system_file == str(DATA / "systems" / name) and not case.in_sample
            assert case.framework == framework and case.assumptions, case.id
    ids = [i for i in all_ids if i.startswith("TTITAN-")]
    for source, metric in SOURCES.items():
        mine = [c for c in cases if c.source == source]
        assert [c.id for c in mine] == ids
        for case in mine:
            assert case.metric == metric and not case.in_sample
            assert case.framework == "torchtitan" and case.assumptions, case.id
            assert case.system_file == str(DATA / "systems" / "grand-teton-h100.toml")
    sources, _ = load_setups()
    declared = {s.name: s for s in sources}
    assert {declared[name].file for name in [*SOURCES, *OTHERS, *ON_FILES, *MEMORY]} == {HELD_OUT}


def test_every_row_is_evaluated_or_has_a_reason(results: list[RowResult]) -> None:
    ids = [r["id"] for r in csv_rows(HELD_OUT)]
    assert len(results) == sum(2 if i.startswith(TWO_METRICS) else 1 for i in ids)
    for result in results:
        if result.evaluated:
            assert math.isfinite(result.error) and result.predicted > 0, result.case.id
        else:
            assert result.note or result.case.reason, f"{result.case.id} dropped silently"
    not_evaluated = {r.case.id for r in results if not r.evaluated}
    assert not_evaluated == NOT_EVALUATED


def test_the_system_file_changes_only_what_the_source_states() -> None:
    teton = load_system(DATA / "systems" / "grand-teton-h100.toml")
    preset = load_system("h100-80gb")
    assert teton.accelerator.memory_bytes == 96 * 2**30
    assert teton.accelerator.memory_bandwidth_bytes_per_s == 2.4e12
    assert teton.accelerator.peak_flops_per_s == preset.accelerator.peak_flops_per_s
    assert teton.accelerator.kernels == preset.accelerator.kernels
    assert [(d.size, d.bandwidth_bytes_per_s) for d in teton.network] == [
        (d.size, d.bandwidth_bytes_per_s) for d in preset.network
    ]
    assert teton.network[1].bandwidth_bytes_per_s * 8 == 400e9  # "400 Gb/s per GPU"


def test_the_fsdp_blog_system_files_change_only_the_scale_out_link() -> None:
    for name, preset, per_node_bits in (("ibm-h100-800g.toml", "h100-80gb", 800e9),
                                        ("ibm-a100-400g.toml", "a100-80gb", 400e9)):  # fmt: skip
        system, base = load_system(DATA / "systems" / name), load_system(preset)
        mine, theirs = system.accelerator, base.accelerator  # the preset's datasheet figures
        assert mine.name == theirs.name and mine.peak_flops_per_s == theirs.peak_flops_per_s
        assert mine.memory_bytes == theirs.memory_bytes
        assert mine.memory_bandwidth_bytes_per_s == theirs.memory_bandwidth_bytes_per_s
        assert system.network[0] == base.network[0]  # the NVSwitch dim
        link, base_link = system.network[1], base.network[1]
        assert link.bandwidth_bytes_per_s * 8 * 8 == per_node_bits  # per node of 8 GPUs
        assert link.nccl_channels == 4  # 2 NICs read from the per-node figure, 2 channels each
        moved = replace(
            base_link, name=link.name, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s,
            nccl_channels=link.nccl_channels,
        )  # fmt: skip
        assert link == moved  # latency, efficiency, overhead, size: the preset's


def test_the_torchtitan_profile_has_the_job_configs_defaults() -> None:
    profile = get_framework("torchtitan")
    # training.compile and experimental.enable_async_tensor_parallel default to false
    assert not profile.fused_elementwise and not profile.tp_comm_overlap
    assert profile.zero3_gathers == 2 and profile.zero3_live_elements == 0  # FSDP2 blocks
    assert profile.pipeline_p2p_blocking  # Schedule1F1B waits on fwd_send_bwd_recv


def test_a_missing_system_file_is_a_one_line_error(tmp_path: Path) -> None:
    for name in ("published_runs.csv", "published_runs_more.csv", "vtrain_multi.csv", HELD_OUT):
        shutil.copy(DATA / name, tmp_path / name)
    text = (DATA / "setups.toml").read_text(encoding="utf-8")
    (tmp_path / "setups.toml").write_text(text, encoding="utf-8")
    # the first source naming a system file of the data folder (VTRAIN's, then TorchTitan's)
    with pytest.raises(ConfigError, match=r"system file 'systems/[\w.-]+\.toml' not found"):
        load_cases(tmp_path)


def _memory_row(case: Case, source: str, in_sample: bool, error: float) -> RowResult:
    moved = replace(case, source=source, in_sample=in_sample, metric="peak_mem_gib", measured=50.0)
    return RowResult(moved, 50.0 * (1 + error))


def test_memory_targets_are_per_source_with_the_in_sample_rows_apart(cases: list[Case]) -> None:
    case = cases[0]
    rows = [
        _memory_row(case, "TUNED", True, 0.05),
        _memory_row(case, "TUNED", True, -0.08),
        _memory_row(case, "HELD", False, 0.04),
        _memory_row(case, "HELD", False, -0.30),
    ]
    targets = {t.name: t for t in ValidationReport(tuple(rows), "test").targets()}
    tuned = targets[f"TUNED: peak memory within {MEMORY_TARGET:.0%} on every row"]
    held = targets[f"HELD: peak memory within {MEMORY_TARGET:.0%} on every row"]
    assert tuned.passed and "(in-sample)" in tuned.detail
    assert f"{(0.05 + 0.08) / 2 * 100:.2f} %" in tuned.detail
    assert not held.passed and "(held out)" in held.detail and "-30.0 %" in held.detail


def test_stage_validate_targets_cover_the_held_out_sources(results: list[RowResult]) -> None:
    report = ValidationReport(tuple(results), "test")
    names = {t.name: t for t in report.targets()}
    for source in ("TORCHTITAN", *OTHERS, *ON_FILES):
        rows = [r for r in results if r.case.source == source and r.evaluated]
        if not rows:  # every row not evaluated (LLAMA3-405B): no target to pass or fail
            assert f"{source}: held-out MAE <= 10%" not in names
            continue
        target = names[f"{source}: held-out MAE <= 10%"]
        mae = sum(abs(r.error) for r in rows) / len(rows)
        assert target.passed == (mae <= 0.10) and f"over {len(rows)} held-out rows" in target.detail
    memory = names["TORCHTITAN-MEM: peak memory within 10% on every row"]
    assert "(held out)" in memory.detail and "over 18 rows" in memory.detail
    assert "TORCHTITAN-MEM: held-out MAE <= 10%" not in names  # memory has its own target


def test_the_trainy_h200_rows_serve_throughput_and_memory(
    cases: list[Case], results: list[RowResult]
) -> None:
    """benchmarks/llama3_8b_h200_2025-06_torchtitan.md: llama3_8b.toml (sequence 8192, selective
    op AC, FSDP over every GPU) with local batch 2, torch.compile and Float8, on 4 and 8 hosts."""
    mine = [c for c in cases if c.source in ("TRAINY-H200", "TRAINY-H200-MEM")]
    assert sorted({c.metric for c in mine}) == ["peak_mem_gib", "tokens_per_s_per_gpu"]
    assert len(mine) == 4
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = int(case.id.rsplit("-", 1)[1])
        assert parallel.dp == gpus and parallel.global_batch == 2 * gpus and parallel.zero == 3
        assert parallel.micro_batch == 2 and model.seq_len == 8192 and parallel.grad_fp32
        assert str(parallel.recompute) == "selective" and parallel.recompute_modules == ("op",)
        assert str(parallel.precision) == "fp8" and str(parallel.fp8_recipe) == "tensorwise"
        assert dict(case.framework_options) == {  # --training.compile, torchtitan of 2025
            "fused_elementwise": True,
            "loss_fp32_buffers": 0,  # the loss compiled too (pytorch/torchtitan#1033)
            "optimizer_foreach": False,  # optimizer.implementation "fused"
            "fsdp_float8_all_gather": True,  # --float8.enable_fsdp_float8_all_gather
        }
    report = ValidationReport(tuple(results), "test")
    names = {t.name for t in report.targets()}
    assert "TRAINY-H200-MEM: peak memory within 10% on every row" in names
    assert "TRAINY-H200-MEM: held-out MAE <= 10%" not in names


def test_leave_one_source_out_trains_a_system_file_source_on_its_accelerators_rows() -> None:
    from stage_explore.validation.loso import _training_rows

    every = [c for c in package_cases() if c.parallel is not None and c.metric != "peak_mem_gib"]
    systems: dict[str, System] = {}

    def train_of(source: str) -> list[Case]:
        mine = [c for c in every if c.source == source]
        return _training_rows(mine, [c for c in every if c.source != source], systems)

    # vTrain runs on its own file with the A100 accelerator: trained on the A100 preset's rows
    vtrain = train_of("VTRAIN")
    assert vtrain and {c.system for c in vtrain} == {"a100-80gb"}
    assert {c.source for c in vtrain} >= {"KOR22-T5", "NAR21-T1"}
    # a preset source trains on the same preset only
    assert {c.system for c in train_of("MBRIDGE-H100")} == {"h100-80gb"}
    # TorchTitan's 96 GB HBM2e part: only the other Grand Teton source (the June 2025 async-TP
    # benchmark) shares its system
    assert {c.source for c in train_of("TORCHTITAN")} == {"TORCHTITAN-ASYNCTP"}


def test_leave_one_source_out_trains_the_fsdp_blog_on_its_accelerators_rows() -> None:
    from stage_explore.validation.loso import _training_rows

    every = [c for c in package_cases() if c.parallel is not None and c.metric != "peak_mem_gib"]
    systems: dict[str, System] = {}
    mine = [c for c in every if c.source == "IBMFSDP-H100"]
    train = _training_rows(mine, [c for c in every if c.source != "IBMFSDP-H100"], systems)
    assert train and {c.system for c in train} == {"h100-80gb"}  # the same H100 SXM5 part


def test_leave_one_source_out_reports_each_source_as_it_goes() -> None:
    # s19 usertour: `stage validate --loso` ran most of an hour without a line of output.
    import io

    from stage_explore.cli.meter import StepMeter
    from stage_explore.validation.loso import leave_one_source_out
    from stage_explore.validation.run import evaluate_cases

    cases = [c for c in package_cases() if c.source in ("KOR22-T5", "NAR21-T1")]
    calls: list[tuple[int, int, str]] = []
    leave_one_source_out(evaluate_cases(cases), max_evaluations=2,
                         progress=lambda *call: calls.append(call))  # fmt: skip
    assert calls == [(0, 2, "KOR22-T5"), (1, 2, "NAR21-T1"), (2, 2, "")]
    stream = io.StringIO()  # not a terminal: a line per source
    meter = StepMeter("leave one source out", "sources", stream)
    for call in calls:
        meter(*call)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("  leave one source out: 0/2 sources, fitting KOR22-T5 (0:0")
    assert lines[2].startswith("  leave one source out: 2/2 sources, done")


def test_leave_one_source_out_fits_once_for_inferred_sources_with_the_same_training_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inferred sources are never trained on, so two on one system train on the same rows: the
    figure fits once for both (it took ~100 minutes with 109 sources, most of them inferred)."""
    from stage_explore.validation import loso
    from stage_explore.validation.infer import INFERRED_PREFIX

    hand = [c for c in package_cases() if c.source in ("KOR22-T5", "NAR21-T1")]
    copies = [
        replace(c, source=f"{INFERRED_PREFIX}{name}")
        for name in ("A", "B") for c in hand if c.source == "NAR21-T1"
    ]  # fmt: skip
    calls: list[int] = []
    real_fit = loso.fit

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real_fit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loso, "fit", counted)
    out = loso.leave_one_source_out(evaluate_cases([*hand, *copies]), max_evaluations=2)
    assert len(calls) == 3  # KOR22-T5 on NAR21-T1, NAR21-T1 on KOR22-T5, both copies on both
    a, b = out[f"{INFERRED_PREFIX}A"], out[f"{INFERRED_PREFIX}B"]
    assert a == b and a["trained_on"] == ["KOR22-T5", "NAR21-T1"]
