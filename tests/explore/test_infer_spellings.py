"""Free-text cells spelled as public tables spell them, read as their canonical spelling is
(s24 spellings): each pair below was misread (a different ZeRO stage, FP8 recipe, top-k or
scale-out rate) or refused before. The reader runs on a copy of a package row (a fixture,
not the package data); the canonical spelling's case is computed, not written out."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_system import infer_system
from stage_explore.validation.setups import Case, data_dir
from tests.explore.case_reading import case_reading as _read

DATA = data_dir()
#: The template's text without the columns that name its framework.
NEUTRAL = {"source": "A further table", "source_table": "", "url": "", "notes": "", "uncertain": ""}
#: NeMo 24.07's Llama 3 70B (TP 4, PP 4, CP 2 on 64 H100, FP8); Megatron-Bridge's Qwen3 235B MoE.
DENSE, MOE = "NEMO2407-H100-LLAMA3-70B", "MBM-B200-25.11-QWEN3_235B_A22B-64"


def _case(template: str, **cells: str) -> Case:
    (row,) = [r for r in read_csv(DATA / "published_runs_held_out.csv") if r["id"] == template]
    case, *_ = row_cases({**row, **NEUTRAL, "id": "SPELL-1", **cells}, "rows.csv", 1, DATA)
    return case


@pytest.mark.parametrize(
    ("column", "canonical", "spelled"),
    [
        # ZeRO stages spelled as DeepSpeed configs and papers write them (were the default, 1)
        ("dp_sharding", "ZeRO-3", "ZeRO Stage-3"),
        ("dp_sharding", "ZeRO-3", "zero_stage: 3"),
        ("dp_sharding", "ZeRO-3", "ZeRO-DP stage 3"),
        ("dp_sharding", "ZeRO-2", "zero_stage=2"),
        ("dp_sharding", "ZeRO-2", "ZeRO Stage-2"),
        # no sharding said in words (was the distributed optimizer)
        ("dp_sharding", "none", "ZeRO-0"),
        ("dp_sharding", "none", "ZeRO stage 0"),
        ("dp_sharding", "none", "no ZeRO"),
        ("dp_sharding", "none", "no sharding"),
        ("dp_sharding", "none", "NO_SHARD"),
        ("dp_sharding", "none", "off"),
        # PyTorch FSDP written out (was Megatron-Core with the distributed optimizer)
        ("dp_sharding", "FSDP", "Fully Sharded Data Parallel"),
        ("dp_sharding", "FSDP", "fully sharded"),
        # FP8 recipes by other names (were delayed scaling)
        ("precision", "FP8 current scaling", "FP8 dynamic scaling"),
        ("precision", "FP8 current scaling", "FP8 (dynamic)"),
        ("precision", "FP8 blockwise", "FP8 subchannel"),
        ("precision", "FP8 blockwise", "bf16_with_fp8_subchannel_scaling_mixed"),
        # Apex AMP's mixed-precision opt levels (were refused)
        ("precision", "fp16 mixed", "AMP O2"),
        ("precision", "fp16 mixed", "Apex AMP opt_level O1"),
        # a dash is not stated (was refused)
        ("precision", "", "-"),
        # sequence parallelism named (was refused)
        ("sp", "yes", "SP"),
        ("sp", "yes", "SP on"),
        ("sp", "yes", "sequence parallel"),
        ("sp", "no", "SP off"),
        ("sp", "no", "none"),
        # scale-out rates (were read as 9.4 and 3.1 GB/s per GPU)
        ("interconnect", "1600 Gbps per node", "1,600 Gbps per node"),
        ("interconnect", "8x 200 Gb/s per node", "8 × 200 Gb/s per node"),
        ("interconnect", "8x 200 Gb/s per node", "8×200 Gb/s per node"),
        ("interconnect", "8x 200 Gb/s per node", "200Gb/s IB x 8 per node"),
        # an Ethernet rate (was not read: the preset's 400 Gb/s per GPU)
        ("interconnect", "8x 200 Gb/s per node", "8x 200GbE RoCE per node"),
    ],
)  # fmt: skip
def test_a_spelling_reads_as_its_canonical_form(column: str, canonical: str, spelled: str) -> None:
    assert _read(_case(DENSE, **{column: spelled})) == _read(_case(DENSE, **{column: canonical}))


@pytest.mark.parametrize(
    ("canonical", "spelled"),
    [
        ("128 experts, top-4", "128 experts, top-k=4"),
        ("128 experts, top-4", "128 experts, k=4"),
        ("128 experts, top-4", "128 experts, 4 active"),
        ("128 experts, top-4", "num_experts=128, topk=4"),
        ("128 experts, top-4", "Experts: 128, Top-k: 4"),
        ("128 experts, top-4", "top-k 4 of 128"),
        ("128 experts, top-8", "num_experts=128, topk=8"),
    ],
)  # fmt: skip
def test_a_top_k_spelled_another_way_is_the_one_read(canonical: str, spelled: str) -> None:
    """The defect: ``top-k=4`` / ``4 active`` were dropped for the flavor's top-8, silently."""
    case = _case(MOE, moe=spelled)
    assert _read(case) == _read(_case(MOE, moe=canonical))
    assert case.model is not None and case.model.top_k == int(canonical[-1])


@pytest.mark.parametrize(
    ("column", "cell", "said"),
    [
        ("dp_sharding", "ZeRO-Infinity", "offload"),
        ("dp_sharding", "ZeRO-3 + CPU offload", "offload"),
        ("dp_sharding", "ZeRO-Offload", "offload"),
        ("precision", "AMP O3", "pure FP16"),
        ("precision", "Apex O0", "FP32"),
    ],
)
def test_an_unmodelled_spelling_is_refused_in_one_line(column: str, cell: str, said: str) -> None:
    """ZeRO-Infinity / -Offload were read as ZeRO-1 (megatron-core default) or ZeRO-3 without
    the offload's host transfers."""
    case = _case(DENSE, **{column: cell})
    assert said in case.reason and repr(cell) in case.reason and "\n" not in case.reason


def test_a_stated_stage_beside_zero_0_keeps_the_stated_stage() -> None:
    """BLOOM's cell ('its own ZeRO stage 1; ds_config zero stage 0') stays ZeRO-1."""
    cell = "DeepSpeed BF16_Optimizer (its own ZeRO stage 1; ds_config zero stage 0)"
    case = _case(DENSE, dp_sharding=cell)
    assert case.parallel is not None and case.parallel.zero == 1


def test_an_a100_without_memory_says_it_takes_the_80_gb_part() -> None:
    """Two A100 presets (40 and 80 GB): a bare 'A100' takes the 80 GB one as a stated default."""
    read = infer_system("A100")
    assert read.value == "a100-80gb" and "no memory stated" in read.assumption
    assert "a100-40gb" in read.assumption
    assert "no memory stated" not in infer_system("A100 80GB").assumption
    assert "no memory stated" not in infer_system("H100").assumption


def test_a_rate_per_second_per_gpu_in_words_is_read() -> None:
    """``tokens per second per GPU`` was refused as a rate that does not say per GPU."""
    case = _case(DENSE, tokens_per_s_per_gpu="1,533 tokens per second per GPU")
    assert not case.reason, case.reason
    assert (case.metric, case.measured) == ("tokens_per_s_per_gpu", 1533.0)


@pytest.mark.parametrize(
    ("column", "canonical", "spelled"),
    [
        ("num_gpus", "64", "64 GPUs"),
        ("seq_len", "8192", "8192 tokens"),
        ("seq_len", "8192", "8K tokens"),
        ("global_batch_seqs", "128", "128 sequences"),
    ],
)
def test_a_number_with_its_column_unit_is_read(column: str, canonical: str, spelled: str) -> None:
    """These were refused as not integers; the column's own unit says nothing more."""
    assert _read(_case(DENSE, **{column: spelled})) == _read(_case(DENSE, **{column: canonical}))


def _row(row_id: str, **cells: str) -> Case:
    """The first case of the package row ``row_id`` (any published-runs CSV) with ``cells``
    written over its own, read as an unclaimed row of a copy."""
    (row,) = [r for p in sorted(DATA.glob("published_runs*.csv")) for r in read_csv(p)
              if r["id"] == row_id]  # fmt: skip
    case, *_ = row_cases({**row, **cells}, "rows.csv", 1, DATA)
    return case


@pytest.mark.parametrize(
    ("row_id", "column", "spelled"),
    [
        # integers as tables print them (were read apart from the digits by the readers that
        # match a cell's text: a 4.4 % and a 2 % move; or refused as a model dim)
        ("NEMO2407-H100-LLAMA2-70B", "seq_len", "4,096"),
        ("NEMO2407-H100-LLAMA2-70B", "seq_len", "4096.0"),
        ("MLPERF-GPT3-H100-V40-10752", "micro_batch", "1.0"),
        ("DGXC-GROK1-BF16-314B-8", "ffn", "32,768"),
        ("DGXC-GROK1-BF16-314B-8", "ffn", "32768.0"),
        ("MBVER-H100-QWEN3-8B-16", "vocab", "151,936"),
        ("MBVER-H100-QWEN3-8B-16", "layers", "36.0"),
        # a Hugging Face repository id (was Mistral 7B by its owner's name, refused)
        ("NEMO2504-GB200-MIXTRAL-8X7B", "model", "mistralai/Mixtral-8x7B-v0.1"),
        # the recompute modules after other words for selective (were the default module)
        ("DGXC2505-DSV3-H100-BF16-671B-512", "recompute", "selective recompute (mla_up_proj)"),
        ("MBVER-GB200-GPTOSS-120B-64", "recompute", "recompute: selective (layernorm moe_act)"),
        ("MBVER-GB200-GPTOSS-120B-64", "recompute",
         "selective activation recomputation (layernorm moe_act)"),
        # a power cap in lower case (the 500 W cap was not read)
        ("TTITAN-T1-1", "gpu", "h100 96gb hbm2e (500 w)"),
    ],
)  # fmt: skip
def test_an_equivalent_cell_reads_as_the_row_does(row_id: str, column: str, spelled: str) -> None:
    """Found by benchmarks/spelling_robustness.py (s30 fuzz): each moved or refused the row.
    The model's name is the cell's own (it names the row, it sets up nothing)."""
    spelled_reading, reading = _read(_row(row_id, **{column: spelled})), _read(_row(row_id))
    for read in (spelled_reading, reading):
        read["model"].pop("name")
    assert spelled_reading == reading


def test_free_text_in_lower_case_or_with_doubled_spaces_reads_the_same() -> None:
    """``etp 4`` in a lower-cased layout remark was not read (ETP 4 is); a notes cell with its
    spaces doubled lost the recipe it names (s30 fuzz)."""
    grok = "DGXC2505-GROK1-GB200-BF16-314B-128"
    (row,) = [r for r in read_csv(DATA / "published_runs_held_out.csv") if r["id"] == grok]
    lower = row["source_table"].lower()
    assert _read(_row(grok, source_table=lower)) == _read(_row(grok))
    gptoss = "MBVER-GB200-GPTOSS-120B-64"
    (row,) = [r for r in read_csv(DATA / "published_runs_no_setup.csv") if r["id"] == gptoss]
    doubled = row["notes"].replace(" ", "  ")
    assert _read(_row(gptoss, notes=doubled)) == _read(_row(gptoss))
