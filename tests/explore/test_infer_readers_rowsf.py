"""What the InternLM rows of s34 rowsF showed the inference misread (7 Dec 2026): a
``dp_sharding`` cell naming ZeRO-1 beside InternLM's "Hybrid ZeRO" was ZeRO-3 in node groups, a
paper cited for a FLOP count in the notes was the framework (``megatron-lm-2021``), InternLM's
trainer (InternEvo) was no framework the model refuses (its own profile since s35 internevo),
and the hardware table's "4 * 100Gb RoCE" was no network rate. Each expected value is the
reading the cited source states."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_citation import flop_citation
from stage_explore.validation.infer_cluster import read_cluster
from stage_explore.validation.infer_fields import (
    FRAMEWORK_DEFAULT,
    infer_framework,
    infer_zero,
    unmodelled_framework,
)
from tests.explore.infer_helpers import package_case, package_row, synthetic_case

#: The cell of the InternLM rows (InternLM/InternLM 20fe5ac2 doc/en/train_performance.md:
#: "zero1=8, tp=1, optimizer states are distributed within 8 GPUs in a single node").
INTERNLM_ZERO = (
    "ZeRO-1 (InternLM Hybrid ZeRO, zero1=8: optimizer states sharded over the 8 GPUs of a node, "
    "replicated across nodes)"
)


def test_zero_one_beside_hybrid_keeps_stage_one_in_its_group() -> None:
    """ZeRO-1 in groups of 8 (zero1=8), 8 replicas on 64 GPUs; it was ZeRO-3 in node groups."""
    assert infer_zero(INTERNLM_ZERO, "megatron-core")[0] == 1
    base = package_row("INTERNLM-7B-A100-AC-G64-MB8-MN1")
    row = {**base, "source": "a benchmark", "source_table": "", "url": "", "notes": ""}
    case = synthetic_case(row, "extra.csv")
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert (case.parallel.zero, case.parallel.dp_shard, case.parallel.dp) == (1, 8, 64)


@pytest.mark.parametrize(
    ("cell", "zero", "shard"),
    [
        # Megatron-Core's partial distributed optimizer: two instances on 64 ranks
        ("hybrid distributed optimizer, --num-distributed-optimizer-instances 2", 1, 32),
        ("InternLM Hybrid ZeRO, zero1=-1", 1, None),  # -1: all of dp, no group
        ("InternLM Hybrid ZeRO, zero1=dict(size=4)", 1, 4),
        ("zero1=1 (InternLM: zero is not used)", 0, None),  # groups of one rank
        ("FSDP HYBRID_SHARD", 3, 8),  # PyTorch's hybrid sharding stays ZeRO-3 in a node
    ],
)
def test_the_stage_and_group_a_hybrid_cell_states(cell: str, zero: int, shard: int | None) -> None:
    """The stage the cell names, in the group it states (InternLM configs/7B_sft.py: zero1 -1
    shards over all of dp, 1 not at all, N in groups of N)."""
    base = package_row("INTERNLM-7B-A100-AC-G64-MB8-MN1")
    row = {**base, "source": "a benchmark", "source_table": "", "url": "", "notes": ""}
    case = synthetic_case(row, "extra.csv", dp_sharding=cell)
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert (case.parallel.zero, case.parallel.dp_shard) == (zero, shard)


@pytest.mark.parametrize(
    ("cells", "framework"),
    [
        # a TFLOP/s count's formula cited: not the code that ran
        ({"notes": "the TFLOPS column is Megatron's formula (Narayanan et al.) at 2048"}, ""),
        ({"notes": "MFU computed as in Korthikanti et al. 2022"}, ""),
        # the papers' own runs, and a paper built on Megatron-LM, keep the 2021 profile
        ({"source": "Narayanan et al. SC'21 (Megatron-LM PTD-P)"}, "megatron-lm-2021"),
        ({"source": "Narayanan et al. SC'21, Table 1 (achieved TFLOP/s)"}, "megatron-lm-2021"),
        (
            {
                "notes": "'We base our implementation on the open-source Megatron-LM project "
                "(Narayanan et al., 2021)'"
            },
            "megatron-lm-2021",
        ),
    ],
)
def test_a_paper_cited_for_its_flops_is_not_the_framework(
    cells: dict[str, str], framework: str
) -> None:
    """``framework`` "" is the default: no column names a known framework."""
    row = {"id": "x", "source": "a benchmark", "model": "Llama 3.1 8B", **cells}
    read = infer_framework(row)
    if framework:
        assert read.value == framework, read.assumption
    else:
        assert read == FRAMEWORK_DEFAULT, read.assumption


def test_flop_citation_reads_only_the_clause_before() -> None:
    """The clause before the citation, not past a ``;``; a start outside the cell is refused."""
    cell = "MFU by the formula of Megatron; Narayanan et al. SC'21 layouts"
    assert not flop_citation(cell, cell.index("Narayanan"))
    assert flop_citation("TFLOP/s as in Narayanan et al.", 14)
    with pytest.raises(ValueError, match="outside the cell"):
        flop_citation("abc", 5)


def test_internlm_trainer_reads_the_internevo_profile() -> None:
    """The InternLM rows read InternEvo's profile (s35 internevo; refused as a framework without
    a profile in s34 rowsF), where they were Megatron-LM 2021 runs (their notes' FLOP
    citation) in ZeRO-3 node groups."""
    case = package_case(package_row("INTERNLM-7B-A100-NOAC-G1024-MB2-MN1"))
    assert not case.reason, case.reason
    assert case.framework == "internevo"
    named = {"id": "x", "source": "InternEvo 7B benchmark"}
    assert infer_framework(named).value == "internevo"
    assert unmodelled_framework(named, infer_framework(named)) == ""
    # the model's name alone (InternLM-7B trained by another framework) is not the trainer
    model_only = {"id": "x", "source": "InternLM-7B fine-tuning", "model": "InternLM-7B"}
    assert infer_framework(model_only) == FRAMEWORK_DEFAULT


@pytest.mark.parametrize(
    ("cell", "per_node_gbps"),
    [
        ("inter-machine bandwidth '4 * 100Gb RoCE' per node", 400.0),  # InternLM's table
        ("4x100Gb RoCE per node", 400.0),
        ("RoCE 200Gb per node", 200.0),
    ],
)
def test_a_bare_gb_port_rate_is_read(cell: str, per_node_gbps: float) -> None:
    """A ``Gb`` (bits) port rate next to its network, with a count before it."""
    cluster = read_cluster("A100 80GB", cell)
    assert cluster.scale_out is not None and cluster.per_node
    assert cluster.scale_out.value == per_node_gbps * 1e9 / 8


def test_a_bare_gigabyte_figure_is_no_port_rate() -> None:
    """``GB`` (bytes) is not ``Gb``: not read as a port rate."""
    assert read_cluster("A100 80GB", "4 * 100GB RoCE per node").scale_out is None
