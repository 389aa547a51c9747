"""What the papers' rows of s27 hidden20 showed the inference misread (MegaScale's Megatron-LM
baseline, Zero Bubble's 1F1B baselines, the Nemotron-4 15B report): a row naming Megatron-LM
alone was the megatron-core default "no column names a known framework", with the NeMo /
Megatron-Bridge recipes' overlaps, sequence parallelism and distributed optimizer, none of which
Megatron-LM's own launcher turns on; and a ``gpu`` cell naming an architecture with "GPUs" and a
parenthesis was "matches no system preset" rather than "an architecture, not a part"."""

from __future__ import annotations

import pytest

from stage_core.parallel.split import split_layers
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_fields import FRAMEWORK_DEFAULT, infer_framework
from stage_explore.validation.infer_megatron_lm import megatron_lm_launch
from stage_explore.validation.infer_system import infer_system
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
NO_SETUP = "published_runs_no_setup.csv"
OVERLAPS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")


def _case(row: dict[str, str]) -> Case:
    (case, *_) = row_cases(row, NO_SETUP, 1, DATA)
    return case


def _megascale(**cells: str) -> dict[str, str]:
    """A MegaScale baseline row (the CSV's, 256 GPUs) with ``cells`` replaced."""
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == "MEGASCALE-MLM-175B-256"]
    return {**row, "gpu": "A100 80GB", **cells}


def test_megatron_lm_named_alone_runs_its_launchers_defaults() -> None:
    """No TP / DP overlap, no sequence parallelism, no distributed optimizer: each a store_true
    flag of Megatron-LM's arguments.py that the row does not name."""
    case = _case(_megascale())
    assert not case.reason and case.parallel is not None
    assert case.framework == "megatron-core"
    assert any("Megatron-LM's own launcher" in a for a in case.assumptions)
    options = dict(case.framework_options)
    assert all(options.get(name) is False for name in OVERLAPS), options
    assert not case.parallel.sp and case.parallel.zero == 0


def test_a_named_switch_keeps_the_profiles_value() -> None:
    """--tp-comm-overlap, --sequence-parallel and a distributed optimizer named on the row stay
    on; a switch named as off stays off."""
    notes = "run with --tp-comm-overlap --sequence-parallel --overlap-grad-reduce"
    case = _case(_megascale(notes=notes, dp_sharding="distributed optimizer"))
    assert case.parallel is not None
    options = dict(case.framework_options)
    assert "tp_comm_overlap" not in options and "overlap_grad_reduce" not in options
    assert options.get("overlap_param_gather") is False
    assert case.parallel.sp and case.parallel.zero == 1
    denied = _case(_megascale(notes="no --tp-comm-overlap"))
    assert dict(denied.framework_options).get("tp_comm_overlap") is False


@pytest.mark.parametrize(
    ("text", "framework", "launch"),
    [("Megatron-LM (commit 285068c8)", "megatron-core", True),
     ("Megatron LM baseline", "megatron-core", True),
     ("NeMo 24.07 on Megatron-LM", "megatron-core", False),
     # Megatron-Core as the library Megatron-LM's own script ran on: the launcher (s33 rowsE;
     # was the recipes' reading)
     ("Megatron-Core via Megatron-LM pretrain_gpt.py", "megatron-core", True),
     ("megatron-core tag:core_v0.6.0, pretrain_gpt.py", "megatron-core", True),
     ("Megatron-Core pretrain_gpt.py, NeMo 24.07 container", "megatron-core", False),
     ("Megatron-MoE-ModelZoo on Megatron-Core, pretrain_gpt.py", "megatron-core", False),
     ("Megatron-Core (mcore models)", "megatron-core", False),
     ("Megatron-DeepSpeed (a fork of Megatron-LM)", "deepspeed", False),
     ("Megatron-LM PTD-P", "megatron-lm-2021", False),
     ("MLPerf Training, Megatron-LM", "megatron-core", False)],
)  # fmt: skip
def test_only_megatron_lm_alone_is_its_launcher(text: str, framework: str, launch: bool) -> None:
    """A recipe or another framework named anywhere keeps its own reading."""
    read = infer_framework({"source": text})
    assert read.value == framework
    assert megatron_lm_launch(read.assumption) is launch


def test_an_unmodelled_framework_beside_megatron_lm_stays_refused() -> None:
    """GPT-NeoX is built on Megatron-LM; it has no profile, and the row is not set up."""
    read = infer_framework({"source": "GPT-NeoX (Megatron-LM and DeepSpeed based)"})
    assert read.value == "deepspeed"  # its DeepSpeed keyword, as before
    alone = infer_framework({"source": "GPT-NeoX, built on Megatron-LM"})
    assert alone == FRAMEWORK_DEFAULT


@pytest.mark.parametrize(
    "cell",
    [
        "NVIDIA Ampere GPUs (the part is not stated)",
        "Hopper GPUs",
        "NVIDIA Blackwell GPU",
        "Ampere",
    ],
)
def test_an_architecture_with_gpus_is_named_as_one(cell: str) -> None:
    with pytest.raises(Uninferable, match="an architecture, not a part"):
        infer_system(cell)


def test_the_megascale_rows_are_refused_for_their_part() -> None:
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("MEGASCALE-MLM-175B-")]
    assert len(rows) == 8
    for row in rows:
        assert "an architecture, not a part" in _case(row).reason


def test_the_zero_bubble_rows_split_as_the_paper_states() -> None:
    """'Both the initial and final pipeline stages possess one fewer transformer layer', and the
    interleaved runs one layer per chunk: STAGE's default split with the embedding and the loss
    counted as a layer each."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("ZB-A100-")]
    assert len(rows) == 16
    for row in rows:
        case = _case(row)
        assert not case.reason and case.parallel is not None and case.model is not None
        assert case.framework == "megatron-lm-2021"
        layers, pp, vpp = case.model.layers, case.parallel.pp, case.parallel.vpp
        split = split_layers(layers, pp, vpp)
        if vpp == 1:
            middle = (layers + 2) // pp
            assert split == (middle - 1, *(middle,) * (pp - 2), middle - 1), row["id"]
        else:
            assert split == (0, *(1,) * (pp * vpp - 2), 0), row["id"]


def test_the_fp8_lm_rows_run_megatron_lms_launch_with_their_stated_cells() -> None:
    """FP8-LM's baselines name Megatron-LM alone: no overlaps; the SP and the weight all-gather
    the paper states keep sequence parallelism and the distributed optimizer."""
    rows = [r for r in read_csv(DATA / NO_SETUP) if r["id"].startswith("FP8LM-H100-GPT-")]
    assert len(rows) == 6
    for row in rows:
        case = _case(row)
        assert not case.reason and case.parallel is not None, row["id"]
        assert any("Megatron-LM's own launcher" in a for a in case.assumptions)
        options = dict(case.framework_options)
        assert all(options.get(name) is False for name in OVERLAPS), row["id"]
        assert case.parallel.sp and case.parallel.zero == 1


def test_megatron_core_as_the_tag_of_a_pretrain_gpt_launch_runs_its_defaults() -> None:
    """FlagPerf's Llama 3 8B rows (s33 rowsE) name Megatron-LM's pretrain_gpt.py on the
    core_v0.6.0 tag: no DP / TP overlap (not named), the sequence parallelism and distributed
    optimizer they name kept."""
    (row,) = [r for r in read_csv(DATA / NO_SETUP) if r["id"] == "FLAGPERF-L3-8B-A800-PP2DP2TP2-8"]
    case = _case(row)
    assert not case.reason and case.parallel is not None
    assert any("Megatron-LM's own launcher" in a for a in case.assumptions)
    options = dict(case.framework_options)
    assert all(options.get(name) is False for name in OVERLAPS), options
    assert case.parallel.sp and case.parallel.zero == 1
