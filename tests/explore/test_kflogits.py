"""KempnerForge's loss (7 Dec 2026, s35 kflogits): ``F.cross_entropy`` eagerly on the bf16
logits of the bf16-cast model (``loss_16bit_buffers``), gathered to the whole vocabulary on
every tensor-parallel rank by the output head's ``ColwiseParallel(output_layouts=Replicate())``
(``loss_logits_gathered``; kempnerforge/distributed/tensor_parallel.py 0c4eba1e)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from stage_core.lower.memory import CROSS_ENTROPY_KIND, loss_working_set
from stage_explore.analytical.loss_memory import loss_excess_bytes
from stage_explore.analytical.profile_runtime import RuntimeOptions
from stage_explore.validation import infer_kflogits
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_kflogits import KEMPNERFORGE_LOSS_16BIT_BUFFERS
from stage_explore.validation.infer_release import TEXT_COLUMNS
from stage_explore.validation.run import analytical_factory
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"
KF_TP4 = "KEMPNERFORGE-H200-7B-TP4-FSDP1-4"
KF_TP1 = "KEMPNERFORGE-H200-7B-TP1-FSDP4-4"
LOCAL = 1000  # local logits of the fake loss block
ACT = 2  # 16-bit activations
#: The rows' logits per micro-batch: 4 x 4,096 tokens x the model's vocabulary, which the
#: generator pads to a multiple of 128 x tp (128,256 -> 128,512)
LOGITS = 4 * 4096 * 128512
BASE = RuntimeOptions(
    pipeline_p2p_blocking=True,
    pipeline_scatter_gather=True,
    runtime_reserved_bytes=0,
    allocator_overhead=0.0,
)


def _loss_block() -> Any:
    """A block whose forward holds one cross-entropy reading ``LOCAL`` 16-bit logits."""
    instr = SimpleNamespace(kind=CROSS_ENTROPY_KIND, inputs=[("logits", LOCAL * ACT)])
    return SimpleNamespace(fwd=[instr])


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def _unnamed(row: dict[str, str]) -> dict[str, str]:
    """The row with KempnerForge's name replaced: the reader's earlier rules only."""
    plain = dict(row)
    for column in TEXT_COLUMNS:  # every column the rule reads, in any case ('kempnerforge/...')
        plain[column] = re.sub("kempnerforge", "a trainer", plain.get(column, ""), flags=re.I)
    return plain


@pytest.mark.parametrize("buffers", [0, 1, 3])
@pytest.mark.parametrize("tp", [1, 4])
def test_without_the_new_options_the_loss_is_the_fp32_count(buffers: int, tp: int) -> None:
    profile = replace(BASE, loss_fp32_buffers=buffers)
    expected = loss_working_set([_loss_block()], buffers, ACT) if buffers else 0
    assert loss_excess_bytes([_loss_block()], profile, tp, ACT) == expected


def test_sixteen_bit_buffers_on_gathered_logits() -> None:
    """(3 buffers + the logits) x 2 bytes x 4 x the local logits, less the saved local ones."""
    profile = replace(BASE, loss_fp32_buffers=3, loss_16bit_buffers=3, loss_logits_gathered=True)
    assert loss_excess_bytes([_loss_block()], profile, 4, ACT) == (4 * ACT * 4 - ACT) * LOCAL
    assert loss_excess_bytes([_loss_block()], profile, 1, ACT) == (4 * ACT - ACT) * LOCAL


def test_gathered_fp32_logits_and_loss_parallel() -> None:
    gathered = replace(BASE, loss_fp32_buffers=3, loss_logits_gathered=True)
    assert loss_excess_bytes([_loss_block()], gathered, 2, ACT) == (14 * 2 - ACT) * LOCAL
    sharded = replace(gathered, loss_parallel=True)  # the logits stay vocabulary-sharded
    assert loss_excess_bytes([_loss_block()], sharded, 2, ACT) == (4 * 4 + ACT - ACT) * LOCAL


def test_no_loss_block_holds_nothing_and_a_bad_tp_is_refused() -> None:
    profile = replace(BASE, loss_16bit_buffers=3, loss_logits_gathered=True)
    assert loss_excess_bytes([SimpleNamespace(fwd=[])], profile, 4, ACT) == 0
    with pytest.raises(ValueError, match="tp must be >= 1"):
        loss_excess_bytes([_loss_block()], profile, 0, ACT)


def _options(row: dict[str, str]) -> dict[str, object]:
    (case, *_) = row_cases(row, FILE, 1)
    return dict(case.framework_options)


def test_a_kempnerforge_tp_row_takes_the_bf16_loss_on_gathered_logits() -> None:
    options = _options(_package(KF_TP4))
    assert options.get("loss_16bit_buffers") == KEMPNERFORGE_LOSS_16BIT_BUFFERS
    assert options.get("loss_logits_gathered") is True


@pytest.mark.parametrize("spell", [str.lower, str.upper])
def test_the_trainer_is_read_in_any_case(spell: Callable[[str], str]) -> None:
    """The source's text in other case reads the same loss (benchmarks/spelling_robustness.py
    found the first rule case-sensitive: 'kempnerforge' kept the fp32 loss)."""
    row = _package(KF_TP4)
    row = {**row, **{column: spell(row.get(column, "")) for column in TEXT_COLUMNS}}
    options = _options(row)
    assert options.get("loss_16bit_buffers") == KEMPNERFORGE_LOSS_16BIT_BUFFERS
    assert options.get("loss_logits_gathered") is True


def test_without_tensor_parallelism_the_logits_are_not_marked_gathered() -> None:
    options = _options(_package(KF_TP1))
    assert options.get("loss_16bit_buffers") == KEMPNERFORGE_LOSS_16BIT_BUFFERS
    assert "loss_logits_gathered" not in options


def test_a_row_not_naming_kempnerforge_keeps_the_profiles_loss() -> None:
    options = _options(_unnamed(_package(KF_TP4)))
    assert "loss_16bit_buffers" not in options and "loss_logits_gathered" not in options


def test_without_the_bf16_cast_the_loss_keeps_its_fp32_upcast() -> None:
    row = _package(KF_TP4)
    row["precision"] = "bf16 (mixed_precision default bf16, fp32 gradient reduce-scatter)"
    options = _options(row)
    assert "loss_16bit_buffers" not in options
    assert options.get("loss_logits_gathered") is True


def _evaluate(row: dict[str, str]) -> tuple[float, float]:
    (case, *_) = row_cases(row, FILE, 1)
    assert case.model is not None and case.parallel is not None, case.reason
    result = analytical_factory()(case.backend_key).evaluate(
        case.model, case.parallel, case_system(case)
    )
    return result.step_time_s, float(result.extra["peak_allocated_bytes"])


def _without_the_loss_rule(
    row: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[float, float]:
    """``row`` evaluated with this rule off and every other rule as it reads (KempnerForge's
    no-sync accumulation stays: only the loss differs)."""
    with monkeypatch.context() as patch:
        patch.setattr(infer_kflogits, "names_kempnerforge", lambda row: False)
        return _evaluate(row)


def test_the_gathered_logits_raise_the_tp_rows_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """TP 4, micro-batch 4 x 4,096 tokens x 128,256 vocabulary: 4 bf16 copies of the whole
    logits (8 bytes a logit) replace 3 fp32 buffers and a bf16 block of the quarter (3.5), at
    most (less where the working set or a reduce-scatter buffer hid part of the old loss)."""
    named, plain = (
        _evaluate(_package(KF_TP4)),
        _without_the_loss_rule(_package(KF_TP4), monkeypatch),
    )
    assert named[0] > plain[0]  # the gather and the tp-fold loss kernels (test_kfthru.py)
    assert 0 < named[1] - plain[1] <= (8 - 3.5) * LOGITS


def test_the_bf16_loss_lowers_the_tp1_rows_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """TP 1: 8 bytes a logit (4 bf16 copies) instead of 14 (3 fp32 buffers and a bf16 one); the
    step is faster, the loss timed at its 16-bit passes (BF16_CROSS_ENTROPY_BYTES, s35 bf16loss)
    instead of the fp32 upcast's."""
    named, plain = (
        _evaluate(_package(KF_TP1)),
        _without_the_loss_rule(_package(KF_TP1), monkeypatch),
    )
    assert named[0] < plain[0]
    assert 0 < plain[1] - named[1] <= (14 - 8) * LOGITS
