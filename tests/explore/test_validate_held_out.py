"""The held-out published runs of ``published_runs_held_out.csv`` (TorchTitan's tables, the
dense Llama rows of the Megatron-Bridge performance summary, NeMo AutoModel's FSDP2 MoE
rows and its dense Llama 3 70B row, the PyTorch/IBM FSDP blog's Table 1, NeMo 24.07's
DGX-H100 FP8 table, the DGX Cloud Benchmarking Llama 3.1, Nemotron-4 and GPT3 175B recipes, NeMo
25.02's DGX-B200 FP8 table and its one stored DGX-H100 row, the Megatron-Bridge 25.09 rows,
torchtitan's Trainy H200 baseline, NeMo's Long Input Sequences table): the CSV parses with
``published_runs_more.csv``'s schema, every row is a case of the sources that read it
(TorchTitan's and Trainy's: TPS/GPU and memory), every case is evaluated or says why, the
system file states what the source states and nothing else, the ``torchtitan`` profile has
TorchTitan's defaults, and memory targets are reported per source, in-sample apart."""

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
from stage_explore.validation.setups import Case, data_dir, load_cases, load_setups

DATA = data_dir()
HELD_OUT = "published_runs_held_out.csv"
SOURCES = {"TORCHTITAN": "tokens_per_s_per_gpu", "TORCHTITAN-MEM": "peak_mem_gib"}
#: Megatron-Bridge dense rows: source → (id prefix, system preset).
MBRIDGE = {
    "MBRIDGE-H100": ("MBD-H100-", "h100-80gb"),
    "MBRIDGE-B200": ("MBD-B200-", "b200"),
    "MBRIDGE-GB200": ("MBD-GB200-", "gb200-nvl72"),
    "MBRIDGE-GB300": ("MBD-GB300-", "gb300-nvl72"),
}
#: One-metric sources of the file: source → (id prefix, system preset, framework).
OTHERS = {
    **{name: (prefix, system, "megatron-core") for name, (prefix, system) in MBRIDGE.items()},
    "AUTOMODEL": ("AUTOMODEL-H100-", "h100-80gb", "automodel"),
    "AUTOMODEL-DENSE": ("AUTOMODEL-DENSE-H100-", "h100-80gb", "automodel"),
    "NEMO2407-H100": ("NEMO2407-H100-", "h100-80gb", "megatron-core"),
    "DGXC-H100-BF16": ("DGXC-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-H100-FP8": ("DGXC-H100-FP8-", "h100-80gb", "megatron-core"),
    "NEMO2502-B200": ("NEMO2502-B200-", "b200", "megatron-core"),
    "DGXC-GPT3-BF16": ("DGXC-GPT3-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-GPT3-FP8": ("DGXC-GPT3-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-H100-BF16": ("DGXC2502-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-H100-FP8": ("DGXC2502-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-GPT3-BF16": ("DGXC2502-GPT3-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-GPT3-FP8": ("DGXC2502-GPT3-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2504-H100-BF16": ("DGXC2504-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2504-H100-FP8": ("DGXC2504-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2411-H100-BF16": ("DGXC2411-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2411-H100-FP8": ("DGXC2411-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC-GROK1-BF16": ("DGXC-GROK1-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-GROK1-FP8": ("DGXC-GROK1-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-GROK1-BF16": ("DGXC2502-GROK1-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-GROK1-FP8": ("DGXC2502-GROK1-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-H100-BF16": ("DGXC2505-GROK1-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-H100-FP8": ("DGXC2505-GROK1-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-GB200-BF16": ("DGXC2505-GROK1-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-GROK1-GB200-FP8": ("DGXC2505-GROK1-GB200-FP8-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-DSV3-H100-BF16": ("DGXC2505-DSV3-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-DSV3-GB200-BF16": ("DGXC2505-DSV3-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-H100-BF16": ("DGXC2505-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-H100-FP8": ("DGXC2505-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GB200-BF16": ("DGXC2505-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-GB200-FP8": ("DGXC2505-GB200-FP8-", "gb200-nvl72", "megatron-core"),
    "NEMO2502-H100": ("NEMO2502-H100-", "h100-80gb", "megatron-core"),
    "TRAINY-H200": ("TRAINY-H200-", "h200", "torchtitan"),
    "NEMO2403-LONGSEQ-H100": ("NEMO2403-LONGSEQ-H100-", "h100-80gb", "megatron-core"),
    "MBRIDGE-MOE-B200": ("MBM-B200-", "b200", "megatron-core"),
    "MBRIDGE-MOE-B300": ("MBM-B300-", "b300", "megatron-core"),
    "TORCHTITAN-A100": ("TTA100-", "a100-80gb", "torchtitan"),
    "MLPERF-GPT3-H100": ("MLPERF-GPT3-H100-", "h100-80gb", "megatron-core"),
    "MLPERF-GPT3-B200": ("MLPERF-GPT3-B200-", "b200", "megatron-core"),
    "MLPERF-L405B-H100": ("MLPERF-L405B-H100-", "h100-80gb", "megatron-core"),
    "NEMOPERF-B200": ("NEMOPERF-B200-", "b200", "megatron-core"),
    "MLPERF-L405B-GB200": ("MLPERF-L405B-GB200-", "gb200-nvl72", "megatron-core"),
    "LLAMA3-405B": ("LLAMA3-405B-", "h100-80gb", "torchtitan"),
}
#: Memory sources on the rows of a throughput source: source → (id prefix, preset, framework).
MEMORY = {"TRAINY-H200-MEM": ("TRAINY-H200-", "h200", "torchtitan")}
#: Id prefixes of the rows that serve two sources (throughput and memory).
TWO_METRICS = ("TTITAN-", "TRAINY-H200-")
#: One-metric sources on a system file of the data folder: source → (id prefix, file, framework).
ON_FILES = {
    "IBMFSDP-H100": ("IBMFSDP-H100-", "ibm-h100-800g.toml", "fms-fsdp"),
    "IBMFSDP-A100": ("IBMFSDP-A100-", "ibm-a100-400g.toml", "fms-fsdp"),
    "FMSFSDP-A100": ("FMSFSDP-A100-", "ibm-a100-400g.toml", "fms-fsdp"),
    "TORCHTITAN-ASYNCTP": ("TTASYNC-", "grand-teton-h100.toml", "torchtitan"),
    "BLOOM": ("BLOOM-", "ibm-a100-400g.toml", "deepspeed"),
}
#: Rows the generator cannot express (each with its reason in setups.toml).
NOT_EVALUATED = {
    # fms-fsdp's 13b: checkpointing an unstated fraction of the blocks
    "IBMFSDP-H100-LLAMA2-13B", "IBMFSDP-A100-LLAMA2-13B",
    # torchtitan's 'selective layer' AC: every n-th block, n not stated
    "TTA100-L3-8B-BS1-SELLAYER", "TTA100-L2-13B-BS2-SELLAYER",
    # Meta's interleaved schedule with a tunable number of contiguous micro-batches
    "LLAMA3-405B-8192", "LLAMA3-405B-16384",
}  # fmt: skip


def _readme_rows(name: str) -> int:
    """The row count the data README's files table states for ``name``."""
    for line in (DATA / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == f"`{name}`":
            return int(cells[1])
    raise AssertionError(f"the data README's files table has no row for {name}")


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [c for c in load_cases() if c.source in {*SOURCES, *OTHERS, *ON_FILES, *MEMORY}]


@pytest.fixture(scope="module")
def results(cases: list[Case]) -> list[RowResult]:
    return evaluate_cases(cases)


def test_the_csv_has_the_wider_schema_and_every_row_names_its_source() -> None:
    with (DATA / "published_runs_more.csv").open(newline="", encoding="utf-8") as handle:
        schema = next(csv.reader(handle))
    with (DATA / HELD_OUT).open(newline="", encoding="utf-8") as handle:
        assert next(csv.reader(handle)) == schema
    rows = _rows(HELD_OUT)
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
    all_ids = [r["id"] for r in _rows(HELD_OUT)]
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
    ids = [r["id"] for r in _rows(HELD_OUT)]
    assert len(results) == sum(2 if i.startswith(TWO_METRICS) else 1 for i in ids)
    for result in results:
        if result.evaluated:
            assert math.isfinite(result.error) and result.predicted > 0, result.case.id
        else:
            assert result.note or result.case.reason, f"{result.case.id} dropped silently"
    not_evaluated = {r.case.id for r in results if not r.evaluated}
    assert not_evaluated == NOT_EVALUATED


def test_recipes_switch_compile_and_async_tp_per_row(cases: list[Case]) -> None:
    by_id = {c.id: c for c in cases if c.source == "TORCHTITAN"}
    assert by_id["TTITAN-T1-1"].backend_key == "torchtitan"  # "FSDP": eager, no Float8
    assert by_id["TTITAN-T1-2"].backend_key == "torchtitan+fused_elementwise=true"
    assert "tp_comm_overlap=true" in by_id["TTITAN-T4-2"].backend_key
    assert "tp_comm_overlap" not in by_id["TTITAN-T4-1"].backend_key
    one, interleaved = by_id["TTITAN-T5-1"].parallel, by_id["TTITAN-T5-2"].parallel
    assert one is not None and interleaved is not None
    # the table's local batch 32 per FSDP rank, split into the default number of micro-batches
    assert one.global_batch == 32 * one.dp and one.global_batch // (one.dp * one.micro_batch) == 8
    assert interleaved.vpp == 2 and str(interleaved.schedule) == "interleaved"
    for case in by_id.values():
        assert case.parallel is not None and case.model is not None
        assert case.parallel.zero == 3
        precision = "bf16" if case.id in {"TTITAN-T1-1", "TTITAN-T1-2", "TTITAN-T3-1",
                                          "TTITAN-T3-2"} else "fp8"  # fmt: skip
        assert str(case.parallel.precision) == precision, case.id


def test_megatron_bridge_rows_take_the_tables_layout_and_recipe(cases: list[Case]) -> None:
    by_id = {c.id: c for c in cases}
    fsdp = by_id["MBD-H100-25.11-LLAMA3_8B"].parallel
    assert fsdp is not None and fsdp.zero == 3 and fsdp.dp == 8  # the table's FSDP 8
    big = by_id["MBD-H100-25.11-LLAMA3.1_405B"].parallel
    assert big is not None
    assert (big.tp, big.pp, big.cp, big.vpp, big.dp) == (8, 8, 2, 8, 1024 // (8 * 8 * 2))
    assert big.sp and big.zero == 1 and not big.grad_fp32
    for row_id, recipe in (("MBD-B200-25.11-LLAMA3_8B-CS", "tensorwise"),
                           ("MBD-B200-25.11-LLAMA3_8B-MX", "mxfp8")):  # fmt: skip
        parallel = by_id[row_id].parallel
        assert parallel is not None and str(parallel.fp8_recipe) == recipe
    # the 25.09 tables state the same layouts as the 25.11 ones for these rows (same recipes)
    older = [i for i in by_id if i.startswith("MBD-") and "-25.09-" in i]
    assert len(older) == 9
    for row_id in older:
        new, old = by_id[row_id.replace("-25.09-", "-25.11-")].parallel, by_id[row_id].parallel
        assert new is not None and old is not None
        fields = ("tp", "pp", "cp", "vpp", "dp", "micro_batch", "global_batch", "zero", "sp")
        assert [getattr(old, f) for f in fields] == [getattr(new, f) for f in fields], row_id
        assert str(old.fp8_recipe) == ("mxfp8" if row_id.endswith("-MX") else "tensorwise")
        assert dict(by_id[row_id].framework_options) == dict(
            by_id[row_id.replace("-25.09-", "-25.11-")].framework_options
        )


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


def test_leave_one_source_out_trains_a_system_file_source_on_its_accelerators_rows() -> None:
    from stage_explore.validation.loso import _training_rows

    every = [c for c in load_cases() if c.parallel is not None and c.metric != "peak_mem_gib"]
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


def test_the_fsdp_blog_rows_take_two_sequences_of_4096_per_gpu(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    blog = ("IBMFSDP-H100", "IBMFSDP-A100")
    evaluated = [c for c in cases if c.source in blog and c.parallel is not None]
    sizes = ["34B", "34B", "70B", "70B", "7B", "7B"]
    assert sorted(c.id.rsplit("-", 1)[1] for c in evaluated) == sizes
    for case in evaluated:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = int(rows[case.id]["num_gpus"])
        # the blog: batch 2 per GPU, 4k sequences, 1M tokens per batch on 128 GPUs
        assert (parallel.dp, parallel.micro_batch, parallel.global_batch) == (gpus, 2, 2 * gpus)
        assert parallel.zero == 3 and not parallel.grad_fp32  # FSDP, bfSixteen reduce dtype
        assert model.seq_len == 4096 and model.vocab == 32000 and str(parallel.precision) == "bf16"
        if case.id.endswith("-7B"):  # fms-fsdp's scripts/7b.sh: HSDP over 8-GPU nodes, no AC
            assert parallel.dp_shard == 8 and str(parallel.recompute) == "none"
            assert model.kv_heads == model.heads == 32
        else:  # FSDP (FULL_SHARD), activation checkpointing of every block
            assert parallel.dp_shard is None and str(parallel.recompute) == "full"
            assert model.kv_heads == 8
    assert rows["IBMFSDP-A100-LLAMA2-7B"]["tokens_per_s_per_gpu"] == "3700"
    assert 128 * 2 * 4096 == 1_048_576  # the blog's "1 million tokens per batch for 128 GPUs"


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


def test_nemo_2407_rows_take_each_models_launcher_recipe(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    by_id = {c.id: c for c in cases if c.source == "NEMO2407-H100"}
    assert len(by_id) == 12
    for row_id, case in by_id.items():
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        row = rows[row_id]
        gpus = int(row["num_gpus"])
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        assert (parallel.global_batch, parallel.micro_batch) == (
            int(row["global_batch_seqs"]),
            int(row["micro_batch"]),
        )
        assert str(parallel.precision) == "fp8" and str(parallel.fp8_recipe) == "delayed"
        assert parallel.zero == 1 and parallel.sp == (parallel.tp > 1)
        gpt3 = "GPT3" in row_id  # *_fp8_performance.yaml: selective, grad_sync_dtype bf16
        assert str(parallel.recompute) == ("selective" if gpt3 else "none"), row_id
        # bf16 gradients: the GPT-3 yamls, nemotron_340b.yaml, and the launcher's H100 example
        # scripts of the table's Llama 2 70B / Llama 3 layouts (grad_sync_dtype=bf16)
        bf16_grads = {"NEMOTRON-340B", "LLAMA2-70B", "LLAMA3-8B", "LLAMA3-70B"}
        bf16 = gpt3 or row_id.removeprefix("NEMO2407-H100-") in bf16_grads
        assert parallel.grad_fp32 == (not bf16), row_id
    nemotron = by_id["NEMO2407-H100-NEMOTRON-8B"].model
    assert nemotron is not None and nemotron.kv_heads == nemotron.heads == 32  # no GQA
    assert str(nemotron.activation) == "squared-relu" and nemotron.vocab == 256000


def test_leave_one_source_out_trains_the_fsdp_blog_on_its_accelerators_rows() -> None:
    from stage_explore.validation.loso import _training_rows

    every = [c for c in load_cases() if c.parallel is not None and c.metric != "peak_mem_gib"]
    systems: dict[str, System] = {}
    mine = [c for c in every if c.source == "IBMFSDP-H100"]
    train = _training_rows(mine, [c for c in every if c.source != "IBMFSDP-H100"], systems)
    assert train and {c.system for c in train} == {"h100-80gb"}  # the same H100 SXM5 part


def test_dgx_cloud_rows_weak_scale_one_layout_per_model(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    by_id = {c.id: c for c in cases if c.source in ("DGXC-H100-BF16", "DGXC-H100-FP8")}
    assert len(by_id) == 60
    # the READMEs' (TP, PP, CP, VP, MBS) per model, and the full model's layer count
    layouts = {
        "8B": ((1, 1, 2, 1, 1), 32),
        "70B": ((4, 4, 2, 5, 1), 80),
        "405B": ((8, 9, 2, 7, 1), 126),
        "15B": ((4, 1, 1, 1, 4), 32),
        "340B": ((8, 8, 1, 12, 1), 96),
    }
    for row_id, case in by_id.items():
        parallel, model, row = case.parallel, case.model, rows[row_id]
        assert parallel is not None and model is not None
        gpus, gbs = int(row["num_gpus"]), int(row["global_batch_seqs"])
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * gbs / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.02), row_id
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        layout, layers = layouts[row_id.split("-")[-2]]
        if model.layers == layers:  # the full models (the 405B proxies differ in pp)
            got = (parallel.tp, parallel.pp, parallel.cp, parallel.vpp, parallel.micro_batch)
            assert got == layout, row_id
        # the 340B recipe's own config (nemotron4-340b-synth.yaml) recomputes core attention
        recompute = "selective" if row_id.split("-")[-2] == "340B" else "none"
        assert parallel.zero == 1 and str(parallel.recompute) == recompute, row_id
        assert parallel.sp == (parallel.tp > 1) and str(parallel.cp_style) == "ring"
        assert str(parallel.precision) == ("fp8" if "-FP8-" in row_id else "bf16")
        # the recipes' memory settings: configure.sh's +model.fp8_params=$FP8_ENABLED, and the
        # 340B config's distributed_fused_adam with a bf16 state (nemotron4-340b-synth.yaml)
        options = dict(case.framework_options)
        assert options.get("fp8_param_gather", False) == ("-FP8-" in row_id), row_id
        adam = "bf16" if row_id.split("-")[-2] == "340B" else "off"
        assert options.get("distributed_fused_adam", "off") == adam, row_id
    # the 405B recipe's GPT-2 BPE proxy tokenizer; Nemotron-4's 256k vocabulary and 4k sequences
    vocab = {i.split("-")[-2]: c.model.vocab for i, c in by_id.items() if c.model is not None}
    assert vocab == {"8B": 128256, "70B": 128256, "405B": 50257, "15B": 256000, "340B": 256000}


def test_dgx_cloud_gpt3_rows_take_the_recipes_layout_and_settings(cases: list[Case]) -> None:
    """nemo_megatron/README_175b.md (GSW 24.11): TP 4, PP 8, VP 12, MBS 1, sequence 2048, GBS
    2 per GPU; gpt3_175b_hydra.yaml and launch.sh at the same commit give the rest."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.source in ("DGXC-GPT3-BF16", "DGXC-GPT3-FP8")]
    assert len(mine) == 10
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        gpus = int(row["num_gpus"])
        assert parallel.global_batch == 2 * gpus and model.seq_len == 2048
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.005), case.id
        got = (parallel.tp, parallel.pp, parallel.vpp, parallel.micro_batch, parallel.dp)
        assert got == (4, 8, 12, 1, gpus // 32), case.id
        assert (model.layers, model.hidden, model.heads, model.vocab) == (96, 12288, 96, 50257)
        assert parallel.sp and parallel.zero == 1 and str(parallel.recompute) == "none"
        assert not parallel.grad_fp32  # optim.grad_sync_dtype bf16
        fp8 = case.source.endswith("FP8")
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16"), case.id
        options = dict(case.framework_options)
        assert options["attention_kernel"] == "fa2"  # launch.sh: NVTE_FUSED_ATTN=0
        assert options["distributed_fused_adam"] == "fp32" and not options["ub_bulk_sm_margin"]
        assert options.get("fp8_param_gather", False) == fp8, case.id
        if fp8:
            assert str(parallel.fp8_recipe) == "delayed"


def test_the_dgx_cloud_25_02_rows_take_their_earlier_twins_setup(cases: list[Case]) -> None:
    """GSW 25.02 (dgxc-benchmarking 8f5cbb37, NeMo 24.12) republished the Llama 3.1 and GPT3 175B
    tables with the 24.09 / 24.11 tables' layouts: each row is set up as its earlier twin, apart
    from the GPT3 recipe's attention (configure.sh NVTE_FUSED_ATTN=1, where 24.11 exported 0)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    new = sorted(i for i in by_id if i.startswith("DGXC2502-"))
    assert new == sorted(r for r in rows if r.startswith("DGXC2502-"))  # every row is a case
    assert any("-GROK1-" in i for i in new) and any("-LLAMA3.1-" in i for i in new)
    for row_id in new:
        case = by_id[row_id]
        twin = by_id[row_id.replace("DGXC2502-", "DGXC-")]
        assert case.parallel == twin.parallel and case.model == twin.model, row_id
        assert not case.in_sample and case.system == twin.system == "h100-80gb"
        for column in ("num_gpus", "global_batch_seqs", "tp", "pp", "cp", "vpp", "layers"):
            assert rows[row_id][column] == rows[twin.id][column], (row_id, column)
        assert case.measured != twin.measured, row_id  # a second measurement, not a copy
        options, earlier = dict(case.framework_options), dict(twin.framework_options)
        if "-GPT3-" in row_id:
            assert (options.pop("attention_kernel"), earlier.pop("attention_kernel")) == (
                "cudnn",
                "fa2",
            )
        assert options == earlier, row_id


def test_the_dgx_cloud_grok1_rows_take_the_recipes_layout_and_moe_setup(cases: list[Case]) -> None:
    """Grok-1 314B (dgxc-benchmarking grok1/README_314b.md at 35a9aecc and 8f5cbb37; the
    per-scale branches of grok1/configure.sh): TP 4, EP 2/4/8, CP 2 and sequence 8192 from 64
    GPUs, PP 1-8 with VP 8 from 128, proxies of 2-32 layers below 512 GPUs, GBS 1024 (2048 and
    4096 at 1024 and 2048 GPUs); 8 experts, top-2, FlashAttention-2 (NVTE_FUSED_ATTN=0)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if "-GROK1-" in c.id and not c.id.startswith("DGXC2505-")]
    earlier = sorted(i for i in rows if "-GROK1-" in i and not i.startswith("DGXC2505-"))
    assert sorted(c.id for c in mine) == earlier
    layout = {  # GPUs: (layers, seq, pp, cp, ep, vpp, gbs), configure.sh per node count
        8: (2, 4096, 1, 1, 2, 1, 1024), 16: (4, 4096, 1, 1, 4, 1, 1024),
        32: (4, 4096, 1, 1, 8, 1, 1024), 64: (8, 8192, 1, 2, 8, 1, 1024),
        128: (16, 8192, 2, 2, 8, 8, 1024), 256: (32, 8192, 4, 2, 8, 8, 1024),
        512: (64, 8192, 8, 2, 8, 8, 1024), 1024: (64, 8192, 8, 2, 8, 8, 2048),
        2048: (64, 8192, 8, 2, 8, 8, 4096),
    }  # fmt: skip
    assert {int(rows[c.id]["num_gpus"]) for c in mine} == set(layout)
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus = int(rows[case.id]["num_gpus"])
        layers, seq, pp, cp, ep, vpp, gbs = layout[gpus]
        got = (model.layers, model.seq_len, parallel.pp, parallel.cp, parallel.ep, parallel.vpp)
        assert got == (layers, seq, pp, cp, ep, vpp), case.id
        assert parallel.tp == parallel.expert_tp == 4 and parallel.global_batch == gbs
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        assert parallel.expert_dp == gpus // (4 * pp * ep)  # experts folded over tp·cp·dp
        assert (model.num_experts, model.top_k, model.expert_ffn) == (8, 2, 32768)
        assert (model.hidden, model.heads, model.kv_heads, model.vocab) == (6144, 48, 8, 128256)
        # grok1_314b.yaml (dgxc-benchmarking 35a9aecc): moe_expert_capacity_factor 1.0 with
        # moe_pad_expert_input_to_capacity, drop-and-pad to capacity (not dropless)
        assert model.capacity_factor == 1.0, case.id
        assert parallel.sequence_parallel and not parallel.grad_fp32 and parallel.zero == 1
        options = dict(case.framework_options)
        assert options["attention_kernel"] == "fa2"
        assert options.get("fp8_param_gather", False) == ("-FP8-" in case.id), case.id
        tokens = seq * gbs / float(rows[case.id]["iter_time_s"]) / gpus
        # the published throughput, within 1 % of SeqLen·GBS/step (25.02 FP8 1024: 0.5 %)
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.01)


def test_the_dgx_cloud_25_05_grok1_rows_take_the_launch_scripts_layout(cases: list[Case]) -> None:
    """GSW 25.05.04 (dgxc-benchmarking 1f6d9f40 grok1/README.md and launch.sh, NeMo 2.0): the
    full 64-layer model, GBS 2 per GPU; H100 TP 4, PP 8, CP 2, EP 8, ETP 1, VP 8; GB200 TP 4,
    EP 8, ETP 4 (gb200-nvl72). The 512-GB200 throughput cells are SeqLen·512/step, half the
    layout's GBS: those rows carry SeqLen·GBS/step. FP8: delayed scaling with FP8 parameters; the
    script's userbuffers config has no SM margin on its bulk overlaps."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.id.startswith("DGXC2505-GROK1-")]
    assert sorted(c.id for c in mine) == sorted(i for i in rows if i.startswith("DGXC2505-GROK1-"))
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus, h100 = int(rows[case.id]["num_gpus"]), "-H100-" in case.id
        got = (parallel.tp, parallel.pp, parallel.cp, parallel.ep, parallel.expert_tp, parallel.vpp)
        assert got == ((4, 8, 2, 8, 1, 8) if h100 else (4, 1, 1, 8, 4, 1)), case.id
        assert case.system == ("h100-80gb" if h100 else "gb200-nvl72")
        assert parallel.global_batch == 2 * gpus and model.layers == 64 and model.seq_len == 8192
        moe = (model.num_experts, model.top_k, model.expert_ffn, model.vocab)
        assert moe == (8, 2, 32768, 128256), case.id
        # pretrain_grok1_314b.py's MegatronTokenDropCallback: capacity 1.0, padded to capacity
        assert model.capacity_factor == 1.0, case.id
        options, fp8 = dict(case.framework_options), "-FP8-" in case.id
        assert options.get("fp8_param_gather", False) == fp8
        # bf16_with_fp8_mixed(): delayed scaling; pretrain_grok1_314b.py names
        # userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 on every GPU and dtype, whose bulk
        # overlaps have set_sm_margin=False
        assert options["ub_bulk_sm_margin"] is False, case.id
        assert not fp8 or str(parallel.fp8_recipe) == "delayed"
        tokens = 8192 * parallel.global_batch / float(rows[case.id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.002)


def test_the_dgx_cloud_25_05_deepseek_rows_take_the_scripts_pipeline_split(
    cases: list[Case],
) -> None:
    """GSW 25.05.04 DeepSeek-V3 BF16 (dgxc-benchmarking 1f6d9f40 deepseek_v3/pretraining/launch.sh,
    NeMo's pretrain_deepseek_v3.py): TP 2, ETP 1, GBS 8 per GPU; H100 PP 8 (512) / 16 (1024),
    EP 64, recompute mla_up_proj; GB200 PP 4, EP 32 (128) / 64, recompute core_attn; decoder
    layers per stage 64/PP with one fewer on the first stage and two fewer on the last."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.id.startswith("DGXC2505-DSV3-")]
    assert sorted(c.id for c in mine) == sorted(i for i in rows if i.startswith("DGXC2505-DSV3-"))
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus, h100 = int(rows[case.id]["num_gpus"]), "-H100-" in case.id
        pp = (8 if gpus == 512 else 16) if h100 else 4
        ep = 64 if h100 or gpus > 128 else 32
        got = (parallel.tp, parallel.pp, parallel.ep, parallel.expert_tp, parallel.global_batch)
        assert got == (2, pp, ep, 1, 8 * gpus), case.id
        middle = 64 // pp
        assert (parallel.pp_first_layers, parallel.pp_last_layers) == (middle - 1, middle - 2)
        assert middle - 1 + (pp - 2) * middle + middle - 2 == model.layers == 61
        assert parallel.recompute_modules == (("mla_up_proj",) if h100 else ("core_attn",))
        assert (model.num_experts, model.top_k, model.mtp_layers, model.seq_len) == (
            256,
            8,
            1,
            4096,
        )
        # pretrain_deepseek_v3.py (USE_TOKEN_DROP) adds NeMo's MegatronTokenDropCallback:
        # moe_expert_capacity_factor 1.0 with moe_pad_expert_input_to_capacity (not dropless)
        assert model.capacity_factor == 1.0, case.id
        # NeMo's DeepSeekV3Config make_vocab_size_divisible_by 1280, padded x TP by
        # GPTConfig.configure_model (get_vocab_size): 129280 -> 130560 at TP 2
        assert parallel.vocab_divisible_by == 1280, case.id
        assert parallel.padded_vocab(model) == 130560, case.id
        assert case.system == ("h100-80gb" if h100 else "gb200-nvl72")
        tokens = 4096 * parallel.global_batch / float(rows[case.id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.002)


def test_the_dgx_cloud_25_05_dense_rows_take_their_25_04_twins_setup(cases: list[Case]) -> None:
    """GSW 25.05.04's Nemotron-4 and Llama 3.1 405B tables (dgxc-benchmarking 1f6d9f40
    nemotron/ and llama3.1/ README.md and launch.sh, NeMo 25.04): set up as the GSW 25.04 rows of
    the same recipes (Nemotron-4 15B-16 / 340B-256, Llama 3.1 405B-512); on GB200 the 340B at TP 8,
    PP 4, VP 12 with GBS GPUs/4 (weak) or 512 (strong scaling), the 405B at TP 4, GBS GPUs/2, both
    with the b200 userbuffers configs NeMo's pretrain_nemotron4_340b.py / pretrain_llama31_405b.py
    name on gb200 (bulk overlaps set_sm_margin=False: ub_bulk_sm_margin false)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    prefixes = ("DGXC2505-H100-", "DGXC2505-GB200-")
    new = sorted(i for i in by_id if i.startswith(prefixes))
    assert new and new == sorted(r for r in rows if r.startswith(prefixes))
    twins = {"15B": "NEMOTRON4-15B-16", "340B": "NEMOTRON4-340B-256", "405B": "LLAMA3.1-405B-512"}
    for row_id in new:
        case = by_id[row_id]
        precision, size = row_id.split("-")[2], row_id.split("-")[4]
        twin = by_id[f"DGXC2504-H100-{precision}-{twins[size]}"]
        assert case.parallel is not None and twin.parallel is not None and case.model is not None
        assert case.model == twin.model, row_id
        gpus = int(rows[row_id]["num_gpus"])
        # the loss: NeMo 25.04's performance scripts set cross_entropy_fusion_impl 'te', the
        # 25.02 twin keeps GPTConfig's native fused loss; every other option is the twin's
        mine, theirs = dict(case.framework_options), dict(twin.framework_options)
        assert mine.pop("te_cross_entropy") is True and "native_cross_entropy" not in mine
        assert theirs.pop("native_cross_entropy") is True and "te_cross_entropy" not in theirs
        if "-H100-" in row_id:
            assert case.parallel == twin.parallel and case.system == "h100-80gb", row_id
            if row_id == "DGXC2505-H100-FP8-LLAMA3.1-405B-512":
                # the FP8 reduce-scatter buffers of userbuffers_fp8_h100_h16384_tp8_cp2 (fp8_buf),
                # which TE honours again from 2.2 (#1633, NeMo 25.04), not in the twin's 25.02
                for option in ("ub_proj_fprop_fp8_buf", "ub_fc2_fprop_fp8_buf"):
                    assert mine.pop(option) is True and option not in theirs
            assert mine == theirs
            continue
        assert case.system == "gb200-nvl72"
        # the scripts' GB200 userbuffers configs (userbuffers_{bf16,fp8}_b200_h18432_tp8_... for
        # the 340B, _b200_h16384_tp4_cp2_... for the 405B): bulk overlaps without an SM margin;
        # forward reduce-scatters as ring exchanges where the config names them (s12 ubrs): the
        # FP8 configs both, the BF16 340B proj_fprop only, the BF16 405B none
        ring = "ring_exchange"
        methods = {
            ("FP8", "340B"): {"ub_proj_fprop_method": ring, "ub_fc2_fprop_method": ring},
            ("FP8", "405B"): {"ub_proj_fprop_method": ring, "ub_fc2_fprop_method": ring},
            ("BF16", "340B"): {"ub_proj_fprop_method": ring},
        }.get((precision, size), {})
        assert mine == theirs | {"ub_bulk_sm_margin": False} | methods, row_id
        if size == "405B":
            got = (case.parallel.tp, case.parallel.pp, case.parallel.cp, case.parallel.vpp)
            assert got == (4, 8, 2, 8) and case.parallel.global_batch == gpus // 2, row_id
            changed = {"tp": 8, "dp": twin.parallel.dp, "global_batch": 256}
            assert replace(case.parallel, **changed) == twin.parallel
            continue
        got = (case.parallel.tp, case.parallel.pp, case.parallel.vpp, case.parallel.dp)
        assert got == (8, 4, 12, gpus // 32), row_id
        gbs = 512 if row_id.endswith("-STRONG") else gpus // 4
        assert case.parallel.global_batch == gbs
        assert replace(case.parallel, pp=8, dp=twin.parallel.dp, global_batch=64) == twin.parallel


def test_the_dgx_cloud_24_11_nemotron_rows_take_their_later_twins_setup(cases: list[Case]) -> None:
    """GSW 24.11's own Nemotron-4 15B table (dgxc-benchmarking 35a9aecc, NeMo 24.09): the layouts
    of the DGXC-H100-* 15B rows (the 0b71cfda table), set up as those twins."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    new = sorted(i for i in by_id if i.startswith("DGXC2411-"))
    assert new and new == sorted(r for r in rows if r.startswith("DGXC2411-"))
    for row_id in new:
        case, twin = by_id[row_id], by_id[row_id.replace("DGXC2411-", "DGXC-")]
        assert case.parallel == twin.parallel and case.model == twin.model, row_id
        assert case.framework_options == twin.framework_options and not case.in_sample
        for column in ("num_gpus", "global_batch_seqs", "tp", "pp", "micro_batch", "layers"):
            assert rows[row_id][column] == rows[twin.id][column], (row_id, column)
    # a second measurement, not a copy (the FP8 512-GPU step is 2.12 s in both tables)
    earlier = {i: by_id[i.replace("DGXC2411-", "DGXC-")].measured for i in new}
    assert sum(by_id[i].measured != earlier[i] for i in new) > 1


def test_the_dgx_cloud_25_04_rows_take_the_readmes_layout_table(cases: list[Case]) -> None:
    """GSW 25.04 (dgxc-benchmarking 741c8860, NeMo 2.0 on nemo:25.02.01): llama3.1/README.md's
    layout table gives (Layers, TP, PP, CP, VP) per model, precision and GPU count, GBS 16 / 2 /
    0.5 per GPU (8B / 70B / 405B; the 405B proxies 64, 64, 128 on 32, 64, 128 GPUs)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.source in ("DGXC2504-H100-BF16", "DGXC2504-H100-FP8")]
    assert len(mine) == 58
    nemotron = [c for c in mine if "-NEMOTRON4-" in c.id]
    assert len(nemotron) == 24
    for case in nemotron:
        # nemotron/launch.sh: 15B TP 2, MBS 2, GBS 4 per GPU; 340B TP 8, PP 8, VP 12 (the
        # layout table's "VP NA" corrected from it), GBS a quarter of the GPUs; 4k sequences
        assert case.parallel is not None and case.model is not None
        gpus = int(rows[case.id]["num_gpus"])
        small = "-15B-" in case.id
        got = (case.parallel.tp, case.parallel.pp, case.parallel.vpp, case.parallel.micro_batch)
        assert got == ((2, 1, 1, 2) if small else (8, 8, 12, 1)), case.id
        assert case.parallel.global_batch == (4 * gpus if small else gpus // 4)
        assert case.model.seq_len == 4096 and case.model.vocab == 256000
    mine = [c for c in mine if "-LLAMA3.1-" in c.id]
    assert len(mine) == 34
    proxies = {32: (8, 1, 1, 64), 64: (30, 4, 8, 64), 128: (62, 4, 8, 128)}
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        size, gpus = case.id.split("-")[-2], int(row["num_gpus"])
        fp8 = case.source.endswith("FP8")
        if size == "8B":
            layout, batch = (32, 1, 1, 2, 1), 16 * gpus
        elif size == "70B":
            layout = (80, 4, 8, 1, 5) if fp8 else (80, 4, 4, 2, 5)
            batch = 2 * gpus
        else:
            layers, pp, vp, batch = proxies.get(gpus, (126, 8, 8, gpus // 2))
            layout = (layers, 8, pp, 2, vp)
        got = (model.layers, parallel.tp, parallel.pp, parallel.cp, parallel.vpp)
        assert got == layout and parallel.global_batch == batch, case.id
        assert parallel.micro_batch == 1 and model.seq_len == 8192 and model.vocab == 128256
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.005), case.id
        assert not parallel.grad_fp32 and parallel.sp == (parallel.tp > 1)
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16")
        if parallel.pp > 1 and model.layers % (parallel.pp * parallel.vpp):
            # the embedding and the loss each take a layer's slot of the pipeline split
            assert parallel.pp_layers is not None and sum(parallel.pp_layers) == model.layers
            assert len(parallel.pp_layers) == parallel.pp * parallel.vpp, case.id
        options = dict(case.framework_options)
        assert options.get("fp8_param_gather", False) == fp8, case.id
        assert options.get("ub_bulk_sm_margin", True) == (size == "8B"), case.id


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
        }
    report = ValidationReport(tuple(results), "test")
    names = {t.name for t in report.targets()}
    assert "TRAINY-H200-MEM: peak memory within 10% on every row" in names
    assert "TRAINY-H200-MEM: held-out MAE <= 10%" not in names


def test_nemo_long_sequence_rows_are_4m_tokens_per_step_with_k_of_1024(cases: list[Case]) -> None:
    """NeMo's Long Input Sequences table (Llama 2 7B, 4K-1024K): every row's layout fills its
    GPUs, steps carry 4M tokens, and the published model FLOPs per token grow as NeMo's attention
    term 12·l·h·s with s = K·1024 (within 0.5 %; K·1000 is off by 2 % at 1024K)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.source == "NEMO2403-LONGSEQ-H100"]
    assert len(mine) == 9
    layers, hidden = 32, 4096

    def flops_per_token(row: dict[str, str]) -> float:
        return float(row["tflops_per_gpu"]) * 1e12 / float(row["tokens_per_s_per_gpu"])

    first = rows[mine[0].id]
    base = flops_per_token(first) - 12 * layers * hidden * int(first["seq_len"])
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        k = int(case.id.rsplit("-", 1)[1].rstrip("K"))
        assert model.seq_len == 1024 * k and (model.layers, model.hidden) == (layers, hidden)
        assert parallel.global_batch * model.seq_len == 4 * 2**20 and parallel.micro_batch == 1
        gpus = parallel.tp * parallel.pp * parallel.cp * parallel.dp
        assert gpus == int(row["num_gpus"]) == k  # one GPU per 1K tokens of sequence
        assert parallel.sp == (parallel.tp > 1) and str(parallel.cp_style) == "ring"
        assert str(parallel.recompute) == "none" and str(parallel.fp8_recipe) == "delayed"
        expected = base + 12 * layers * hidden * model.seq_len
        assert flops_per_token(row) == pytest.approx(expected, rel=0.005), case.id
    last = rows[mine[-1].id]
    assert abs(flops_per_token(last) / (base + 12 * layers * hidden * 1024 * 1000) - 1) > 0.01


def test_the_26_02_moe_rows_take_their_25_11_twins_setup_but_the_batch() -> None:
    """The 26.02 tables' H100 GPT-OSS 120B and Qwen3-235B rows run the recipes' V2 variants,
    which change only the global batch of the 25.11 rows' V1 (published_runs_more.csv)."""
    by_id = {c.id: c for c in load_cases() if c.source == "MBRIDGE"}
    for new_id, batch in (
        ("MBRIDGE26.02-DGX-H100-GPTOSS120B-64", 1280),
        ("MBRIDGE26.02-DGX-H100-Qwen3_235B_a22B-256", 8192),
    ):
        new, old = by_id[new_id], by_id[new_id.replace("26.02", "25.11")]
        assert new.parallel is not None and old.parallel is not None
        assert new.parallel.global_batch == batch != old.parallel.global_batch
        assert replace(new.parallel, global_batch=old.parallel.global_batch) == old.parallel
        assert new.model == old.model and new.framework_options == old.framework_options
        assert not new.in_sample and new.system == old.system == "h100-80gb"


def test_the_b200_moe_rows_take_the_tables_layout(cases: list[Case]) -> None:
    """Megatron-Bridge's DGX-B200 MoE rows: GPUs, GBS, MBS, PP, VP, EP as the tables state
    (expert DP = GPUs / (EP x PP)) but the 25.11 GPT-OSS row's EP, which its recipe sets to 64
    (a csv correction), 26.02 / 26.04 rows on cuDNN 9.17's attention, MXFP8 for Qwen3."""
    by_id = {c.id: c for c in cases if c.source == "MBRIDGE-MOE-B200"}
    layouts = {  # GPUs, GBS, MBS, PP, VP, EP (the tables; the 25.11 GPT-OSS EP the recipe's)
        "MBM-B200-25.11-GPTOSS120B-64": (64, 512, 4, 1, 1, 64),
        "MBM-B200-26.02-GPTOSS120B-64": (64, 1280, 4, 1, 1, 64),
        "MBM-B200-25.11-QWEN3_235B_A22B-64": (64, 1024, 1, 8, 2, 8),
        "MBM-B200-26.02-QWEN3_235B_A22B-256": (256, 8192, 1, 8, 1, 8),
        "MBM-B200-26.04-GPTOSS120B-64": (64, 1280, 4, 1, 1, 8),
    }
    assert set(by_id) == set(layouts)
    for row_id, (gpus, gbs, mbs, pp, vpp, ep) in layouts.items():
        parallel = by_id[row_id].parallel
        assert parallel is not None
        got = (parallel.tp * parallel.pp * parallel.cp * parallel.dp, parallel.global_batch)
        assert got == (gpus, gbs), row_id
        assert (parallel.micro_batch, parallel.pp, parallel.vpp, parallel.ep) == (mbs, pp, vpp, ep)
        assert parallel.expert_tp == 1 and not parallel.grad_fp32 and parallel.zero == 1
        qwen = "QWEN3" in row_id
        assert str(parallel.fp8_recipe) == "mxfp8" if qwen else str(parallel.precision) == "bf16"
        options = dict(by_id[row_id].framework_options)
        later = "-26.02-" in row_id or "-26.04-" in row_id
        assert (options.get("attention_kernel") == "cudnn-9.17") == later
    corrected = by_id["MBM-B200-25.11-GPTOSS120B-64"].assumptions
    assert any(a.startswith("ep 64 instead of the published '8'") for a in corrected)


def test_the_torchtitan_a100_rows_run_fsdp2_over_64_gpus(cases: list[Case]) -> None:
    """docs/performance.md (2024): FSDP2 alone on 64 A100, global batch = local batch x 64, the
    table's AC per row, Llama 3 at 8192 tokens and Llama 2 at 4096."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = [c for c in cases if c.source == "TORCHTITAN-A100"]
    assert len(mine) == 8
    recompute = {"SELOP": "selective", "FULL": "full", "NOAC": "none"}
    for case in mine:
        if case.id.endswith("SELLAYER"):  # not evaluated: the layer interval is not stated
            assert case.reason and case.parallel is None
            continue
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        local = int(case.id.split("-BS")[1].split("-")[0])
        assert (parallel.dp, parallel.zero, parallel.micro_batch) == (64, 3, local), case.id
        assert parallel.global_batch == 64 * local and parallel.grad_fp32
        assert model.seq_len == (8192 if "-L3-" in case.id else 4096), case.id
        assert str(parallel.recompute) == recompute[case.id.rsplit("-", 1)[1]], case.id
        if case.id.endswith("SELOP"):
            assert parallel.recompute_modules == ("op",)
        assert float(row["mfu_pct"]) > 50 and not dict(case.framework_options)  # eager, bf16


def test_the_fms_fsdp_readme_rows_take_the_tables_strategy_batch_and_checkpointing(
    cases: list[Case],
) -> None:
    """fms-fsdp's README table on 128 A100: 13b HSDP (shard groups of a node) without
    checkpointing at batch 1, 34b / 70b FSDP with every block checkpointed at batch 8 / 6."""
    by_id = {c.id: c for c in cases if c.source == "FMSFSDP-A100"}
    expected = {  # dp_shard (None: FULL_SHARD over all of dp), micro-batch, recompute
        "FMSFSDP-A100-LLAMA2-13B-HSDP-BS1": (8, 1, "none"),
        "FMSFSDP-A100-LLAMA2-34B-FSDP-BS8": (None, 8, "full"),
        "FMSFSDP-A100-LLAMA2-70B-FSDP-BS6": (None, 6, "full"),
    }
    assert set(by_id) == set(expected)
    for row_id, (shard, batch, recompute) in expected.items():
        parallel, model = by_id[row_id].parallel, by_id[row_id].model
        assert parallel is not None and model is not None
        assert (parallel.dp, parallel.zero, parallel.dp_shard) == (128, 3, shard), row_id
        assert (parallel.micro_batch, parallel.global_batch) == (batch, 128 * batch)
        assert str(parallel.recompute) == recompute and not parallel.grad_fp32
        assert model.seq_len == 4096 and model.vocab == 32000


def test_the_async_tp_rows_run_fsdp_x_tp8_compiled(cases: list[Case]) -> None:
    """asyncTP_llama3_h100_2025-06: 70B on 256 GPUs (FSDP 32, local batch 16, full AC), 8B on
    64 (FSDP 8, local batch 12, per-op SAC), TP 8, compile, bf16 / float8, vanilla / async TP."""
    mine = [c for c in cases if c.source == "TORCHTITAN-ASYNCTP"]
    assert len(mine) == 8
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        big = "-70B-" in case.id
        dp, local, recompute = (32, 16, "full") if big else (8, 12, "selective")
        got = (parallel.tp, parallel.dp, parallel.micro_batch, parallel.global_batch)
        assert got == (8, dp, local, local * dp) and parallel.sp and parallel.zero == 3
        assert str(parallel.recompute) == recompute and model.seq_len == 8192
        assert model.layers == (80 if big else 32)
        assert str(parallel.precision) == ("fp8" if "-FP8-" in case.id else "bf16")
        options = dict(case.framework_options)
        assert options.get("tp_comm_overlap", False) == case.id.endswith("-ASYNC")
        assert options["fused_elementwise"] and options["loss_fp32_buffers"] == 0


def test_the_26_04_rows_take_their_26_02_twins_setup() -> None:
    """The Megatron-Bridge 26.04 tables' rows whose 26.02 twins are here state the same layouts
    (GPT-OSS 120B on DGX-B200 at EP 8 instead of 64; Qwen3-235B on DGX-B300 at MBS 2 without the
    26.02 table's VP 4): each is set up as its twin, except that the B300 twin's recipe ran
    the expert all-to-all overlap its VP 4 was for (moe_comm_overlap; the 26.04 recipe has
    neither)."""
    by_id = {c.id: c for c in load_cases()}
    new = sorted(i for i in by_id if "26.04" in i)
    assert len(new) == 11
    for row_id in new:
        case, twin = by_id[row_id], by_id[row_id.replace("26.04", "26.02")]
        assert case.parallel is not None and twin.parallel is not None
        assert case.source == twin.source and not case.in_sample
        options, twin_options = dict(case.framework_options), dict(twin.framework_options)
        if row_id.startswith("MBM-B300-"):
            assert (options["moe_comm_overlap"], twin_options["moe_comm_overlap"]) == (False, True)
            twin_options["moe_comm_overlap"] = False
        assert case.model == twin.model and options == twin_options
        if row_id.startswith("MBM-B200-"):
            assert (case.parallel.ep, twin.parallel.ep) == (8, 64), row_id
            assert replace(case.parallel, ep=64) == twin.parallel
        elif row_id.startswith("MBM-B300-"):
            assert (case.parallel.micro_batch, case.parallel.vpp, twin.parallel.vpp) == (2, 1, 4)
            unchanged = replace(
                case.parallel, micro_batch=1, vpp=4, schedule=twin.parallel.schedule
            )
            assert unchanged == twin.parallel, row_id
        else:
            assert case.parallel == twin.parallel, row_id


def test_the_mlperf_gpt3_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """NVIDIA's MLPerf GPT-3 175B submissions: config_<system>_<nodes>x8x<MINIBS>x<TP>x<PP>
    states TP, PP and the per-replica batch MINIBS (GBS = MINIBS x DP, conf/custom.yaml),
    INTERLEAVED_PIPELINE and MICRO_BATCH_SIZE; the rate is GBS x 2048 tokens per step time."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    layouts = {  # GPUs, MINIBS, TP, PP, VP, MBS (the configs; the 512-GPU run's MINIBS is 144:
        # its log's gradient_accumulation_steps 72 x MBS 2)
        "MLPERF-GPT3-H100-V41-256": (256, 256, 4, 8, 6, 2),
        "MLPERF-GPT3-H100-V40-512": (512, 144, 4, 8, 4, 2),
        "MLPERF-GPT3-H100-V40-10752": (10752, 6, 4, 6, 8, 1),
        "MLPERF-GPT3-H100-V40-11616": (11616, 6, 4, 6, 8, 1),
        "MLPERF-GPT3-H100-V41-512": (512, 128, 4, 8, 6, 2),
        "MLPERF-GPT3-B200-V41-64": (64, 1024, 4, 8, 6, 2),
    }
    mine = {c.id: c for c in cases if c.source.startswith("MLPERF-GPT3-")}
    assert set(mine) == set(layouts)
    for row_id, (gpus, minibs, tp, pp, vpp, mbs) in layouts.items():
        case, row = mine[row_id], rows[row_id]
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        dp = gpus // (tp * pp)
        assert (parallel.tp, parallel.pp, parallel.vpp, parallel.micro_batch) == (tp, pp, vpp, mbs)
        assert parallel.dp == dp and parallel.global_batch == minibs * dp, row_id
        assert model.layers % (pp * vpp) == 0 and model.seq_len == 2048 and not model.dropout
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.001), row_id
        assert parallel.sp and parallel.zero == 1 and not parallel.grad_fp32
        assert str(parallel.precision) == "fp8" and str(parallel.fp8_recipe) == "delayed"
        options = dict(case.framework_options)
        assert options["distributed_fused_adam"] == "fp32" and not options["ub_bulk_sm_margin"]
        assert "attention_kernel" not in options  # TE's cuDNN fused attention (the default)


def test_the_mlperf_llama_405b_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """MLPerf v5.0 Llama 3.1 405B on H100: TP 8, PP 8, CP 2, VP 8, MBS 1; 'global batch size will
    be DGXNNODES*MINIBS/16' (config_DGXH100_1024x8x24xtp8pp8cp2.sh); ASYM_PP_EMBED / _LOSS give
    the embedding and the loss a layer's slot: 64 chunks of 2 over 126 layers + 2."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    layouts = {"MLPERF-L405B-H100-V50-512": (64, 288), "MLPERF-L405B-H100-V50-2048": (256, 72),
               "MLPERF-L405B-H100-V50-2432": (304, 64), "MLPERF-L405B-H100-V50-2560": (320, 56),
               "MLPERF-L405B-H100-V50-8192": (1024, 24)}  # fmt: skip
    mine = {c.id: c for c in cases if c.source == "MLPERF-L405B-H100"}
    assert set(mine) == set(layouts)
    for row_id, (nodes, minibs) in layouts.items():
        case, row = mine[row_id], rows[row_id]
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = 8 * nodes
        assert (parallel.tp, parallel.pp, parallel.cp, parallel.vpp) == (8, 8, 2, 8)
        assert parallel.dp == gpus // 128 and parallel.global_batch == nodes * minibs // 16
        chunks = parallel.pp_layers
        assert len(chunks) == parallel.pp * parallel.vpp and sum(chunks) == model.layers == 126
        assert chunks[0] == chunks[-1] == 1 and set(chunks[1:-1]) == {2}
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.001), row_id
        assert str(parallel.fp8_recipe) == "delayed" and not parallel.grad_fp32
        assert dict(case.framework_options)["fp8_param_gather"]


def test_the_third_party_b200_rows_differ_only_in_precision(cases: list[Case]) -> None:
    """vuiseng9/nemo-perf-nvfp4: one 8xB200 node, GBS 128, MBS 2, sequence 8192, TP/PP/CP 1;
    BF16, FP8 delayed scaling ('--fp8_recipe ds') and MXFP8 of NeMo's pretrain_llama3_8b.py."""
    mine = {c.id.rsplit("-", 1)[-1]: c for c in cases if c.source == "NEMOPERF-B200"}
    assert set(mine) == {"BF16", "FP8DS", "MXFP8"}
    layouts = set()
    for name, case in mine.items():
        parallel = case.parallel
        assert parallel is not None and case.model is not None and case.model.seq_len == 8192
        layouts.add((parallel.tp, parallel.pp, parallel.cp, parallel.dp, parallel.micro_batch,
                     parallel.global_batch, parallel.zero, str(parallel.recompute)))  # fmt: skip
        fp8 = name != "BF16"
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16"), name
        assert dict(case.framework_options).get("fp8_param_gather", False) == fp8, name
        if fp8:
            assert str(parallel.fp8_recipe) == {"FP8DS": "delayed", "MXFP8": "mxfp8"}[name]
    assert layouts == {(1, 1, 1, 8, 2, 128, 1, "none")}


def test_the_mlperf_llama_405b_gb200_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """MLPerf v5.0 Llama 3.1 405B on GB200 (4 GPUs per tray; NVIDIA's Tyche and CoreWeave's
    Carina): TP 4, PP 8, CP 2, VP 8, MBS 1, MINIBS sequences per data-parallel replica (the
    config names' third field), the H100 rows' pipeline split."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    mine = {c.id: c for c in cases if c.source == "MLPERF-L405B-GB200"}
    minibs = {"MLPERF-L405B-GB200-V50-256": 112, "MLPERF-L405B-GB200-V50-512": 112,
              "MLPERF-L405B-GB200-CARINA-V50-512": 112, "MLPERF-L405B-GB200-CARINA-V50-1536": 48,
              "MLPERF-L405B-GB200-CARINA-V50-2496": 32}  # fmt: skip
    assert set(mine) == set(minibs)
    for row_id, case in mine.items():
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = int(row_id.rsplit("-", 1)[-1])
        assert (parallel.tp, parallel.pp, parallel.cp, parallel.vpp) == (4, 8, 2, 8)
        assert parallel.dp == gpus // 64 and parallel.global_batch == minibs[row_id] * parallel.dp
        assert sum(parallel.pp_layers) == model.layers and len(parallel.pp_layers) == 64
        tokens = model.seq_len * parallel.global_batch / float(rows[row_id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[row_id]["tokens_per_s_per_gpu"]), rel=0.001)
        assert str(parallel.fp8_recipe) == "delayed"


def test_the_bloom_row_takes_the_tr11_layout(cases: list[Case]) -> None:
    """BigScience tr11-176B-ml (bigscience-workshop/bigscience train/tr11-176B-ml/README.md):
    TP 4, PP 12, DP 8, MBS 2, GBS 2048, sequence 2048, BF16_Optimizer's ZeRO-1, full
    checkpointing, the embedding counted as a layer at both pipeline ends; the rate is the
    logged iteration time's (104.70 s)."""
    rows = {r["id"]: r for r in _rows(HELD_OUT)}
    [case] = [c for c in cases if c.source == "BLOOM"]
    parallel, model = case.parallel, case.model
    assert parallel is not None and model is not None and not case.in_sample
    assert (parallel.tp, parallel.pp, parallel.dp, parallel.micro_batch) == (4, 12, 8, 2)
    assert parallel.global_batch == 2048 and model.seq_len == 2048 and model.layers == 70
    assert parallel.zero == 1 and str(parallel.recompute) == "full"
    assert case.framework == "deepspeed"
    assert str(model.position) == "none" and model.core_attention == "unfused"
    tokens = 2048 * 2048 / float(rows[case.id]["iter_time_s"]) / 384
    assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.001)


def test_the_llama3_405b_rows_are_reported_with_their_reason() -> None:
    """Llama 3 Table 4's 8K rows: the derived rate is TFLOPs/GPU over PaLM's 6N + 12·L·H·Q·T
    model FLOPs per token; the rows are reported as not evaluated (Meta's tunable interleaved
    schedule), never dropped."""
    rows = {r["id"]: r for r in _rows(HELD_OUT) if r["id"].startswith("LLAMA3-405B-")}
    assert set(rows) == {"LLAMA3-405B-8192", "LLAMA3-405B-16384"}
    per_token = 6 * 405.9e9 + 12 * 126 * 16384 * 8192
    for row in rows.values():
        derived = float(row["tflops_per_gpu"]) * 1e12 / per_token
        assert derived == pytest.approx(float(row["tokens_per_s_per_gpu"]), abs=0.05)
        assert int(row["dp"]) * int(row["tp"]) * int(row["pp"]) == int(row["num_gpus"])
        assert int(row["global_batch_seqs"]) * int(row["seq_len"]) == 2**24
    reported = {c.id: c for c in load_cases() if c.source == "LLAMA3-405B"}
    assert set(reported) == set(rows)
    assert all("tunable" in c.reason and c.parallel is None for c in reported.values())
