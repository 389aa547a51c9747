"""The further held-out set's path (s13 hidden): a published-runs CSV given to ``validate --data``
as a file, its rows written by someone else in the package's schema, each one evaluated with an
inferred setup or reported with a one-line reason, never stopping the run."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stage_core.models import get_flavor
from stage_explore.cli import main
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_cluster import read_cluster
from stage_explore.validation.infer_fields import (
    Uninferable,
    infer_framework,
    infer_model,
    infer_precision,
    infer_zero,
    names_bridge,
)
from stage_explore.validation.infer_recompute import read_recompute
from stage_explore.validation.setups import Case, data_dir
from tests.explore.published_rows import HELD_OUT, TEMPLATE, inferred_case, template, write_rows

DATA = data_dir()


def _row(row_id: str, **cells: str) -> dict[str, str]:
    _, row = template()
    return {**row, "id": row_id, "source": "A further held-out table", **cells}


def test_a_csv_file_given_to_data_is_evaluated_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: ``validate --data rows.csv`` stopped with 'is a file: expected a folder'."""
    runs = write_rows(tmp_path / "rows.csv", [_row("HID-1"), _row("HID-2", precision="FP4")])
    write_rows(tmp_path / "published_runs_other.csv", [_row("OTHER-1")])  # a sibling: not read
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in payload["rows"]}
    assert set(rows) == {"HID-1", "HID-2"}
    assert rows["HID-1"]["predicted"] > 0 and rows["HID-1"]["source"].startswith("INFERRED: ")
    # an NVFP4 row on a part without a measured NVFP4 GEMM fraction is named with the reason
    assert "needs a grounded NVFP4 GEMM rate" in rows["HID-2"]["not_evaluated_reason"]
    assert payload["accounting"]["files"] == {"rows.csv": 2}


def test_a_file_outside_the_data_folder_finds_the_package_system_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row stating a cluster the package's ``systems/`` holds runs on that file wherever its
    CSV lies (the folder of the file has no ``systems/``)."""
    teton = (
        "Grand Teton: 8x H100 96GB HBM2e (2.4 TB/s) per host fully connected with NVLink, "
        "backend RDMA 400 Gb/s per GPU"
    )
    runs = write_rows(
        tmp_path / "rows.csv", [_row("HID-1", gpu="H100 96GB HBM2e (500 W)", interconnect=teton)]
    )
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["system"] == "systems/grand-teton-h100.toml"


def _case(row_id: str = "HID-1", base: str = TEMPLATE, file: str = HELD_OUT, **cells: str) -> Case:
    (row,) = [r for r in read_csv(DATA / file) if r["id"] == base]
    row = {**row, "id": row_id, "source": "A further held-out table", **cells}
    (case,) = row_cases(row, "rows.csv", 1, DATA)
    return case


@pytest.mark.parametrize(
    ("cell", "precision", "recipe"),
    [
        ("bfloat16", "bf16", ""),
        ("BFloat16 mixed", "bf16", ""),
        ("float16", "fp16", ""),
        ("half", "fp16", ""),
        ("FP8 (MX)", "fp8", "mxfp8"),
    ],
)
def test_precision_spellings(cell: str, precision: str, recipe: str) -> None:
    """The defect: ``bfloat16`` / ``float16`` were not evaluated; ``FP8 (MX)`` took delayed."""
    read = infer_precision(cell, "megatron-core")
    assert (read.precision, read.fp8_recipe) == (precision, recipe)
    assert repr(cell.strip()) in read.assumption


def test_an_unread_precision_names_the_spellings_read() -> None:
    with pytest.raises(Uninferable, match=r"'TF32': expected .* \(bfloat16, float16, half"):
        infer_precision("TF32", "megatron-core")


@pytest.mark.parametrize(
    ("cells", "framework"),
    [
        ({"source": "LLM Foundry benchmarks"}, "llm-foundry-2023"),
        ({"source": "llm_foundry"}, "llm-foundry-2023"),
        ({"source": "Torch Titan"}, "torchtitan"),
        ({"source": "NeMo2 recipes"}, "megatron-core"),
        ({"source": "Megatron Core"}, "megatron-core"),
        # ZeRO-3 beside FSDP is FSDP's sharding, not DeepSpeed (was deepspeed)
        ({"source": "", "dp_sharding": "FSDP FULL_SHARD (ZeRO-3)"}, "fsdp"),
        ({"source": "", "dp_sharding": "ZeRO-3 (FSDP)"}, "fsdp"),
        ({"source": "", "dp_sharding": "DeepSpeed ZeRO-3"}, "deepspeed"),
        ({"source": "", "dp_sharding": "ZeRO-3"}, "deepspeed"),
        ({"source": "", "dp_sharding": "Megatron FSDP"}, "megatron-core"),
    ],
)
def test_framework_spellings(cells: dict[str, str], framework: str) -> None:
    read = infer_framework(cells)
    assert read.value == framework and "a default" not in read.assumption


def test_megatron_bridge_without_a_hyphen_takes_its_fp8_label() -> None:
    """A bare FP8 in a Megatron-Bridge table is its FP8-CS; the spelling ``Megatron Bridge``
    missed it (delayed)."""
    assert names_bridge({"source": "NVIDIA Megatron Bridge performance summary"})
    case = _case(source="Megatron Bridge", url="", precision="FP8")
    assert case.parallel is not None and str(case.parallel.fp8_recipe) == "tensorwise"


@pytest.mark.parametrize(
    ("cell", "framework", "zero"),
    [
        ("FSDP (SHARD_GRAD_OP)", "fsdp", 2),
        ("DDP", "torchtitan", 0),
        ("NO_SHARD", "fsdp", 0),
        ("replicate (DDP)", "automodel", 0),
        ("DDP", "megatron-core", 1),  # Megatron's DDP runs the distributed optimizer by default
        ("DDP (FSDP 0)", "megatron-core", 1),
        ("dist-opt", "torchtitan", 1),
        ("Megatron FSDP", "megatron-core", 3),
    ],
)
def test_dp_sharding_spellings(cell: str, framework: str, zero: int) -> None:
    assert infer_zero(cell, framework)[0] == zero


@pytest.mark.parametrize(
    ("cell", "level"),
    [
        ("No", "none"),
        ("off", "none"),
        ("selective(core_attn)", "selective"),
        ("Activation checkpointing: selective", "selective"),
        ("uniform", "full"),
        ("yes", "full"),
        ("SAC", "selective"),
    ],
)
def test_recompute_spellings_are_evaluated(cell: str, level: str) -> None:
    """The defect: a recompute cell whose first word is not none/selective/full (``No``)
    stopped the row: 'recompute 'no' must be one of ...'."""
    case = _case(recompute=cell)
    assert not case.reason and case.parallel is not None
    assert case.parallel.recompute.value == level
    assert f"the recompute column says {cell!r}" in "\n".join(case.assumptions)


def test_a_recompute_cell_in_canonical_form_adds_no_assumption() -> None:
    assert read_recompute("selective (core_attn)") == ("selective (core_attn)", "")
    assert read_recompute("") == ("", "")


@pytest.mark.parametrize("cell", ["none", "No", "dense", "-", "dense (no experts)"])
def test_a_dense_model_whose_moe_cell_says_so_is_evaluated(cell: str) -> None:
    """The defect: ``moe`` = ``none`` on Llama 3 8B: 'no MoE flavor of it'."""
    case = _case(moe=cell)
    assert not case.reason and case.model is not None and not case.model.num_experts


def test_an_moe_row_whose_default_expert_tp_cannot_fold_takes_etp_1() -> None:
    """The defect: Qwen3-235B at TP 2, EP 32 on 256 GPUs with no container named kept
    Megatron-Core's default etp = tp, which cannot fold (ep·etp = 64 over tp·dp·cp = 32
    ranks): 'the generator cannot express it'. The run set the experts' TP: 1."""
    case = _case(
        base="MBRIDGE25.11-DGX-H100-Qwen3_235B_a22B-256", file="published_runs_more.csv",
        source="Megatron-Bridge", source_table="", url="", notes="", uncertain="",
    )  # fmt: skip
    assert not case.reason and case.parallel is not None
    assert (case.parallel.ep, case.parallel.expert_tp) == (32, 1)
    assert any("cannot fold ep 32" in a for a in case.assumptions)


@pytest.mark.parametrize("cell", ["0", "-1", "0.0"])
def test_a_measured_value_that_is_not_positive_is_a_row_reason(
    tmp_path: Path, cell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: a measured 0 stopped the whole run with a ZeroDivisionError traceback."""
    runs = write_rows(
        tmp_path / "rows.csv", [_row("HID-1"), _row("HID-0", tokens_per_s_per_gpu=cell)]
    )
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    reason = rows["HID-0"]["not_evaluated_reason"]
    assert reason == f"the tokens_per_s_per_gpu cell {cell!r} is not a positive number"
    assert rows["HID-1"]["evaluated"]


@pytest.mark.parametrize(
    ("cells", "words"),
    [
        ({"layers": "99999999"}, "layers: expected at most 16,384"),
        ({"seq_len": "999999999"}, "seq_len: expected at most 16,777,216"),
    ],
)
def test_an_absurd_size_is_a_row_reason_before_any_work(
    tmp_path: Path, cells: dict[str, str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: a row with 10^8 layers ran for minutes (the lowering walks every layer)
    instead of failing the size limits `stage eval` applies."""
    runs = write_rows(tmp_path / "rows.csv", [_row("HID-1"), _row("HID-9", **cells)])
    assert main(["validate", "--data", str(runs), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert words in rows["HID-9"]["not_evaluated_reason"]
    assert rows["HID-1"]["evaluated"]


@pytest.mark.parametrize(
    ("cells", "field", "value"),
    [
        ({"seq_len": "8K"}, "seq_len", 8192),
        ({"seq_len": "4k"}, "seq_len", 4096),
        ({"tp": "1 (no TP)"}, "tp", 1),
        ({"global_batch_seqs": "128 (assumed)"}, "global_batch", 128),
        ({"sp": "enabled"}, "sp", True),
        ({"sp": "disabled"}, "sp", False),
    ],
)
def test_cells_written_another_way_are_read(
    cells: dict[str, str], field: str, value: int | bool
) -> None:
    """The defect: ``8K``, ``1 (no TP)``, ``enabled`` stopped the row ('is not an integer',
    'must start with yes or no')."""
    case = _case(**cells)
    assert not case.reason and case.parallel is not None and case.model is not None
    got = case.model.seq_len if field == "seq_len" else getattr(case.parallel, field)
    assert got == value
    column = next(iter(cells))
    if column != "sp":
        assert any(f"the {column} column says {cells[column]!r}" in a for a in case.assumptions)


def test_column_names_with_spaces_or_capitals_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: a header written ``ID, Source, ...`` (a spreadsheet's export) left every
    cell unread (the columns were ' source' and 'ID')."""
    header, row = template()
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        names = [f" {n.upper()}" if n in ("id", "gpu") else f" {n}" for n in header]
        writer.writerow(names)
        writer.writerow([{**row, "id": "HID-1"}[name] for name in header])
    assert main(["validate", "--data", str(path), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["rows"]
    assert got["id"] == "HID-1" and got["evaluated"] and got["system"] == "h100-80gb"


@pytest.mark.parametrize("model", ["Nemotron-H 30B", "Jamba 1.5 Large", "Mamba 2.8B"])
def test_a_hybrid_state_space_model_is_named_as_such(model: str) -> None:
    """Nemotron-H's rows were 'of another size than this family's flavors, or of no known
    family': the reason now says what the row lacks (a hybrid flavor of its size; Mamba-1's
    "Mamba 2.8B" is not Mamba-2's flavor; no Nemotron-H of 30B is published)."""
    case = _case(model=model)
    assert model in case.reason
    assert case.reason.endswith(
        "its layer pattern and state-space dims are not in the CSV's columns"
    )


@pytest.mark.parametrize(
    ("model", "flavor"),
    [
        ("Nemotron-H 8B", "nemotron-h-8b"),
        ("Mamba-2 2.7B", "mamba2-2.7b"),
        ("Nemotron-H 4B", "nemotron-h-4b"),
        ("Nemotron-H-47B-Base-8K", "nemotron-h-47b"),
        ("nvidia/Nemotron-H-56B-Base-8K", "nemotron-h-56b"),
    ],
)
def test_a_hybrid_state_space_model_of_a_flavor_size_takes_the_flavor(
    model: str, flavor: str
) -> None:
    """The generator has Mamba-2 layers (the flavors nemotron-h-8b and mamba2-2.7b): the reason
    'the generator has no Mamba layer' was false for the models of those sizes."""
    assert infer_model({"model": model}, "megatron-core").value == flavor


def test_a_hybrid_row_whose_dims_are_not_its_sizes_flavor_is_named() -> None:
    """A hybrid's layer pattern is laid out over its own depth: a row stating another layer
    count (or width) than the published architecture of its size keeps a one-line reason
    naming the cell; the dims it states alike are named in the assumption."""
    row = {"model": "Nemotron-H 56B", "layers": "98", "hidden": "8192"}
    with pytest.raises(Uninferable, match="the layers column says 98, but the published "
                       "nemotron-h-56b has 118") as error:  # fmt: skip
        infer_model(row, "megatron-core")
    assert "\n" not in str(error.value)
    agreed = infer_model({**row, "layers": "118", "ffn": "32768"}, "megatron-core")
    assert agreed.value == "nemotron-h-56b"
    assert "54 Mamba-2, 10 attention, 54 MLP" in agreed.assumption
    assert "the CSV's layers, hidden, ffn agree" in agreed.assumption
    with pytest.raises(Uninferable, match="the hidden column says 4096"):
        infer_model({"model": "Nemotron-H 4B", "hidden": "4096"}, "megatron-core")
    # no published size named: the one flavor whose dims are all the row states, if any
    by_dims = infer_model({"model": "Nemotron-H", "params_b": "56.3", "layers": "118"}, "x")
    assert by_dims.value == "nemotron-h-56b" and "the only one whose dims" in by_dims.assumption
    small = {"model": "Nemotron-H", "layers": "52", "hidden": "3072"}
    assert infer_model(small, "megatron-core").value == "nemotron-h-4b"
    for ambiguous in ({"model": "Nemotron-H", "layers": "52"}, {"model": "Nemotron-H"}):
        with pytest.raises(Uninferable, match="of no size the generator has a flavor of"):
            infer_model(ambiguous, "megatron-core")  # 4B and 8B share 52 layers
    # a pure Mamba-2 stack's heads and ffn are placeholders: not compared
    pure = {"model": "Mamba-2 2.7B", "layers": "64", "heads": "32", "ffn": "10240"}
    assert infer_model(pure, "megatron-core").value == "mamba2-2.7b"


def _no_setup_cases(
    selected: Callable[[str], bool], count: int
) -> list[tuple[dict[str, str], Case]]:
    """The rows of the package's published_runs_no_setup.csv whose id ``selected`` accepts (there
    must be ``count``), each with its one case, set up from its own columns without a reason."""
    rows = [r for r in read_csv(DATA / "published_runs_no_setup.csv") if selected(r["id"])]
    assert len(rows) == count
    pairs = []
    for row in rows:
        (case,) = row_cases(row, "published_runs_no_setup.csv", 1, DATA)
        assert not case.reason
        pairs.append((row, case))
    return pairs


def test_the_dgx_cloud_nemotron_h_rows_take_the_56b_and_their_container() -> None:
    """The seven DGX Cloud Nemotron-H rows (published_runs_no_setup.csv) are evaluated as the
    published 56B with the NeMo 25.04 container's defaults their text names (launch.sh
    FW_VERSION 25.04.01): FP8 parameters, bf16 gradient reduction, TE's fused loss."""
    for _, case in _no_setup_cases(lambda row_id: "NEMOTRONH" in row_id, 7):
        assert case.model is not None and case.parallel is not None
        flavor = get_flavor("nemotron-h-56b")
        assert case.model.layer_kinds() == flavor.layer_kinds() and case.parallel.tp == 8
        assert (case.model.ssm_heads, case.model.ssm_state) == (flavor.ssm_heads, 256)
        assert any(a.startswith("inferred: model flavor nemotron-h-56b") for a in case.assumptions)
        options = dict(case.framework_options)
        assert options["fp8_param_gather"] and options["te_cross_entropy"]
        assert not case.parallel.grad_fp32
        assert any("container 25.04" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("interconnect", "per_gpu_gbit"),
    [
        ("HDR 200 Gb/s x 8 per node", 200),  # was read as 200 Gb/s per node: 25 per GPU
        ("3.2 Tbps per node", 400),  # was not read, and not named as unread
        ("EFA 3200 Gbps per instance (p5.48xlarge)", 400),  # an instance is a node
        ("8x200 Gb/s HDR IB/node", 200),  # the package's form, unchanged
    ],
)
def test_inter_node_rates_written_another_way(interconnect: str, per_gpu_gbit: int) -> None:
    cluster = read_cluster("A100 80GB", interconnect)
    assert cluster.scale_out is not None and cluster.per_node
    assert cluster.scale_out.value * 8 / 1e9 / 8 == pytest.approx(per_gpu_gbit)


def test_the_llm_foundry_a100_rows_read_their_memory_and_composer_mode() -> None:
    """The 81 llm-foundry A100 rows of published_runs_no_setup.csv (5 Dec 2026, s15 hidden3):
    the 40 GB table on the a100-40gb preset, the 80 GB one on a100-80gb, every row on the
    llm-foundry-2023 profile; every row gathers bf16 parameters on a bf16 residual stream (PURE,
    and DEFAULT as Composer ran it since its PR 2047: s17 mpt40), the PURE rows reduce-scatter
    in bf16, the DEFAULT rows in fp32; every row has biased blocks (the tables' NumParams)."""
    for row, case in _no_setup_cases(lambda row_id: row_id.startswith("MPT-A100"), 81):
        assert case.parallel is not None and case.model is not None
        assert case.system_source == ("a100-40gb" if "A100 40GB" in row["gpu"] else "a100-80gb")
        assert case.backend_key.split("+")[0] == "llm-foundry-2023"
        pure = "PURE" in row["precision"]
        assert ("DEFAULT" in row["precision"]) is not pure
        options = dict(case.framework_options)
        assert options.get("fsdp_param_fp32") is False
        assert options.get("eager_modules") == "generator"
        assert case.parallel.zero == 3 and case.parallel.grad_fp32 is not pure
        assert case.model.bias


def test_the_mlperf_v51_third_party_8b_rows_read_their_nics_per_gpu() -> None:
    """Cisco's and HPE's MLPerf v5.1 Llama 3.1 8B rows state 400 Gb/s per GPU (8 NICs per
    node of 8), the presets' own figure: no derived system."""
    ids = ("MLPERF-L31-8B-H100-V51-CISCO-64", "MLPERF-L31-8B-H100-V51-CISCO-128",
           "MLPERF-L31-8B-H200-V51-HPE-64")  # fmt: skip
    rows = {r["id"]: r for r in read_csv(DATA / "published_runs_no_setup.csv")}
    for rid in ids:
        (case,) = row_cases(rows[rid], "published_runs_no_setup.csv", 1, DATA)
        assert not case.reason and case.parallel is not None
        assert case.system_source == ("h200" if "H200" in rid else "h100-80gb")
        assert not case.system_overrides
        assert case.backend_key.split("+")[0] == "megatron-core"


def test_the_cisco_8b_rows_read_what_their_pretrain_applied() -> None:
    """Cisco's MLPerf v5.1 Llama 3.1 8B rows (7 Dec 2026, s30 partners): the submission's
    pretrain.py builds no MegatronCommOverlapCallback, so the 128-GPU row states the effective
    TP_COMM_OVERLAP=False and is read without TP overlap; both rows read conf/custom.yaml's
    bucket_size default of 64 parameters (BUCKET_CAP_MB is read by nothing), 2 bytes each."""
    rows = {r["id"]: r for r in read_csv(DATA / "published_runs_no_setup.csv")}
    for rid in ("MLPERF-L31-8B-H100-V51-CISCO-64", "MLPERF-L31-8B-H100-V51-CISCO-128"):
        (case,) = row_cases(rows[rid], "published_runs_no_setup.csv", 1, DATA)
        assert not case.reason and case.parallel is not None
        assert case.parallel.grad_bucket_bytes == 64 * 2
    row = rows["MLPERF-L31-8B-H100-V51-CISCO-128"]
    (case,) = row_cases(row, "published_runs_no_setup.csv", 1, DATA)
    assert dict(case.framework_options).get("tp_comm_overlap") is False
    assert any("TP communication overlap off" in n for n in case.assumptions)


def test_the_nemo_2504_gb200_rows_read_current_scaling_on_gb200() -> None:
    """The seven DGX-GB200 rows of NeMo's archived 25.04 performance summary (5 Dec 2026, s16
    hidden4; the Mixtral-8x22B row s17 hidden5): every row on the gb200-nvl72 preset and the
    megatron-core profile, FP8 with the table's per-tensor current scaling (fp8_recipe
    tensorwise), the Mixtral-8x7B row with its 8 experts over EP 8."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("NEMO2504-GB200-"), 7)
    for _, case in pairs:
        assert case.parallel is not None and case.model is not None
        assert case.system_source == "gb200-nvl72"
        assert case.backend_key.split("+")[0] == "megatron-core"
        assert case.parallel.fp8_recipe == "tensorwise"
        assert case.metric == "tokens_per_s_per_gpu"
    (case,) = (c for row, c in pairs if "MIXTRAL-8X7B" in row["id"])
    assert case.model is not None and case.parallel is not None
    assert (case.model.num_experts, case.model.top_k, case.parallel.ep) == (8, 2, 8)


def test_the_nemo_long_sequence_b200_rows_compare_model_tflops() -> None:
    """NeMo's Llama 3 8B long-sequence table on DGX-B200 (NeMo 25.04.rc2; 8K-1024K tokens,
    CP up to 16) states TFLOP/s per GPU only: each row compares tflops_per_gpu counted as
    model FLOPs, on the b200 preset, its GPUs the product of the stated TP, DP and CP."""
    for row, case in _no_setup_cases(lambda row_id: row_id.startswith("NEMO2504-LONGSEQ-B200-"), 8):
        assert case.parallel is not None and case.model is not None
        assert case.metric == "tflops_per_gpu" and case.flops == "megatron-model"
        assert case.system_source == "b200"
        assert case.model.seq_len == int(row["id"].rsplit("-", 1)[1][:-1]) * 1024
        p = case.parallel
        assert p.tp * p.pp * p.dp * p.cp == int(row["num_gpus"])


def test_the_mlperf_v51_mi355x_8b_rows_of_four_submitters_share_one_setup() -> None:
    """AMD's MLPerf v5.1 Llama 3.1 8B row and the Dell, Supermicro and GigaComputing runs of
    the same implementation on one 8-GPU MI355X node (5 Dec 2026, s17 hidden5): all on the
    mi355x preset and the megatron-core profile at TP 1, micro-batch 2 of GBS 32, FP8; the
    four rows state the same layout, so their inferred setups are one setup."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("MLPERF-L31-8B-MI355X-V51-"), 4)
    setups = set()
    for _, case in pairs:
        assert case.parallel is not None and case.model is not None
        assert case.system_source == "mi355x" and not case.system_overrides
        assert case.backend_key.split("+")[0] == "megatron-core"
        p = case.parallel
        assert (p.tp, p.pp, p.dp, p.micro_batch, p.global_batch) == (1, 1, 8, 2, 32)
        assert case.metric == "tokens_per_s_per_gpu"
        setups.add((case.backend_key, p, case.model, case.framework_options))
    assert len(setups) == 1


def test_the_mlperf_v50_nebius_405b_h200_rows_read_the_stated_layout() -> None:
    """Nebius's MLPerf v5.0 Llama 3.1 405B rows (512 and 1024 H200, NeMo 25.01; 5 Dec 2026, s17
    hidden5): the h200 preset, the megatron-core profile, the published 405B at the stated
    TP 4 PP 8 VP 8 CP 2 with DP = GPUs / 64 and GBS 1152, FP8 with the stated delayed scaling."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("MLPERF-L405B-H200-V50-NEBIUS-"), 2)
    for row, case in pairs:
        assert case.parallel is not None and case.model is not None
        assert case.system_source == "h200"
        assert case.backend_key.split("+")[0] == "megatron-core"
        p = case.parallel
        assert (p.tp, p.pp, p.vpp, p.cp, p.micro_batch) == (4, 8, 8, 2, 1)
        assert p.dp == int(row["num_gpus"]) // 64 and p.global_batch == 1152
        assert p.fp8_recipe == "delayed" and case.model.layers == 126


def test_the_nemo_summary_mixtral_rows_read_their_moe_layouts() -> None:
    """The Mixtral rows of NeMo's 25.02 DGX-B200 and 25.04 DGX-GB200 performance summaries
    (5 Dec 2026, s17 hidden5): 8 experts, top-2, over EP 8 on the stated preset; the 8x22B
    rows at sequence 65536 with TP 2, PP 4 x VP 14, CP 8, micro-batch 1 of GBS 64."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("NEMO") and "MIXTRAL" in row_id, 4)
    for row, case in pairs:
        assert case.parallel is not None and case.model is not None
        assert case.system_source == ("b200" if "DGXB200" in row["id"] else "gb200-nvl72")
        p = case.parallel
        assert (case.model.num_experts, case.model.top_k, p.ep) == (8, 2, 8)
        if row["id"].endswith("8X22B"):
            assert case.model.seq_len == 65536 and case.model.layers == 56
            assert (p.tp, p.pp, p.vpp, p.cp, p.dp) == (2, 4, 14, 8, 4)
            assert (p.micro_batch, p.global_batch) == (1, 64)


def test_the_moe_model_zoo_qwen3_235b_h100_rows_read_their_layouts_and_techniques() -> None:
    """The Megatron-Core MoE model zoo's Qwen3-235B-A22B H100 table (5 Dec 2026, s18 hidden6):
    the h100-80gb preset and the megatron-core profile, the published 94-layer model with 128
    experts, top-8, each row's stated TP / PP / VPP / EP / MBS over 256 GPUs at GBS 2048, DeepEP
    where the row names it, the expert all-to-all overlap only on the '+1f1b overlap' row and
    Megatron-FSDP as ZeRO-3."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("MOEZOO-H100-QWEN3-235B-"), 5)
    for row, case in pairs:
        assert case.parallel is not None and case.model is not None
        assert case.system_source == "h100-80gb" and case.metric == "iter_time_s"
        assert case.backend_key.split("+")[0] == "megatron-core"
        assert (case.model.layers, case.model.num_experts, case.model.top_k) == (94, 128, 8)
        p, options = case.parallel, dict(case.framework_options)
        stated = tuple(int(row[c] or 1) for c in ("tp", "pp", "vpp", "ep", "micro_batch"))
        assert (p.tp, p.pp, p.vpp, p.ep, p.micro_batch) == stated
        assert p.tp * p.pp * p.dp == 256 and p.global_batch == 2048
        assert options.get("moe_deepep") is ("DEEPEP" in row["id"] or "FSDP" in row["id"] or None)
        assert options.get("moe_comm_overlap") is (row["id"].endswith("A2AOVERLAP") or None)
        assert p.zero == (3 if "FSDP" in row["id"] else 1)


def test_the_moe_model_zoo_rows_take_the_etp_their_notes_state() -> None:
    """Every Megatron-MoE-ModelZoo Qwen3-235B H100 row states ETP 1 in its table (transcribed in
    the notes column, not source_table): the experts' tensor parallel size is 1 on each, also
    where Megatron-Core's default (tp) could fold EP over the data-parallel ranks (the FSDP row,
    TP 2, EP 8; the TP 4, EP 8 row), so no expert all-gather / reduce-scatter over tp is
    planned; the assumption names the notes column (6 Dec 2026, s20 h100moe)."""
    pairs = _no_setup_cases(lambda row_id: row_id.startswith("MOEZOO-H100-QWEN3-235B-"), 5)
    for row, case in pairs:
        assert "ETP 1" in row["notes"] and "ETP 1" not in row["source_table"]
        assert case.parallel is not None and case.parallel.etp == 1, row["id"]
        said = [a for a in case.assumptions if "expert tensor parallel size" in a]
        assert len(said) == 1, said
    folded_by_default = {"MOEZOO-H100-QWEN3-235B-EP8-FSDP", "MOEZOO-H100-QWEN3-235B-TP4-EP8-DEEPEP"}
    for row, case in pairs:
        if row["id"] in folded_by_default:  # only the stated figure sets their etp
            (said,) = [a for a in case.assumptions if "expert tensor parallel size" in a]
            assert "the notes column says 'ETP 1'" in said


def test_a_stated_etp_in_source_table_wins_over_one_in_notes() -> None:
    """``stated_etp`` reads ``source_table`` first and ``notes`` only when it states none; a
    row stating neither keeps the framework's default (s20 review)."""
    row = dict(source="a cluster of ours, Megatron-Core", model="GPT OSS 120B", num_gpus="16",
               moe="128 experts, top-4", tp="2", ep="8")  # fmt: skip
    both = inferred_case(source_table="layout: TP 2, ETP 2", notes="the table's ETP 1", **row)
    notes = inferred_case(notes="EDP 1, ETP 1", **row)
    neither = inferred_case(**row)
    assert both.parallel is not None and both.parallel.etp == 2
    assert "the source_table column says 'ETP 2'" in "\n".join(both.assumptions)
    assert notes.parallel is not None and notes.parallel.etp == 1
    assert "the notes column says 'ETP 1'" in "\n".join(notes.assumptions)
    assert neither.parallel is not None and neither.parallel.etp is None
    assert not [a for a in neither.assumptions if "expert tensor parallel size" in a]


def test_the_torchtitan_deepep_qwen3_30b_b200_rows_shard_over_all_gpus() -> None:
    """torchtitan's DeepEP README rows (Qwen3-30B-A3B on 8-128 B200; 5 Dec 2026, s18 hidden6):
    the b200 preset and the torchtitan profile, FSDP2 (ZeRO-3) over every GPU with EP 8, the
    stated local batch, full recompute, DeepEP on every row but the default-EP baseline; the
    rows with a Memory/GPU figure are also a memory case."""
    rows = [r for r in read_csv(DATA / "published_runs_no_setup.csv")
            if r["id"].startswith("TTDEEPEP-B200-QWEN3-30B-A3B-")]  # fmt: skip
    assert len(rows) == 7
    for row in rows:
        case, *memory = row_cases(row, "published_runs_no_setup.csv", 1, DATA)
        assert not case.reason and case.parallel is not None and case.model is not None
        assert [m.metric for m in memory] == (["peak_mem_gib"] if row["peak_mem_gib"] else [])
        assert case.system_source == "b200" and case.metric == "tokens_per_s_per_gpu"
        assert case.backend_key.split("+")[0] == "torchtitan"
        p, options = case.parallel, dict(case.framework_options)
        assert (p.tp, p.pp, p.ep, p.zero, p.dp) == (1, 1, 8, 3, int(row["num_gpus"]))
        assert p.micro_batch == int(row["micro_batch"]) and str(p.recompute) == "full"
        assert options.get("moe_deepep") is (not row["id"].endswith("DEFAULTEP") or None)
        # both configs the README names set moe_force_load_balance (s23 ttaudit); the default-EP
        # baseline's configuration is not stated
        assert options.get("moe_fake_balanced_gate") is options.get("moe_deepep")
    assert sum(bool(r["peak_mem_gib"]) for r in rows) == 6
