"""Rows of s25 hidden13 (IBM's 'Maximizing Training Throughput Using PyTorch FSDP and
Torch.compile', 2024, Tables 1-2, and fms-fsdp's README 7b row, added to
published_runs_no_setup.csv as ``IBMFSDPC-*`` / ``FMSFSDP-A100-LLAMA2-7B-*``) and the two
readings they exposed (:mod:`stage_explore.validation.infer_compile`): torch.compile named on a
PyTorch FSDP / fms-fsdp row (it ran eager before), with a denial in the row's most specific
text winning; and fms-fsdp's 'selective' checkpointing (a fraction of the blocks), refused
unless the row states the fraction (s34 fmssel)."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_explore.analytical.eager import FMS_ROPE, eager_op_bytes, fms_kv_expand
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_compile import names_compile, says_compiled
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import data_dir

NO_SETUP = "published_runs_no_setup.csv"


def _rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_csv(data_dir() / NO_SETUP)}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("FSDP + torch.compile", True),
        ("MFU compile", True),
        ("fms-fsdp's use_torch_compile", True),
        ("eager, the 'MFU no-compile' column", False),
        ("no torch.compile", False),
        ("run without torch.compile", False),
        ("use_torch_compile=False", False),
        ("compile: off", False),
        # s26 review: each of these read as compiled
        ("compiled: no", False),
        ("compile=0", False),
        ("torch.compile: 0", False),
        ("compile (off)", False),
        ("torch.compile not used (not in the script)", False),
        ("compile was not enabled", False),
        ("uncompiled", False),
        ("compile: 0.5 s per step", True),  # a number, not a setting
        ("MFU results with compile and no compile", None),  # a caption naming both
        ("PyTorch FSDP, bf16", None),
    ],
)
def test_a_text_says_compiled_denied_or_neither(text: str, said: bool | None) -> None:
    assert says_compiled(text) is said


def test_the_most_specific_column_decides() -> None:
    title = "Maximizing Training Throughput Using PyTorch FSDP and Torch.compile"
    caption = "Table 2: MFU results with compile and no compile"
    eager = {"source": title, "source_table": caption, "notes": "the 'MFU no-compile' column"}
    compiled = {"source": title, "source_table": caption, "notes": "torch.compile"}
    assert not names_compile(eager)
    assert names_compile(compiled)
    assert names_compile({"source": title, "source_table": caption})  # left to the title
    assert not names_compile({"source": "PyTorch FSDP"})


def test_a_compiled_fms_fsdp_row_fuses_and_runs_faster_than_its_eager_twin() -> None:
    """The defect: the fms-fsdp profile ignored torch.compile (only torchtitan read it), so
    the blog's compile and no-compile columns were predicted identical."""
    rows = _rows()
    (compiled, *_) = row_cases(rows["IBMFSDPC-H100-464-LLAMA2-7B-COMPILE"], NO_SETUP, 1, data_dir())
    (eager, *_) = row_cases(rows["IBMFSDPC-H100-464-LLAMA2-7B-EAGER"], NO_SETUP, 1, data_dir())
    assert compiled.framework == eager.framework == "fms-fsdp"
    assert dict(compiled.framework_options).get("fused_elementwise") is True
    assert "fused_elementwise" not in dict(eager.framework_options)
    fast, slow = evaluate_cases([compiled, eager])
    assert fast.predicted > 1.05 * slow.predicted


def test_an_fms_fsdp_selective_row_reads_its_stated_fraction_or_is_refused() -> None:
    """The defect: 'selective' on an fms-fsdp row read as Megatron's selective recompute (the
    core attention, nearly free with SDPA flash) where fms-fsdp checkpoints a fraction p of the
    blocks. The 13B rows state p since s34 fmssel (infer_fms_ac.py): 20 of the 40 blocks,
    spread; the same row without it is refused with the reason."""
    rows = _rows()
    for row_id in (
        "IBMFSDPC-A100-128-LLAMA2-13B-COMPILE",
        "IBMFSDPC-H100-464-LLAMA2-13B-EAGER",
        "IBMFSDPC-H100-464-LLAMA2-13B-COMPILE",
    ):
        (case, *_) = row_cases(rows[row_id], NO_SETUP, 1, data_dir())
        assert case.parallel is not None, (row_id, case.reason)
        assert case.parallel.recompute.value == "full", row_id
        assert case.parallel.recompute_method == "spread", row_id
        assert case.parallel.recompute_num_layers == 20, row_id
        assert any("20 of the 40 blocks" in a for a in case.assumptions), row_id
    row = dict(rows["IBMFSDPC-H100-464-LLAMA2-13B-EAGER"], recompute="selective")
    (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert case.parallel is None
    assert "fraction p of the blocks" in case.reason and "states neither p" in case.reason
    # two amounts in one cell: the cell's own error is the reason
    row = dict(row, recompute="selective (p = 1/2, every_xth_item 3)")
    (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert case.parallel is None and "more than one amount" in case.reason
    # a torchtitan 'selective' row is untouched (its op-level policy)
    row = dict(rows["IBMFSDPC-H100-464-LLAMA2-13B-EAGER"], recompute="selective")
    row.update(source="TorchTitan docs/performance.md", notes="torchtitan FSDP2")
    (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert case.framework == "torchtitan" and case.parallel is not None
    assert case.parallel.recompute.value == "selective"


def test_compiled_fms_keeps_the_grouped_query_copies_sdpa_reads() -> None:
    """FMS's Llama compiled: its real-valued RoPE fused (the generator's count), the expanded
    keys and values still copied for SDPA, an extern kernel (eager.py's docstring)."""
    model = get_flavor("llama2-70b")
    expansion = model.heads // model.kv_heads
    assert expansion == 8
    table = eager_op_bytes(model, "fms", True)
    expand = fms_kv_expand(expansion)
    assert table["k.rope"] == FMS_ROPE.compiled_bytes[0] + expand.bytes_per_element(False)
    assert table["k.rope.backward"] == FMS_ROPE.compiled_bytes[1] + expand.bytes_per_element(True)
    plain = eager_op_bytes(get_flavor("llama2-7b"), "fms", True)  # no GQA: nothing extra
    assert (plain["k.rope"], plain["k.rope.backward"]) == FMS_ROPE.compiled_bytes
